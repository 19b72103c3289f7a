"""The stage plan of a pipelined loop (lowering/tilelang/staging.py), piece by piece.

A loop names its stages only where TileLang's simplifier keeps each `if` and inner loop at the top of its
body as one statement; the plan decides that by evaluating the integer expressions of bounds and
conditions at the points the program reaches. Those pieces are checked here on IR built by hand: the
evaluator (every op it follows and every one it refuses), the trip count, the samples of a loop's steps,
the points that reach a body, and the (order, stage) list written from the body's statements."""
import re
from types import SimpleNamespace

import pytest
import torch
import triton.language as tl

import tle
from tle.cli import meta_copy

from tle.lowering.ir import ops, types as ir_types
from tle.lowering.ir.builder import Builder
from tle.lowering.ir.ops import BinaryOp, CmpPred, UnaryOp
from tle.lowering.tilelang import staging
from tle.lowering.tilelang.emission import Stmt

i1, i8, i32 = ir_types.i1, ir_types.i8, ir_types.i32


class Kernel:
    """Builds scalar IR at the top of a kernel; `gen` stands for the code generator's context, of which the
    plan reads the grid and the runtime parameters."""

    def __init__(self, grid=(4,)):
        self.b = Builder()
        self.top = self.b.new_block([])
        self.gen = SimpleNamespace(grid=grid, params={})

    def __enter__(self):
        self._ctx = self.b.insert_into(self.top)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)

    def c(self, value, dtype=i32):
        return self.b.const(value, dtype)

    def param(self, name: str, dtype=i32):
        """A runtime scalar argument the kernel was not compiled for."""
        (v,) = self.b.new_block([ir_types.scalar(dtype)], [name]).args
        self.gen.params[v.id] = name
        return v

    def eval(self, v, point=None):
        return staging._eval(self.gen, v, point or {})


# -- the evaluator ---------------------------------------------------------------------------------------------
def test_constants_block_indices_grid_sizes_and_hints_evaluate():
    with Kernel(grid=(4, 3)) as k:
        b = k.b
        assert k.eval(k.c(7)) == 7
        assert k.eval(k.c(True, i1)) is True
        assert k.eval(k.c(1.5, ir_types.DTYPES["fp32"])) is None          # not an integer
        pid = b.program_id(1)
        assert k.eval(pid, {("pid", 1): 2}) == 2
        assert k.eval(pid, {("pid", 0): 2}) is None                       # that axis is not given
        assert k.eval(b.num_programs(0)) == 4
        assert k.eval(b.num_programs(1)) == 3
        assert k.eval(b.num_programs(2)) == 1                              # beyond the grid: one block
        assert k.eval(b.hint("multiple_of", b.binary(BinaryOp.MUL, pid, k.c(16)), (16,)), {("pid", 1): 3}) == 48


def test_a_value_given_at_the_point_is_taken_from_it():
    with Kernel() as k:
        n = k.param("n")
        twice = k.b.binary(BinaryOp.ADD, n, n)
        assert k.eval(twice, {n.id: 21}) == 42
        assert k.eval(twice) is None                                       # a runtime integer, not given


@pytest.mark.parametrize("op, a, b, want", [
    (BinaryOp.ADD, 5, 3, 8), (BinaryOp.SUB, 5, 7, -2), (BinaryOp.MUL, -4, 3, -12), (BinaryOp.DIV, -7, 2, -3),
    (BinaryOp.REM, -7, 2, -1), (BinaryOp.DIV, 7, 0, None), (BinaryOp.MAXIMUM, 2, 9, 9), (BinaryOp.MINIMUM, 2, 9, 2),
])
def test_integer_arithmetic_follows_the_device(op, a, b, want):
    """Division truncates toward zero (C, TIR), not toward minus infinity (Python); division by zero is
    not known."""
    with Kernel() as k:
        assert k.eval(k.b.binary(op, k.c(a), k.c(b))) == want


