"""The warp-group plan on TileLang (lowering/tilelang/warp_groups.py, warp_group_code.py) for programs beyond
the attention kernels: which group runs a loop, a branch or a load written outside the groups' blocks; the
hand-off of a buffer one group fills in a loop of its own; scalars carried from step to step; the step
variable of a loop that does not start at 0 or steps by more than 1; where a reader releases a buffer it
reads inside a branch; and the tiles one group cannot read from another. The numbers come from the
interpreter of TileLang programs, under both role orders where the groups synchronise."""
import re

import pytest
import torch
import triton.language as tl

import tle
from tle.lowering.errors import LoweringError, UnsupportedConstruct
from tilelang_oracle import needs_tilelang

pytestmark = needs_tilelang
ORDERS = ("lowest_first", "highest_first")


def _source(kernel, *args, num_warps=8, **meta):
    return kernel.lower(*args, grid=(1,), backend="tilelang", num_warps=num_warps, **meta).source


def _group_branches(src: str) -> list[str]:
    """The text of each group's branch: `if tx < 128:` ... `else:` (two groups)."""
    first = src.index("if tx < 128:")
    second = src.index("\n        else:\n", first)
    return [src[first:second], src[second:]]


# -- the step variable of a loop holding several groups --------------------------------------------------
@tle.jit
def _stepped(x_ptr, y_ptr, LO: tl.constexpr, HI: tl.constexpr, STEP: tl.constexpr):
    """Group 0 copies row k of x into shared memory and sums k; group 1 stores row k, times k, to row k of y."""
    i = tl.arange(0, 16)
    total = tl.zeros([16], tl.float32)
    for k in range(LO, HI, STEP):
        buf = tle.gpu.alloc([16], tl.float32)
        with tle.gpu.warp_group(0):
            tle.gpu.copy(x_ptr + k * 16 + i, buf, [16])
            total += k
        with tle.gpu.warp_group(1):
            tl.store(y_ptr + 16 + k * 16 + i, tle.gpu.local_load(buf) * k)
    with tle.gpu.warp_group(0):
        tl.store(y_ptr + i, total)


def _stepped_run(lo, hi, step):
    x = torch.randn(hi * 16, generator=torch.Generator().manual_seed(0))
    y = torch.zeros(16 + hi * 16)
    _stepped.interpret_tilelang((1,), x, y, LO=lo, HI=hi, STEP=step, num_warps=8)
    want = torch.zeros_like(y)
    ks = list(range(lo, hi, step))
    want[:16] = float(sum(ks))
    for k in ks:
        want[16 + k * 16:32 + k * 16] = x[k * 16:(k + 1) * 16] * k
    return y, want


@pytest.mark.parametrize("lo, hi, step", [(1, 8, 3), (2, 6, 1), (0, 7, 2)])
def test_each_groups_copy_of_a_loop_steps_from_its_lower_bound_by_its_step(tmp_cache, lo, hi, step):
    """Each group's copy of the loop counts its trips from 0 and computes the loop variable as lower bound
    plus trip times step: both groups see the program's k, so group 0 copies the rows group 1 stores."""
    y, want = _stepped_run(lo, hi, step)
    assert torch.equal(y, want)


def test_the_loop_variable_of_a_groups_copy_is_written_in_its_simplest_form():
    """The let that gives k its value leaves out a step of 1 and a lower bound of 0: `k = 2 + it`,
    `k = it * 2`, `k = 1 + it * 3`, as an engineer reading the generated program would write them."""
    x, y = torch.zeros(128), torch.zeros(144)
    lets = {}
    for lo, step in ((2, 1), (0, 2), (1, 3)):
        src = _source(_stepped, x, y, LO=lo, HI=8, STEP=step)
        lets[lo, step] = [ln.strip() for ln in src.splitlines() if re.match(r"\s*k(_\d+)? = ", ln)]
    assert lets[2, 1] == ["k = 2 + it", "k_1 = 2 + it_1"]
    assert lets[0, 2] == ["k = it * 2", "k_1 = it_1 * 2"]
    assert lets[1, 3] == ["k = 1 + it * 3", "k_1 = 1 + it_1 * 3"]


