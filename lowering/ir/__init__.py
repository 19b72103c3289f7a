from .core import Block, KernelIR, Loc, Op, Param, Value, UNKNOWN_LOC  # noqa: F401
from .builder import Builder  # noqa: F401
from . import types  # noqa: F401
from .printer import print_kernel  # noqa: F401
