"""vprintf and vassert for raw functions (FlagTree's names), written as MLIR's own printf and assert ops:
`vprintf(fmt, *args)` is `gpu.printf`; `vassert(cond, fmt, *args)` prints `fmt` with `args` where `cond` is
false (an scf.if around a gpu.printf) and then stops the kernel there (`cf.assert`, whose message is `fmt`)."""
from tle.lowering.raw import bindings as _bindings


def vprintf(fmt: str, *args, loc=None, ip=None):
    """C's printf of `args` (scalar values) with the format `fmt`, on every thread that runs it."""
    b = _bindings.load()
    if not isinstance(fmt, str):
        raise TypeError(f"vprintf: the format must be a str, got {type(fmt).__name__}")
    return b.gpu.PrintfOp(format=fmt, args=list(args), loc=loc, ip=ip)


def vassert(cond, fmt: str, *args, loc=None, ip=None):
    """Where `cond` (an i1) is false: print `fmt` with `args`, then stop the kernel with an assertion failure."""
    b = _bindings.load()
    if not isinstance(fmt, str):
        raise TypeError(f"vassert: the message must be a str, got {type(fmt).__name__}")
    i1 = b.ir.IntegerType.get_signless(1)
    failed = b.arith.xori(cond, b.arith.constant(i1, 1, loc=loc, ip=ip), loc=loc, ip=ip)
    branch = b.scf.IfOp(failed, loc=loc, ip=ip)
    with b.ir.InsertionPoint(branch.then_block):
        b.gpu.PrintfOp(format=fmt, args=list(args), loc=loc)
        b.scf.YieldOp([], loc=loc)
    return b.cf.assert_(cond, fmt, loc=loc, ip=ip)
