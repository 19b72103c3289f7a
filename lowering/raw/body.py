"""A raw MLIR function read into a small, backend-neutral form that the renderers walk.

Reading happens once per function, from its verified textual form, so the renderers never hold MLIR
objects. Each SSA scalar gets a short name ("v3"); tensors do not appear as values at all: every tensor
SSA value is one of the function's arguments (`tensor.insert` writes the argument's buffer in place), so
`tensor.extract` / `tensor.insert` statements carry the argument's index (`attrs["arg"]`) instead.
Tensor-typed loop-carried values and `scf.if` results must stay on one argument; they are dropped from
the form. An op outside the supported set is recorded, not raised: a backend names itself when it
reports it (`RawBody.check(backend)`).

FlagTree's form (`tle.raw.dialect`) passes tiles as shared-memory memrefs (`memref<?xf32, 3>`, dynamic
extents allowed: `memref.dim` reads the tile's), global pointers (`!llvm.ptr<1>`) and scalars. memref.load /
memref.store are read as tensor.extract / tensor.insert on the argument (`attrs["spelled"]` keeps the op's
name); a pointer value is the argument it derives from plus an element offset (llvm.getelementptr with one
index over a scalar element type), read and written with llvm.load / llvm.store.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import LoweringError, UnsupportedConstruct
from ..ir.core import Loc
from . import bindings

# MLIR element types -> tle dtype names ("index" is kept; backends compute it in 32 bits)
DTYPES = {"f32": "fp32", "f16": "fp16", "bf16": "bf16", "f64": "fp64", "i1": "i1", "i8": "i8", "i16": "i16",
          "i32": "i32", "i64": "i64", "index": "index"}

# nvvm special registers -> (what it reads, axis)
SPECIAL = {f"nvvm.read.ptx.sreg.{reg}.{axis}": (kind, i)
           for reg, kind in (("tid", "thread_id"), ("ntid", "block_dim"), ("ctaid", "block_id"),
                             ("nctaid", "grid_dim"))
           for i, axis in enumerate("xyz")}
BARRIERS = {"nvvm.barrier0", "nvvm.barrier"}
MEMORY_OPS = {"memref.load", "memref.store", "memref.dim", "memref.atomic_rmw", "llvm.getelementptr", "llvm.load",
              "llvm.store"}
GEP_DYNAMIC = -2**31                # llvm.getelementptr's rawConstantIndices entry for a dynamic index
# memref.atomic_rmw's kind attribute prints as its enum number (arith's AtomicRMWKind)
ATOMIC_RMW_NAMES = dict(enumerate("addf addi andi assign maximumf maxnumf maxs maxu minimumf minnumf mins minu "
                                  "mulf muli ori xori".split()))
POINTER = "ptr"                     # the dtype name of a global pointer value (!llvm.ptr<1>)
GLOBAL_SPACE = 1                    # !llvm.ptr<1>: the GPU's global memory
SHARED_SPACE = 3                    # memref<..., 3>: a tile in shared memory
ATOMIC_KINDS = {"addi": "add", "addf": "add", "maxs": "max", "mins": "min", "maximumf": "max",
                "minimumf": "min"}   # memref.atomic_rmw kinds raw functions use, by what they do
CMP_OPERATORS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def cmpi_relation(predicate: str) -> tuple[str, bool]:
    """arith.cmpi's predicate as (relation: a key of CMP_OPERATORS, whether the operands compare unsigned)."""
    if predicate in ("eq", "ne"):
        return predicate, False
    return predicate[1:], predicate[0] == "u"

CMPI_PREDICATES = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")
CMPF_PREDICATES = ("false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult",
                   "ule", "une", "uno", "true")

ARITH_OPS = {f"arith.{n}" for n in (
    "addi subi muli divsi divui remsi remui addf subf mulf divf negf maxnumf minnumf maximumf minimumf "
    "maxsi minsi maxui minui andi ori xori shli shrsi shrui cmpi cmpf select index_cast sitofp uitofp "
    "fptosi fptoui extf truncf extsi extui trunci bitcast ceildivsi ceildivui floordivsi").split()}
MATH_OPS = {f"math.{n}" for n in
            "exp exp2 log log2 sqrt rsqrt tanh absf absi erf sin cos floor ceil fma powf".split()}
SCALAR_OPS = ARITH_OPS | MATH_OPS


