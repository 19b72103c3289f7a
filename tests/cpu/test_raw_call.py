"""tle.call inside @tle.jit kernels: the raw vector add and calls in loops and branches (the written tile
is rebound) on both backends (Triton's interpreter; the interpreter of TileLang programs), and the errors
a call reports at lowering."""
from typing import Annotated

import pytest
import torch
import triton.language as tl

pytest.importorskip("jaxlib.mlir")

import tle  # noqa: E402
from kernel_cases import lower_example  # noqa: E402
from tle.lowering.errors import LoweringError, UnsupportedConstruct  # noqa: E402
from tle.lowering.tilelang.interpreter import OutOfBounds  # noqa: E402
from tle.raw.mlir import arith, ir, nvvm, tensor  # noqa: E402
from raw_functions import F4x32, thread_index, triple_2d  # noqa: E402
from tilelang_oracle import interpret_tilelang, run_on  # noqa: E402

from tle.kernels.examples import raw_vector_add as rva  # noqa: E402

F1024 = Annotated[ir.RankedTensorType, "tensor<1024xf32>"]
F128 = Annotated[ir.RankedTensorType, "tensor<128xf32>"]


def _line(marker: str) -> int:
    """The line of this file holding `marker` (a comment at a tle.call)."""
    with open(__file__) as f:
        for i, text in enumerate(f, 1):
            if marker in text and "_line(" not in text:
                return i
    raise AssertionError(marker)


def _tilelang_or_skip():
    why = tle.available_backends().get("tilelang")
    if why is not None:
        pytest.skip(f"TileLang backend unavailable here ({why})")


BACKENDS = ["triton", "tilelang"]


# -- raw functions -----------------------------------------------------------------------------------------
@tle.raw.language(name="mlir")
@tle.hardware_constraint(threads_dim=1, sync_scope="none")
def accumulate(x: F128, acc: F128):
    """acc += x, one element per thread."""
    i = thread_index(nvvm.ThreadIdXOp)
    tensor.insert(arith.addf(tensor.extract(acc, [i]), tensor.extract(x, [i])), acc, [i])


@tle.raw.language(name="mlir")
def copy_tile(x: F1024, out: F1024):
    i = thread_index(nvvm.ThreadIdXOp)
    tensor.insert(tensor.extract(x, [i]), out, [i])


@tle.raw.language(name="mlir")
def shifted(x: F1024, out: F1024):
    """out[t] = x[t + 1]: every thread reads its neighbour's element (not element-wise)."""
    i = thread_index(nvvm.ThreadIdXOp)
    j = arith.addi(i, arith.constant(ir.IndexType.get(), 1))
    tensor.insert(tensor.extract(x, [j]), out, [i])


# -- kernels -----------------------------------------------------------------------------------------------
@tle.jit
def loop_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    acc = tl.zeros_like(x)
    total = acc                 # the same tile under another name: it sees every update
    for i in range(n):
        tle.call(accumulate, args=[x, acc], hardware={"threads": (BLOCK,)})
        if i % 2 == 0:
            tle.call(accumulate, args=[x, total], hardware={"threads": (BLOCK,)})
    tl.store(o_ptr + offs, total)


@tle.jit
def loop_assign_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    acc = tl.zeros_like(x)
    for i in range(n):
        tle.call(accumulate, args=[x, acc], hardware={"threads": (BLOCK,)})
        x = x * 2.0             # an assigned variable and an updated tile, carried together
    tl.store(o_ptr + offs, acc + x)


@tle.jit
def add_into(x, acc, BLOCK: tl.constexpr):
    tle.call(accumulate, args=[x, acc], hardware={"threads": (BLOCK,)})


