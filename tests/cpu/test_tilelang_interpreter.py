"""The interpreter of TileLang programs (tle.lowering.tilelang.interpreter), construct by construct, on
small hand-written programs: what each TileLang construct computes, and the accesses with no defined
result that it reports instead of computing something. tests/gpu checks the same programs against
compiled TileLang."""
import pytest
import torch

import tle
from tle.lowering.tilelang.interpreter import (DivisionByZero, Misaligned, OutOfBounds, Program, Race,
                                               UninitializedRead, Unsupported, load_prim_func)
from interpreter_programs import PROGRAMS, write_program
from syntax_corpus import CASES
from tle.examples import compare_outputs

pytestmark = pytest.mark.skipif(tle.available_backends().get("tilelang") is not None,
                                reason="the interpreter reads programs with TileLang's parser")


@pytest.fixture
def program(tmp_path):
    def load(name: str) -> Program:
        return Program(load_prim_func(write_program(tmp_path, name), name))
    return load


# -- every program of the shared set against its torch reference -----------------------------------------
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_matches_reference(program, name):
    case = PROGRAMS[name]
    args, expected = case.make()
    report = program(name).run(args, strict_reads=case.strict)
    for i, want in expected.items():
        got = args[i]
        if want.is_floating_point():
            torch.testing.assert_close(got, want, atol=case.atol, rtol=case.atol, equal_nan=True)
        else:
            assert torch.equal(got, want), (got, want)
    assert report.predicated_reads == case.predicated


# -- what has no defined result is an error, naming the statement and the block ---------------------------
def test_read_outside_a_shared_buffer(program):
    with pytest.raises(OutOfBounds, match=r"read of s\[64\] outside its shape \[64\].*s\[i \+ 1\].*block \(bx=0\)"):
        program("shared_off_by_one").run([torch.zeros(64), torch.zeros(64)])


def test_read_past_a_global_tensor_is_zero_or_an_error_when_strict(program):
    x, y = torch.randn(64), torch.zeros(64)
    report = program("global_overread").run([x, y])
    assert report.predicated_reads == {"x": 12}
    torch.testing.assert_close(y, torch.cat([x[8:], torch.zeros(8)]) + torch.cat([torch.zeros(4), x[:60]]))
    with pytest.raises(OutOfBounds, match=r"read of x\[(64|-4)\] outside its shape \[64\]"):
        program("global_overread").run([x, y], strict_reads=True)


@pytest.mark.parametrize("name", ["negative_copy_start", "negative_index"])
def test_an_index_negative_in_every_lane_is_not_modelled(program, name):
    # TileLang reads an index it can prove negative from the end, Python-style, and one it cannot as zero
    with pytest.raises(Unsupported, match=r"negative .*x"):
        program(name).run([torch.randn(10), torch.zeros(8)])


def test_write_past_a_global_tensor(program):
    with pytest.raises(OutOfBounds, match=r"write of y\[64\] outside its shape \[64\]"):
        program("global_overwrite").run([torch.zeros(64), torch.zeros(64)])


def test_read_of_a_fragment_nothing_wrote(program):
    with pytest.raises(UninitializedRead, match=r"read of acc\[32\] before anything wrote it"):
        program("half_cleared").run([torch.zeros(64)])


def test_two_blocks_storing_different_values(program):
    with pytest.raises(Race, match=r"block 1 stores y\[0\].*block 0 stored a different value"):
        program("blocks_collide").run([torch.zeros(4), 1])
    y = torch.zeros(4)
    program("blocks_collide").run([y, 0])          # the same value from every block: no race
    assert y[0] == 7


def test_a_block_reading_what_another_stored(program):
    with pytest.raises(Race, match=r"block 1 reads y\[0\], which block 0 stored"):
        program("blocks_read_each_other").run([torch.zeros(4)])


def test_iterations_of_one_parallel_loop_touching_each_others_elements(program):
    with pytest.raises(Race, match=r"reads s .*which another iteration of the loop writes"):
        program("parallel_shift").run([torch.randn(64), torch.zeros(64)])


