"""The runtime every operator of tle.ops shares: backend choice, contract checks, the Operator record."""
from tle.oplib.backend import OP_BACKENDS, resolve  # noqa: F401
from tle.oplib.operator import BenchSpec, Operator, Sample, Sweep  # noqa: F401
from tle.oplib.rows import row_stat_like  # noqa: F401
from tle.oplib.tensors import (FLOAT_DTYPES, as_rows, check_float, check_int32_offsets, check_kernel_dtypes,  # noqa: F401
                               check_tensor, programs, shared_memory_per_block)