def test_arithmetic_that_wraps_around_is_not_followed():
    with Kernel() as k:
        assert k.eval(k.b.binary(BinaryOp.ADD, k.c(100, i8), k.c(27, i8))) == 127
        assert k.eval(k.b.binary(BinaryOp.ADD, k.c(100, i8), k.c(28, i8))) is None


def test_a_binary_op_without_an_integer_meaning_is_not_followed():
    with Kernel() as k:
        assert k.eval(k.b.binary(BinaryOp.UMULHI, k.c(3, ir_types.u32), k.c(5, ir_types.u32))) is None


@pytest.mark.parametrize("pred, want", [(CmpPred.LT, True), (CmpPred.LE, True), (CmpPred.GT, False),
                                        (CmpPred.GE, False), (CmpPred.EQ, False), (CmpPred.NE, True)])
def test_comparisons(pred, want):
    with Kernel() as k:
        assert k.eval(k.b.cmp(pred, k.c(2), k.c(3))) is want


@pytest.mark.parametrize("op, x, want", [(UnaryOp.NEG, 5, -5), (UnaryOp.ABS, -5, 5), (UnaryOp.INVERT, 5, -6),
                                         (UnaryOp.NOT, 5, 0), (UnaryOp.NOT, 0, 1)])
def test_integer_unary_ops(op, x, want):
    with Kernel() as k:
        assert k.eval(k.b.unary(op, k.c(x))) == want


def test_unary_ops_on_booleans_and_those_without_an_integer_meaning():
    with Kernel() as k:
        t = k.b.cmp(CmpPred.LT, k.c(1), k.c(2))
        assert k.eval(k.b.unary(UnaryOp.NOT, t)) is False
        assert k.eval(k.b.unary(UnaryOp.INVERT, t)) is False
        assert k.eval(k.b.unary(UnaryOp.NEG, t)) is None
        assert k.eval(k.b.unary(UnaryOp.NEG, k.c(-128, i8))) is None        # 128 does not fit
        assert k.eval(k.b.unary(UnaryOp.EXP, k.c(1))) is None


def test_casts_convert_and_bitcasts_are_not_followed():
    with Kernel() as k:
        b = k.b
        assert k.eval(b.cast(k.c(5), i1)) is True
        assert k.eval(b.cast(k.c(0), i1)) is False
        assert k.eval(b.cast(k.c(100), i8)) == 100
        assert k.eval(b.cast(k.c(300), i8)) is None
        assert k.eval(b.cast(b.cmp(CmpPred.LT, k.c(1), k.c(2)), i32)) == 1
        assert k.eval(b.cast(k.c(5), ir_types.u32, bitcast=True)) is None


def test_where_chooses_by_its_condition():
    with Kernel() as k:
        b = k.b
        yes, no = b.cmp(CmpPred.LT, k.c(1), k.c(2)), b.cmp(CmpPred.GT, k.c(1), k.c(2))
        assert k.eval(b.where(yes, k.c(10), k.c(20))) == 10
        assert k.eval(b.where(no, k.c(10), k.c(20))) == 20
        n = k.param("n")
        assert k.eval(b.where(yes, n, k.c(20))) is None                     # an unknown operand: not known


def test_values_that_read_memory_or_are_not_integers_are_not_known():
    with Kernel() as k:
        b = k.b
        ptr = k.param("p", ir_types.PointerType(i32))
        assert k.eval(b.load(ptr, None, None, {})) is None
        f = b.cast(k.c(2), ir_types.DTYPES["fp32"])
        assert k.eval(f) is None
        assert k.eval(b.arange(0, 4)) is None                               # a tile, not a scalar


# -- trip counts and samples -------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, want", [(0, []), (1, [0]), (2, [0, 1]), (3, [0, 1, 2]), (4, [0, 1, 2, 3]),
                                     (9, [0, 1, 4, 8])])
def test_the_samples_of_a_loop_are_its_ends_its_second_step_and_its_middle(n, want):
    assert staging._samples(n) == want


