"""Tile IR -> the source of a `@triton.jit` kernel.

The output reads like a hand-written Triton kernel: constexprs are folded in, each named source
variable is a statement, and single-use pure values are written inline where they are used.
"""
from __future__ import annotations

import os
import re

from ..errors import UnsupportedConstruct
from ..ir import types as T
from ..ir.core import Block, KernelIR, Op, Value
from ..ir.ops import CACHE_HINTS
from ..ir.uses import Identifiers, users
from ..transforms.async_loads import how_issued

BACKEND = "triton"
_TL_DTYPE = {"i1": "tl.int1", "i8": "tl.int8", "i16": "tl.int16", "i32": "tl.int32", "i64": "tl.int64",
             "u8": "tl.uint8", "u16": "tl.uint16", "u32": "tl.uint32", "u64": "tl.uint64",
             "fp16": "tl.float16", "bf16": "tl.bfloat16", "fp32": "tl.float32", "fp64": "tl.float64"}
_BIN = {"add": "+", "sub": "-", "mul": "*", "fdiv": "/", "div": "//", "rem": "%", "and": "&", "or": "|",
        "xor": "^", "shl": "<<", "shr": ">>"}
_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_MATH = {"exp": "tl.exp", "exp2": "tl.exp2", "log": "tl.log", "log2": "tl.log2", "sqrt": "tl.sqrt",
         "rsqrt": "tl.rsqrt", "sigmoid": "tl.sigmoid", "abs": "tl.abs", "erf": "tl.erf", "sin": "tl.sin",
         "cos": "tl.cos", "floor": "tl.floor", "ceil": "tl.ceil"}
_PREC = {"|": 1, "^": 2, "&": 3, "<<": 4, ">>": 4, "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6,
         "unary": 7, "<": 0.5, "<=": 0.5, ">": 0.5, ">=": 0.5, "==": 0.5, "!=": 0.5}
_PURE = {"const", "program_id", "num_programs", "arange", "splat", "broadcast", "expand_dims", "reshape",
         "trans", "binary", "cmp", "unary", "cast", "where", "addptr", "local_load"}
# tle.gpu buffers are register tiles here (stock Triton has no explicit shared memory): a buffer
# version is the tile it holds, an allocation's contents (undefined) are zeros.
IN_REGISTERS = "a register tile (stock Triton has no explicit shared memory)"
_IMPLICIT_BROADCAST_USERS = {"binary", "cmp", "where", "addptr"}


def tl_dtype(d: T.DType) -> str:
    return _TL_DTYPE[d.name]


def _literal(value, dtype: T.DType) -> str:
    if dtype.is_bool:
        return "True" if value else "False"
    if dtype.is_float:
        if value != value:
            return "float('nan')"
        if value in (float("inf"), float("-inf")):
            return f"float('{'-' if value < 0 else ''}inf')"
        return repr(float(value))
    return repr(int(value))


def _full(shape: list, value, dtype: T.DType) -> str:
    """A constant tile. bf16 constants are made in fp32 and converted (the same value after rounding):
    Triton's interpreter cannot build bf16 constants."""
    if dtype.name == "bf16":
        return f"tl.full({shape}, {_literal(value, dtype)}, tl.float32).to(tl.bfloat16)"
    return f"tl.full({shape}, {_literal(value, dtype)}, {tl_dtype(dtype)})"


