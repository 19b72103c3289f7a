"""Raw functions in FlagTree's form (tle.raw.dialect, Input / InOut, call(fn, outputs, inputs)): how they are
declared, what a call checks, and what they compute on TileLang (the interpreter of TileLang programs, and
nvcc's build for sm_90a where it is installed)."""
import shutil

import pytest
import torch
import triton.language as tl

pytest.importorskip("jaxlib.mlir")

import tle  # noqa: E402
from tle.lowering.errors import LoweringError, UnsupportedConstruct  # noqa: E402
from tle.lowering.tilelang.interpreter.errors import DeviceAssertionFailed  # noqa: E402
from tle.raw import InOut, Input, dialect  # noqa: E402
from tle.raw.mlir import arith, ir, llvm, memref, nvvm  # noqa: E402
from raw_dialect_functions import (add_kernel, assert_kernel, element, grid_stride_add, hello_kernel,  # noqa: E402
                                   histogram_kernel, i32, product_kernel, sum_kernel, tree_sum)
from tilelang_oracle import interpret_tilelang  # noqa: E402

NVCC = shutil.which("nvcc") is not None


@pytest.fixture(autouse=True)
def _tilelang():
    why = tle.available_backends().get("tilelang")
    if why is not None:
        pytest.skip(f"TileLang backend unavailable here ({why})")


# -- what they compute -------------------------------------------------------------------------------------
def test_pointers_and_program_ids_grid_stride_add():
    x, y = torch.randn(1000), torch.randn(1000)
    out = torch.zeros(1000)
    interpret_tilelang(add_kernel, (3,), x, y, out, 1000, num_warps=2, compile_cuda=NVCC)
    torch.testing.assert_close(out, x + y)


def test_while_loop_and_barriers_tree_sum():
    x = torch.randn(3, 128)
    out = torch.zeros(3, 128)
    interpret_tilelang(sum_kernel, (3,), x, out, N=128, num_warps=1, compile_cuda=NVCC)
    torch.testing.assert_close(out[:, 0], x.sum(1), rtol=1e-5, atol=1e-5)


def test_atomics_on_shared_copies_and_scratch_inputs():
    bins = torch.randint(0, 16, (256,), dtype=torch.int32)
    counts, seen = torch.full((16,), -1, dtype=torch.int32), torch.full((16,), -1, dtype=torch.int32)
    interpret_tilelang(histogram_kernel, (1,), bins, counts, seen, N=256, B=16, num_warps=4, compile_cuda=NVCC)
    assert counts.tolist() == torch.bincount(bins, minlength=16).int().tolist()
    assert seen.tolist() == [0] * 16          # an Input tile the function writes: the kernel's tile is unchanged


def test_memref_dims_strided_layout_and_carried_values():
    a, b = torch.randn(16, 8), torch.randn(8, 32)
    c = torch.zeros(16, 32)
    interpret_tilelang(product_kernel, (1,), a, b, c, M=16, N=32, K=8, num_warps=2, compile_cuda=NVCC)
    torch.testing.assert_close(c, 1.0 + 2 * (a @ b), rtol=1e-4, atol=1e-4)


def test_vprintf_prints_on_every_thread(capfd):
    hello_kernel.interpret_tilelang((2,), num_warps=1)
    lines = [ln for ln in capfd.readouterr().out.splitlines() if ln.startswith("program")]
    assert len(lines) == 64 and "program 1 thread 31" in lines and "program 0 thread 0" in lines


def test_vassert_stops_the_kernel():
    with pytest.raises(DeviceAssertionFailed, match="is not below the limit"):
        assert_kernel.interpret_tilelang((1,), torch.zeros(1), 40, num_warps=2)
    assert_kernel.interpret_tilelang((1,), torch.zeros(1), 64, num_warps=2)


def test_tilelang_writes_a_device_function_and_the_interpreter_a_thread_level_twin():
    lw = add_kernel.lower(torch.zeros(8), torch.zeros(8), torch.zeros(8), 8, grid=(2,), backend="tilelang",
                          num_warps=1)
    src = lw.source
    assert "__device__ __forceinline__ int tle_raw_grid_stride_add(float* out, float* x, float* y, int n)" in src
    assert "T.evaluate(T.call_extern('int32', 'tle_raw_grid_stride_add', T.access_ptr(out_ptr[0], 'rw'), " \
           "T.access_ptr(x_ptr[0], 'rw'), T.access_ptr(y_ptr[0], 'rw'), 8))" in src
    assert "for (int v16 = v13; v16 < v14; v16 += v15) {" in src and "int v8 = (int)blockIdx.x;" in src
    # the interpreter's program: the same kernel, the function as thread-level TIR (program ids, 32 threads)
    twin = open(lw.compiled.interpreted_path).read()
    assert "call_extern" not in twin and "T.get_thread_binding(0)" in twin and "= (bx * 32)" in twin
    assert ", 8, 64):" in twin and "= x_ptr[" in twin