# -- a scalar carried from step to step ------------------------------------------------------------------
@tle.jit
def _advancing_offset(x_ptr, y_ptr, steps):
    """Group 0 advances an offset each step (off = 2 off + 16); group 1 stores the 16 values of x there,
    reading the offset before group 0 advances it."""
    i = tl.arange(0, 16)
    off = 0
    for k in range(steps):
        with tle.gpu.warp_group(1):
            tl.store(y_ptr + k * 16 + i, tl.load(x_ptr + off + i))
        with tle.gpu.warp_group(0):
            off = off * 2 + 16


def test_a_scalar_another_group_advances_is_carried_by_the_group_that_reads_it(tmp_cache):
    """Registers belong to one group, so a group reading a carried scalar keeps its own copy and advances it
    with the same expression: group 1 reads offsets 0, 16 and 48, as the program says."""
    x, y = torch.arange(64.0), torch.zeros(48)
    _advancing_offset.interpret_tilelang((1,), x, y, 3, num_warps=8)
    assert torch.equal(y, torch.cat([x[0:16], x[16:32], x[48:64]]))
    reader = _group_branches(_source(_advancing_offset, x, y, 3))[1]
    assert "T.alloc_var('int32', init=0)" in reader and "* 2) + 16)" in reader


# -- a loop that only one group's code is in -------------------------------------------------------------
@tle.jit
def _accumulate_in_one_group(x_ptr, y_ptr, STEPS: tl.constexpr):
    """Group 0 sums the rows of x into a shared buffer in a loop of its own; group 1 stores the sum once the
    loop is done."""
    i = tl.arange(0, 16)
    buf = tle.gpu.alloc([16], tl.float32)
    tle.gpu.local_store(buf, tl.zeros([16], tl.float32))
    for k in range(STEPS):
        with tle.gpu.warp_group(0):
            tle.gpu.local_store(buf, tle.gpu.local_load(buf) + tl.load(x_ptr + k * 16 + i))
    with tle.gpu.warp_group(1):
        tl.store(y_ptr + i, tle.gpu.local_load(buf))


@pytest.mark.parametrize("order", ORDERS)
def test_a_buffer_filled_in_one_groups_loop_is_handed_over_after_it(monkeypatch, tmp_cache, order):
    """A loop holding one group's code is that group's, written once in its branch; the buffer it fills is
    handed to the reader after the loop (the writer arrives once the loop is done, the reader waits first),
    so the reader sees the whole sum whichever group runs first."""
    monkeypatch.setenv("TLE_INTERPRETER_ROLE_ORDER", order)
    x, y = torch.randn(48, generator=torch.Generator().manual_seed(1)), torch.zeros(16)
    _accumulate_in_one_group.interpret_tilelang((1,), x, y, STEPS=3, num_warps=8)
    assert torch.allclose(y, x.view(3, 16).sum(0), rtol=0, atol=1e-6)


def test_a_loop_holding_one_groups_code_is_that_groups_and_its_buffer_a_hand_off():
    """The for loop is written in group 0's branch only, with no barrier inside it; the hand-off is at the
    group section: group 0 arrives on the buffer's one `full` barrier after the loop, and group 1 waits on it
    (parity 0, the first phase) before it copies the buffer out."""
    x, y = torch.zeros(48), torch.zeros(16)
    src = _source(_accumulate_in_one_group, x, y, STEPS=3)
    writer, reader = _group_branches(src)
    assert "buf_full = T.alloc_barrier(arrive_count=[128])" in src
    assert "for k in T.serial(3):" in writer and "T.serial" not in reader     # the loop is group 0's alone
    assert writer.index("T.serial(3)") < writer.index("T.barrier_arrive(buf_full[0])")
    assert reader.index("T.barrier_wait(buf_full[0], 0)") < reader.index("T.copy(buf, y_ptr[0:16])")


@tle.jit
def _while_in_one_group(x_ptr, y_ptr, n):
    """Group 1 copies the first row of x; group 0 sums the first n rows in a while loop of its own."""
    i = tl.arange(0, 16)
    with tle.gpu.warp_group(1):
        tl.store(y_ptr + 16 + i, tl.load(x_ptr + i))
    acc = tl.zeros([16], tl.float32)
    k = 0
    while k < n:
        with tle.gpu.warp_group(0):
            acc += tl.load(x_ptr + k * 16 + i)
        k += 1
    with tle.gpu.warp_group(0):
        tl.store(y_ptr + i, acc)


