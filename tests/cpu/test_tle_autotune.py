"""tle.autotune: one config space for every backend with per-backend overrides, tuned per (backend, key
values, dtypes), the choice kept on disk. Triton runs in its interpreter, TileLang through the interpreter of
TileLang programs; timings come from a stub do_bench that reports a made-up time per config."""
import contextlib
import glob
import io
import json
import sys

import pytest
import torch
import triton
import triton.language as tl

import tle
from tle.errors import AutotuneError, BackendUnavailable, LaunchError
from tle.jit import Kernel
from tilelang_oracle import tilelang_through_interpreter


@tle.jit
def _fill(out, n, BLOCK: tl.constexpr):
    # writes its own BLOCK: the output shows which config was launched
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.full((BLOCK,), BLOCK, tl.float32), mask=offs < n)


@tle.jit
def _accumulate(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(out + offs, mask=m) + tl.load(x + offs, mask=m), mask=m)


def _grid(meta):
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


@pytest.fixture(autouse=True)
def _autotune_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TLE_AUTOTUNE_CACHE_DIR", str(tmp_path / "autotune"))
    monkeypatch.delenv("TLE_AUTOTUNE_QUIET", raising=False)
    monkeypatch.delenv("TLE_BACKEND", raising=False)
    return tmp_path / "autotune"


@contextlib.contextmanager
def launching_on(backend):
    """Record every launch's options and constexprs (TileLang ones run through the interpreter)."""
    with contextlib.ExitStack() as stack:
        if backend == "tilelang":
            why = tle.available_backends().get("tilelang")
            if why is not None:
                pytest.skip(f"TileLang backend unavailable here ({why})")
            stack.enter_context(tilelang_through_interpreter())
        seen, inner = [], Kernel._launch

        def spy(kernel, grid, args, kwargs, warmup=False):
            seen.append(dict(kwargs, grid=grid, warmup=warmup))
            return inner(kernel, grid, args, kwargs, warmup)
        Kernel._launch = spy
        try:
            yield seen
        finally:
            Kernel._launch = inner


class Bench:
    """A do_bench that runs the call once and reports the made-up time of the config it launched."""

    def __init__(self, seen, ms_by_block):
        self.seen, self.ms, self.blocks = seen, ms_by_block, []

    def __call__(self, fn, warmup, rep):
        fn()
        block = self.seen[-1]["BLOCK"]
        self.blocks.append(block)
        return [self.ms[block], 0.0, 0.0]      # a sequence, as do_bench with quantiles returns


CONFIGS = [tle.Config({"BLOCK": 16}, num_warps=1), tle.Config({"BLOCK": 64}, num_warps=2),
           tle.Config({"BLOCK": 128}, num_warps=4)]
MS = {16: 3.0, 64: 1.0, 128: 2.0}


def test_picks_the_fastest_config_and_launches_with_it():
    with launching_on("triton") as seen:
        bench = Bench(seen, MS)
        tuned = tle.autotune(configs=CONFIGS, key=["n"], do_bench=bench)(_fill)
        out = torch.zeros(300)
        tuned[_grid](out, 300)
        assert sorted(bench.blocks) == [16, 64, 128]
        assert tuned.best_config.kwargs == {"BLOCK": 64} and tuned.best_config.num_warps == 2
        assert tuned.timings == {CONFIGS[0]: 3.0, CONFIGS[1]: 1.0, CONFIGS[2]: 2.0} and not tuned.failures
        assert (out == 64).all()
        assert seen[-1]["grid"] == (5,) and seen[-1]["num_warps"] == 2 and not seen[-1]["warmup"]
        seen.clear()
        tuned[_grid](out, 300)                       # same key: no tuning, one launch
        assert len(bench.blocks) == 3 and [s["BLOCK"] for s in seen] == [64]
        assert tuned.cache == {("triton", (300,), ("torch.float32",)): CONFIGS[1]}


@pytest.mark.parametrize("backend", ["triton", "tilelang"])
def test_per_backend_overrides_reach_the_launch(backend, monkeypatch):
    configs = [tle.Config({"BLOCK": 64}, num_warps=4, overrides={"tilelang": {"BLOCK": 32, "num_warps": 2}}),
               tle.Config({"BLOCK": 128}, num_warps=8)]
    monkeypatch.setenv("TLE_BACKEND", backend)        # resolved as any tle launch resolves it
    with launching_on(backend) as seen:
        tuned = tle.autotune(configs=configs, key=["n"], do_bench=Bench(seen, {64: 1.0, 32: 1.0, 128: 5.0}))(_fill)
        out = torch.zeros(100)
        tuned[_grid](out, 100)
    block, warps = (32, 2) if backend == "tilelang" else (64, 4)
    assert (out == block).all()
    assert (seen[-1]["backend"], seen[-1]["BLOCK"], seen[-1]["num_warps"]) == (backend, block, warps)
    assert tuned.best_config == tle.Config({"BLOCK": block}, num_warps=warps)
    assert {s["BLOCK"] for s in seen} == {block, 128}


