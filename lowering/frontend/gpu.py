"""`tle.gpu` inside a kernel: buffers in on-chip memory, the copies and reads that use them, and the
pipelined range.

A buffer is a `Buffer` handle (a traced value of buffer type). Each write (`copy` into it,
`local_store`) makes the buffer's next version and rebinds the handle to it, the way `tle.call`
rebinds the tiles it writes, so loops and branches carry buffers like any updated variable and every
read sees the latest write. Arithmetic on a handle, or passing it where a tile is expected, is an
error that says to read it with `tle.gpu.local_load`.
"""
from __future__ import annotations

from ..errors import LoweringError
from ..ir.ops import LoopKind, Storage
from . import semantics as S
from .builtins import mask_and_pointer
from .semantics import TV, as_tv, constexpr_value as _plain, is_num, to_dtype

# storage kinds the IR has; each backend's rule table says what it does with the alloc's scope
SPACES = {Storage.SMEM: "shared memory"}


class Buffer(TV):
    """A traced tle.gpu buffer: not a tile (read it with local_load)."""

    __slots__ = ()

    def _not_a_tile(self, *_a, **_k):
        raise LoweringError(f"a tle.gpu buffer ({self.v.type}) is not a tile: read it with "
                            f"tle.gpu.local_load(buf) first", self.b.loc)

    def __repr__(self):
        return f"Buffer({self.v!r}: {self.v.type})"

    @property
    def T(self):
        self._not_a_tile()


for _m in ("add", "sub", "mul", "truediv", "floordiv", "mod", "and", "or", "xor", "lshift", "rshift"):
    setattr(Buffer, f"__{_m}__", Buffer._not_a_tile)
    setattr(Buffer, f"__r{_m}__", Buffer._not_a_tile)
for _m in ("lt", "le", "gt", "ge", "eq", "ne", "neg", "invert", "getitem"):
    setattr(Buffer, f"__{_m}__", Buffer._not_a_tile)
Buffer.to = Buffer.trans = Buffer._not_a_tile
Buffer.__hash__ = object.__hash__


def traced(v, b) -> TV:
    """The traced value for IR value `v`: a Buffer for a buffer, else a TV."""
    return Buffer(v, b) if v.type.is_buffer else TV(v, b)


def _space_name(scope) -> str:
    scope = _plain(scope)
    name = getattr(scope, "value", scope)          # a tle.gpu.storage_kind member, or its name
    return str(name)


def _shape(tr, shape, what) -> tuple[int, ...]:
    shape = _plain(shape)
    if isinstance(shape, int):
        shape = (shape,)
    if not isinstance(shape, (list, tuple)) or not shape:
        raise LoweringError(f"{what}: the shape must be a list of constexpr ints, got {shape!r}", tr.b.loc)
    out = []
    for s in shape:
        s = _plain(s)
        if isinstance(s, TV) or isinstance(s, bool) or not isinstance(s, int) or s <= 0:
            raise LoweringError(f"{what}: the shape must be a list of positive constexpr ints, got {shape!r}",
                                tr.b.loc)
        out.append(s)
    return tuple(out)


def alloc(tr, shape, dtype, layout=None, scope=None):
    shape = _shape(tr, shape, "tle.gpu.alloc")
    try:
        elem = to_dtype(_plain(dtype))
    except Exception:
        raise LoweringError(f"tle.gpu.alloc: dtype must be a Triton dtype (tl.float16, ...), got {dtype!r}",
                            tr.b.loc) from None
    space = Storage.SMEM if scope is None else _space_name(scope)
    if space not in SPACES:
        which = ", ".join(f"{name} ({what})" for name, what in SPACES.items())
        raise LoweringError(f"tle.gpu.alloc: storage kind '{space}' is not supported by any backend "
                            f"(the storage kinds: {which})", tr.b.loc, construct=f"storage kind '{space}'")
    layout = _plain(layout)
    if layout is not None:
        raise LoweringError(f"tle.gpu.alloc: layout={layout!r} is not supported; pass layout=None (each backend "
                            f"chooses the buffer's layout: TileLang swizzles shared buffers for T.gemm, Triton "
                            f"keeps the tile in registers)", tr.b.loc, construct="tle.gpu.alloc layout")
    return Buffer(tr.b.alloc(shape, elem, Storage(space), None), tr.b)