def test_integer_division_by_zero_in_a_live_lane(program):
    a, b = torch.arange(8, dtype=torch.int32), torch.tensor([1, 2, 0, 1, 1, 1, 1, 1], dtype=torch.int32)
    with pytest.raises(DivisionByZero):
        program("divide").run([a, b, torch.zeros(8, dtype=torch.int32), 0])
    out = torch.zeros(8, dtype=torch.int32)
    program("divide").run([a, b, out, 1])          # guarded by `b != 0`: the zero lane never divides
    assert out.tolist() == [0, 0, -1, 3, 4, 5, 6, 7]


def test_a_stage_list_that_reads_before_the_write(program):
    # the consumer in stage 0, its producer in stage 1: step 0 reads a buffer nothing has written yet
    with pytest.raises(UninitializedRead, match=r"read of s\[0\]"):
        program("pipeline_backwards").run([torch.randn(4 * 32), torch.zeros(32)])


def test_parallel_under_a_thread_dependent_condition_is_not_modelled(program):
    with pytest.raises(Unsupported, match="T.Parallel under a thread-dependent condition"):
        program("parallel_in_thread_branch").run([torch.zeros(64)])


def test_a_cp_async_at_a_misaligned_address(program):
    x = torch.randn(137, dtype=torch.float16)
    p, y = program("cp_async_alignment"), torch.full((128,), float("nan"), dtype=torch.float16)
    p.run([x[:136], y, 8, 0])                       # aligned; the last thread's predicate is false: zeros
    assert torch.equal(y, torch.cat([x[8:128], torch.zeros(8, dtype=torch.float16)]))
    statement = r"\(`T.ptx_cp_async\(.*\)` in block \(bx=0\)\)$"
    with pytest.raises(Misaligned, match=r"cp.async of 16 bytes at x\[4\] in thread 0: address 0x[0-9a-f]*8 "
                                         r"\(byte 8 of global x\) is not a multiple of 16 " + statement):
        p.run([x[:136], y, 4, 0])
    with pytest.raises(Misaligned, match=r"at s\[2\] in thread 0: address 0x4 \(byte 4 of shared s\)"):
        p.run([x[:136], y, 0, 2])
    # a view one element into its storage: x[0] is at an address that is 2 (mod 16)
    with pytest.raises(Misaligned, match=r"at x\[0\] in thread 0: address 0x[0-9a-f]*2 \(byte 0 of global x\)"):
        p.run([x[1:], y, 0, 0])


def test_arguments_are_checked(program):
    p = program("global_overread")
    with pytest.raises(TypeError, match="argument 'x': expected dtype float32, got float16"):
        p.run([torch.zeros(64, dtype=torch.float16), torch.zeros(64)])
    with pytest.raises(TypeError, match="argument 'y': expected a flat contiguous tensor of 64 elements"):
        p.run([torch.zeros(64), torch.zeros(8, 8)])
    with pytest.raises(TypeError, match="takes 2 arguments, got 1"):
        p.run([torch.zeros(64)])


def test_the_interpreter_is_not_a_backend():
    """A TileLang launch on CPU tensors is refused; nothing falls back to the interpreter."""
    from syntax_corpus import CASES
    kernel, make = CASES["tle_load_async"]
    launch = make("cpu")
    with pytest.raises(tle.LaunchError, match="TileLang kernels run on CUDA tensors only"):
        kernel[launch.grid](*launch.args, backend="tilelang", **launch.kwargs)


def test_a_lowering_interprets_out_of_bounds_reads_as_zero_by_default():
    """TileLang predicates a global read outside the tensor to zero; a lowering's `interpret` does the same
    unless asked to be strict (the oracle is strict except where the lowering relies on it)."""
    kernel, make = CASES["gathers_without_other"]          # masked rows sent past the end, zero-filled
    launch = make("cpu")
    lowered = kernel.lower(*launch.args, grid=launch.grid, backend="tilelang", **launch.kwargs)
    report = lowered.compiled.interpret(list(launch.args))
    assert report.predicated_reads
    compare_outputs(launch)
    with pytest.raises(OutOfBounds):
        lowered.compiled.interpret(list(make("cpu").args), strict_reads=True)