def test_a_while_loop_holding_one_groups_code_runs_in_that_group(tmp_cache):
    """Only a for loop may hold several groups' code (each group gets a copy); a while loop holding one
    group's is that group's, written in its branch alone."""
    x, y = torch.randn(48, generator=torch.Generator().manual_seed(2)), torch.zeros(32)
    _while_in_one_group.interpret_tilelang((1,), x, y, 3, num_warps=8)
    assert torch.allclose(y, torch.cat([x.view(3, 16).sum(0), x[:16]]), rtol=0, atol=1e-6)
    first, second = _group_branches(_source(_while_in_one_group, x, y, 3))
    assert "while " in first and "while " not in second


# -- a load written between the groups' blocks -----------------------------------------------------------
@tle.jit
def _load_between_blocks(x_ptr, y_ptr):
    i = tl.arange(0, 16)
    with tle.gpu.warp_group(0):
        tl.store(y_ptr + i, tl.load(x_ptr + i))
    t = tl.load(x_ptr + 16 + i)
    with tle.gpu.warp_group(1):
        tl.store(y_ptr + 16 + i, t * 3)


def test_a_load_between_the_groups_blocks_runs_in_the_one_group_that_reads_it(tmp_cache):
    """A load outside every warp-group block, once the groups have started, is emitted in the group that
    reads its tile: only group 1 loads the second row."""
    x, y = torch.arange(32.0), torch.zeros(32)
    _load_between_blocks.interpret_tilelang((1,), x, y, num_warps=8)
    assert torch.equal(y, torch.cat([x[:16], x[16:] * 3]))
    first, second = _group_branches(_source(_load_between_blocks, x, y))
    assert "x_ptr[16:16 + 16]" in second and "x_ptr[16:" not in first


# -- where a reader releases a buffer it reads inside a branch -------------------------------------------
@tle.jit
def _read_in_a_branch(x_ptr, y_ptr, STEPS: tl.constexpr):
    """Group 0 copies row k of x into a buffer of two versions; group 1 loads it and stores it to row k of y
    inside a branch: as it is on even steps, doubled on odd ones."""
    i = tl.arange(0, 16)
    for k in range(STEPS):
        buf = tle.gpu.alloc([16], tl.float32)
        with tle.gpu.warp_group(0):
            tle.gpu.copy(x_ptr + k * 16 + i, buf, [16])
        with tle.gpu.warp_group(1):
            t = tle.gpu.local_load(buf)
            if k % 2 == 0:
                tl.store(y_ptr + k * 16 + i, t)
            else:
                tl.store(y_ptr + k * 16 + i, t * 2)


def test_a_tile_read_in_place_inside_a_branch_keeps_its_buffer_until_the_branch_ends(monkeypatch, tmp_cache):
    """The loaded tile is read from shared memory where the branch uses it, so the reader releases the
    version after the branch: released before it, the writer (running as soon as the release completes a
    phase) would overwrite the version two steps on while the branch still reads it."""
    monkeypatch.setenv("TLE_INTERPRETER_ROLE_ORDER", "lowest_first")
    monkeypatch.setenv("TLE_INTERPRETER_ROLE_SWITCH", "arrive")
    x, y = torch.arange(64.0), torch.zeros(64)
    _read_in_a_branch.interpret_tilelang((1,), x, y, STEPS=4, num_warps=8)
    assert torch.equal(y.view(4, 16), x.view(4, 16) * torch.tensor([1.0, 2.0, 1.0, 2.0])[:, None])
    reader = _group_branches(_source(_read_in_a_branch, x, y, STEPS=4))[1]
    assert reader.index("y_ptr[k_1 * 16:k_1 * 16 + 16])\n") < reader.index("T.barrier_arrive(buf_empty[k_1 % 2])")


