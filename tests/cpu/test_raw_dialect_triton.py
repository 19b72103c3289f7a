"""tle.raw.dialect functions on Triton: the generated source calls LLVM IR linked into the kernel (copies of
the tiles in, a barrier, the function on every thread, a barrier, copies out); the .ll says what each MLIR op
became; the kernel compiles to PTX for sm_90 here, without a GPU; the interpreter refuses to launch it."""
import os
import re

import pytest
import torch
import triton.language as tl

pytest.importorskip("jaxlib.mlir")

import tle  # noqa: E402
from tle.lowering.errors import UnsupportedConstruct  # noqa: E402
from tle.lowering.triton.raw_llvm import literal  # noqa: E402
from tle.raw import InOut, dialect  # noqa: E402
from tle.raw.mlir import arith, ir, memref  # noqa: E402
import raw_dialect_kernels as K  # noqa: E402

HERE = os.path.basename(K.__file__)


def meta(n, dtype=torch.float32):
    return torch.empty(n, dtype=dtype, device="meta")


def lower_vector_add():
    return K.vector_add_kernel.lower(meta(1000), meta(1000), meta(1000), 1000, grid=(4,), backend="triton")


def lower_tree_sum(block=128, num_warps=None):
    return K.tree_sum_kernel.lower(meta(2 * block), meta(2 * block), BLOCK=block, grid=(2,), backend="triton",
                                   num_warps=num_warps)


def lower_histogram():
    return K.histogram_kernel.lower(meta(512, torch.int32), meta(16, torch.int32), N=512, BINS=16, grid=(1,),
                                    backend="triton")


def lower_exp_rows():
    return K.exp_rows_kernel.lower(meta(256), meta(256), 0.5, R=8, C=32, grid=(1,), backend="triton")


def ptx_lines(lw) -> list[str]:
    return [line.strip() for line in lw.compiled.stage("ptx").splitlines()]


# -- pointers -----------------------------------------------------------------------------------------------
def test_pointer_function_is_called_on_scalars_without_copies():
    lw = lower_vector_add()
    src, ll = lw.compiled.source, lw.compiled.llvm
    assert "vector_add(out_ptr, x_ptr, y_ptr, n)" in src
    assert "tl.debug_barrier()" not in src            # no tiles: nothing to copy or to wait for
    assert "from tle.lowering.triton.llvm_call import call_llvm" in src
    assert "RAW_LLVM = os.path.splitext(__file__)[0] + '.ll'" in src
    assert "return call_llvm(RAW_LLVM, 'vector_add', [output, x, y, n], [None, None, None, tl.int32], tl.int32, " \
           "_semantic)" in src
    assert "define i32 @vector_add(ptr addrspace(1) %output, ptr addrspace(1) %x, ptr addrspace(1) %y, i32 %n) #0" in ll
    assert re.search(r"= getelementptr float, ptr addrspace\(1\) %x, i32 %v\d+   ; llvm.getelementptr", ll)
    assert "call i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()" in ll
    assert re.search(r"%for0.go = icmp slt i64 %v\d+, %v\d+", ll)
    assert "attributes #0 = { alwaysinline convergent nounwind }" in ll


@pytest.mark.slow
def test_pointer_function_compiles_inline():
    ptx = ptx_lines(lower_vector_add())
    assert any(line.startswith("ld.global") for line in ptx) and any(line.startswith("st.global") for line in ptx)
    assert any("%ctaid.x" in line for line in ptx) and any("%nctaid.x" in line for line in ptx)
    assert not any(line.startswith("call") for line in ptx)       # inlined: no call left


# -- a shared tile, a while loop and barriers -------------------------------------------------------------------
def test_tile_copies_and_barriers_in_the_source():
    lw = lower_tree_sum()
    body = lw.compiled.source.split("def tree_sum_kernel")[1].splitlines()
    steps = [line.strip() for line in body if line.strip() and not line.strip().startswith("#")]
    assert steps[2:9] == ["t = tl.load(x_ptr + offs)", "tree_sum_index = tl.arange(0, 128)",
                          "tree_sum_store_y(t, tree_sum_index)", "tl.debug_barrier()", "tree_sum()",
                          "tl.debug_barrier()", "y = tree_sum_load_y(tree_sum_index)"]
    ll = lw.compiled.llvm
    assert "@tree_sum_y = internal addrspace(3) global [128 x float] undef, align 16" in ll
    assert "define i32 @tree_sum_store_y(float %value, i32 %index) #0" in ll
    assert "define float @tree_sum_load_y(i32 %index) #0" in ll
    for label in ("while0.before:", "while0.after:", "while0.end:", "for0.cond:"):
        assert label in ll
    assert "call void @llvm.nvvm.barrier0()" in ll and "declare void @llvm.nvvm.barrier0()" in ll
    assert re.search(r"%v\d+\.q\.\d+ = sdiv i64 %v\d+, 2", ll)       # arith.ceildivsi


def test_the_llvm_file_sits_beside_the_source_and_is_the_same_each_time(tmp_path, monkeypatch):
    texts = []
    for run in ("a", "b"):
        monkeypatch.setenv("TLE_CACHE_DIR", str(tmp_path / run))
        K.tree_sum_kernel._cache.clear()
        lw = lower_tree_sum()
        path = os.path.splitext(lw.compiled.path)[0] + ".ll"
        assert lw.compiled.llvm_path == path and open(path).read() == lw.compiled.llvm
        assert lw.compiled.compile_options()["extern_libs"] == {"tle_raw": path}
        texts.append((lw.compiled.llvm, os.path.basename(path)))
    assert texts[0] == texts[1]


