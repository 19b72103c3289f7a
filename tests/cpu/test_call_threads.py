"""The threads of a tle.call and the kernel's num_warps. A launch that leaves num_warps out runs the kernel
with the threads its tle.call sites ask for (threads / 32 warps), on both backends: Triton launches that
num_warps, TileLang's T.Kernel has that many threads, and inspection (`.num_warps`, the IR, the sources,
`tle show`, `tle compare`) says so. A launch whose num_warps gives another count, calls that disagree, and
a count no num_warps gives are LoweringErrors naming both numbers and the call's file:line."""
import os

import pytest
import torch
import triton.language as tl

pytest.importorskip("jaxlib.mlir")

import tle  # noqa: E402
from tilelang_oracle import run_on  # noqa: E402
from tle.cli import main  # noqa: E402
from markers import marked_line

HERE = os.path.abspath(__file__)
BACKENDS = ["triton", "tilelang"]


def line_of(marker: str) -> int:
    return marked_line(__file__, marker)


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "tilelang" and tle.available_backends()["tilelang"] is not None:
        pytest.skip("TileLang backend unavailable here")
    return request.param


def doubling(n: int):
    """A raw function doubling an n-element tile, one element per thread (element-wise: Triton inlines it)."""
    return tle.raw.from_text(f"""
func.func @double_{n}(%x: tensor<{n}xf32>, %out: tensor<{n}xf32>) {{
  %t = nvvm.read.ptx.sreg.tid.x : i32
  %i = arith.index_cast %t : i32 to index
  %v = tensor.extract %x[%i] : tensor<{n}xf32>
  %c = arith.constant 2.0 : f32
  %d = arith.mulf %v, %c : f32
  %r = tensor.insert %d into %out[%i] : tensor<{n}xf32>
  return
}}""", sync_scope="none")


DOUBLE = {n: doubling(n) for n in (32, 128, 256, 1024)}

# out[ty, tx] = 2 * x[ty, tx] on an 8x32 tile, threads (32, 8)
DOUBLE_8x32 = tle.raw.from_text("""
func.func @double_8x32(%x: tensor<8x32xf32>, %out: tensor<8x32xf32>) {
  %tx = nvvm.read.ptx.sreg.tid.x : i32
  %ty = nvvm.read.ptx.sreg.tid.y : i32
  %j = arith.index_cast %tx : i32 to index
  %i = arith.index_cast %ty : i32 to index
  %v = tensor.extract %x[%i, %j] : tensor<8x32xf32>
  %c = arith.constant 2.0 : f32
  %d = arith.mulf %v, %c : f32
  %r = tensor.insert %d into %out[%i, %j] : tensor<8x32xf32>
  return
}""", threads_dim=2, sync_scope="none")