@dataclass(frozen=True)
class TileArg:
    """An argument. kind "tile": a tile passed in `args` (a tensor, or a shared-memory memref whose extents
    may be None: the tile's); `written` tiles are the call's outputs in the tensor form. kind "pointer" / "scalar":
    a global pointer or a scalar, `value` its SSA name in the body."""
    name: str
    shape: tuple[int | None, ...]
    dtype: str
    read: bool = False
    written: bool = False
    kind: str = "tile"
    value: str | None = None
    strides: tuple[int | None, ...] | None = None      # a memref's strided layout, None where it has none


@dataclass
class Region:
    """The body of an scf.for (args: induction variable, then scalar iter args) or an scf.if branch."""
    args: tuple[str, ...]
    stmts: list["Stmt"]
    yields: tuple[str, ...] = ()      # scalar operands of the closing scf.yield


@dataclass
class Stmt:
    op: str                                   # the MLIR op name, e.g. "arith.addf"
    results: tuple[str, ...] = ()             # scalar SSA names defined here
    operands: tuple[str, ...] = ()            # scalar SSA names read (extract: its indices; insert: value, indices)
    attrs: dict = field(default_factory=dict)  # value, predicate, arg (tensor index), special, axis
    regions: tuple[Region, ...] = ()
    loc: Loc | None = None

    @property
    def name(self) -> str | None:
        return self.results[0] if self.results else None


@dataclass
class RawBody:
    name: str
    args: tuple[TileArg, ...]
    stmts: list[Stmt]
    dtype: dict[str, str]                      # SSA name -> tle dtype name
    loc: Loc | None = None
    unsupported: list[tuple[str, str, Loc | None]] = field(default_factory=list)  # (construct, detail, loc)

    @property
    def outputs(self) -> tuple[int, ...]:
        return tuple(i for i, a in enumerate(self.args) if a.written)

    @property
    def inputs(self) -> tuple[int, ...]:
        return tuple(i for i, a in enumerate(self.args) if a.read)

    def walk(self, stmts=None):
        """Every statement, nested ones after the op that holds them."""
        for s in self.stmts if stmts is None else stmts:
            yield s
            for r in s.regions:
                yield from self.walk(r.stmts)

    def check_strides(self, error, shapes):
        """Tiles are passed row-major: a memref argument's static strides must be the row-major strides of
        the tile passed (`shapes[k]`); raises error(k, message) where one is not."""
        for k, (a, shape) in enumerate(zip(self.args, shapes)):
            if a.kind != "tile" or a.strides is None:
                continue
            row_major = [1] * len(shape)
            for d in range(len(shape) - 2, -1, -1):
                row_major[d] = row_major[d + 1] * int(shape[d + 1])
            if any(s is not None and s != r for s, r in zip(a.strides, row_major)):
                raise error(k, f"declares strides {list(a.strides)}, but a tile of shape {list(shape)} is passed "
                               f"row-major (strides {row_major})")

    def check(self, backend: str):
        """Raise UnsupportedConstruct, naming `backend`, for the first op outside the supported set."""
        if self.unsupported:
            construct, detail, loc = self.unsupported[0]
            raise UnsupportedConstruct(construct, backend, loc or self.loc,
                                       f"in raw function '{self.name}'" + (f": {detail}" if detail else ""))


def check_constraints(body: RawBody, threads_dim: int, sync_scope: str):
    """The function's ops must fit its hardware_constraint: thread/block ids only along its threads_dim
    axes, and a block barrier only with sync_scope='block'."""
    for s in body.walk():
        if s.op in SPECIAL and SPECIAL[s.op][1] >= threads_dim:
            raise LoweringError(f"raw function '{body.name}' reads {s.op} but declares threads_dim={threads_dim}",
                                s.loc or body.loc, construct=s.op)
        if s.op in BARRIERS and sync_scope != "block":
            raise LoweringError(f"raw function '{body.name}' uses a block barrier ({s.op}) but declares "
                                f"sync_scope={sync_scope!r}; use sync_scope='block'", s.loc or body.loc, construct=s.op)


def find_func(module, name: str | None):
    """The func.func named `name` in `module` (the only one when name is None), or None."""
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    if name is None:
        return funcs[0] if len(funcs) == 1 else None
    for f in funcs:
        if str(f.operation.attributes["sym_name"]).strip('"') == name:
            return f
    return None


