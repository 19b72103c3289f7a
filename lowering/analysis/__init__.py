from .affine import Affine, AffineAnalysis  # noqa: F401
from .access import Access, classify_accesses  # noqa: F401