@tle.jit
def double_kernel(x_ptr, o_ptr, FN: tl.constexpr, BLOCK: tl.constexpr, THREADS: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    out = tl.full((BLOCK,), float("nan"), tl.float32)     # a thread the call lacks leaves a NaN
    tle.call(FN, args=[x, out], hardware={"threads": THREADS})  # CALL-double
    tl.store(o_ptr + offs, out)


@tle.jit
def double_twice(x_ptr, o_ptr, FIRST: tl.constexpr, SECOND: tl.constexpr):
    offs = tl.arange(0, 256)
    x = tl.load(x_ptr + offs)
    y = tl.full((256,), float("nan"), tl.float32)
    tle.call(DOUBLE[256], args=[x, y], hardware={"threads": FIRST})  # CALL-first
    z = tl.full((256,), float("nan"), tl.float32)
    tle.call(DOUBLE[256], args=[y, z], hardware={"threads": SECOND})  # CALL-second
    tl.store(o_ptr + offs, z)


@tle.example(double_kernel)
def _example(device, size):
    x = torch.randn(512, device=device)
    out = torch.full_like(x, float("nan"))
    return tle.Launch(grid=(2,), args=(x, out), kwargs=dict(FN=DOUBLE[256], BLOCK=256, THREADS=(256,)),
                      outputs={"out": out}, reference=lambda: {"out": 2 * x})


def meta(n):
    return torch.empty(n, device="meta")


def lower(backend, block=256, threads=None, grid=(2,), **launch):
    threads = (block,) if threads is None else threads
    return double_kernel.lower(meta(2 * block), meta(2 * block), FN=DOUBLE[block], BLOCK=block, THREADS=threads,
                               grid=grid, backend=backend, **launch)


def where(marker: str) -> str:
    return f"{HERE}:{line_of(marker)}"


# -- without num_warps: the kernel runs the call's threads -------------------------------------------------------
@pytest.mark.parametrize("block, warps", [(32, 1), (256, 8), (1024, 32)])
def test_num_warps_comes_from_the_call(block, warps, backend):
    lw = lower(backend, block)
    assert lw.num_warps == warps and lw.kernel.num_warps == warps
    assert f"launch {{num_warps={warps}, num_stages=3}}" in lw.ir
    if backend == "triton":
        assert f"# launch: num_warps={warps}, num_stages=3" in lw.source
        assert lw.compiled.ir.num_warps == warps            # what Triton's launch is given
    else:
        assert f"T.Kernel(2, threads={32 * warps})" in lw.source


@tle.jit
def double_2d(x_ptr, o_ptr):
    offs = tl.arange(0, 8)[:, None] * 32 + tl.arange(0, 32)[None, :]
    x = tl.load(x_ptr + offs)
    out = tl.full((8, 32), float("nan"), tl.float32)
    tle.call(DOUBLE_8x32, args=[x, out], hardware={"threads": (32, 8)})
    tl.store(o_ptr + offs, out)


def test_the_threads_of_a_2d_call_multiply(backend):
    x = torch.randn(8, 32)
    out = torch.full_like(x, float("nan"))
    run_on(backend, double_2d, (1,), x, out)
    torch.testing.assert_close(out, 2 * x, atol=0, rtol=0)
    assert double_2d.lower(meta(256), meta(256), grid=(1,), backend=backend).num_warps == 8


def test_without_a_call_the_default_stays_4(backend):
    @tle.jit
    def copy(x_ptr, o_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(o_ptr + offs, tl.load(x_ptr + offs))

    assert copy.lower(meta(256), meta(256), BLOCK=256, grid=(1,), backend=backend).num_warps == 4


def test_triton_launches_with_the_call_threads(monkeypatch):
    """What Triton's launch is handed, the generated kernel replaced by a recorder."""
    x, out = torch.randn(512), torch.full((512,), float("nan"))
    launched = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **options: launched.append((grid, options))

    lw = double_kernel.lower(x, out, FN=DOUBLE[256], BLOCK=256, THREADS=(256,), backend="triton")
    monkeypatch.setattr(lw.compiled, "_fn", Recorder())
    double_kernel[(2,)](x, out, FN=DOUBLE[256], BLOCK=256, THREADS=(256,), backend="triton")
    assert launched == [((2,), {"num_warps": 8, "num_stages": 3})]


@pytest.mark.parametrize("block", [32, 256, 1024])
def test_runs_with_the_call_threads(block, backend):
    x = torch.randn(2 * block)
    out = torch.full_like(x, float("nan"))
    run_on(backend, double_kernel, (2,), x, out, FN=DOUBLE[block], BLOCK=block, THREADS=(block,))
    torch.testing.assert_close(out, 2 * x, atol=0, rtol=0)


def test_calls_that_agree(backend):
    x = torch.randn(256)
    out = torch.full_like(x, float("nan"))
    run_on(backend, double_twice, (1,), x, out, FIRST=(256,), SECOND=(256,))
    torch.testing.assert_close(out, 4 * x, atol=0, rtol=0)
    assert double_twice.lower(meta(256), meta(256), FIRST=(256,), SECOND=(256,), grid=(1,),
                              backend=backend).num_warps == 8


# -- with num_warps: it must give the call's threads ---------------------------------------------------------
def test_a_num_warps_that_gives_the_call_threads(backend):
    assert lower(backend, 256, num_warps=8).num_warps == 8


@pytest.mark.parametrize("num_warps", [4, 16])
def test_a_num_warps_that_does_not_is_an_error_naming_both_numbers(num_warps, backend):
    with pytest.raises(tle.LoweringError) as err:
        lower(backend, 256, num_warps=num_warps)
    msg = str(err.value)
    assert msg.startswith(f"{where('CALL-double')}: "), msg
    assert "asks for 256 threads" in msg and f"num_warps={num_warps} gives the kernel {32 * num_warps}" in msg
    assert "launch with num_warps=8, or leave num_warps out" in msg


def test_a_launch_that_conflicts_fails_before_running(backend):
    x = torch.randn(512)
    with pytest.raises(tle.LoweringError, match="asks for 256 threads, but the launch's num_warps=4"):
        double_kernel[(2,)](x, torch.empty_like(x), FN=DOUBLE[256], BLOCK=256, THREADS=(256,), num_warps=4,
                            backend=backend)


# -- errors ----------------------------------------------------------------------------------------------------
def test_calls_that_disagree_name_both_counts_and_both_sites(backend):
    with pytest.raises(tle.LoweringError) as err:
        double_twice.lower(meta(256), meta(256), FIRST=(256,), SECOND=(128,), grid=(1,), backend=backend)
    msg = str(err.value)
    assert f"at {where('CALL-first')} asks for 256 threads" in msg, msg
    assert f"at {where('CALL-second')} for 128" in msg, msg
    assert err.value.loc.line == line_of("CALL-second")


@pytest.mark.parametrize("threads", [(96,), (100,), (16,), (2048,)])
def test_a_count_no_num_warps_gives(threads, backend):
    with pytest.raises(tle.LoweringError) as err:
        lower(backend, 128, threads=threads)
    msg = str(err.value)
    assert msg.startswith(f"{where('CALL-double')}: "), msg
    assert f"asks for {threads[0]} threads" in msg and "give the call 32 * 2**k threads, at most 1024" in msg


# -- what the command line reports ---------------------------------------------------------------------------------
def test_tle_show_reports_the_call_threads(capsys):
    assert main(["show", f"{HERE}::double_kernel", "--backend", "triton", "--stage", "source"]) == 0
    assert "# launch: num_warps=8, num_stages=3" in capsys.readouterr().out
    if tle.available_backends()["tilelang"] is None:
        assert main(["show", f"{HERE}::double_kernel", "--backend", "tilelang", "--stage", "source"]) == 0
        assert "T.Kernel(2, threads=256)" in capsys.readouterr().out


def test_tle_compare_reports_the_call_threads(capsys):
    assert main(["compare", f"{HERE}::double_kernel", "--no-run", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "launch {num_warps=8, num_stages=3}" in out and "# launch: num_warps=8, num_stages=3" in out
    if tle.available_backends()["tilelang"] is None:
        assert "T.Kernel(2, threads=256)" in out


@pytest.mark.slow
def test_tle_compare_compiles_and_checks_with_the_call_threads(capsys):
    if tle.available_backends()["tilelang"] is not None:
        pytest.skip("TileLang backend unavailable here")
    assert main(["compare", f"{HERE}::double_kernel"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("all lowerings, compiles and checks passed")


@pytest.mark.slow
def test_the_compiled_kernels_have_the_call_threads():
    assert '"ttg.num-warps" = 8' in lower("triton", 256).stage("ttgir")
    if tle.available_backends()["tilelang"] is None:
        assert "__launch_bounds__(256" in lower("tilelang", 256).stage("cuda")