def read_body(text: str, name: str | None = None, arg_names=None, loc: Loc | None = None) -> RawBody:
    """Parse `text` (a module holding the func.func `name`) and read that function."""
    ir = bindings.load().ir
    with bindings.new_context():
        try:
            module = ir.Module.parse(text)
        except Exception as e:  # the bindings raise MLIRError (older ones ValueError)
            raise LoweringError(f"raw function '{name}': invalid MLIR: {e}", loc) from None
        f = find_func(module, name)
        if f is None:
            raise LoweringError(f"raw function '{name}': the MLIR text has no single func.func "
                                f"{'named ' + repr(name) if name else ''}".rstrip(), loc)
        fname = str(f.operation.attributes["sym_name"]).strip('"')
        return _Reader(ir, loc).function(f, fname, arg_names)


_LOC = re.compile(r'loc\("([^"]*)":(\d+):\d+')


class _Reader:
    def __init__(self, ir, loc: Loc | None):
        self.ir = ir
        self.loc = loc
        self.names: dict = {}       # MLIR scalar Value -> SSA name
        self.tensors: dict = {}     # MLIR tensor Value -> argument index
        self.dtype: dict[str, str] = {}
        self.unsupported: list = []
        self.flags: list[list[bool]] = []   # per argument: [read, written]

    # -- values ------------------------------------------------------------------------------------------
    def define(self, value) -> str:
        name = f"v{len(self.names)}"
        self.names[value] = name
        t = str(value.type)
        self.dtype[name] = POINTER if t.startswith("!llvm.ptr") else DTYPES.get(t, t)
        return name

    def use(self, value) -> str:
        if value not in self.names:        # the result of an unsupported op; reported already
            return self.define(value)
        return self.names[value]

    def is_tensor(self, value) -> bool:
        return str(value.type).startswith(("tensor<", "memref<"))

    def op_loc(self, op) -> Loc | None:
        m = _LOC.match(str(op.location))
        if m and m.group(1) not in ("-", ""):
            return Loc(m.group(1), int(m.group(2)), self.loc.function if self.loc else "")
        return self.loc

    def unsupported_op(self, construct: str, detail: str, op):
        self.unsupported.append((construct, detail, self.op_loc(op)))
        for r in op.results:
            if not self.is_tensor(r):
                self.define(r)

    # -- the function ------------------------------------------------------------------------------------
    def function(self, f, fname: str, arg_names) -> RawBody:
        entry = f.regions[0].blocks[0]
        args = []
        for i, a in enumerate(entry.arguments):
            pname = arg_names[i] if arg_names and i < len(arg_names) else f"arg{i}"
            kind, shape, dtype, strides = param_type(a.type)
            value = None
            if kind is None:
                self.unsupported.append((f"a raw-function argument of type {a.type}",
                                         "arguments are tiles (statically shaped tensors, or shared-memory memrefs "
                                         "of address space 3) of f16/bf16/f32/f64/i1-i64, global pointers "
                                         "(!llvm.ptr<1>) or scalars", self.loc))
            elif kind == "tile":
                self.tensors[a] = i
            else:
                value = self.define(a)
            self.flags.append([False, False])
            args.append((pname, shape or (), dtype, kind or "tile", value, strides))
        stmts, _ = self.block(entry)
        tiles = tuple(TileArg(n, s, d, *fl, kind=k, value=v, strides=st)
                      for (n, s, d, k, v, st), fl in zip(args, self.flags))
        return RawBody(fname, tiles, stmts, self.dtype, self.loc, self.unsupported)

    def block(self, blk):
        """Statements of one block, and the raw values its scf.yield (or scf.condition) yields."""
        stmts, yields = [], []
        for op in blk.operations:
            o = op.operation
            if o.name in ("scf.yield", "scf.condition"):
                yields = list(o.operands)
            elif o.name == "func.return":
                for v in o.operands:
                    if not self.is_tensor(v):
                        self.unsupported_op("func.return of a scalar",
                                            "a raw function returns results through its tensor arguments", o)
            else:
                s = self.op(o)
                if s is not None:
                    stmts.append(s)
        return stmts, yields

    def op(self, o) -> Stmt | None:
        name, loc = o.name, self.op_loc(o)
        if name in MEMORY_OPS:
            return self.memory(o, loc)
        if name == "tensor.extract":
            k = self.arg_of(o.operands[0], o)
            if k is None:
                return None
            self.flags[k][0] = True
            idx = tuple(self.use(v) for v in o.operands[1:])
            return Stmt(name, (self.define(o.results[0]),), idx, {"arg": k}, loc=loc)
        if name == "tensor.insert":
            k = self.arg_of(o.operands[1], o)
            if k is None:
                return None
            self.flags[k][1] = True
            self.tensors[o.results[0]] = k
            ops = (self.use(o.operands[0]),) + tuple(self.use(v) for v in o.operands[2:])
            return Stmt(name, (), ops, {"arg": k}, loc=loc)
        if name == "scf.for":
            return self.scf_for(o, loc)
        if name == "scf.if":
            return self.scf_if(o, loc)
        if name == "scf.while":
            return self.scf_while(o, loc)
        if name == "gpu.printf":
            fmt = self.ir.StringAttr(o.attributes["format"]).value
            return Stmt(name, (), tuple(self.use(v) for v in o.operands), {"format": fmt}, loc=loc)
        if name == "cf.assert":
            msg = self.ir.StringAttr(o.attributes["msg"]).value
            return Stmt(name, (), (self.use(o.operands[0]),), {"message": msg}, loc=loc)
        if name in SPECIAL:
            kind, axis = SPECIAL[name]
            return Stmt(name, (self.define(o.results[0]),), (), {"special": kind, "axis": axis}, loc=loc)
        if name in BARRIERS:
            return self.barrier(o, loc)
        if name != "arith.constant" and name not in SCALAR_OPS:
            self.unsupported_op(name, "", o)
            return None
        bad = [str(v.type) for v in list(o.results) + list(o.operands) if str(v.type) not in DTYPES]
        if bad:
            self.unsupported_op(name, f"on values of type {bad[0]} (raw functions compute on scalars)", o)
            return None
        attrs = {}
        if name == "arith.constant":
            attrs["value"] = attr_value(self.ir, o.attributes["value"])
            if str(o.results[0].type) == "i1":
                attrs["value"] = bool(attrs["value"])
        elif name in ("arith.cmpi", "arith.cmpf"):
            table = CMPI_PREDICATES if name == "arith.cmpi" else CMPF_PREDICATES
            attrs["predicate"] = table[int(attr_value(self.ir, o.attributes["predicate"]))]
        operands = tuple(self.use(v) for v in o.operands)
        return Stmt(name, (self.define(o.results[0]),), operands, attrs, loc=loc)

    def arg_of(self, value, o) -> int | None:
        k = self.tensors.get(value)
        if k is None:
            self.unsupported_op(f"{o.name} on a tensor that is not an argument",
                                "raw functions read and write only the tiles passed in args", o)
        return k

    # -- memory: memrefs (the tiles) and global pointers ----------------------------------------------------
    def memory(self, o, loc) -> Stmt | None:
        name = o.name
        if name in ("memref.load", "memref.store", "memref.atomic_rmw", "memref.dim"):
            where = {"memref.load": 0, "memref.store": 1, "memref.atomic_rmw": 1, "memref.dim": 0}[name]
            k = self.arg_of(o.operands[where], o)
            if k is None:
                return None
            if name == "memref.dim":
                axis = self.constant_of(o.operands[1])
                if axis is None:
                    self.unsupported_op("memref.dim with an axis that is not a constant", "", o)
                    return None
                return Stmt(name, (self.define(o.results[0]),), (), {"arg": k, "axis": int(axis)}, loc=loc)
            if name == "memref.load":
                self.flags[k][0] = True
                idx = tuple(self.use(v) for v in o.operands[1:])
                return Stmt("tensor.extract", (self.define(o.results[0]),), idx, {"arg": k, "spelled": name}, loc=loc)
            self.flags[k][1] = True
            ops_ = (self.use(o.operands[0]),) + tuple(self.use(v) for v in o.operands[2:])
            if name == "memref.store":
                return Stmt("tensor.insert", (), ops_, {"arg": k, "spelled": name}, loc=loc)
            self.flags[k][0] = True
            kind = str(o.attributes["kind"]).split()[0].strip('"')
            kind = ATOMIC_RMW_NAMES.get(int(kind), kind) if kind.isdigit() else kind
            if kind not in ATOMIC_KINDS:
                self.unsupported_op(f"memref.atomic_rmw {kind}", f"the kinds there are: {', '.join(ATOMIC_KINDS)}", o)
                return None
            return Stmt(name, (self.define(o.results[0]),), ops_, {"arg": k, "kind": ATOMIC_KINDS[kind]}, loc=loc)
        if name == "llvm.getelementptr":
            return self.getelementptr(o, loc)
        pointer = o.operands[0] if name == "llvm.load" else o.operands[1]
        if self.dtype.get(self.names.get(pointer)) != POINTER:
            self.unsupported_op(f"{name} through a pointer that is not a pointer argument or derived from one", "", o)
            return None
        if name == "llvm.load":
            if str(o.results[0].type) not in DTYPES:
                self.unsupported_op(f"{name} of a {o.results[0].type}", "raw functions load scalars", o)
                return None
            return Stmt(name, (self.define(o.results[0]),), (self.use(pointer),), {}, loc=loc)
        return Stmt(name, (), (self.use(o.operands[0]), self.use(pointer)), {}, loc=loc)

    def getelementptr(self, o, loc) -> Stmt | None:
        base, *dynamic = o.operands
        if self.dtype.get(self.names.get(base)) != POINTER:
            self.unsupported_op("llvm.getelementptr on a value that is not a pointer argument or derived from one",
                                "", o)
            return None
        elem = str(self.ir.TypeAttr(o.attributes["elem_type"]).value)
        indices = list(self.ir.DenseI32ArrayAttr(o.attributes["rawConstantIndices"]))
        if elem not in DTYPES or elem == "index" or len(indices) != 1:
            self.unsupported_op("llvm.getelementptr with " + (f"element type {elem}" if elem not in DTYPES else
                                                              f"{len(indices)} indices"),
                                "raw functions offset a pointer by one index over a scalar element type", o)
            return None
        offset = self.use(dynamic[0]) if indices[0] == GEP_DYNAMIC else None
        attrs = {"elem": DTYPES[elem], "constant": None if offset else int(indices[0])}
        return Stmt(o.name, (self.define(o.results[0]),), (self.use(base),) + ((offset,) if offset else ()), attrs,
                    loc=loc)

    def constant_of(self, value):
        """The value of an arith.constant operand (None for anything else)."""
        owner = value.owner
        op = getattr(owner, "operation", owner)
        if getattr(op, "name", None) != "arith.constant":
            return None
        return attr_value(self.ir, op.attributes["value"])

    def barrier(self, o, loc) -> Stmt:
        """nvvm.barrier0, or nvvm.barrier with its optional barrier id and thread count (attrs "id", "count":
        SSA names or None)."""
        operands = list(o.operands)
        sizes = [0, 0]
        if "operandSegmentSizes" in o.attributes:
            sizes = list(self.ir.DenseI32ArrayAttr(o.attributes["operandSegmentSizes"]))[:2]
        elif operands:
            sizes = [1, 1 if len(operands) > 1 else 0]
        barrier_id = self.use(operands[0]) if sizes[0] else None
        count = self.use(operands[sizes[0]]) if len(sizes) > 1 and sizes[1] else None
        used = tuple(x for x in (barrier_id, count) if x is not None)
        return Stmt(o.name, (), used, {"id": barrier_id, "count": count}, loc=loc)

    # -- structured control flow -------------------------------------------------------------------------
    def carried(self, inits, results, region_args, o) -> list[int] | None:
        """Bind tensor-typed carried values to their argument; return the scalar positions."""
        scalars = []
        for j, (init, res) in enumerate(zip(inits, results)):
            if self.is_tensor(res):
                k = self.arg_of(init, o) if init is not None else None
                if init is not None and k is None:
                    return None
                if k is not None:
                    self.tensors[res] = k
                    if region_args is not None:
                        self.tensors[region_args[j]] = k
            else:
                scalars.append(j)
        return scalars

    def tensor_yields_ok(self, yields, results, o) -> bool:
        for v, r in zip(yields, results):
            if self.is_tensor(r) and self.tensors.get(v) != self.tensors.get(r):
                self.unsupported_op(f"{o.name} yielding a different tensor than it carries",
                                    "a carried tensor must stay on one argument", o)
                return False
        return True

    def scf_for(self, o, loc) -> Stmt | None:
        lb, ub, step, *inits = o.operands
        blk = o.regions[0].blocks[0]
        iv, *iters = blk.arguments
        results = list(o.results)
        scal = self.carried(inits, results, iters, o)
        if scal is None:
            return None
        args = (self.define(iv),) + tuple(self.define(iters[j]) for j in scal)
        stmts, yields = self.block(blk)
        if not self.tensor_yields_ok(yields, results, o):
            return None
        region = Region(args, stmts, tuple(self.use(yields[j]) for j in scal))
        operands = tuple(self.use(v) for v in (lb, ub, step)) + tuple(self.use(inits[j]) for j in scal)
        return Stmt("scf.for", tuple(self.define(results[j]) for j in scal), operands, {}, (region,), loc)

    def scf_if(self, o, loc) -> Stmt | None:
        results = list(o.results)
        regions, scal = [], [j for j, r in enumerate(results) if not self.is_tensor(r)]
        tensor_arg = {}
        for reg in o.regions:
            if len(reg.blocks) == 0:
                regions.append(Region((), [], ()))
                continue
            stmts, yields = self.block(reg.blocks[0])
            for j, r in enumerate(results):
                if self.is_tensor(r):
                    k = self.tensors.get(yields[j])
                    if k is None or tensor_arg.setdefault(j, k) != k:
                        self.unsupported_op("scf.if yielding different tensors from its branches",
                                            "a tensor result must stay on one argument", o)
                        return None
            regions.append(Region((), stmts, tuple(self.use(yields[j]) for j in scal)))
        for j, k in tensor_arg.items():
            self.tensors[results[j]] = k
        return Stmt("scf.if", tuple(self.define(results[j]) for j in scal), (self.use(o.operands[0]),), {},
                    tuple(regions), loc)

    def scf_while(self, o, loc) -> Stmt | None:
        """Two regions: `before` (args: the carried values; yields: the condition, then the values passed on)
        and `after` (args: the values passed on; yields: the next carried values). Scalars only."""
        if any(self.is_tensor(v) for v in list(o.operands) + list(o.results)):
            self.unsupported_op("scf.while carrying a tile", "a while loop carries scalars", o)
            return None
        regions = []
        for reg in o.regions:
            blk = reg.blocks[0]
            args = tuple(self.define(a) for a in blk.arguments)
            stmts, yields = self.block(blk)
            regions.append(Region(args, stmts, tuple(self.use(v) for v in yields)))
        return Stmt("scf.while", tuple(self.define(r) for r in o.results), tuple(self.use(v) for v in o.operands),
                    {}, tuple(regions), loc)