class TritonCodegen:
    def __init__(self, k: KernelIR, source_note: str = ""):
        self.k = k
        self.ids = Identifiers(reserved={"tl", "triton"})
        self.users = users(k)
        self.lines: list[str] = []
        self.source_note = source_note

    # -- which values become expressions instead of statements ------------------------------------
    def _inline(self, op: Op) -> bool:
        if op.name == "alloc":
            return True
        if op.name not in _PURE or len(op.results) != 1:
            return False
        v = op.result
        us = self.users.get(v.id, [])
        if op.name == "const":
            return True
        if self._implicitly_broadcast(op):
            return True
        if v.name and op.name not in ("expand_dims",):
            return False
        return len(us) == 1 and us[0].parent is op.parent

    def _implicitly_broadcast(self, op: Op) -> bool:
        """A splat/broadcast whose every user broadcasts its operands itself in Triton."""
        us = self.users.get(op.result.id, [])
        return op.name in ("splat", "broadcast") and bool(us) and all(u.name in _IMPLICIT_BROADCAST_USERS for u in us)

    def expr(self, v: Value) -> str:
        if v in self.ids:
            return self.ids[v]
        op = v.defining_op
        assert op is not None, f"value {v} has no name and no defining op"
        return self._render(op)

    def _prec(self, v: Value) -> int:
        """Python precedence of the expression `v` renders to (higher binds tighter)."""
        if v in self.ids:
            return 100
        op = v.defining_op
        if op.name == "binary" and op.attrs["op"] in _BIN:
            return _PREC[_BIN[op.attrs["op"]]]
        if op.name == "cmp":
            return _PREC["<"]
        if op.name == "addptr":
            return _PREC["+"]
        if op.name == "unary" and op.attrs["op"] in ("neg", "invert", "not"):
            return _PREC["unary"]
        if op.name == "const" and isinstance(op.attrs["value"], (int, float)) and op.attrs["value"] < 0:
            return _PREC["unary"]
        if self._implicitly_broadcast(op):
            return self._prec(op.operands[0])
        return 100

    def _paren(self, v: Value, need: int = 100, right: bool = False) -> str:
        """`v` as an operand that needs precedence `need` (a right operand of equal precedence is
        parenthesized: a - (b - c))."""
        e = self.expr(v)
        p = self._prec(v)
        if p > need or (p == need and not right):
            return e
        return f"({e})"

    def _binop(self, sym: str, a: Value, b: Value) -> str:
        p = _PREC[sym]
        return f"{self._paren(a, p)} {sym} {self._paren(b, p, right=True)}"

    def _render(self, op: Op) -> str:
        a = op.attrs
        ops = op.operands
        n = op.name
        if n == "const":
            return _literal(a["value"], op.result.type.elem) if op.result.type.elem.name in ("i32", "fp32", "i1") \
                or self._typed_by_context(op) else _full([], a["value"], op.result.type.elem)
        if n == "program_id":
            return f"tl.program_id({a['axis']})"
        if n == "num_programs":
            return f"tl.num_programs({a['axis']})"
        if n == "arange":
            return f"tl.arange({a['start']}, {a['end']})"
        if n in ("splat", "broadcast"):
            if self._implicitly_broadcast(op):
                return self.expr(ops[0])
            if n == "splat":
                if op.result.type.is_pointer:
                    return f"tl.broadcast_to({self.expr(ops[0])}, {list(a['shape'])})"
                src = ops[0].defining_op
                if src is not None and src.name == "const" and ops[0] not in self.ids:
                    return _full(list(a["shape"]), src.attrs["value"], op.result.type.elem)
                return f"tl.full({list(a['shape'])}, {self.expr(ops[0])}, {tl_dtype(op.result.type.elem)})"
            return f"tl.broadcast_to({self.expr(ops[0])}, {list(a['shape'])})"
        if n == "expand_dims":
            rank = op.result.type.rank
            idx = [":"] * rank
            idx[a["axis"]] = "None"
            return f"{self._paren(ops[0])}[{', '.join(idx)}]"
        if n == "reshape":
            return f"tl.reshape({self.expr(ops[0])}, {list(a['shape'])})"
        if n == "trans":
            if tuple(a["perm"]) == (1, 0):
                return f"tl.trans({self.expr(ops[0])})"
            return f"tl.permute({self.expr(ops[0])}, {tuple(a['perm'])})"
        if n == "binary":
            o = a["op"]
            if o in ("maximum", "minimum"):
                return f"tl.{o}({self.expr(ops[0])}, {self.expr(ops[1])})"
            if o == "pow":
                raise UnsupportedConstruct("pow", BACKEND, op.loc)
            return self._binop(_BIN[o], ops[0], ops[1])
        if n == "cmp":
            return self._binop(_CMP[a["pred"]], ops[0], ops[1])
        if n == "unary":
            o = a["op"]
            if o == "neg":
                return f"-{self._paren(ops[0], _PREC['unary'], right=True)}"
            if o in ("invert", "not"):
                return f"~{self._paren(ops[0], _PREC['unary'], right=True)}"
            return f"{_MATH[o]}({self.expr(ops[0])})"
        if n == "cast":
            extra = ", bitcast=True" if a.get("bitcast") else ""
            if ops[0].type.is_scalar:
                # a loop counter is a Python int in Triton's interpreter, where int has no .to()
                return f"tl.cast({self.expr(ops[0])}, {tl_dtype(a['dtype'])}{extra})"
            return f"{self._paren(ops[0])}.to({tl_dtype(a['dtype'])}{extra})"
        if n == "where":
            return f"tl.where({self.expr(ops[0])}, {self.expr(ops[1])}, {self.expr(ops[2])})"
        if n == "addptr":
            return self._binop("+", ops[0], ops[1])
        if n == "alloc":
            return _full(list(op.result.type.shape), 0, op.result.type.elem)
        if n == "local_load":
            return self.expr(ops[0])
        if n == "local_store":
            return self.expr(ops[1])
        if n in ("load", "copy_in"):
            args = [self.expr(ops[0])]
            if ops[1] is not None:
                args.append(f"mask={self.expr(ops[1])}")
            if ops[2] is not None:
                args.append(f"other={self._other(ops[2])}")
            for key in CACHE_HINTS:
                if a.get(key):
                    args.append(f"{key}={a[key]!r}")
            if a.get("volatile"):
                args.append("volatile=True")
            return f"tl.load({', '.join(args)})"
        if n == "atomic":
            args = [self.expr(ops[0]), self.expr(ops[1])]
            if ops[2] is not None:
                args.append(f"mask={self.expr(ops[2])}")
            for key in ("sem", "scope"):
                if a.get(key):
                    args.append(f"{key}={a[key]!r}")
            return f"tl.atomic_{a['kind']}({', '.join(args)})"
        if n == "reduce":
            kd = ", keep_dims=True" if a["keep_dims"] else ""
            return f"tl.{a['kind']}({self.expr(ops[0])}, axis={a['axis']}{kd})"
        if n == "dot":
            args = [self.expr(ops[0]), self.expr(ops[1]), self.expr(ops[2])]
            if a.get("input_precision"):
                args.append(f"input_precision={a['input_precision']!r}")
            if a.get("max_num_imprecise_acc"):
                args.append(f"max_num_imprecise_acc={a['max_num_imprecise_acc']}")
            args.append(f"out_dtype={tl_dtype(a['out_dtype'])}")
            return f"tl.dot({', '.join(args)})"
        raise UnsupportedConstruct(f"op '{n}'", BACKEND, op.loc)

    def _other(self, v: Value) -> str:
        """tl.load casts `other` to the pointee type, so a constant can be written as a plain literal."""
        op = v.defining_op
        while op is not None and op.name in ("splat", "broadcast") and v not in self.ids:
            v = op.operands[0]
            op = v.defining_op
        if op is not None and op.name == "const" and v not in self.ids:
            return _literal(op.attrs["value"], v.type.elem)
        return self.expr(v)

    def _typed_by_context(self, op: Op) -> bool:
        """A literal takes the dtype of the tile it meets in these users (Triton's scalar rule)."""
        us = self.users.get(op.result.id, [])
        if not us:
            return False
        for u in us:
            if u.name not in ("binary", "cmp", "where"):
                return False
            others = [o for o in u.operands if o is not None and o is not op.result and
                      o.type.elem == op.result.type.elem]
            if not others or all((o.defining_op is not None and o.defining_op.name == "const") for o in others):
                return False
        return True

    # -- statements -----------------------------------------------------------------------------------
    def emit(self, line: str, indent: int):
        self.lines.append("    " * indent + line)

    def block(self, blk: Block, indent: int):
        for op in blk.ops:
            self.statement(op, indent)

    def statement(self, op: Op, indent: int):
        n = op.name
        if n == "yield":
            return  # handled by the parent op
        if n in ("store", "copy_out"):
            ptr, val, mask = op.operands
            args = [self.expr(ptr), self.expr(val)]
            if mask is not None:
                args.append(f"mask={self.expr(mask)}")
            for key in CACHE_HINTS:
                if op.attrs.get(key):
                    args.append(f"{key}={op.attrs[key]!r}")
            self.emit(f"tl.store({', '.join(args)})", indent)
            return
        if n == "for":
            self._for(op, indent)
            return
        if n == "if":
            self._if(op, indent)
            return
        if n == "raw_call":
            self._raw_call(op, indent)
            return
        if self._inline(op):
            return
        name = self.ids[op.result] if op.result in self.ids else self.ids.define(op.result)
        note = f"  # tle.load(is_async=True): {how_issued(op)}" if n == "load" and op.attrs.get("is_async") else ""
        if n in ("copy_in", "local_store") and self._first_write(op):
            t = op.result.type
            self.emit(f"# tle.gpu.alloc {op.result.name or name} {list(t.shape)} {t.elem}: {IN_REGISTERS}", indent)
        self.emit(f"{name} = {self._render(op)}{note}", indent)

    def _first_write(self, op: Op) -> bool:
        """Is `op` the first write of a buffer straight after its tle.gpu.alloc?"""
        d = op.operands[3 if op.name == "copy_in" else 0].defining_op
        return d is not None and d.name == "alloc"

    def _raw_call(self, op: Op, indent: int):
        """tle.call: an element-wise raw function becomes whole-tile statements over the argument tiles;
        each written argument's result is then bound to its own name."""
        from .raw_render import render_triton, require_elementwise
        fn = op.attrs["fn"]
        body = fn.body()
        try:
            ew = require_elementwise(body, op.attrs["threads"])
        except UnsupportedConstruct as e:        # name the call site; the reason names the function's line
            prefix = f"backend '{e.backend}' cannot express {e.construct}: "
            detail = e.message[len(prefix):] if e.message.startswith(prefix) else e.message
            where = f" (at {e.loc})" if e.loc is not None and e.loc != op.loc else ""
            raise UnsupportedConstruct(e.construct, BACKEND, op.loc, f"{detail}{where}") from None
        exprs = []
        for v in op.operands:
            e = self.expr(v)
            if not re.fullmatch(r"[A-Za-z_]\w*", e):      # the renderer composes operands as plain names
                name = self.ids.fresh(v.name or fn.params[len(exprs)])
                self.emit(f"{name} = {e}", indent)
                e = name
            exprs.append(e)
        self.emit(f"# tle.call({fn.name}): element-wise raw MLIR function, inlined as tile code", indent)
        made = set()

        def fresh(hint=None):
            name = self.ids.fresh(hint or "raw")
            made.add(name)
            return name

        lines, finals = render_triton(ew, exprs, names=fresh)
        outputs = op.attrs["outputs"]
        pairs = []
        for k, r in zip(outputs, op.results):
            name = self.ids[r] if r in self.ids else self.ids.define(r)
            f = finals[k]
            if f == name:
                continue
            if f in made and name not in [finals[j] for j in outputs if j != k] and \
                    _rename_definition(lines, f, name):
                continue        # the statement computing the output's last value defines its name itself
            pairs.append((name, f))
        for line in lines:
            self.emit(line, indent)
        if pairs:       # one assignment: a final value may be another output's previous tile
            self.emit(f"{', '.join(p[0] for p in pairs)} = {', '.join(p[1] for p in pairs)}", indent)

    def _carried_expr(self, v: Value) -> str:
        """A value assigned to a loop-carried or branch-merged variable: constants are typed, so the
        variable is a tensor on every path (Triton's interpreter keeps bare literals as Python ints)."""
        op = v.defining_op
        if v not in self.ids and op is not None and op.name == "const" and v.type.is_scalar:
            return _full([], op.attrs["value"], v.type.elem)
        return self.expr(v)

    def _assign_many(self, names: list[str], values: list[Value], indent: int):
        pairs = [(nm, self._carried_expr(v)) for nm, v in zip(names, values) if self.expr(v) != nm]
        if not pairs:
            return
        if len(pairs) == 1:
            self.emit(f"{pairs[0][0]} = {pairs[0][1]}", indent)
        else:
            self.emit(f"{', '.join(p[0] for p in pairs)} = {', '.join(p[1] for p in pairs)}", indent)

    def _for(self, op: Op, indent: int):
        lo, hi, st, *inits = op.operands
        iv, *carried = op.body.args
        y = op.body.terminator
        yields = y.operands if y else []
        order = {id(o): i for i, o in enumerate(op.body.ops)}
        names = []
        for c, r, init, out in zip(carried, op.results, inits, yields):
            # keep the source's variable name across the loop where nothing else needs the value
            if init in self.ids and all(u is op for u in self.users.get(init.id, [])) and \
                    self.ids[init].split("_")[0] == (c.name or "").split("_")[0]:
                nm = self.ids[init]
                self.ids.alias(c, nm)
            else:
                nm = self.ids.define(c)
            self.ids.alias(r, nm)
            names.append(nm)
            if self._can_write_in_place(c, out, op.body, order):
                self.ids.alias(out, nm)
        self._assign_many(names, inits, indent)
        ivn = self.ids.define(iv)
        bounds = [self.expr(lo), self.expr(hi)]
        if not (st.defining_op is not None and st.defining_op.name == "const" and st.defining_op.attrs["value"] == 1):
            bounds.append(self.expr(st))
        elif bounds[0] == "0":
            bounds = bounds[1:]
        kw = []
        for key in ("num_stages", "loop_unroll_factor", "warp_specialize", "flatten", "disallow_acc_multi_buffer",
                    "disable_licm"):
            if key in op.attrs:
                kw.append(f"{key}={op.attrs[key]!r}")
        it = "tl.range" if op.attrs.get("kind") == "tl.range" or kw else "range"
        if "async_raised_from" in op.attrs:
            self.emit(f"# pipelined for tle.load(is_async=True) (the kernel asked for num_stages="
                      f"{op.attrs['async_raised_from']})", indent)
        self.emit(f"for {ivn} in {it}({', '.join(bounds + kw)}):", indent)
        self.block(op.body, indent + 1)
        y = op.body.terminator
        self._assign_many(names, y.operands if y else [], indent + 1)
        if len(op.body.ops) == 0 or (len(op.body.ops) == 1 and y is not None and not names):
            self.emit("pass", indent + 1)

    def _can_write_in_place(self, carried: Value, out: Value, body: Block, order) -> bool:
        """Can the body's new value of a carried variable be assigned to the variable itself? Yes when it
        is a statement of the body's own block that comes after every use of the old value."""
        d = out.defining_op
        if d is None or d.parent is not body or out in self.ids or d.name in ("for", "if") or self._inline(d):
            return False
        if [u for u in self.users.get(out.id, []) if u is not body.terminator]:
            return False
        pos = order[id(d)]
        for u in self.users.get(carried.id, []):
            top = u
            while top.parent is not body:
                top = top.parent.parent_op
            if order[id(top)] >= pos and top is not d:
                return False
        return True

    def _if(self, op: Op, indent: int):
        names = [self.ids.define(r) for r in op.results]
        for blk in op.regions:          # compute a branch's value straight into the merged variable
            y = blk.terminator
            for nm, out in zip(names, y.operands if y else []):
                d = out.defining_op
                if d is not None and d.parent is blk and out not in self.ids and not self._inline(d) and \
                        d.name not in ("for", "if") and \
                        all(u is y for u in self.users.get(out.id, [])) and \
                        nm not in [self.expr(o) for o in (y.operands if y else []) if o is not out and o in self.ids]:
                    self.ids.alias(out, nm)
        self.emit(f"if {self.expr(op.operands[0])}:", indent)
        for i, blk in enumerate(op.regions):
            if i == 1:
                self.emit("else:", indent)
            before = len(self.lines)
            self.block(blk, indent + 1)
            y = blk.terminator
            self._assign_many(names, y.operands if y else [], indent + 1)
            if len(self.lines) == before:
                self.emit("pass", indent + 1)

    def generate(self) -> str:
        k = self.k
        params = [self.ids.define(p.value, p.name) for p in k.params]
        body_start = len(self.lines)
        self.block(k.body, 1)
        body = self.lines[body_start:] or ["    pass"]
        head = [f"# Generated by tle from {os.path.basename(k.loc.file)}:{k.loc.line} ({k.name}); edit the source kernel, not this file.",
                "import triton",
                "import triton.language as tl",
                "",
                ""]
        if k.constexprs:
            head.append("# constexprs: " + ", ".join(f"{n}={v!r}" for n, v in k.constexprs.items()))
        head.append(f"# launch: num_warps={k.num_warps}, num_stages={k.num_stages}")
        head.append("@triton.jit")
        head.append(f"def {k.name}({', '.join(params)}):")
        return "\n".join(head + body) + "\n"


def _rename_definition(lines: list[str], old: str, new: str) -> bool:
    """Rename `old` to `new` in `lines` (in place) where `old` is used only by its one definition
    `old = ...` and nothing after that definition reads `new`; whether it was renamed."""
    uses = [i for i, ln in enumerate(lines) if re.search(rf"\b{re.escape(old)}\b", ln)]
    if len(uses) != 1 or not lines[uses[0]].startswith(f"{old} = ") or \
            len(re.findall(rf"\b{re.escape(old)}\b", lines[uses[0]])) != 1:
        return False
    if any(re.search(rf"\b{re.escape(new)}\b", ln) for ln in lines[uses[0] + 1:]):
        return False
    lines[uses[0]] = new + lines[uses[0]][len(old):]
    return True


def generate(k: KernelIR) -> str:
    return TritonCodegen(k).generate()
