"""tl.device_assert: TileLang's `tl.device_assert_with_msg` builtin, on every element of the condition.

Triton keeps a device_assert only when its debug mode is on at the launch (TRITON_DEBUG=1, or
`triton.knobs.runtime.debug`; tle passes no `debug=` of its own) and compiles it away otherwise; its
interpreter never checks one. The TileLang lowering follows the same switch, read when the kernel is lowered
(tle keys its lowerings on it): with debug on, the assertion is written as the builtin called directly
(`T.call_intrin("void", tvm.ir.Op.get("tl.device_assert_with_msg"), cond, msg)`); with it off, nothing.
TileLang's own `T.device_assert` is not used: it writes nothing when CUDA was not found when TileLang was
imported, so the kernel compiled on a machine without a GPU would differ from the one compiled with one.
A failed assertion prints the message and traps the kernel, as Triton's does (the CUDA error is reported at
the next synchronization)."""
from __future__ import annotations

import os

from ..ir.core import Op
from .context import Context
from .rules import RULES
from .syntax import loop_indices, parallel_header

_ASSERT = 'T.call_intrin("void", tvm.ir.Op.get("tl.device_assert_with_msg"), {cond}, {msg})'


@RULES.rule("assert", role="statement")
def device_assert(g: Context, op: Op, indent: int):
    if not g.debug:
        return
    cond = op.operands[0]
    g.imports_tvm = True
    msg = f"{op.attrs['msg']} (at {os.path.basename(op.loc.file)}:{op.loc.line} in {g.k.name})"
    if cond.type.is_scalar:
        g.emit(_ASSERT.format(cond=g.scalar(cond), msg=repr(msg)), indent)
        return
    shape = cond.type.shape
    idx = loop_indices(len(shape))
    g.emit(parallel_header(idx, shape), indent)
    g.emit(_ASSERT.format(cond=g.elem(cond, idx), msg=repr(msg)), indent + 1)
