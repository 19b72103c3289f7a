"""`tle.gpu` inside a kernel: buffers in on-chip memory, the copies and reads that use them, and the
pipelined range.

A buffer is a `Buffer` handle (a traced value of buffer type). Each write (`copy` into it,
`local_store`) makes the buffer's next version and rebinds the handle to it, the way `tle.call`
rebinds the tiles it writes, so loops and branches carry buffers like any updated variable and every
read sees the latest write. Arithmetic on a handle, or passing it where a tile is expected, is an
error that says to read it with `tle.gpu.local_load`.
"""
from __future__ import annotations

import triton.language as tl

from ..errors import LoweringError
from ..ir import types as ir_types
from ..ir.ops import LoopKind, Storage
from . import semantics as S
from .builtins import as_mask, mask_and_pointer
from .semantics import TV, as_tv, constexpr_value as _plain, is_num, to_dtype
from .tensor_desc import TensorDescriptor

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


class BufferSpecError(ValueError):
    """An alloc's shape or dtype that no backend can make a buffer of (tle.gpu.semantic's TLESemanticError)."""


def buffer_shape(shape) -> tuple[int, ...]:
    """A buffer's shape as a tuple of positive ints: a list or tuple of them (constexprs unwrapped), or one int."""
    shape = _plain(shape)
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (list, tuple)) or not shape:
        raise BufferSpecError(f"the shape must be a non-empty list of constexpr ints, got {shape!r}")
    dims = [_plain(s) for s in shape]
    if any(isinstance(s, bool) or not isinstance(s, int) or s <= 0 for s in dims):
        raise BufferSpecError(f"the shape must be a list of positive constexpr ints, got {shape!r}")
    return tuple(dims)


def buffer_dtype(dtype):
    """A buffer's element type as the IR's DType, from a Triton dtype (tl.float16, tl.int1, ...)."""
    dtype = _plain(dtype)
    if not isinstance(dtype, (tl.dtype, ir_types.DType)) or isinstance(dtype, tl.pointer_type):
        raise BufferSpecError(f"dtype must be a Triton dtype (tl.float16, ...), got {dtype!r}")
    try:
        return to_dtype(dtype)
    except (TypeError, ValueError):
        raise BufferSpecError(f"dtype {dtype!r} is not one tle buffers hold") from None


def _shape(tr, shape, what) -> tuple[int, ...]:
    try:
        return buffer_shape(shape)
    except BufferSpecError as e:
        raise LoweringError(f"{what}: {e}", tr.b.loc) from None


def alloc(tr, shape, dtype, layout=None, scope=None, nv_mma_shared_layout=None):
    """A buffer. `layout` (a tle.gpu layout object) and FlagTree's `nv_mma_shared_layout=` flag are placement
    hints: the op keeps their description as its `layout` attribute, and each backend's rule table says what
    becomes of it (a buffer's contents do not depend on its layout)."""
    shape = _shape(tr, shape, "tle.gpu.alloc")
    try:
        elem = buffer_dtype(dtype)
    except BufferSpecError as e:
        raise LoweringError(f"tle.gpu.alloc: {e}", tr.b.loc) from None
    space = Storage.SMEM if scope is None else _space_name(scope)
    if space not in SPACES:
        which = ", ".join(f"{name} ({what})" for name, what in SPACES.items())
        raise LoweringError(f"tle.gpu.alloc: storage kind '{space}' is not supported by any backend "
                            f"(the storage kinds: {which})", tr.b.loc, construct=f"storage kind '{space}'")
    hint = _layout_hint(tr, _plain(layout), _plain(nv_mma_shared_layout), len(shape))
    return Buffer(tr.b.alloc(shape, elem, Storage(space), hint), tr.b)


def _layout_hint(tr, layout, nv_mma, rank: int) -> str | None:
    """The description of an alloc's layout hint, None without one. A layout object describes itself
    (`describe()`); nv_mma_shared_layout=False asks FlagTree's default unswizzled layout, True its default
    NVMMA-swizzled one (what it takes when neither is given)."""
    if layout is not None:
        describe = getattr(layout, "describe", None)
        if describe is None:
            raise LoweringError(f"tle.gpu.alloc: layout must be a tle.gpu layout (swizzled_shared_layout, "
                                f"nv_mma_shared_layout, ...) or None, got {layout!r}", tr.b.loc)
        if getattr(layout, "rank", rank) != rank:
            raise LoweringError(f"tle.gpu.alloc: the layout {describe()} is of rank {layout.rank}, the buffer's "
                                f"shape of rank {rank}", tr.b.loc)
        return describe()
    if nv_mma is None:
        return None
    if not isinstance(nv_mma, bool):
        raise LoweringError(f"tle.gpu.alloc: nv_mma_shared_layout must be a bool, got {nv_mma!r}", tr.b.loc)
    return "nv_mma_shared_layout (default)" if nv_mma else "swizzled_shared_layout (default: not swizzled)"