# -- declarations ------------------------------------------------------------------------------------------
def test_declared_parameters():
    assert tree_sum.flagtree and tree_sum.roles == ("inout", "input")
    assert tree_sum.kinds == ("tile", "tile") and tree_sum.tiles == (((None,), "fp32"), ((None,), "fp32"))
    assert grid_stride_add.kinds == ("pointer",) * 3 + ("scalar",)
    assert "InOut['memref<?xf32, 3>']" in repr(tree_sum)
    with pytest.raises(TypeError, match="is not called directly"):
        tree_sum(1, 2)


def test_declaration_errors():
    with pytest.raises(ValueError, match="name must be 'mlir'"):
        dialect(name="llvm")
    with pytest.raises(TypeError, match="needs Input"):
        @dialect(name="mlir")
        def bare(x):
            pass
    with pytest.raises(TypeError, match="InOut parameters are tiles"):
        @dialect(name="mlir")
        def inout_pointer(p: InOut["!llvm.ptr<1>"]):  # noqa: F722
            pass
    with pytest.raises(TypeError, match="must be a tile"):
        @dialect(name="mlir")
        def global_memref(p: Input["memref<?xf32>"]):  # noqa: F722
            pass
    with pytest.raises(TypeError, match="not an MLIR type"):
        @dialect(name="mlir")
        def garbage(p: Input["memref<<"]):  # noqa: F722
            pass
    with pytest.raises(TypeError, match="hardware_constraint applies to tle.raw.language"):
        tle.hardware_constraint(threads_dim=1)(tree_sum)


# -- what a call checks ------------------------------------------------------------------------------------
@tle.jit
def call_kernel(x_ptr, FN: tl.constexpr, OUTS: tl.constexpr, INS: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, 128))
    if OUTS == 1:
        x = tle.raw.call(FN, [x], [x.to(tl.float16)] if INS == 2 else [x])
    else:
        tle.raw.call(FN, [], [x_ptr, x_ptr, x, 5])
    tl.store(x_ptr + tl.arange(0, 128), x)


@pytest.mark.parametrize("fn, outs, ins, word", [
    (tree_sum, 1, 2, "must be a tile matching memref<\\?xf32, 3>, got a tile of type tensor<128xf16>"),
    (grid_stride_add, 0, 0, "argument 2 \\('y', !llvm.ptr<1>\\) must be a pointer"),
])
def test_call_argument_errors(fn, outs, ins, word):
    with pytest.raises(LoweringError, match=word):
        call_kernel.lower(torch.zeros(128), FN=fn, OUTS=outs, INS=ins, grid=(1,), backend="tilelang")


def test_call_counts_and_order():
    @tle.jit
    def k(x_ptr):
        x = tl.load(x_ptr + tl.arange(0, 128))
        tle.raw.call(tree_sum, [], [x, x])

    with pytest.raises(LoweringError, match="takes 1 outputs \\(acc\\) and 1 inputs \\(x\\), got 0 and 2"):
        k.lower(torch.zeros(128), grid=(1,), backend="tilelang")

    @dialect(name="mlir")
    def input_first(x: Input["memref<?xf32, 3>"], y: InOut["memref<?xf32, 3>"]):  # noqa: F722
        pass

    @tle.jit
    def k2(x_ptr):
        x = tl.load(x_ptr + tl.arange(0, 128))
        tle.raw.call(input_first, [x], [x])

    with pytest.raises(LoweringError, match="parameter 'x' is Input but InOut parameters follow it"):
        k2.lower(torch.zeros(128), grid=(1,), backend="tilelang")


def test_element_type_of_a_pointer_must_match_on_tilelang():
    @dialect(name="mlir")
    def as_ints(p: Input["!llvm.ptr<1>"]):  # noqa: F722
        i = nvvm.read_ptx_sreg_tid_x(i32())
        llvm.store(i, element(p, i, i32()))

    @tle.jit
    def k(x_ptr):
        tle.raw.call(as_ints, [], [x_ptr])

    with pytest.raises(UnsupportedConstruct, match="llvm.getelementptr over i32 elements.*points to fp32"):
        k.lower(torch.zeros(128), grid=(1,), backend="tilelang")


def test_an_op_outside_the_set_is_named_at_lowering():
    @dialect(name="mlir")
    def allocates(y: InOut["memref<?xf32, 3>"]):  # noqa: F722
        memref.alloca(ir.MemRefType.get([4], ir.F32Type.get()), [], [])

    @tle.jit
    def k(x_ptr):
        x = tl.load(x_ptr + tl.arange(0, 128))
        tl.store(x_ptr + tl.arange(0, 128), tle.raw.call(allocates, [x], []))

    with pytest.raises(UnsupportedConstruct, match="memref.alloca"):
        k.lower(torch.zeros(128), grid=(1,), backend="tilelang")


def test_ir_prints_the_program_threads():
    ir_text = sum_kernel.lower(torch.zeros(128), torch.zeros(128), N=128, grid=(1,), backend="tilelang").ir
    assert "raw_call @tree_sum(" in ir_text and "threads=program" in ir_text
