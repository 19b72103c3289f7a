"""tle.raw.call of a tle.raw.dialect function on Triton: the function becomes LLVM IR (raw_llvm.py), which
Triton links into the kernel, and the kernel calls it from Triton code.

Each tile argument is copied into its shared-memory global element by element (`<fn>_store_<param>` over the
tile and its row-major element indices), the program's threads meet at a barrier, every thread runs the
function once (a call on scalars), they meet again, and each InOut tile's new contents are read back
element-wise (`<fn>_load_<param>`). Triton's interpreter cannot run linked LLVM IR: launches there are
refused (backend.py), while the source and the compiled stages are made as on a GPU.
"""
from __future__ import annotations

import math
import os

from triton.runtime.errors import OutOfResources

from ..errors import UnsupportedConstruct
from ..ir.core import Op
from ..ir.ops import Trait
from ..raw.bounds import check_bounds
from .raw_llvm import STATIC_SHARED_LIMIT, CallFacts, LoweredCall, lower_call, module_text
from .syntax import TL_DTYPE

BACKEND = "triton"
LIBRARY_PATH = "RAW_LLVM"       # the generated module's name for the path of its .ll file
# symbols the .ll declares itself: a function named like one would clash
_TAKEN = {"vprintf", "__assertfail"}


class RawLibrary:
    """The LLVM IR of a kernel's tle.raw.dialect calls, one .ll file next to the generated source."""

    def __init__(self, kernel_name: str, title: str):
        self.kernel_name, self.title = kernel_name, title
        self.calls: list[LoweredCall] = []
        self.sites: list[Op] = []

    @property
    def shared_bytes(self) -> int:
        return sum(c.shared_bytes for c in self.calls)

    def text(self) -> str:
        return module_text(self.calls, self.title)


class TilesPastSharedLimit(UnsupportedConstruct, OutOfResources):
    """More tile bytes than a kernel may declare as static shared memory. Also Triton's OutOfResources, as a
    config asking for too much shared memory is in Triton: an autotuner (Triton's, or tle's) skips the config."""

    def __init__(self, call: str, required: int, loc):
        UnsupportedConstruct.__init__(self, f"{call} with {required} bytes of tiles", BACKEND, loc,
                                      f"the tiles of the kernel's tle.raw.dialect calls are static shared memory, "
                                      f"which a kernel may declare up to {STATIC_SHARED_LIMIT} bytes of; pass "
                                      f"smaller tiles")
        self.call, self.required, self.limit, self.name = call, required, STATIC_SHARED_LIMIT, "shared memory"

    def __str__(self):
        return Exception.__str__(self)        # this message, not OutOfResources' own

    def __reduce__(self):
        return (type(self), (self.call, self.required, self.loc))


def library(gen) -> RawLibrary:
    """The kernel's RawLibrary, made (with the generated module's imports) at its first call."""
    if gen.raw_library is None:
        k = gen.kernel
        gen.raw_library = RawLibrary(k.name, f"LLVM IR of the tle.raw.dialect calls of kernel '{k.name}' "
                                             f"({os.path.basename(k.loc.file)}:{k.loc.line})")
        for line in ("import os", "from triton.language import core",
                     "from tle.lowering.triton.llvm_call import call_llvm"):
            gen.need_import(line)
        gen.function_lines += ["# the LLVM IR the tle.raw.dialect calls run (Triton links it: extern_libs)",
                               f"{LIBRARY_PATH} = os.path.splitext(__file__)[0] + '.ll'", "", ""]
    return gen.raw_library


def in_loop(op: Op) -> bool:
    blk = op.parent
    while blk is not None and blk.parent_op is not None:
        if blk.parent_op.has(Trait.LOOP):
            return True
        blk = blk.parent_op.parent
    return False


def _symbol(gen, base: str) -> str:
    name = gen.ids.fresh(base)
    while name == gen.kernel.name or name in _TAKEN:
        name = gen.ids.fresh(base)
    return name