@pytest.mark.slow
def test_tile_function_compiles_to_shared_memory_and_barriers():
    ptx = ptx_lines(lower_tree_sum())
    assert ".shared .align 16 .b8 tree_sum_y[512];" in ptx
    assert any(line.startswith("st.shared") for line in ptx) and any(line.startswith("ld.shared") for line in ptx)
    assert sum(line.startswith("bar.sync") for line in ptx) >= 3


@pytest.mark.slow
def test_eight_warps_run_the_function_on_256_threads():
    lw = lower_tree_sum(block=256, num_warps=8)
    assert "program's 256 threads" in lw.compiled.llvm
    assert ".reqntid 256" in "\n".join(ptx_lines(lw))


# -- shared atomics into an Input tile ---------------------------------------------------------------------------
def test_written_input_tile_is_copied_in_but_not_out():
    lw = lower_histogram()
    src, ll = lw.compiled.source, lw.compiled.llvm
    assert "histogram_store_bins(zeros, histogram_index)" in src
    assert "histogram_store_data(data, histogram_index_1)" in src and "histogram_index_1 = tl.arange(0, 512)" in src
    assert "counts = histogram_load_counts(histogram_index)" in src
    assert "histogram_load_bins(" not in src.split("def histogram_kernel")[1]
    assert re.search(r"= atomicrmw add ptr addrspace\(3\) %v\d+\.addr\.\d+, i32 1 monotonic, align 4", ll)


@pytest.mark.slow
def test_atomics_compile_to_shared_atomics():
    ptx = ptx_lines(lower_histogram())
    assert any(line.startswith("atom.shared.add") for line in ptx)


# -- a 2-D tile, libdevice, a named barrier, printf and an assertion -------------------------------------------------
def test_two_dimensional_tile_math_printing_and_assertion_in_llvm():
    lw = lower_exp_rows()
    src, ll = lw.compiled.source, lw.compiled.llvm
    assert "exp_rows_index = tl.arange(0, 8)[:, None] * 32 + tl.arange(0, 32)[None, :]" in src
    assert "exp_rows(scale)" in src
    assert "@exp_rows_y = internal addrspace(3) global [256 x float] undef, align 16" in ll
    assert "call float @__nv_expf(float" in ll and "declare float @__nv_expf(float)" in ll
    assert re.search(r"call void @llvm.nvvm.barrier.sync.cnt\(i32 1, i32 %v\d+\)", ll)
    assert 'c"exp_rows: y[0][0]=%f rows=%d\\0A\\00"' in ll
    assert "alloca { double, i32 }, align 8" in ll and "call i32 @vprintf(ptr @exp_rows_format" in ll
    assert re.search(r"call void @__assertfail\(ptr @exp_rows_message\d+, ptr @exp_rows_file\d+, i32 \d+, "
                     r"ptr @exp_rows_function\d+, i64 1\)", ll)


@pytest.mark.slow
def test_math_printing_and_assertion_compile():
    ptx = "\n".join(ptx_lines(lower_exp_rows()))
    assert "ex2.approx" in ptx                                   # libdevice's expf, linked by Triton
    assert re.search(r"barrier.sync\s+1, %r\d+;", ptx)
    assert "call.uni (retval0), vprintf" in ptx and "call.uni __assertfail" in ptx


# -- what is refused ---------------------------------------------------------------------------------------------
def test_interpreter_refuses_to_launch_it():
    x = torch.ones(100)
    with pytest.raises(UnsupportedConstruct) as e:
        K.vector_add_kernel[(1,)](x, x, torch.empty_like(x), 100, backend="triton")
    msg = str(e.value)
    assert e.value.backend == "triton" and "tle.raw.call(vector_add)" in msg
    assert f"{HERE}:" in msg and "interpreter" in msg and "TRITON_INTERPRET=1" in msg


def test_tiles_over_48_kb_are_refused():
    with pytest.raises(UnsupportedConstruct) as e:
        lower_tree_sum(block=16384)
    assert e.value.backend == "triton" and "65536 bytes of tiles" in str(e.value) and "49152" in str(e.value)
    # Triton's own error for a config past shared memory too, which autotuners skip
    from triton.runtime.errors import OutOfResources
    assert isinstance(e.value, OutOfResources) and (e.value.required, e.value.limit) == (65536, 49152)
    import pickle
    assert str(pickle.loads(pickle.dumps(e.value))) == str(e.value)


@dialect(name="mlir")
def float_remainder(y: InOut["memref<?xf32, 3>"]):  # noqa: F722
    i = arith.constant(ir.IndexType.get(), 0)
    v = memref.load(y, [i])
    memref.store(arith.remf(v, v), y, [i])


@tle.jit
def remainder_kernel(x_ptr):
    offs = tl.arange(0, 128)
    tle.raw.call(float_remainder, [tl.load(x_ptr + offs)], [])


def test_an_op_without_llvm_ir_is_refused_naming_triton():
    with pytest.raises(UnsupportedConstruct) as e:
        remainder_kernel.lower(meta(128), grid=(1,), backend="triton")
    assert e.value.backend == "triton" and "arith.remf" in str(e.value)


# -- LLVM constants ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, dtype, text", [
    (1.0, "fp32", "1.0"), (0.1, "fp32", "0.10000000149011612"), (1e-05, "fp64", "1.0e-05"),
    (float("inf"), "fp32", "0x7FF0000000000000"), (1.0, "fp16", "0xH3C00"), (1.0, "bf16", "0xR3F80"),
    (True, "i1", "true"), (-1, "i32", "-1"), (2**32 - 1, "i32", "-1"), (7, "index", "7"),
])
def test_llvm_literals(value, dtype, text):
    assert literal(value, dtype) == text