def test_backend_configs_replace_the_space_on_one_backend():
    with launching_on("tilelang") as seen:
        tuned = tle.autotune(configs=CONFIGS, key=["n"], do_bench=Bench(seen, {8: 2.0, 32: 1.0}),
                             backend_configs={"tilelang": [tle.Config({"BLOCK": 8}), tle.Config({"BLOCK": 32})]})(_fill)
        out = torch.zeros(100)
        tuned[_grid](out, 100, backend="tilelang")
    assert {s["BLOCK"] for s in seen} == {8, 32} and (out == 32).all()


def test_choice_is_written_to_disk_and_reused_without_timing(_autotune_env):
    with launching_on("triton") as seen:
        first = Bench(seen, MS)
        tle.autotune(configs=CONFIGS, key=["n"], do_bench=first)(_fill)[_grid](torch.zeros(300), 300)
        [path] = glob.glob(str(_autotune_env / "*" / "*.json"))
        record = json.load(open(path))
        assert record["best"] == {"kwargs": {"BLOCK": 64}, "num_warps": 2, "num_stages": 3}
        assert (record["backend"], record["device"], record["key"]) == ("triton", "cpu", [300])
        assert record["kernel"].endswith("._fill") and set(record["versions"]) == {"tle", "triton", "tilelang"}
        assert len(record["timings_ms"]) == 3
        second = Bench(seen, MS)                      # a fresh autotuner, as in another process
        fresh = tle.autotune(configs=CONFIGS, key=["n"], do_bench=second)(_fill)
        out = torch.zeros(300)
        fresh[_grid](out, 300)
        assert second.blocks == [] and fresh.best_config == CONFIGS[1] and (out == 64).all()
        # another config space is another entry: a stored choice always names a config of the space
        third = Bench(seen, {**MS, 256: 0.5})
        tle.autotune(configs=CONFIGS + [tle.Config({"BLOCK": 256})], key=["n"], do_bench=third)(_fill)[_grid](out, 300)
        assert len(third.blocks) == 4 and (out == 256).all()


def test_cache_is_keyed_by_backend_key_values_and_dtypes(_autotune_env):
    launches = [("triton", 100, torch.float32), ("triton", 200, torch.float32), ("tilelang", 100, torch.float32),
                ("triton", 100, torch.float16)]
    for expected_timings in (3, 0):                   # the second round, with a fresh autotuner, reads the disk
        with launching_on("tilelang") as seen:
            bench = Bench(seen, MS)
            tuned = tle.autotune(configs=CONFIGS, key=["n"], do_bench=bench)(_fill)
            for backend, n, dtype in launches:
                tuned[_grid](torch.zeros(n, dtype=dtype), n, backend=backend)
            assert len(bench.blocks) == expected_timings * len(launches)
    assert len(glob.glob(str(_autotune_env / "*" / "*.json"))) == len(launches)
    assert ("tilelang", (100,), ("torch.float32",)) in tuned.cache


def test_cache_false_writes_nothing(_autotune_env):
    with launching_on("triton") as seen:
        tle.autotune(configs=CONFIGS, key=["n"], do_bench=Bench(seen, MS), cache=False)(_fill)[_grid](
            torch.zeros(64), 64)
    assert not _autotune_env.exists()


def test_cache_folder_defaults_to_tle_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("TLE_AUTOTUNE_CACHE_DIR")
    monkeypatch.setenv("TLE_CACHE_DIR", str(tmp_path / "tle-cache"))
    with launching_on("triton") as seen:
        tle.autotune(configs=CONFIGS, key=["n"], do_bench=Bench(seen, MS))(_fill)[_grid](torch.zeros(64), 64)
    assert glob.glob(str(tmp_path / "tle-cache" / "autotune" / "*" / "triton-*.json"))


def test_a_config_that_fails_to_lower_is_skipped(capsys):
    bad = tle.Config({"BLOCK": 48})                   # tl.arange needs a power of two
    with launching_on("triton") as seen:
        tuned = tle.autotune(configs=[bad] + CONFIGS, key=["n"], do_bench=Bench(seen, MS))(_fill)
        out = torch.zeros(300)
        tuned[_grid](out, 300)
    assert (out == 64).all() and set(tuned.failures) == {bad} and bad not in tuned.timings
    assert "LoweringError" in tuned.failures[bad] and "power of two" in tuned.failures[bad]
    assert "4/4 configs, best 1.000 ms {BLOCK: 64, num_warps: 2, num_stages: 3}, 1 failed" in capsys.readouterr().err