@tle.jit
def alias_kernel(x_ptr, o_ptr, x_out_ptr, flag, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    acc = tl.zeros_like(x)
    add_into(x, acc, BLOCK)                 # a @jit helper updates the caller's tile: acc = x
    if flag > 0:
        add_into(x * 2.0, acc, BLOCK)       # acc = 3x
        acc2 = acc                          # the same tile
    else:
        acc2 = x                            # the same tile as x: updating acc2 updates x
        tle.call(accumulate, args=[acc, acc2], hardware={"threads": (BLOCK,)})   # x = 2x
    tl.store(o_ptr + offs, acc + acc2)
    tl.store(x_out_ptr + offs, x)


@tle.jit
def kernel_2d(x_ptr, o_ptr, ORDER: tl.constexpr = (1, 0)):
    offs = tl.arange(0, 4)[:, None] * 32 + tl.arange(0, 32)[None, :]
    x = tl.load(x_ptr + offs)
    out = tl.zeros_like(x)
    tle.call(triple_2d, args=[x, out], hardware={"threads": (32, 4)}, layout={out: {"space": "shared", "order": ORDER}})
    tl.store(o_ptr + offs, out)


@tle.jit
def call_kernel(x_ptr, o_ptr, BLOCK: tl.constexpr, FN: tl.constexpr, HW: tl.constexpr, LAYOUT: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    out = tl.zeros_like(x)
    if LAYOUT == "bad key":
        tle.call(FN, args=[x, out], hardware=HW, layout={offs: {"space": "shared"}})  # call: bad key
    else:
        tle.call(FN, args=[x, out], hardware=HW, layout={out: LAYOUT})  # call: the call
    tl.store(o_ptr + offs, out)


# -- the raw vector add ------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [5000, 1024, 1, 3 * 1024 + 17])
def test_raw_vector_add_on_triton_matches_torch(n):
    x, y = torch.randn(n), torch.randn(n)
    torch.testing.assert_close(rva.vector_add_raw(x, y, backend="triton"), x + y, atol=0, rtol=0)


@pytest.mark.parametrize("n", [5000, 1024, 1, 3 * 1024 + 17])
def test_raw_vector_add_on_tilelang_matches_torch(n):
    x, y = torch.randn(n), torch.randn(n)
    out = torch.full((n,), float("nan"))
    run_on("tilelang", rva.add_kernel, (-(-n // rva.BLOCK_SIZE),), x, y, out, n, BLOCK_SIZE=rva.BLOCK_SIZE,
        num_warps=rva.NUM_WARPS)
    torch.testing.assert_close(out, x + y, atol=0, rtol=0)


def _lower(backend):
    return lower_example(rva.add_kernel, backend)


def test_raw_vector_add_ir_and_triton_source():
    lw = _lower("triton")
    assert "%output.1 = raw_call @vector_add_tile(%x, %y, %output) threads=(1024,)" in lw.ir
    assert "store %10, %output.1, mask=%mask" in lw.ir
    src = lw.source
    assert "# tle.call(vector_add_tile): element-wise raw MLIR function, inlined as tile code" in src
    assert "    output_1 = (x + y)\n    tl.store(output_ptr + offsets, output_1, mask=mask)" in src


def test_raw_vector_add_wrapper_checks_inputs():
    with pytest.raises(tle.LaunchError, match="dtype"):
        rva.vector_add_raw(torch.randn(10, dtype=torch.float64), torch.randn(10, dtype=torch.float64))
    with pytest.raises(tle.LaunchError, match="rank"):
        rva.vector_add_raw(torch.randn(2, 10), torch.randn(2, 10))
    with pytest.raises(tle.LaunchError, match="shape"):
        rva.vector_add_raw(torch.randn(10), torch.randn(11))


@pytest.mark.slow
def test_raw_vector_add_tilelang_source_and_cuda():
    _tilelang_or_skip()
    lw = _lower("tilelang")
    src = lw.source
    assert "tid = T.get_thread_binding(0)" in src
    assert "output = T.alloc_shared((1024,), 'float32')" in src
    assert "output[tid] = vector_add_tile_2" in src              # tensor.insert into the shared output copy
    assert "T.copy(output, output_ptr[block_start:block_start + 1024])" in src
    assert (44, "tle.call", "raw", "thread-level code on shared buffers") in lw.compiled.access_report
    assert not [n for n in lw.notes if "layout hint" in n]       # order [0] is the identity
    cuda = lw.stage("cuda")
    assert "__global__" in cuda and "threadIdx.x" in cuda


# -- loops, branches, aliases ------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [0, 1, 4, 5])
def test_call_in_a_loop_and_a_branch(n, backend):
    x = torch.randn(128)
    out = torch.full((128,), float("nan"))
    run_on(backend, loop_kernel, (1,), x, out, n, BLOCK=128)
    torch.testing.assert_close(out, x * (n + (n + 1) // 2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_call_in_a_loop_with_an_assigned_variable(backend):
    x = torch.randn(128)
    out = torch.full((128,), float("nan"))
    run_on(backend, loop_assign_kernel, (1,), x, out, 3, BLOCK=128)
    torch.testing.assert_close(out, x * (1 + 2 + 4) + x * 8)


def test_call_in_a_loop_is_carried_in_the_ir():
    lw = loop_kernel.lower(torch.empty(128, device="meta"), torch.empty(128, device="meta"), 4, BLOCK=128,
                           backend="triton")
    ir = lw.ir
    assert "%acc.1 = for %i" in ir and "iter_args(%acc.2 = %acc)" in ir   # the updated tile is loop-carried
    assert "%acc.3 = raw_call @accumulate(%x, %acc.2) threads=(128,)" in ir
    assert "%acc.5 = raw_call @accumulate(%x, %acc.3) threads=(128,)" in ir   # `total` is the same tile
    assert "store %10, %acc.1" in ir
    assert ir.count("raw_call @accumulate") == 2


def test_call_in_a_loop_on_tilelang_is_thread_level_code():
    _tilelang_or_skip()
    lw = loop_kernel.lower(torch.empty(128, device="meta"), torch.empty(128, device="meta"), 4, BLOCK=128,
                           grid=(1,), backend="tilelang")
    assert lw.source.count("T.get_thread_binding(0)") == 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("flag", [1, 0])
def test_updates_reach_every_name_of_a_tile(flag, backend):
    x = torch.randn(128)
    out, x_out = torch.full((128,), float("nan")), torch.full((128,), float("nan"))
    run_on(backend, alias_kernel, (1,), x, out, x_out, flag, BLOCK=128)
    torch.testing.assert_close(out, 6 * x if flag else 3 * x)
    torch.testing.assert_close(x_out, x if flag else 2 * x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_2d_threads(backend):
    x = torch.randn(4, 32)
    out = torch.full((4, 32), float("nan"))
    run_on(backend, kernel_2d, (1,), x, out)
    torch.testing.assert_close(out, 3 * x)


def test_2d_threads_on_tilelang_split_the_thread_index():
    _tilelang_or_skip()
    lw = kernel_2d.lower(torch.empty(4, 32, device="meta"), torch.empty(4, 32, device="meta"), grid=(1,),
                         backend="tilelang")
    src = lw.source
    assert "tid_x = tid % 32" in src and "tid_y = tid // 32" in src


# -- errors ------------------------------------------------------------------------------------------------
_DEFAULT = object()


def _call(backend="triton", block=1024, fn=copy_tile, hw=_DEFAULT, layout=None, dtype=torch.float32, num_warps=None):
    hw = {"threads": (block,)} if hw is _DEFAULT else hw
    layout = {"space": "shared", "order": [0]} if layout is None else layout
    x = torch.empty(block, device="meta", dtype=dtype)
    return call_kernel.lower(x, torch.empty_like(x), BLOCK=block, FN=fn, HW=hw, LAYOUT=layout, grid=(1,),
                             backend=backend, num_warps=num_warps)


def _where(e, marker="# call: the call") -> str:
    return f"{__file__}:{_line(marker)}"


def test_the_generic_call_lowers():
    assert "raw_call @copy_tile(%x, %out)" in _call().ir


def test_shape_mismatch():
    with pytest.raises(LoweringError) as e:
        _call(block=512)
    msg = str(e.value)
    assert _where(e) in msg and "tle.call(copy_tile)" in msg and "argument 0 ('x')" in msg
    assert "tensor<512xf32>" in msg and "tensor<1024xf32>" in msg


def test_dtype_mismatch():
    with pytest.raises(LoweringError) as e:
        _call(dtype=torch.float16)
    msg = str(e.value)
    assert _where(e) in msg and "'x'" in msg and "tensor<1024xf16>" in msg and "tensor<1024xf32>" in msg


def test_not_a_raw_function():
    def plain(x, out):
        pass

    with pytest.raises(LoweringError, match="must be a raw function") as e:
        _call(fn=plain)
    assert _where(e) in str(e.value)


@pytest.mark.parametrize("hw, word", [
    ({}, "needs 'threads'"),
    ({"threads": 1024}, "must be a tuple"),
    ({"threads": (1024, 1)}, "1 positive"),
    ({"threads": (0,)}, "1 positive"),
    ({"threads": (True,)}, "1 positive"),
    ({"threads": (1024,), "warps": 4}, "unknown key"),
    ("1024", "must be a dict"),
])
def test_bad_hardware(hw, word):
    with pytest.raises(LoweringError, match=word) as e:
        _call(hw=hw)
    assert _where(e) in str(e.value) and "tle.call(copy_tile)" in str(e.value)


def test_missing_hardware():
    with pytest.raises(LoweringError, match=r"give the launch domain as hardware=\{'threads': \(128,\)\}") as e:
        _call(hw=None)
    assert _where(e) in str(e.value)


def test_layout_space_other_than_shared():
    with pytest.raises(LoweringError) as e:
        _call(layout={"space": "global"})
    msg = str(e.value)
    assert _where(e) in msg and "'global'" in msg and "no backend supports it" in msg
    assert "triton" in msg and "tilelang" in msg and e.value.construct == "layout space 'global'"


@pytest.mark.parametrize("layout, word", [
    ({"order": [1]}, "not a permutation"),
    ({"order": [0, 0]}, "not a permutation"),
    ({"space": "shared", "swizzle": 1}, "unknown key"),
    ("bad key", "not one of args"),
])
def test_bad_layout(layout, word):
    with pytest.raises(LoweringError, match=word) as e:
        _call(layout=layout)
    marker = "# call: bad key" if layout == "bad key" else "# call: the call"
    assert _where(e, marker) in str(e.value)


def test_non_elementwise_function_on_triton():
    with pytest.raises(UnsupportedConstruct) as e:
        _call(fn=shifted)
    err = e.value
    assert err.backend == "triton" and err.loc.line == _line("# call: the call") and err.loc.file == __file__
    msg = str(err)
    assert "raw function 'shifted' (not element-wise over its tile)" in msg and "[triton]" in msg
    assert "at a thread-dependent index other than the tile element" in msg and f"(at {__file__}:{shifted.line})" in msg


def test_non_elementwise_function_lowers_on_tilelang():
    _tilelang_or_skip()
    src = _call(backend="tilelang", fn=shifted, num_warps=32).source
    assert "out[tid] = shifted_1" in src
    # the last thread reads x[1024], past the 1024-element tile: no defined result, and the oracle says so
    with pytest.raises(OutOfBounds, match=r"read of x_1\[1024\] outside its shape \[1024\]"):
        interpret_tilelang(call_kernel, (1,), torch.randn(1024), torch.zeros(1024), BLOCK=1024, FN=shifted,
                           HW={"threads": (1024,)}, LAYOUT={"space": "shared", "order": [0]}, num_warps=32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_launch_num_warps_other_than_the_call_threads(backend):
    """The kernel's thread count and the call's agree on every backend (tests/cpu/test_call_threads.py)."""
    if backend == "tilelang":
        _tilelang_or_skip()
    with pytest.raises(LoweringError) as e:
        _call(backend=backend, num_warps=4)
    assert e.value.loc.line == _line("# call: the call")
    assert "asks for 1024 threads" in str(e.value) and "num_warps=4 gives the kernel 128" in str(e.value)


def test_tilelang_notes_an_order_other_than_row_major():
    _tilelang_or_skip()
    meta = torch.empty(4, 32, device="meta")
    lw = kernel_2d.lower(meta, meta, grid=(1,), backend="tilelang")
    assert not [n for n in lw.notes if "layout hint" in n]        # (1, 0): row-major, fastest axis first
    lw = kernel_2d.lower(meta, meta, ORDER=(0, 1), grid=(1,), backend="tilelang")
    assert [n for n in lw.notes if "layout hint" in n] == [
        f"line {_line('tle.call(triple_2d')}: tle.call(triple_2d): the order [0, 1] of 'out' is a layout hint; "
        "TileLang infers shared layouts itself"]


@tle.raw.language(name="mlir")
def two_outputs(a: F128, b: F128):
    i = thread_index(nvvm.ThreadIdXOp)
    v = arith.constant(ir.F32Type.get(), 1.0)
    tensor.insert(v, a, [i])
    tensor.insert(v, b, [i])


@tle.jit
def twice_kernel(o_ptr):
    offs = tl.arange(0, 128)
    out = tl.zeros([128], tl.float32)
    tle.call(two_outputs, args=[out, out], hardware={"threads": (128,)})  # call: twice
    tl.store(o_ptr + offs, out)


def test_the_same_tile_for_two_written_arguments():
    with pytest.raises(LoweringError, match="writes both") as e:
        twice_kernel.lower(torch.empty(128, device="meta"), backend="triton")
    assert _where(e, "# call: twice") in str(e.value)


def test_call_outside_a_kernel_and_exports():
    assert tle.call is tle.raw.call and tle.hardware_constraint is tle.raw.hardware_constraint
    with pytest.raises(RuntimeError, match="inside a @tle.jit kernel"):
        tle.call(copy_tile, args=[], hardware={"threads": (1024,)})


# -- thread-level code that reads fewer thread indices than it is given (TileLang only: not element-wise) ----
@tle.raw.language(name="mlir")
def bump_first(x: F128, out: F128):
    """out[0] = x[0] + 1, the same on every thread: no thread index read."""
    c0 = arith.constant(ir.IndexType.get(), 0)
    tensor.insert(arith.addf(tensor.extract(x, [c0]), arith.constant(ir.F32Type.get(), 1.0)), out, [c0])


@tle.raw.language(name="mlir")
@tle.hardware_constraint(threads_dim=2, sync_scope="none")
def first_column(x: F4x32, out: F4x32):
    """out[ty, 0] = 3 * x[ty, 0]: only the y thread index read."""
    c0 = arith.constant(ir.IndexType.get(), 0)
    ty = thread_index(nvvm.ThreadIdYOp)
    v = tensor.extract(x, [ty, c0])
    tensor.insert(arith.mulf(v, arith.constant(ir.F32Type.get(), 3.0)), out, [ty, c0])


@tle.jit
def column_kernel(x_ptr, o_ptr):
    offs = tl.arange(0, 4)[:, None] * 32 + tl.arange(0, 32)[None, :]
    x = tl.load(x_ptr + offs)
    res = tl.zeros_like(x)
    tle.call(first_column, args=[x, res], hardware={"threads": (32, 4)})
    tl.store(o_ptr + offs, res)


def test_unread_thread_index_is_not_computed():
    _tilelang_or_skip()
    hw, layout = {"threads": (128,)}, {"space": "shared", "order": [0]}
    src = _call(backend="tilelang", block=128, fn=bump_first, hw=hw, num_warps=4).source
    assert "T.get_thread_binding(0)" not in src and "out[0] = " in src
    x, out = torch.randn(128), torch.full((128,), float("nan"))
    interpret_tilelang(call_kernel, (1,), x, out, BLOCK=128, FN=bump_first, HW=hw, LAYOUT=layout)
    torch.testing.assert_close(out, torch.cat([x[:1] + 1, torch.zeros(127)]))


def test_unread_thread_axis_is_not_computed():
    _tilelang_or_skip()
    meta = torch.empty(4, 32, device="meta")
    src = column_kernel.lower(meta, meta, grid=(1,), backend="tilelang").source
    assert "tid_y = tid // 32" in src and "tid_x" not in src
    # the written copy is named after the kernel's tile, not the raw function's parameter
    assert "res = T.alloc_shared((4, 32), 'float32')" in src
    x, out = torch.randn(4, 32), torch.full((4, 32), float("nan"))
    interpret_tilelang(column_kernel, (1,), x, out)
    expected = torch.zeros(4, 32)
    expected[:, 0] = 3 * x[:, 0]
    torch.testing.assert_close(out, expected)