def _loop(k, lower, upper, step):
    body = k.b.new_block([ir_types.scalar(i32)], ["i"])
    loop = k.b.for_op(lower, upper, step, [], body, {})
    with k.b.insert_into(body):
        k.b.yield_([])
    return loop


@pytest.mark.parametrize("lo, hi, step, want", [(0, 10, 3, 4), (0, 9, 3, 3), (2, 3, 1, 1), (5, 5, 1, 0),
                                                (7, 2, 1, 0), (-4, 4, 4, 2), (0, 4, 0, None), (0, 4, -1, None)])
def test_trip_counts(lo, hi, step, want):
    with Kernel() as k:
        assert staging._steps(k.gen, _loop(k, k.c(lo), k.c(hi), k.c(step)), {}) == want


def test_a_trip_count_of_unknown_bounds_is_not_known():
    with Kernel() as k:
        assert staging._steps(k.gen, _loop(k, k.c(0), k.param("n"), k.c(1)), {}) is None


# -- the points that reach a body, and the ifs and loops kept there ---------------------------------------------
def _guarded_body(k, upper, limit, inner=None):
    """for i in range(upper): [if i * 64 <= limit: ...] [for j in range(inner): ...]; returns the loop."""
    b = k.b
    body = b.new_block([ir_types.scalar(i32)], ["i"])
    loop = b.for_op(k.c(0), upper, k.c(1), [], body, {})
    with b.insert_into(body):
        if limit is not None:
            cond = b.cmp(CmpPred.LE, b.binary(BinaryOp.MUL, body.args[0], k.c(64)), limit)
            then_block, else_block = b.new_block([]), b.new_block([])
            b.if_op(cond, then_block, else_block, [])
            for blk in (then_block, else_block):
                with b.insert_into(blk):
                    b.yield_([])
        if inner is not None:
            _loop(k, k.c(0), inner, k.c(1))
        b.yield_([])
    return loop


def test_points_follow_the_block_indices_and_the_steps_of_the_loops_around():
    with Kernel(grid=(3,)) as k:
        pid = k.b.program_id(0)
        outer_body = k.b.new_block([ir_types.scalar(i32)], ["j"])
        k.b.for_op(k.c(0), k.b.binary(BinaryOp.ADD, pid, k.c(1)), k.c(1), [], outer_body, {})
        with k.b.insert_into(outer_body):
            loop = _guarded_body(k, k.c(2), k.b.binary(BinaryOp.MUL, outer_body.args[0], k.c(64)))
            k.b.yield_([])
        points = staging._points(k.gen, loop)
        j, i = outer_body.args[0].id, loop.body.args[0].id
        # block p runs p + 1 outer steps, each of which runs the loop's two steps
        outer = [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)]
        assert sorted((p[("pid", 0)], p[j], p[i]) for p in points) == [(*o, s) for o in outer for s in (0, 1)]


def test_points_inside_a_branch_are_those_that_take_it():
    with Kernel(grid=(4,)) as k:
        b = k.b
        pid = b.program_id(0)
        cond = b.cmp(CmpPred.LT, pid, k.c(2))
        then_block, else_block = b.new_block([]), b.new_block([])
        b.if_op(cond, then_block, else_block, [])
        with b.insert_into(then_block):
            in_then = _guarded_body(k, k.c(2), k.c(0))
            b.yield_([])
        with b.insert_into(else_block):
            in_else = _guarded_body(k, k.c(2), k.c(0))
            b.yield_([])
        assert sorted(p[("pid", 0)] for p in staging._points(k.gen, in_then)) == [0, 0, 1, 1]
        assert sorted(p[("pid", 0)] for p in staging._points(k.gen, in_else)) == [2, 2, 3, 3]