def _buffer(tr, x, what) -> Buffer:
    if not isinstance(x, Buffer):
        got = f"a tile of type {x.type}" if isinstance(x, TV) else repr(x)
        raise LoweringError(f"{what} must be a buffer from tle.gpu.alloc, got {got}", tr.b.loc)
    return x


def _check_shape(tr, buf: Buffer, shape, what):
    if tuple(shape) != tuple(buf.type.shape):
        raise LoweringError(f"{what}: shape {list(shape)} differs from the buffer's {list(buf.type.shape)} "
                            f"(copies move whole buffers)", tr.b.loc)


def copy(tr, src, dst, shape, mask=None, other=None):
    """Global -> buffer (src a pointer tile), buffer -> global (dst a pointer tile), or buffer -> buffer."""
    shape = _shape(tr, shape, "tle.gpu.copy")
    if isinstance(src, Buffer) and isinstance(dst, Buffer):
        if mask is not None or other is not None:
            raise LoweringError("tle.gpu.copy between buffers takes no mask or other", tr.b.loc)
        _check_shape(tr, src, shape, "tle.gpu.copy")
        local_store(tr, dst, local_load(tr, src))
        return None
    if isinstance(dst, Buffer):
        ptr, msk = _pointer_tile(tr, src, mask, "source", dst, shape)
        oth = None
        if other is not None:
            if msk is None:
                raise LoweringError("tle.gpu.copy: `other` given without `mask`", tr.b.loc)
            elem = dst.dtype
            oth = S.broadcast_to(S.cast(as_tv(tr.b, other, elem if is_num(other) else None), elem), shape).v
        new = tr.b.copy_in(ptr.v, msk.v if msk is not None else None, oth, dst.v)
        new.name = dst.v.name
        tr.rebind(dst, new)
        return None
    if isinstance(src, Buffer):
        if other is not None:
            raise LoweringError("tle.gpu.copy from a buffer takes no `other`", tr.b.loc)
        ptr, msk = _pointer_tile(tr, dst, mask, "destination", src, shape)
        tr.b.copy_out(ptr.v, src.v, msk.v if msk is not None else None)
        return None
    raise LoweringError("tle.gpu.copy: one of src and dst must be a buffer from tle.gpu.alloc", tr.b.loc)


def _pointer_tile(tr, p, mask, which, buf: Buffer, shape):
    """The copy's pointer tile and mask (broadcast together), checked against the buffer it pairs with."""
    if isinstance(p, Buffer) or not isinstance(p, TV) or not p.type.is_pointer:
        raise LoweringError(f"tle.gpu.copy: the {which} must be a pointer tile or a buffer, got {p!r}", tr.b.loc)
    if p.type.is_scalar:
        raise LoweringError(f"tle.gpu.copy: the {which} is a single pointer; copies move tiles", tr.b.loc)
    p, mask = mask_and_pointer(tr, p, mask)
    _check_shape(tr, buf, shape, "tle.gpu.copy")
    if tuple(p.type.shape) != tuple(buf.type.shape):
        raise LoweringError(f"tle.gpu.copy: the {which} pointer tile has shape {list(p.type.shape)}, "
                            f"the buffer {list(buf.type.shape)}", tr.b.loc)
    if p.dtype.elem != buf.dtype:
        raise LoweringError(f"tle.gpu.copy: the {which} points to {p.dtype.elem} and the buffer holds "
                            f"{buf.dtype}; copies do not convert (local_load, then .to())", tr.b.loc)
    return p, mask


def local_load(tr, buf):
    buf = _buffer(tr, buf, "tle.gpu.local_load's argument")
    return TV(tr.b.local_load(buf.v), tr.b)