def _buffer(tr, x, what) -> Buffer:
    if not isinstance(x, Buffer):
        got = f"a tile of type {x.type}" if isinstance(x, TV) else repr(x)
        raise LoweringError(f"{what} must be a buffer from tle.gpu.alloc, got {got}", tr.b.loc)
    return x


def _check_shape(tr, buf: Buffer, shape, what):
    if tuple(shape) != tuple(buf.type.shape):
        raise LoweringError(f"{what}: shape {list(shape)} differs from the buffer's {list(buf.type.shape)} "
                            f"(copies move whole buffers)", tr.b.loc)


def copy(tr, src, dst, shape, mask=None, other=None, offsets=None):
    """Global -> buffer (src a pointer tile), buffer -> global (dst a pointer tile), or buffer -> buffer; with a
    tensor descriptor on one side (FlagTree's TMA form, `copy(desc, buf, shape, offsets)`), the descriptor's
    block at `offsets` (the fourth argument) into the buffer or the buffer into it."""
    shape = _shape(tr, shape, "tle.gpu.copy")
    if isinstance(src, TensorDescriptor) or isinstance(dst, TensorDescriptor):
        return _descriptor_copy(tr, src, dst, shape, offsets if offsets is not None else mask, other)
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


def _descriptor_copy(tr, src, dst, shape, offsets, other):
    """A descriptor's block at `offsets` into a buffer (elements outside the tensor reading as its padding), or
    a buffer into the block (elements outside the tensor left alone): desc.load / desc.store."""
    if other is not None:
        raise LoweringError("tle.gpu.copy with a tensor descriptor takes (src, dst, shape, offsets), no `other`: "
                            "the descriptor's padding fills what lies outside the tensor", tr.b.loc)
    desc, buf = (src, dst) if isinstance(src, TensorDescriptor) else (dst, src)
    if not isinstance(buf, Buffer):
        raise LoweringError("tle.gpu.copy with a tensor descriptor: the other side must be a buffer from "
                            "tle.gpu.alloc", tr.b.loc)
    if offsets is None:
        raise LoweringError("tle.gpu.copy with a tensor descriptor needs the block's offsets: "
                            "copy(desc, buf, shape, offsets)", tr.b.loc)
    _check_shape(tr, buf, shape, "tle.gpu.copy")
    if tuple(desc.block_shape) != tuple(buf.type.shape) or desc.dtype != buf.dtype:
        raise LoweringError(f"tle.gpu.copy: the descriptor's block ({list(desc.block_shape)} {desc.dtype}) and the "
                            f"buffer ({list(buf.type.shape)} {buf.dtype}) must match", tr.b.loc)
    if desc is src:
        local_store(tr, buf, desc.load(offsets))
    else:
        desc.store(offsets, local_load(tr, buf))
    return None


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