def test_points_are_not_enumerated_under_an_unknown_condition_or_trip_count():
    with Kernel() as k:
        b = k.b
        n = k.param("n")
        cond = b.cmp(CmpPred.LT, b.load(k.param("p", ir_types.PointerType(i32)), None, None, {}), k.c(2))
        then_block, else_block = b.new_block([]), b.new_block([])
        b.if_op(cond, then_block, else_block, [])
        with b.insert_into(then_block):
            under_if = _guarded_body(k, k.c(2), k.c(0))
            b.yield_([])
        assert staging._points(k.gen, under_if) is None
        outer_body = b.new_block([ir_types.scalar(i32)], ["j"])
        b.for_op(k.c(0), b.load(k.param("q", ir_types.PointerType(i32)), None, None, {}), k.c(1), [],
                 outer_body, {})
        with b.insert_into(outer_body):
            under_loop = _guarded_body(k, n, k.c(0))
            b.yield_([])
        assert staging._points(k.gen, under_loop) is None


def test_runtime_integers_are_tried_at_a_few_values():
    with Kernel() as k:
        n = k.param("n")
        loop = _guarded_body(k, n, k.c(0))
        points = staging._points(k.gen, loop)
        # -1 and 0 run no step; 1 and 2 run theirs; 64 and 1000, four samples of theirs
        assert sorted(p[n.id] for p in points) == [1, 2, 2] + [64] * 4 + [1000] * 4
        assert sorted(p[loop.body.args[0].id] for p in points if p[n.id] == 1000) == [0, 1, 500, 999]


@pytest.mark.parametrize("upper, limit, kept", [
    (2, 0, True),         # step 0 takes the branch, step 1 does not
    (2, 64, False),       # both steps take it: TileLang keeps the guarded block only
    (1, 0, False),        # one step, which takes it
    (2, -1, False),       # no step takes it: TileLang drops it
])
def test_an_if_is_kept_where_it_goes_both_ways(upper, limit, kept):
    with Kernel() as k:
        assert staging._statements_kept(k.gen, _guarded_body(k, k.c(upper), k.c(limit))) is kept


def test_an_if_on_a_runtime_integer_goes_both_ways():
    with Kernel() as k:
        assert staging._statements_kept(k.gen, _guarded_body(k, k.c(2), k.param("limit"))) is True


@pytest.mark.parametrize("inner, kept", [(3, True), (1, True), (0, False)])
def test_an_inner_loop_is_kept_where_it_runs(inner, kept):
    with Kernel() as k:
        assert staging._statements_kept(k.gen, _guarded_body(k, k.c(2), None, inner=k.c(inner))) is kept


def test_an_inner_loop_that_runs_at_some_block_only_is_kept():
    with Kernel(grid=(3,)) as k:
        inner = k.b.binary(BinaryOp.SUB, k.b.program_id(0), k.c(1))       # block 0: -1 steps, block 2: one
        assert staging._statements_kept(k.gen, _guarded_body(k, k.c(2), None, inner=inner)) is True


def test_a_body_without_ifs_or_loops_keeps_its_statements():
    with Kernel() as k:
        loop = _guarded_body(k, k.param("n"), None)
        assert staging._statements_kept(k.gen, loop) is True


# -- the named stages --------------------------------------------------------------------------------------------
def test_the_stage_list_puts_stage0_copies_first_and_the_rest_last():
    statements = [Stmt("t = ck * 32", 3, defines="t"), Stmt("T.copy(a, a_s)", 3, stage0=True),
                  Stmt("for i in T.Parallel(4):", 3), Stmt("T.gemm(a_s, b_s, acc)", 3)]
    assert staging.stage_annotation(statements, 3) == ([0, 1, 2], [0, 2, 2])
    assert staging.stage_annotation(statements[1:], 2) == ([0, 1, 2], [0, 1, 1])


def test_the_stage_list_refuses_a_let_after_a_statement():
    statements = [Stmt("T.copy(a, a_s)", 3, stage0=True), Stmt("t = ck * 32", 3, defines="t"),
                  Stmt("T.gemm(a_s, b_s, acc)", 3)]
    with pytest.raises(AssertionError, match="a let among the statements"):
        staging.stage_annotation(statements, 2)