def test_every_config_failing_is_an_error_listing_each():
    with launching_on("triton") as seen:
        tuned = tle.autotune(configs=[tle.Config({"BLOCK": 48}), tle.Config({"BLOCK": 96}, num_warps=8)],
                             key=["n"], do_bench=Bench(seen, MS))(_fill)
        with pytest.raises(AutotuneError, match=r"no config of _fill ran on backend 'triton' for key=\(300\)") as e:
            tuned[_grid](torch.zeros(300), 300)
    msg = str(e.value)
    assert "{BLOCK: 48, num_warps: 4, num_stages: 3}: LoweringError" in msg
    assert "{BLOCK: 96, num_warps: 8, num_stages: 3}: LoweringError" in msg and "arange(0, 96)" in msg


def test_reset_to_zero_and_restore_value():
    x = torch.randn(100)
    with launching_on("triton") as seen:
        # every timed run adds x into out: zeroed before each run (and the real launch), out ends as x
        tuned = tle.autotune(configs=CONFIGS, key=["n"], do_bench=Bench(seen, MS), reset_to_zero=["out"])(_accumulate)
        out = torch.full((100,), 7.0)
        tuned[_grid](x, out, 100)
        torch.testing.assert_close(out, x)
        # restored after each run: only the real launch adds to it
        tuned = tle.autotune(configs=CONFIGS, key=["n"], do_bench=Bench(seen, MS), restore_value=["out"],
                             cache=False)(_accumulate)
        out = torch.full((100,), 7.0)
        tuned[_grid](x, out, 100)
        torch.testing.assert_close(out, x + 7.0)


def test_progress_line_on_stderr_or_quiet(capsys, monkeypatch):
    def tune(n, **kw):
        with launching_on("triton") as seen:
            tle.autotune(configs=CONFIGS, key=["n"], do_bench=Bench(seen, MS), cache=False, **kw)(_fill)[_grid](
                torch.zeros(n), n)
    tune(64)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\r" not in err
    assert err.startswith("tle.autotune _fill[triton] key=(64): 3/3 configs, best 1.000 ms "
                          "{BLOCK: 64, num_warps: 2, num_stages: 3} (")

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    monkeypatch.setattr(sys, "stderr", Terminal())
    tune(65)
    err = sys.stderr.getvalue()
    assert "0/3 configs\x1b[K\r" in err and "2/3 configs, best 1.000 ms" in err and err.endswith("\x1b[K\n")
    monkeypatch.undo()
    tune(66, verbose=False)
    monkeypatch.setenv("TLE_AUTOTUNE_QUIET", "1")
    tune(67)
    assert capsys.readouterr().err == ""


def test_triton_configs_and_a_single_config():
    with launching_on("triton") as seen:
        bench = Bench(seen, MS)
        tuned = tle.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128})],
                             key=["n"], do_bench=bench)(_fill)
        tuned[_grid](torch.zeros(100), 100)
        assert tuned.best_config == tle.Config({"BLOCK": 64}, num_warps=2)
        single = tle.autotune(configs=[tle.Config({"BLOCK": 32})], key=["n"], do_bench=bench)(_fill)
        out = torch.zeros(100)
        single[_grid](out, 100)                       # nothing to choose: no timing
        assert len(bench.blocks) == 2 and (out == 32).all()


def test_warmup_compiles_every_config_without_launching():
    tuned = tle.autotune(configs=CONFIGS, key=["n"], do_bench=lambda *a, **k: pytest.fail("timed"))(_fill)
    out = torch.zeros(100)
    lowered = tuned.run(out, 100, grid=_grid, warmup=True)
    assert ["BLOCK=16" in lowered[0].source, "BLOCK=128" in lowered[2].source] == [True, True]
    assert (out == 0).all() and tuned.cache == {}


def test_stacked_over_triton_heuristics():
    configs = [tle.Config(num_warps=1), tle.Config(num_warps=2)]
    with launching_on("triton") as seen:
        def bench(fn, warmup, rep):
            fn()
            return {1: 2.0, 2: 1.0}[seen[-1]["num_warps"]]
        tuned = tle.autotune(configs=configs, key=["n"], do_bench=bench)(
            triton.heuristics({"BLOCK": lambda args: 64})(_fill))
        out = torch.zeros(100)
        tuned[(2,)](out, 100)
    assert (out == 64).all() and tuned.best_config.num_warps == 2