# -- what one group cannot read from another -------------------------------------------------------------
@tle.jit
def _tile_carried_to_another_group(x_ptr, y_ptr):
    """Group 0 loads a tile each step; group 1 stores the one loaded the step before."""
    i = tl.arange(0, 16)
    t = tl.zeros([16], tl.float32)
    for k in range(2):
        with tle.gpu.warp_group(1):
            tl.store(y_ptr + k * 16 + i, t)
        with tle.gpu.warp_group(0):
            t = tl.load(x_ptr + k * 16 + i)


@tle.jit
def _address_from_another_groups_load(x_ptr, idx_ptr, y_ptr):
    """Group 0 loads indices and forms gather addresses from them; group 1 loads through those addresses."""
    i = tl.arange(0, 16)
    with tle.gpu.warp_group(0):
        src = x_ptr + tl.load(idx_ptr + i)
    with tle.gpu.warp_group(1):
        tl.store(y_ptr + i, tl.load(src))


@tle.jit
def _only_group_one(x_ptr, idx_ptr, y_ptr):
    i = tl.arange(0, 16)
    with tle.gpu.warp_group(1):
        tl.store(y_ptr + i, tl.load(x_ptr + i))


@tle.jit
def _groups_in_a_branch_of_a_while_loop(x_ptr, idx_ptr, y_ptr):
    i = tl.arange(0, 16)
    k = 0
    while k < 2:
        if k == 0:
            with tle.gpu.warp_group(0):
                tl.store(y_ptr + i, tl.load(x_ptr + i))
            with tle.gpu.warp_group(1):
                tl.store(y_ptr + i, tl.load(x_ptr + 16 + i))
        k += 1


@pytest.mark.parametrize("kernel, warps, message", [
    (_tile_carried_to_another_group, 8,
     r"a tile computed in warp group 0 \('load', line \d+\) and read in warp group 1"),
    (_address_from_another_groups_load, 8,
     r"a tile computed in warp group 0 \('load', line \d+\) and read in warp group 1"),
    (_only_group_one, 4, r"the kernel's warp groups are \[1\]; number them 0 to 0"),
    (_groups_in_a_branch_of_a_while_loop, 8, "a while loop holding several warp groups' code"),
])
def test_what_one_group_cannot_take_from_another_is_an_error_naming_the_line(kernel, warps, message):
    """A tile carried to the next step, or the addresses of a gather, computed from one group's load cannot
    be read by another group (its registers are the loader's: hand the tile over in a buffer); a kernel
    whose groups do not start at 0, or a while loop whose branch holds two groups, is refused too."""
    x, idx, y = torch.randn(32), torch.arange(16, dtype=torch.int32), torch.empty(32)
    args = (x, y) if kernel is _tile_carried_to_another_group else (x, idx, y)
    with pytest.raises(LoweringError, match=message) as e:
        kernel.lower(*args, grid=(1,), backend="tilelang", num_warps=warps)
    assert isinstance(e.value, UnsupportedConstruct) and "test_warp_group_plan.py:" in str(e.value)


# -- a tile read from a buffer into a carried value ----------------------------------------------------------
@tle.jit
def _summed_from_a_buffer(x_ptr, y_ptr):
    """Group 0 copies row k of x into shared memory; group 1 adds it to a sum it carries, then stores the sum."""
    i = tl.arange(0, 16)
    acc = tl.zeros([16], tl.float32)
    for k in range(4):
        buf = tle.gpu.alloc([16], tl.float32)
        with tle.gpu.warp_group(0):
            tle.gpu.copy(x_ptr + k * 16 + i, buf, [16])
        with tle.gpu.warp_group(1):
            acc += tle.gpu.local_load(buf)
    with tle.gpu.warp_group(1):
        tl.store(y_ptr + i, acc)


@pytest.mark.parametrize("order", ORDERS)
def test_a_tile_read_into_a_carried_value_keeps_its_buffer_until_the_value_is_written(monkeypatch, tmp_cache,
                                                                                      order):
    """The sum reads the buffer where the step writes the carried value, after the body's ops: the reader
    releases the version after that write. Released before it, the writer (running as soon as the release
    completes a phase) fills the version two steps on, and the sum reads rows 2 and 3 twice."""
    monkeypatch.setenv("TLE_INTERPRETER_ROLE_ORDER", order)
    monkeypatch.setenv("TLE_INTERPRETER_ROLE_SWITCH", "arrive")
    x, y = torch.arange(64.0), torch.zeros(16)
    _summed_from_a_buffer.interpret_tilelang((1,), x, y, num_warps=8)
    assert torch.equal(y, x.view(4, 16).sum(0))
    reader = _group_branches(_source(_summed_from_a_buffer, x, y))[1]
    assert reader.index("buf[k_1 % 2, i0])\n") < reader.index("T.barrier_arrive(buf_empty[k_1 % 2])")


