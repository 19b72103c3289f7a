"""tle.ops: the operator library, each operator written once and run on "torch", "triton" or "tilelang".

    y = tle.ops.rms_norm(x, weight, eps=1e-6, backend="tilelang")
    norm = tle.ops.RMSNorm(4096, backend="triton")

Every operator is a torch.library custom op (tle::<name>) with a backward; docs/ops.md lists them.
Operators live in their own modules under kernels/ (installed as tle.kernels); this package re-exports
them, one line per operator module (its OPERATOR record, or a tuple of them, imported as _op_<module>),
and OPERATORS lists those records for the tests and tle-bench."""
from tle.oplib.operator import Operator as _Operator

from tle.kernels.rms_norm import OPERATOR as _op_rms_norm, RMSNorm, rms_norm  # noqa: E402,F401

OPERATORS = {op.name: op for k, v in dict(globals()).items() if k.startswith("_op_")
             for op in (v if isinstance(v, tuple) else (v,)) if isinstance(op, _Operator)}