# -- the decision on whole kernels: stages named exactly where no let follows a statement -----------------------
@tle.jit
def staged_gather(q_ptr, kv_ptr, idx_ptr, w_ptr, out_ptr, cnt_ptr, K: tl.constexpr, BH: tl.constexpr,
                  D: tl.constexpr, BI: tl.constexpr, FORM: tl.constexpr):
    """The sparse-MLA gather loop (a masked index tile read synchronously, rows gathered asynchronously,
    two dots), with the ops of FORM before or after it at the top of the loop's body."""
    pid = tl.program_id(0)
    offs_h = tl.arange(0, BH)
    offs_d = tl.arange(0, D)
    offs_t = tl.arange(0, BI)
    limit = pid * BI + BI - 1
    q = tl.load(q_ptr + pid * (BH * D) + offs_h[:, None] * D + offs_d[None, :])
    acc = tl.zeros([BH, D], dtype=tl.float32)
    c = tl.zeros([BH, D], dtype=tl.float32)
    buf = tle.gpu.alloc([BH, D], tl.float32)
    tle.gpu.local_store(buf, acc)
    a = 0
    b = 1
    for ck in tl.range(tl.cdiv(K, BI), num_stages=0):
        if FORM == "scalar_load_first":
            a = a + tl.load(w_ptr + ck)
        if FORM == "inner_loop_first":
            for j in range(2):
                c = c + q.to(tl.float32) * j
        if FORM == "tile_then_let":
            c = c + q.to(tl.float32) * 2.0
            a = a + tl.load(w_ptr + ck)
        if FORM == "shared_tile_then_let":
            x = q.to(tl.float32) * 2.0
            c = c + x * x + tl.exp(x) * x
            a = a + tl.load(w_ptr + ck)
        if FORM == "reduce_then_let":
            a = a + tl.sum(q.to(tl.float32)).to(tl.int32)
        if FORM == "local_then_let":
            c = c + tle.gpu.local_load(buf)
            a = a + tl.load(w_ptr + ck)
        if FORM == "dot_then_let":
            c = c + tl.sum(tl.dot(q, q.trans()), axis=1)[:, None]
            a = a + tl.load(w_ptr + ck)
        t = ck * BI + offs_t
        ids = tl.load(idx_ptr + t, mask=t < K, other=-1)
        valid = (ids >= 0) & (ids <= limit)
        kv_blk = tle.load(kv_ptr + offs_d[:, None] + ids[None, :] * D, mask=valid[None, :], other=0.0,
                          is_async=True)
        s = tl.where(valid[None, :], tl.dot(q, kv_blk), 0.0)
        acc = tl.dot(s.to(tl.float16), kv_blk.trans(), acc)
        if FORM == "scalar_load_last":
            a = a + tl.load(w_ptr + ck)
        if FORM == "count":
            a = a + 1
        if FORM == "swap":
            a, b = b, a + 1
        if FORM == "pure_swap":
            a, b = b, a
        if FORM == "two_counts":
            a, b = a + 1, b + 2
        if FORM == "tiles_swap":
            acc, c = c, acc
        if FORM == "tiles_swap_scaled":
            acc, c = c * 0.5, acc
        if FORM == "local_roundtrip":
            tle.gpu.local_store(buf, tle.gpu.local_load(buf))
        if FORM == "local_accumulate":
            tle.gpu.local_store(buf, tle.gpu.local_load(buf) + acc)
        if FORM == "inner_loop":
            for j in range(2):
                c = c + acc * j
        if FORM == "branch_result":
            if ck % 2 == 0:
                c = c + 1.0
        if FORM == "branch_swap":
            if ck % 2 == 0:
                a, b = b, a
        if FORM == "dot_into_other":
            c = tl.dot(s.to(tl.float16), kv_blk.trans(), c)
            acc, c = c, acc
        if FORM == "elementwise_last":
            c = c + acc * 2.0
    rows = pid * (BH * D) + offs_h[:, None] * D + offs_d[None, :]
    tl.store(out_ptr + rows, acc + c + tle.gpu.local_load(buf))
    tl.store(cnt_ptr + pid * 2, a)
    tl.store(cnt_ptr + pid * 2 + 1, b)