# -- three groups taking turns; a scalar atomic and a print in a group ---------------------------------------
@tle.jit
def _tickets_in_turns(x_ptr, tickets_ptr, counter_ptr):
    """Each step, groups 1, 2 and 3 take turns drawing a ticket from a counter (a scalar atomic add); group 2
    draws its ticket before it reads the row group 0 copied that step."""
    i = tl.arange(0, 16)
    for k in range(2):
        buf = tle.gpu.alloc([16], tl.float32)
        with tle.gpu.warp_group(0):
            tle.gpu.copy(x_ptr + k * 16 + i, buf, [16])
        with tle.gpu.warp_group(1):
            with tle.gpu.turn():
                tl.store(tickets_ptr + k * 3, tl.atomic_add(counter_ptr, 1))
        with tle.gpu.warp_group(2):
            with tle.gpu.turn():
                ticket = tl.atomic_add(counter_ptr, 1)
                tl.store(tickets_ptr + k * 3 + 1, ticket + (tl.sum(tle.gpu.local_load(buf)) > 1e9).to(tl.int32))
        with tle.gpu.warp_group(3):
            with tle.gpu.turn():
                tl.store(tickets_ptr + k * 3 + 2, tl.atomic_add(counter_ptr, 1))


@pytest.mark.parametrize("switch", ["wait", "arrive"])
@pytest.mark.parametrize("order", ORDERS)
def test_three_groups_take_turns_in_order_and_each_draws_its_ticket_on_its_own_thread(monkeypatch, tmp_cache,
                                                                                      order, switch):
    """The turn passes from group 1 to 2 to 3 and back: the tickets come out 0 to 5 in program order. A scalar
    atomic in a group is made by the group's first thread (thread 0 of the block is in group 0, which never
    runs it), and group 2 waits for its turn before the atomic at the top of its turn block, not where the
    block's data comes in (its read of the buffer)."""
    monkeypatch.setenv("TLE_INTERPRETER_ROLE_ORDER", order)
    monkeypatch.setenv("TLE_INTERPRETER_ROLE_SWITCH", switch)
    x, tickets = torch.arange(32.0), torch.full((6,), -1, dtype=torch.int32)
    counter = torch.zeros(1, dtype=torch.int32)
    _tickets_in_turns.interpret_tilelang((1,), x, tickets, counter, num_warps=16)
    assert tickets.tolist() == [0, 1, 2, 3, 4, 5] and counter.item() == 6
    src = _source(_tickets_in_turns, x, tickets, counter, num_warps=16)
    group_2 = src[src.index("elif tx < 384:"):src.index("\n        else:\n")]
    assert group_2.index("T.barrier_wait(turn_2[0]") < group_2.index("if thread_2 == 0:") \
        < group_2.index("T.atomic_add(counter_ptr[0]") < group_2.index("T.barrier_wait(buf_full")


@tle.jit
def _printed_by_group_one(x_ptr):
    i = tl.arange(0, 16)
    with tle.gpu.warp_group(0):
        tl.store(x_ptr + 16 + i, tl.load(x_ptr + i))
    with tle.gpu.warp_group(1):
        tl.device_print("x", tl.load(x_ptr + i) * 2)


def test_a_tile_printed_in_a_group_is_printed_by_the_groups_own_threads(monkeypatch, tmp_cache, capfd):
    """Group 1's threads (128 to 255) print the tile, element e on the group's thread e: with the block's
    thread index, elements 0 to 15 would be left to threads of group 0, and nothing would be printed."""
    from triton import knobs
    monkeypatch.setattr(knobs.runtime, "debug", True)
    x = torch.arange(32.0)
    src = _source(_printed_by_group_one, x)
    assert "if thread_1 < 16:" in _group_branches(src)[1], src
    _printed_by_group_one.interpret_tilelang((1,), x, num_warps=8)
    printed = [ln for ln in capfd.readouterr().out.splitlines() if " x: " in ln]
    assert sorted(float(ln.split()[-1]) for ln in printed) == [2.0 * e for e in range(16)]


