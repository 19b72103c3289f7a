"""FlagTree's spellings of tle.gpu: the scope kinds, the layout classes, alloc's layout hints, memory_space, the
pipeline as a range-like object, buffered_tensor and tle.gpu.semantic. Each is the project's own function under
FlagTree's name: results on both backends (Triton's interpreter; the interpreter of TileLang programs), the
notes that say what a backend did with a hint, and the errors."""
import pytest
import torch
import triton.language as tl

import tle
from flagtree_form_kernels import hinted_buffers
from lowering_errors import assert_lowering_error
from tilelang_oracle import run_on
from tle.gpu.semantic import TLESemantic, TLESemanticError

BACKENDS = ["triton", "tilelang"]


def test_scope_kinds_are_flagtree_names_and_the_project_spelling_is_the_same_class():
    assert tle.gpu.smem.name == "share_memory" and tle.gpu.tmem.name == "tensor_memory"
    assert tle.gpu.storage_kind is tle.gpu.scope and tle.gpu.storage_kind.smem == tle.gpu.smem
    assert tle.gpu.smem.value == "smem"
    with pytest.raises(ValueError, match="unknown storage kind 'global'"):
        tle.gpu.scope("global")


def test_layout_classes_default_permute_and_check_their_fields():
    lay = tle.gpu.swizzled_shared_layout.make_default(3)
    assert (lay.vectorSize, lay.perPhase, lay.maxPhase, lay.order) == (1, 1, 1, [2, 1, 0])
    assert lay.make_permute([1, 0, 2]).order == (1, 2, 0)        # order[dims[i]], as FlagTree permutes
    assert lay.make_permute([0, 1, 2]) != lay.make_permute([1, 0, 2])
    mma = tle.gpu.nv_mma_shared_layout.make_default([64, 32], tl.float16)
    assert (mma.order, mma.swizzled, mma.rank) == ([1, 0], True, 2)
    assert mma.make_permute([1, 0]).order == (0, 1)
    assert isinstance(mma, tle.gpu.shared_layout) and isinstance(lay, tle.gpu.layout)
    assert tle.gpu.tensor_memory_layout.make_default([128, 64]).blockN == 64
    with pytest.raises(ValueError, match="permutation"):
        tle.gpu.swizzled_shared_layout(1, 1, 1, [0, 0])
    with pytest.raises(ValueError, match="positive"):
        tle.gpu.swizzled_shared_layout(0, 1, 1, [1, 0])
    with pytest.raises(ValueError, match="dims must be a permutation of 0..2"):
        lay.make_permute([0, 1])


def test_pipeline_outside_a_kernel_describes_its_loop():
    p = tle.gpu.pipeline(10)
    assert (p.start, p.end, p.step, p.num_stages, p.loop_unroll_factor) == (0, 10, 1, None, None)
    p = tle.gpu.pipeline(2, 8, 3, num_stages=2, loop_unroll_factor=4)
    assert (p.start, p.end, p.step, p.num_stages, p.loop_unroll_factor) == (2, 8, 3, 2, 4)
    with pytest.raises(RuntimeError, match="inside a @tle.jit kernel"):
        iter(p)


def test_semantic_checks_are_the_checks_alloc_makes():
    sem = TLESemantic(object())
    assert sem.validate_alloc_shape((8,)) == [8] and sem.validate_alloc_shape([16, 32]) == [16, 32]
    assert sem.validate_alloc_dtype(tl.int1) is tl.int1
    for shape in ([], [16, -1], [16, 2.0], "16"):
        with pytest.raises(TLESemanticError):
            sem.validate_alloc_shape(shape)
    for dtype in ("float32", 32, torch.float32, tl.pointer_type(tl.float32)):
        with pytest.raises(TLESemanticError):
            sem.validate_alloc_dtype(dtype)
    assert issubclass(TLESemanticError, ValueError)



@pytest.mark.parametrize("backend", BACKENDS)
def test_layout_hints_do_not_change_results(backend):
    x = torch.randn(4 * 32)
    out = torch.full((32,), float("nan"))
    run_on(backend, hinted_buffers, (1,), x, out, N=4, BLOCK=32)
    torch.testing.assert_close(out, x.view(4, 32).sum(0))


def _lowered(backend):
    meta = [torch.empty(s, device="meta") for s in (128, 32)]
    return hinted_buffers.lower(*meta, N=4, BLOCK=32, grid=(1,), backend=backend)


def test_tilelang_drops_the_layout_hints_and_the_unroll_factor_with_notes():
    lw = _lowered("tilelang")
    notes = "\n".join(lw.notes)
    assert "swizzled_shared_layout(vectorSize=1, perPhase=1, maxPhase=1, order=[0])" in notes
    assert "swizzled_shared_layout (default: not swizzled)" in notes
    assert "layout hint dropped, TileLang chooses shared layouts itself" in notes
    assert "loop_unroll_factor=2" in notes
    assert "memory_space(..., 'shared_memory'): placement hint dropped" in notes


def test_triton_writes_the_unroll_factor_and_notes_the_memory_space():
    lw = _lowered("triton")
    assert "tl.range(4, num_stages=2, loop_unroll_factor=2)" in lw.source
    assert any("memory_space(..., 'shared_memory'): placement hint dropped" in n for n in lw.notes)


def test_the_ir_keeps_the_layout_hint():
    ir = _lowered("triton").ir
    assert "alloc {scope=smem, layout=swizzled_shared_layout(vectorSize=1, perPhase=1, maxPhase=1, order=[0])}" in ir


@tle.jit
def _layout_of_other_rank(x_ptr):
    tle.gpu.alloc([16], dtype=tl.float32, layout=tle.gpu.swizzled_shared_layout.make_default(2))


@tle.jit
def _flag_not_bool(x_ptr):
    tle.gpu.alloc([16], dtype=tl.float32, nv_mma_shared_layout="yes")


@tle.jit
def _dtype_string(x_ptr):
    tle.gpu.alloc([16], dtype="float32")


@tle.jit
def _memory_space_of_buffer(x_ptr):
    tle.gpu.memory_space(tle.gpu.alloc([16], dtype=tl.float32), "register")


@tle.jit
def _unroll_zero(x_ptr):
    for i in tle.gpu.pipeline(4, loop_unroll_factor=0):
        pass


@pytest.mark.parametrize("kernel, words", [
    (_layout_of_other_rank, ["of rank 2", "shape of rank 1"]),
    (_flag_not_bool, ["nv_mma_shared_layout must be a bool"]),
    (_dtype_string, ["dtype must be a Triton dtype", "'float32'"]),
    (_memory_space_of_buffer, ["memory_space got a tle.gpu buffer", "local_load"]),
    (_unroll_zero, ["loop_unroll_factor must be a constexpr int >= 1"]),
])
def test_bad_hints_are_errors_at_the_line(kernel, words):
    assert_lowering_error(kernel, [torch.empty(16, device="meta")], words, "tilelang")


def test_buffered_tensor_is_the_type_of_a_buffer_inside_a_kernel():
    from tle.lowering.frontend.gpu import Buffer
    assert tle.gpu.buffered_tensor is Buffer