def _staged_gather_launch(form: str, k: int = 59):
    g, bh, d, bi = 2, 64, 32, 32
    gen = torch.Generator().manual_seed(1)
    q = (torch.randn(g, bh, d, generator=gen) / 4).half()
    kv = (torch.randn(g * bi, d, generator=gen) / 4).half()
    idx = torch.randint(-3, g * bi, (k,), generator=gen, dtype=torch.int32)
    w = torch.randint(0, 5, (8,), generator=gen, dtype=torch.int32)
    out = torch.full((g, bh, d), float("nan"))
    counts = torch.zeros(g * 2, dtype=torch.int32)
    return (g,), (q, kv, idx, w, out, counts), dict(K=k, BH=bh, D=d, BI=bi, FORM=form)


def _loop_body(source: str) -> tuple[str, list[str]]:
    """The pipelined loop's header and the statements at the top of its body."""
    lines = source.splitlines()
    (at,) = [n for n, ln in enumerate(lines) if "T.Pipelined(" in ln]
    indent = len(lines[at]) - len(lines[at].lstrip()) + 4
    body = []
    for ln in lines[at + 1:]:
        if ln.strip() and len(ln) - len(ln.lstrip()) < indent:
            break
        if len(ln) - len(ln.lstrip()) == indent and ln.strip() not in ("else:", ""):
            body.append(ln.strip())
    return lines[at].strip(), body


def _lets(source: str, body: list[str]) -> list[bool]:
    """For each statement of `body`: is it a scalar let (a name bound by `=` that is not declared storage)?"""
    storage = set(re.findall(r"^\s*(\w+) = T\.alloc_", source, re.M))
    return [bool(m) and m.group(1) not in storage for m in (re.match(r"(\w+) = ", stmt) for stmt in body)]


def _let_after_statement(lets: list[bool]) -> bool:
    return any(let and not all(lets[:n]) for n, let in enumerate(lets))


@pytest.mark.parametrize("form, named", [
    ("plain", True),
    ("scalar_load_first", True),        # the load's let and the sum's come before every statement
    ("scalar_load_last", False),        # ... after the dots
    ("count", False),                   # a carried scalar's new value is a let after the dots
    ("swap", False),
    ("two_counts", False),
    ("pure_swap", False),               # the swap goes through temporaries: lets after the dots
    ("tile_then_let", True),            # the carried tile is written at the end of the body, after the dots
    ("reduce_then_let", False),
    ("shared_tile_then_let", True),     # the tile is written inline where the carried tile is updated
    ("local_then_let", True),
    ("dot_then_let", False),
    ("tiles_swap", True),               # tiles swap through temporary tiles: statements
    ("tiles_swap_scaled", True),
    ("dot_into_other", True),
    ("local_roundtrip", True),
    ("local_accumulate", True),
    ("inner_loop", True),
    ("inner_loop_first", True),
    ("branch_result", True),
    ("branch_swap", True),              # the lets of the swap are inside the branch, not at the top
    ("elementwise_last", True),
])
def test_a_gather_loop_names_its_stages_unless_a_let_follows_a_statement(form, named):
    grid, args, kwargs = _staged_gather_launch(form)
    source = staged_gather.lower(*[meta_copy(a) for a in args], grid=grid, backend="tilelang", **kwargs).source
    header, body = _loop_body(source)
    assert ("stage=[" in header) == named, (header, body)
    lets = _lets(source, body)
    assert _let_after_statement(lets) == (not named), body
    if named:
        # one stage per statement after the lets; the index tile's two writes and the gather in stage 0
        stages = eval(header[header.index("stage=") + len("stage="):header.rindex(")")])
        assert len(stages) == lets.count(False) and stages.count(0) == 3, (header, body)