def local_store(tr, buf, value):
    buf = _buffer(tr, buf, "tle.gpu.local_store's first argument")
    if isinstance(value, Buffer):
        value = local_load(tr, value)
    elem = buf.dtype
    v = as_tv(tr.b, value, elem if is_num(value) else None)
    try:
        v = S.broadcast_to(S.cast(v, elem), buf.type.shape)
    except ValueError as e:
        raise LoweringError(f"tle.gpu.local_store: {e}", tr.b.loc) from None
    new = tr.b.local_store(buf.v, v.v)
    new.name = buf.v.name
    tr.rebind(buf, new)
    return None


for _f in (alloc, copy, local_load, local_store):
    _f.takes_buffers = True


def pipeline_attrs(tr, args, kwargs) -> tuple[list, dict]:
    """The range arguments and loop attributes of `for i in tle.gpu.pipeline(...)`."""
    kwargs = dict(kwargs)
    stages = _plain(kwargs.pop("num_stages", None))
    if kwargs:
        raise LoweringError(f"tle.gpu.pipeline takes (stop), (start, stop) or (start, stop, step) and "
                            f"num_stages=; got {sorted(kwargs)}", tr.b.loc)
    if not 1 <= len(args) <= 3:
        raise LoweringError(f"tle.gpu.pipeline takes 1 to 3 positional arguments, got {len(args)}", tr.b.loc)
    attrs = {"kind": LoopKind.PIPELINE}
    if stages is not None:
        if isinstance(stages, TV) or isinstance(stages, bool) or not isinstance(stages, int) or stages < 0:
            raise LoweringError(f"tle.gpu.pipeline: num_stages must be a constexpr int >= 0, got {stages!r}",
                                tr.b.loc)
        attrs["num_stages"] = stages
    return list(args), attrs


def warp_group_scope(tr, args, kwargs) -> tuple[dict, int, int | None]:
    """The op attributes, group index and register count of `with tle.gpu.warp_group(index, registers=None)`."""
    kwargs = dict(kwargs)
    registers = _plain(kwargs.pop("registers", None))
    if len(args) == 1 and not kwargs:
        index = _plain(args[0])
    elif not args and set(kwargs) == {"index"}:
        index = _plain(kwargs["index"])
    else:
        raise LoweringError(f"tle.gpu.warp_group takes (index, registers=None); got {len(args)} positional "
                            f"arguments and {sorted(kwargs)}", tr.b.loc)
    if isinstance(index, (TV, bool)) or not isinstance(index, int) or index < 0:
        raise LoweringError(f"tle.gpu.warp_group: index must be a constexpr int >= 0, got {index!r}", tr.b.loc)
    if registers is not None and (isinstance(registers, (TV, bool)) or not isinstance(registers, int)
                                  or not 24 <= registers <= 256 or registers % 8):
        raise LoweringError(f"tle.gpu.warp_group: registers must be a constexpr multiple of 8 in [24, 256] "
                            f"(setmaxnreg's range), got {registers!r}", tr.b.loc)
    return {"warp_group": index}, index, registers


def turn_scope(tr, args, kwargs) -> tuple[dict, None, None]:
    """The op attributes of `with tle.gpu.turn(enabled=True)`: a number for the block (each block traced gets its
    own), or none when not enabled."""
    if len(args) > 1 or set(kwargs) - {"enabled"} or (args and kwargs):
        raise LoweringError(f"tle.gpu.turn takes (enabled=True); got {len(args)} positional arguments and "
                            f"{sorted(kwargs)}", tr.b.loc)
    enabled = _plain(args[0] if args else kwargs.get("enabled", True))
    if isinstance(enabled, TV) or not isinstance(enabled, int):
        raise LoweringError(f"tle.gpu.turn: enabled must be a constexpr bool, got {enabled!r}", tr.b.loc)
    if not enabled:
        return {}, None, None
    tr.turns += 1
    return {"turn": tr.turns}, None, None


__all__ = ["Buffer", "traced", "alloc", "copy", "local_load", "local_store", "pipeline_attrs", "warp_group_scope",
           "turn_scope"]
