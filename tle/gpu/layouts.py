"""Where a tle.gpu buffer lives and how it is laid out, in FlagTree's spellings: the `scope` kinds (`smem`,
`tmem`) and the layout classes `alloc(layout=)` takes.

A layout is a placement hint: a buffer's contents, and so every program's meaning, do not depend on it. Each
backend's rule table says what it does with the hint (docs/lowering.md): Triton keeps buffers in registers,
TileLang chooses its shared layouts itself, and the kernel's lowering notes name the hint either drops. The
classes check their fields and describe themselves for those notes; they carry no backend state.
"""
from __future__ import annotations


class scope:
    """A storage kind: `smem` (shared memory, 'share_memory' in FlagTree's naming) or `tmem` (tensor memory,
    which no backend here has: an alloc in it is an error that says so). `storage_kind` is this class."""

    NVIDIA = ("share_memory", "tensor_memory")
    _KINDS = {"share_memory": "smem", "tensor_memory": "tmem"}

    def __init__(self, name: str):
        if name not in self._KINDS:
            raise ValueError(f"tle.gpu.scope: unknown storage kind {name!r} (the kinds: {', '.join(self.NVIDIA)})")
        self.name = name

    @property
    def value(self) -> str:
        """The kind's short name, as the IR and the lowering notes spell it ('smem', 'tmem')."""
        return self._KINDS[self.name]

    def __eq__(self, other):
        return type(other) is scope and other.name == self.name

    def __hash__(self):
        return hash(("tle.gpu.scope", self.name))

    def __repr__(self):
        return self.name


smem = scope("share_memory")
tmem = scope("tensor_memory")
scope.smem, scope.tmem = smem, tmem


def _ints(name: str, values, positive: bool = True) -> tuple[int, ...]:
    values = tuple(values)
    if any(isinstance(v, bool) or not isinstance(v, int) or (positive and v <= 0) for v in values):
        raise ValueError(f"{name} must be {'positive ' if positive else ''}ints, got {list(values)}")
    return values


def _order(order, rank: int | None = None, name: str = "order") -> list[int]:
    order = list(_ints(name, order, positive=False))
    if sorted(order) != list(range(len(order))) or (rank is not None and len(order) != rank):
        raise ValueError(f"{name} must be a permutation of 0..{len(order) - 1 if rank is None else rank - 1}, "
                         f"got {order}")
    return order


def _permuted(order, dims) -> tuple[int, ...]:
    """FlagTree's permutation of a layout's order: entry i of the result is order[dims[i]]."""
    dims = _order(dims, len(order), "dims")
    return tuple(order[d] for d in dims)


class layout:
    """A buffer layout: a placement hint (see the module's docstring)."""

    rank: int

    def describe(self) -> str:
        """How the lowering notes name the hint."""
        raise NotImplementedError(f"{type(self).__name__} does not describe itself")

    def __repr__(self):
        return self.describe()

    def __eq__(self, other):
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self):
        return hash((type(self).__name__, self.describe()))


class shared_layout(layout):
    """A shared-memory layout."""

    def make_permute(self, dims) -> "shared_layout":
        """The same layout with its order permuted by `dims`."""
        raise NotImplementedError(f"{type(self).__name__} has no permutation")