@pytest.mark.parametrize("kwargs, match", [
    (dict(key=["m"]), r"key names 'm', which is not a parameter of _fill \(out, n, BLOCK\)"),
    (dict(key="n"), r"key must be a list of parameter names, got 'n'"),
    (dict(configs=[]), r"configs is empty"),
    (dict(configs=[tle.Config({"BLOK": 64})]), r"configs\[0\] sets 'BLOK', which is neither a parameter of _fill"),
    (dict(configs=[tle.Config({"BLOCK": 64}, overrides={"tilelang": {"BLOK": 1}})]),
     r"configs\[0\]\.overrides\['tilelang'\] sets 'BLOK'"),
    (dict(backend_configs={"cuda": CONFIGS}), r"backend_configs names backend 'cuda', which is not one of triton"),
    (dict(backend_configs={"tilelang": []}), r"backend_configs\['tilelang'\] is empty"),
    (dict(reset_to_zero=["z"]), r"reset_to_zero names 'z'"),
    (dict(configs=[triton.Config({"BLOCK": 64}, num_ctas=2)]), r"configs\[0\]: num_ctas=2 is not supported"),
])
def test_bad_arguments_are_errors_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tle.autotune(**{"configs": CONFIGS, "key": ["n"], **kwargs})(_fill)


def test_bad_configs_and_launches_are_errors_naming_them():
    with pytest.raises(ValueError, match=r"overrides names backend 'cuda', which is not one of triton, tilelang"):
        tle.Config({"BLOCK": 64}, overrides={"cuda": {"BLOCK": 32}})
    with pytest.raises(TypeError, match=r"tle.autotune decorates a @tle.jit kernel"):
        tle.autotune(configs=CONFIGS, key=["n"])(_grid)
    tuned = tle.autotune(configs=CONFIGS, key=["n"], do_bench=lambda *a, **k: pytest.fail("timed"))(_fill)
    out = torch.zeros(64)
    with pytest.raises(LaunchError, match=r"_fill: 'BLOCK' is chosen by tle.autotune"):
        tuned[_grid](out, 64, BLOCK=64)
    with pytest.raises(LaunchError, match=r"_fill: 'num_warps' is chosen by tle.autotune"):
        tuned[_grid](out, 64, num_warps=8)
    with pytest.raises(BackendUnavailable, match=r"unknown backend 'cuda'"):
        tuned[_grid](out, 64, backend="cuda")
    with pytest.raises(LaunchError, match=r"_fill: missing argument 'n' \(an autotuning key\)"):
        tuned[_grid](out)


@pytest.mark.slow
def test_tilelang_configs_compile_side_by_side_before_timing(monkeypatch):
    """A tuning lowers every config, then compiles them at once in threads (a TileLang build takes TileLang's
    passes and nvcc, seconds to a minute each); a config that fails to compile is reported, the others build."""
    from tle.autotune import _precompiled
    from tle.lowering.tilelang import backend
    if tle.available_backends().get("tilelang") or backend.compile_unavailable_reason():
        pytest.skip("TileLang cannot compile here")
    threads, real = set(), backend.compile_prim_func

    def recording(*args, **kwargs):
        import threading
        threads.add(threading.current_thread().name)
        return real(*args, **kwargs)
    monkeypatch.setattr(backend, "compile_prim_func", recording)
    out = torch.zeros(100)
    lowerings = {c: _fill.lower(out, 100, grid=(1,), backend="tilelang", num_warps=c.num_warps, **c.kwargs)
                 for c in CONFIGS}
    broken = lowerings[CONFIGS[0]].compiled

    def fails():
        raise RuntimeError("nvcc: out of memory")
    monkeypatch.setattr(broken, "precompile", fails)
    failed = _precompiled(lowerings)
    assert list(failed) == [CONFIGS[0]] and "out of memory" in str(failed[CONFIGS[0]])
    for c in CONFIGS[1:]:
        assert lowerings[c].compiled._kernel is not None and "__global__" in lowerings[c].stage("cuda")
    assert len(threads) == 2 and all(t.startswith("tle-autotune") for t in threads)
    assert _precompiled({CONFIGS[1]: lowerings[CONFIGS[1]]}) == {}      # one config: left to its launch


def test_a_triton_config_means_what_it_means_in_triton():
    """triton.Config({..., "num_warps": 8}) launches with 4 warps under Triton's autotune (the Config's attribute,
    4 unless given, wins over its kwargs): the same here, said in a warning."""
    with pytest.warns(UserWarning, match=r"launches with num_warps=4, as in Triton: .*kwargs' \(num_warps=8\)"):
        tuned = tle.autotune(configs=[triton.Config({"BLOCK": 64, "num_warps": 8, "num_stages": 3})], key=["n"])(_fill)
    assert tuned.configs == [tle.Config({"BLOCK": 64}, num_warps=4, num_stages=3)]
    same = tle.autotune(configs=[triton.Config({"BLOCK": 64, "num_warps": 8}, num_warps=8)], key=["n"])(_fill)
    assert same.configs[0].num_warps == 8
    with pytest.raises(ValueError, match=r"num_warps is 8 in kwargs and 4 as the option; give it once"):
        tle.Config({"BLOCK": 64, "num_warps": 8}, num_warps=4)       # a tle.Config takes no silent winner
