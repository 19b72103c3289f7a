"""The runtime every operator of tle.ops shares: backend choice, contract checks, the Operator record."""
from tle.oplib.backend import OP_BACKENDS, resolve  # noqa: F401
from tle.oplib.operator import BenchSpec, Operator, Sample  # noqa: F401
from tle.oplib.tensors import FLOAT_DTYPES, as_rows, check_float, check_kernel_dtypes, check_tensor, programs  # noqa: F401