class swizzled_shared_layout(shared_layout):
    """Triton's swizzled shared encoding: `vectorSize` elements a vector, `perPhase` rows a phase, `maxPhase`
    phases, dimensions from fastest to slowest in `order`; the CTA fields describe a cluster's split."""

    def __init__(self, vectorSize, perPhase, maxPhase, order, numCTAs=None, numCTAsPerCGA=None, numCTASplit=None,
                 numCTAOrder=None):
        self.vectorSize, self.perPhase, self.maxPhase = _ints("vectorSize, perPhase and maxPhase",
                                                              (vectorSize, perPhase, maxPhase))
        self.order = order if isinstance(order, tuple) else _order(order)
        _order(self.order)
        rank = len(self.order)
        self.numCTAs, self.numCTAsPerCGA, self.numCTASplit, self.numCTAOrder = (
            [1] * rank if v is None else list(_ints(n, v)) for n, v in
            (("numCTAs", numCTAs), ("numCTAsPerCGA", numCTAsPerCGA), ("numCTASplit", numCTASplit),
             ("numCTAOrder", numCTAOrder)))

    @property
    def rank(self) -> int:
        return len(self.order)

    @classmethod
    def make_default(cls, rank: int) -> "swizzled_shared_layout":
        """Not swizzled, row-major: order [rank - 1, ..., 0]."""
        return cls(1, 1, 1, list(reversed(range(rank))))

    def make_permute(self, dims) -> "swizzled_shared_layout":
        return swizzled_shared_layout(self.vectorSize, self.perPhase, self.maxPhase, _permuted(self.order, dims),
                                      self.numCTAs, self.numCTAsPerCGA, self.numCTASplit, self.numCTAOrder)

    def describe(self) -> str:
        return (f"swizzled_shared_layout(vectorSize={self.vectorSize}, perPhase={self.perPhase}, "
                f"maxPhase={self.maxPhase}, order={list(self.order)})")


class nv_mma_shared_layout(shared_layout):
    """The NVMMA shared encoding wgmma and TMA read: a buffer of `shape` and `elemType`, dimensions from fastest
    to slowest in `order`, 128-byte swizzled unless `swizzled` is False."""

    def __init__(self, shape, order, elemType, numCTAsPerCGA=None, numCTASplit=None, numCTAOrder=None,
                 fp4Padded=False, swizzled=True):
        self.shape = list(_ints("shape", shape))
        self.order = order if isinstance(order, tuple) else _order(order, len(self.shape))
        _order(self.order, len(self.shape))
        self.elemType = elemType
        rank = len(self.shape)
        self.numCTAsPerCGA, self.numCTASplit, self.numCTAOrder = (
            [1] * rank if v is None else list(_ints(n, v)) for n, v in
            (("numCTAsPerCGA", numCTAsPerCGA), ("numCTASplit", numCTASplit), ("numCTAOrder", numCTAOrder)))
        self.fp4Padded, self.swizzled = bool(fp4Padded), bool(swizzled)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @classmethod
    def make_default(cls, shape, elemType) -> "nv_mma_shared_layout":
        """Swizzled, row-major."""
        return cls(shape, list(reversed(range(len(shape)))), elemType)

    def make_permute(self, dims) -> "nv_mma_shared_layout":
        return nv_mma_shared_layout(self.shape, _permuted(self.order, dims), self.elemType, self.numCTAsPerCGA,
                                    self.numCTASplit, self.numCTAOrder, self.fp4Padded, self.swizzled)

    def describe(self) -> str:
        return (f"nv_mma_shared_layout(shape={self.shape}, order={list(self.order)}, elemType={self.elemType}, "
                f"swizzled={self.swizzled})")


class tensor_memory_layout(shared_layout):
    """A tensor-memory layout (blocks of `blockM` x `blockN`); tensor memory is a storage kind no backend here
    has, so an alloc that asks for it is refused whatever its layout."""

    def __init__(self, blockM, blockN, unpacked=True, CTASplitM=1, CTASplitN=1):
        self.blockM, self.blockN, self.CTASplitM, self.CTASplitN = _ints(
            "blockM, blockN, CTASplitM and CTASplitN", (blockM, blockN, CTASplitM, CTASplitN))
        self.unpacked = bool(unpacked)

    rank = 2

    @classmethod
    def make_default(cls, shape) -> "tensor_memory_layout":
        return cls(shape[0], shape[1])

    def describe(self) -> str:
        return f"tensor_memory_layout(blockM={self.blockM}, blockN={self.blockN}, unpacked={self.unpacked})"