def tile_type(t) -> tuple[tuple[int, ...] | None, str]:
    """(shape, tle dtype) of a statically shaped ranked tensor type; (None, text) for anything else."""
    m = re.fullmatch(r"tensor<((?:\d+x)*)(\w+)>", str(t))
    if not m or m.group(2) not in DTYPES or m.group(2) == "index":
        return None, str(t)
    shape = tuple(int(d) for d in m.group(1).split("x") if d)
    return shape, DTYPES[m.group(2)]


def param_type(t):
    """(kind, shape, dtype, strides) of a raw function's parameter type: kind "tile" (a statically shaped
    tensor, or a memref in shared memory whose dynamic extents are None), "pointer" (!llvm.ptr<1>) or "scalar";
    kind None where it is none of these."""
    text = str(t)
    shape, dtype = tile_type(text)
    if shape is not None:
        return "tile", shape, dtype, None
    if re.fullmatch(r"!llvm\.ptr<\s*1\s*>", text):
        return "pointer", (), POINTER, None
    if text in DTYPES and text != "index":
        return "scalar", (), DTYPES[text], None
    m = re.fullmatch(r"memref<((?:(?:\d+|\?)x)*)(\w+)(?:,\s*strided<\[([^\]]*)\](?:,\s*offset:\s*[?\d]+)?>)?"
                     r",\s*(\d+)\s*>", text)
    if not m or m.group(2) not in DTYPES or m.group(2) == "index" or int(m.group(4)) != SHARED_SPACE:
        return None, None, text, None
    shape = tuple(None if d == "?" else int(d) for d in m.group(1).split("x") if d)
    strides = None
    if m.group(3) is not None:
        strides = tuple(None if x.strip() == "?" else int(x) for x in m.group(3).split(","))
    return "tile", shape, DTYPES[m.group(2)], strides


def attr_value(ir, a):
    """The Python value of a bool, integer or float attribute (None for anything else)."""
    for cls in ("BoolAttr", "IntegerAttr", "FloatAttr"):
        C = getattr(ir, cls)
        if bindings.isa(a, C):
            v = C(a).value
            return bool(v) if cls == "BoolAttr" else v
    return None
