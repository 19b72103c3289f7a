"""CUDA's printf, as the interpreter runs it: C's conversions of the arguments a program passes
(`T.call_extern("int32", "printf", fmt, *args)`), one line per active lane or thread, written to stdout.

The conversions are C's, on the argument's bits: %d / %i signed, %u / %x / %o unsigned, at 32 bits, or 64 with
a length modifier (%lli, %llx); %f / %e / %g of a double; %s of a string; %% a percent sign."""
from __future__ import annotations

import re
import sys

import torch

from .errors import Unsupported

_SPEC = re.compile(r"%(?P<flags>[-+ #0]*)(?P<width>\d*)(?:\.(?P<precision>\d+))?(?P<length>hh|h|ll|l|j|z|t)?"
                   r"(?P<conv>[diouxXfFeEgGcs%])")


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def c_format(fmt: str, args: list) -> str:
    """`fmt` with C's printf conversions of `args` (Python ints, floats and strs)."""
    out, pos, k = [], 0, 0
    for m in _SPEC.finditer(fmt):
        out.append(fmt[pos:m.start()])
        pos = m.end()
        conv = m["conv"]
        if conv == "%":
            out.append("%")
            continue
        if k == len(args):
            raise Unsupported(f"printf format {fmt!r} converts more arguments than it is given ({len(args)})")
        a, k = args[k], k + 1
        spec = "%" + m["flags"] + m["width"] + (f".{m['precision']}" if m["precision"] is not None else "")
        bits = 64 if m["length"] in ("ll", "l", "j", "z", "t") else 32
        if conv in "di":
            out.append((spec + "d") % _signed(int(a), bits))
        elif conv in "uoxX":
            out.append((spec + ("d" if conv == "u" else conv)) % (int(a) & ((1 << bits) - 1)))
        elif conv in "fFeEgG":
            out.append((spec + conv) % float(a))
        elif conv == "c":
            out.append((spec + "c") % chr(int(a) & 0xFF))
        else:
            out.append((spec + "s") % a)
    out.append(fmt[pos:])
    if k != len(args):
        raise Unsupported(f"printf format {fmt!r} converts {k} arguments, it is given {len(args)}")
    return "".join(out)


def printf(fmt: str, args: list, fr):
    """Print `fmt` with `args` (Python strings, or tensors over the frame's lanes) once per active lane of a
    T.Parallel nest (in row-major order), per active thread of thread-level code (in thread order), or, for a
    statement the same on every thread, once per thread of the block."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    mask = fr.mask
    if fr.in_parallel:
        shape = torch.broadcast_shapes(fr.lanes, *(t.shape for t in tensors), *(() if mask is None else (mask.shape,)))
    elif any(t.dim() for t in tensors) or (mask is not None and mask.dim()):
        shape = (fr.threads,)
    else:
        shape = None
    if shape is None:                       # every thread prints the same line
        if mask is not None and not bool(mask):
            return
        line = c_format(fmt, [a if isinstance(a, str) else a.item() for a in args])
        sys.stdout.write(line * fr.threads)
        sys.stdout.flush()
        return
    active = torch.ones(shape, dtype=torch.bool) if mask is None else mask.expand(shape)
    columns = [a if isinstance(a, str) else a.expand(shape)[active].tolist() for a in args]
    count = int(active.sum())
    lines = [c_format(fmt, [c if isinstance(c, str) else c[n] for c in columns]) for n in range(count)]
    sys.stdout.write("".join(lines))
    sys.stdout.flush()