# -- a masked row copy between groups: cp.async with a predicate, or not at all ----------------------------
@tle.jit
def _masked_rows(x_ptr, y_ptr, LO: tl.constexpr, HI: tl.constexpr, OTHER: tl.constexpr):
    """Group 0 copies rows LO to HI of each step's 64 rows of x (the others: OTHER) into shared memory; group 1
    stores the buffer to y."""
    rows = tl.arange(0, 64)
    cols = tl.arange(0, 16)
    for step in range(2):
        buf = tle.gpu.alloc([64, 16], tl.float16)
        at = (step * 64 + rows)[:, None] * 16 + cols[None, :]
        with tle.gpu.warp_group(0):
            keep = (rows >= LO) & (rows < HI)
            tle.gpu.copy(x_ptr + at, buf, [64, 16], mask=keep[:, None], other=OTHER)
        with tle.gpu.warp_group(1):
            tl.store(y_ptr + at, tle.gpu.local_load(buf))


@pytest.mark.parametrize("other, cp_async", [(0.0, True), (5.0, False)])
def test_a_masked_row_copy_is_cp_async_with_every_row_condition_only_where_it_fills_zeros(tmp_cache, other,
                                                                                          cp_async):
    """cp.async fills the rows its predicate leaves out with zeros: a copy whose `other` is 0 is one, its
    predicate both row conditions together; one with another `other` is copied element by element."""
    x = torch.randn(128 * 16, generator=torch.Generator().manual_seed(0)).half()
    y = torch.full((128 * 16,), float("nan")).half()
    _masked_rows.interpret_tilelang((1,), x, y, LO=8, HI=40, OTHER=other, num_warps=8)
    want = torch.full((2, 64, 16), other).half()
    want[:, 8:40] = x.view(2, 64, 16)[:, 8:40]
    assert torch.equal(y.view(2, 64, 16), want)
    src = _source(_masked_rows, x, y, LO=8, HI=40, OTHER=other)
    assert ("T.ptx_cp_async(" in src) == cp_async
    if cp_async:
        (call,) = [ln for ln in src.splitlines() if "T.ptx_cp_async(" in ln]
        assert " & " in call and " | " not in call, call


@tle.jit
def _scaled_in_turns(x_ptr, y_ptr):
    """Groups 1 and 2 take turns storing the row group 0 copied, each scaled by a factor it computes first."""
    i = tl.arange(0, 16)
    for k in range(2):
        buf = tle.gpu.alloc([16], tl.float32)
        with tle.gpu.warp_group(0):
            tle.gpu.copy(x_ptr + k * 16 + i, buf, [16])
        with tle.gpu.warp_group(1):
            with tle.gpu.turn():
                w = k * 2.0 + 1.0
                tl.store(y_ptr + k * 32 + i, tle.gpu.local_load(buf) * w)
        with tle.gpu.warp_group(2):
            with tle.gpu.turn():
                tl.store(y_ptr + k * 32 + 16 + i, tle.gpu.local_load(buf) * 3.0)


def test_a_turn_block_that_computes_before_its_data_waits_for_the_turn_once_the_data_is_in(tmp_cache):
    """Group 1's turn block computes its factor (no write) before it reads the buffer: it waits for the data
    first and for its turn after, as a block that starts with the read does."""
    x, y = torch.arange(32.0), torch.full((64,), float("nan"))
    _scaled_in_turns.interpret_tilelang((1,), x, y, num_warps=12)
    want = torch.cat([x[:16], x[:16] * 3, x[16:] * 3, x[16:] * 3])
    assert torch.equal(y, want)
    src = _source(_scaled_in_turns, x, y, num_warps=12)
    group_1 = src[src.index("elif tx < 256:"):src.index("\n        else:\n")]
    assert group_1.index("T.barrier_wait(buf_full") < group_1.index("T.barrier_wait(turn_1[0]"), group_1