def _extern(gen, name: str, params: list[str], types: list[str], ret: str):
    """A module-level `@core.extern` function of the generated source calling `name` in the .ll."""
    gen.function_lines += [
        "@core.extern",
        f"def {name}({', '.join(params + ['_semantic=None'])}):",
        f"    return call_llvm({LIBRARY_PATH}, {name!r}, [{', '.join(params)}], [{', '.join(types)}], {ret}, "
        f"_semantic)", "", ""]


def _index_expr(shape) -> str:
    """The row-major element index of each element of a tile of `shape`."""
    if len(shape) == 1:
        return f"tl.arange(0, {shape[0]})"
    terms = []
    for d, n in enumerate(shape):
        axes = ", ".join(":" if e == d else "None" for e in range(len(shape)))
        stride = math.prod(shape[d + 1:])
        terms.append(f"tl.arange(0, {n})[{axes}]" + (f" * {stride}" if stride != 1 else ""))
    return " + ".join(terms)


def flagtree_call(gen, op: Op, body, indent: int):
    fn, outputs = op.attrs["fn"], tuple(op.attrs["outputs"])
    call = f"tle.raw.call({fn.name})"
    for k, (v, arg) in enumerate(zip(op.operands, body.args)):
        if arg.kind == "tile" and not v.type.shape:
            raise UnsupportedConstruct(f"{call} on a rank-0 tile ('{fn.params[k]}')", BACKEND, op.loc,
                                       "pass tiles of rank 1 or more")
    check_bounds(body, [tuple(v.type.shape) for v in op.operands], 32 * gen.kernel.num_warps)
    lib = library(gen)
    symbol = _symbol(gen, fn.name)
    shapes = tuple(tuple(int(d) for d in v.type.shape) if arg.kind == "tile" else ()
                   for v, arg in zip(op.operands, body.args))
    site = f"{os.path.basename(op.loc.file)}:{op.loc.line}"
    lowered = lower_call(body, CallFacts(symbol, shapes, site, gen.kernel.num_warps))
    if lib.shared_bytes + lowered.shared_bytes > STATIC_SHARED_LIMIT:
        raise TilesPastSharedLimit(call, lib.shared_bytes + lowered.shared_bytes, op.loc)
    lib.calls.append(lowered)
    lib.sites.append(op)

    for k in lowered.stores:
        dtype = TL_DTYPE[body.args[k].dtype]
        _extern(gen, lowered.stores[k], ["value", "index"], [dtype, "tl.int32"], "tl.int32")
        _extern(gen, lowered.loads[k], ["index"], ["tl.int32"], dtype)
    params = [fn.params[k] for k in lowered.params]
    types = ["None" if body.args[k].kind == "pointer" else TL_DTYPE[body.args[k].dtype] for k in lowered.params]
    _extern(gen, symbol, params, types, "tl.int32")

    copies = bool(lowered.stores)        # no tiles: nothing to copy, and no barriers around the call
    gen.emit(f"# {call}: LLVM IR (@{symbol} in the .ll beside this file) run once by every thread" +
             ("; its tiles are copied" if copies else ""), indent)
    if copies:
        gen.emit("# into shared memory and back element-wise, between barriers", indent)
    if copies and in_loop(op):          # the threads still reading the previous call's copies out
        gen.emit("tl.debug_barrier()", indent)
    indices: dict[tuple, str] = {}

    def index(k: int) -> str:
        if shapes[k] not in indices:
            indices[shapes[k]] = name = gen.ids.fresh(f"{symbol}_index")
            gen.emit(f"{name} = {_index_expr(shapes[k])}", indent)
        return indices[shapes[k]]

    for k in lowered.stores:
        if body.args[k].read or k in outputs:
            gen.emit(f"{lowered.stores[k]}({gen.expr(op.operands[k])}, {index(k)})", indent)
    if copies:
        gen.emit("tl.debug_barrier()", indent)
    gen.emit(f"{symbol}({', '.join(gen.expr(op.operands[k]) for k in lowered.params)})", indent)
    if copies:
        gen.emit("tl.debug_barrier()", indent)
    for k, r in zip(outputs, op.results):
        name = gen.ids[r] if r in gen.ids else gen.ids.define(r)
        gen.emit(f"{name} = {lowered.loads[k]}({index(k)})", indent)
