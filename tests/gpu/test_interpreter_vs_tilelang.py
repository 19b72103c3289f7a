"""The interpreter of TileLang programs against compiled TileLang: the hand-written programs, every kernel's
small example and every corpus case, run by both on the same inputs, must agree within dtype tolerance.
This is what keeps the CPU oracle honest."""
import pytest
import torch

from interpreter_programs import PROGRAMS, write_program
from kernel_cases import example_kernels
from syntax_corpus import CASES
from tilelang_oracle import interpret_launch
from tle.cli import poison
from tle.examples import tolerance
from tle.lowering.tilelang.backend import compile_prim_func
from tle.lowering.tilelang.interpreter import Program, load_prim_func

KERNELS = example_kernels()


def _on_gpu(args):
    """The tensors copied to the GPU as they lie in memory: views of one storage (a packed tensor read in place
    through two views) stay views of one copy, with their strides and offsets."""
    copies = {}

    def copy(a):
        key = (a.untyped_storage().data_ptr(), a.dtype)
        if key not in copies:
            copies[key] = torch.empty(0, dtype=a.dtype).set_(a.untyped_storage()).to("cuda")
        return copies[key].as_strided(a.shape, a.stride(), a.storage_offset())
    return [copy(a) if isinstance(a, torch.Tensor) else a for a in args]


def _agree(name, interpreted, compiled, atol, rtol):
    compiled = compiled.cpu()
    if interpreted.is_floating_point():
        torch.testing.assert_close(interpreted.float(), compiled.float(), atol=atol, rtol=rtol, equal_nan=True,
                                   msg=lambda m: f"'{name}', interpreter vs TileLang: {m}")
    else:
        assert torch.equal(interpreted, compiled), f"'{name}', interpreter vs TileLang: {interpreted} != {compiled}"


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program(tmp_path, name):
    case = PROGRAMS[name]
    args, expected = case.make()
    func = load_prim_func(write_program(tmp_path, name), name)
    gpu = _on_gpu(args)
    compile_prim_func(func)(*gpu)
    torch.cuda.synchronize()
    Program(func).run(args, strict_reads=case.strict)
    for i in expected:
        _agree(f"argument {i}", args[i], gpu[i], case.atol, case.atol)


def _same_elements(arg, output):
    """Is `arg` the output, or a contiguous view of all of its elements (a kernel's view of it, as group_norm's
    [N * G, C / G, S])?"""
    return arg is output or (isinstance(arg, torch.Tensor) and arg.data_ptr() == output.data_ptr()
                             and arg.numel() == output.numel() and arg.is_contiguous() and output.is_contiguous())


def _both(kernel, launch):
    """Run `launch` (CPU tensors) through the interpreter, and a copy on the GPU through TileLang."""
    gpu = _on_gpu(launch.args)
    where = {n: next(i for i, a in enumerate(launch.args) if _same_elements(a, t)) for n, t in launch.outputs.items()}
    kernel[launch.grid](*gpu, backend="tilelang", **launch.kwargs)
    torch.cuda.synchronize()
    interpret_launch(kernel, launch)
    for n, t in launch.outputs.items():
        got = gpu[where[n]].reshape(t.shape)
        atol, rtol = tolerance(launch, n, t, got.cpu().float() if got.is_floating_point() else got.cpu())
        # two results, each within the tolerance of the reference, may differ by twice it (fast-math exp and
        # rsqrt on the GPU, float64 products in the interpreter)
        _agree(n, t, got, 2 * atol, 2 * rtol)


@pytest.mark.parametrize("name, kernel", KERNELS, ids=[n for n, _ in KERNELS])
def test_kernel(name, kernel):
    launch = kernel.example("cpu", "small")
    poison(launch)
    _both(kernel, launch)


@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus(name):
    kernel, make = CASES[name]
    _both(kernel, make("cpu"))