class LocalPointer:
    """`tle.gpu.local_ptr(buf, offsets=None)`: pointers to elements of a buffer, for tl.load and tl.store.
    `offsets` is an integer tile of flat row-major element offsets into the buffer; without it, one pointer
    per element, in the buffer's shape. It refers to the buffer the kernel holds (not to one version): a load
    reads the latest write and a store makes the next version, as copy and local_store do. Adding an integer
    (or integer tile) moves the pointers by that many elements."""

    is_local_pointer = True

    def __init__(self, buf: Buffer, offsets: TV | None):
        self.buf, self.offsets = buf, offsets

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.offsets.type.shape if self.offsets is not None else self.buf.type.shape)

    def __repr__(self):
        return f"local_ptr({self.buf.v.name or 'buffer'}, {self.shape})"

    def _flat_offsets(self) -> TV:
        """The offsets as a tile (the buffer's row-major element numbers where none were given)."""
        if self.offsets is not None:
            return self.offsets
        b, shape = self.buf.b, self.buf.type.shape
        flat = TV(b.arange(0, self.buf.type.numel), b)
        return TV(b.reshape(flat.v, tuple(shape)), b) if len(shape) > 1 else flat

    def _moved(self, delta, sign):
        b = self.buf.b
        delta = as_tv(b, delta) if not is_num(delta) else delta
        if isinstance(delta, TV) and (not delta.dtype.is_int or delta.dtype.is_bool):
            raise LoweringError(f"a tle.gpu.local_ptr moves by integers, got {delta.type}", b.loc)
        if not isinstance(delta, TV) and (isinstance(delta, bool) or not isinstance(delta, int)):
            raise LoweringError(f"a tle.gpu.local_ptr moves by integers, got {delta!r}", b.loc)
        offsets = self._flat_offsets()
        return LocalPointer(self.buf, offsets + delta if sign > 0 else offsets - delta)

    def __add__(self, delta):
        return self._moved(delta, 1)

    __radd__ = __add__

    def __sub__(self, delta):
        return self._moved(delta, -1)

    def _mask(self, tr, mask):
        if mask is None:
            return None
        try:
            return S.broadcast_to(as_mask(tr, mask), self.shape)
        except LoweringError as e:
            raise LoweringError(f"the mask of an access through a tle.gpu.local_ptr: {e.message}", tr.b.loc) from None

    def _tile(self, tr, value, what):
        elem = self.buf.dtype
        try:
            return S.broadcast_to(S.cast(as_tv(tr.b, value, elem if is_num(value) else None), elem), self.shape)
        except LoweringError as e:
            raise LoweringError(f"{what} through a tle.gpu.local_ptr: {e.message}", tr.b.loc) from None

    def load(self, tr, mask, other):
        """tl.load: the buffer's elements at the pointers (`other` where `mask` is false)."""
        mask = self._mask(tr, mask)
        if other is not None and mask is None:
            raise LoweringError("`other` given without `mask`", tr.b.loc)
        other = self._tile(tr, other, "the `other` of a load") if other is not None else None
        if self.offsets is None:                      # the whole buffer, element for element
            tile = local_load(tr, self.buf)
            return tile if mask is None else S.where(mask, tile, other if other is not None else 0)
        return TV(tr.b.local_gather(self.buf.v, self.offsets.v, mask.v if mask is not None else None,
                                    other.v if other is not None else None), tr.b)

    def store(self, tr, value, mask):
        """tl.store: the buffer's next version, with `value` at the pointers where `mask` holds."""
        mask = self._mask(tr, mask)
        value = self._tile(tr, value, "the value of a store")
        if self.offsets is None and mask is None:
            local_store(tr, self.buf, value)
            return None
        # a masked store to every element leaves the others as they are: a scatter at the elements' own places
        # (offsets None), which reads nothing of the buffer
        offsets = self.offsets.v if self.offsets is not None else None
        new = tr.b.local_scatter(self.buf.v, offsets, value.v, mask.v if mask is not None else None)
        new.name = self.buf.v.name
        tr.rebind(self.buf, new)
        return None


def local_ptr(tr, buffer, offsets=None):
    buf = _buffer(tr, buffer, "tle.gpu.local_ptr's first argument")
    if offsets is None:
        return LocalPointer(buf, None)
    offsets = as_tv(tr.b, offsets)
    if offsets.type.is_scalar or not offsets.dtype.is_int or offsets.dtype.is_bool:
        raise LoweringError(f"tle.gpu.local_ptr: offsets must be an integer tile (flat element offsets into the "
                            f"buffer), got {offsets.type}", tr.b.loc)
    return LocalPointer(buf, offsets)


def memory_space(tr, input, space):
    """FlagTree's placement hint for a tile: the tile itself, with a note (both backends place tiles themselves)."""
    space = _plain(space)
    if not isinstance(space, str):
        raise LoweringError(f"tle.gpu.memory_space: the space must be a string ('shared_memory', 'register', ...), "
                            f"got {space!r}", tr.b.loc)
    tr.notes.append(f"line {tr.b.loc.line}: tle.gpu.memory_space(..., {space!r}): placement hint dropped, each "
                    f"backend places tiles itself")
    return as_tv(tr.b, input)


for _f in (alloc, copy, local_load, local_store, local_ptr):
    _f.takes_buffers = True


def pipeline_attrs(tr, args, kwargs) -> tuple[list, dict]:
    """The range arguments and loop attributes of `for i in tle.gpu.pipeline(...)`."""
    kwargs = dict(kwargs)
    stages = _plain(kwargs.pop("num_stages", None))
    unroll = _plain(kwargs.pop("loop_unroll_factor", None))
    if kwargs:
        raise LoweringError(f"tle.gpu.pipeline takes (stop), (start, stop) or (start, stop, step), num_stages= "
                            f"and loop_unroll_factor=; got {sorted(kwargs)}", tr.b.loc)
    if not 1 <= len(args) <= 3:
        raise LoweringError(f"tle.gpu.pipeline takes 1 to 3 positional arguments, got {len(args)}", tr.b.loc)
    attrs = {"kind": LoopKind.PIPELINE}
    if stages is not None:
        if isinstance(stages, TV) or isinstance(stages, bool) or not isinstance(stages, int) or stages < 0:
            raise LoweringError(f"tle.gpu.pipeline: num_stages must be a constexpr int >= 0, got {stages!r}",
                                tr.b.loc)
        attrs["num_stages"] = stages
    if unroll is not None:
        if isinstance(unroll, TV) or isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1:
            raise LoweringError(f"tle.gpu.pipeline: loop_unroll_factor must be a constexpr int >= 1, got {unroll!r}",
                                tr.b.loc)
        attrs["loop_unroll_factor"] = unroll
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
