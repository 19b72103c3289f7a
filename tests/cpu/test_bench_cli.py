"""tle-bench without a GPU: the command line and its errors, --list, the exit without CUDA, the records merge,
the page (its Notes kept), the plot, and the measuring loop run end to end on the CPU (`--device cpu`, a
wall-clock dry run) over small operators defined here: a right and a wrong tle backend, peers that are
missing or lack the case, an operator with its own check, a forward-only one, one counting its flops
(TFLOP/s), one with a sweep (--sweep: its table and plot against the swept size); and once over rms_norm."""
import dataclasses
import json
import os

import pytest
import torch

from tle.benchmark import cli, page, plot, records
from tle.benchmark.measure import Case, Row
from tle.errors import BackendUnavailable
from tle.oplib.operator import BenchSpec, Operator, Sample, Sweep


# -- small operators ------------------------------------------------------------------------------------------
def _scale(x, w, *, backend=None):
    y = x * w
    return y + 1.0 if backend == "tilelang" else y          # "tilelang" here is a wrong implementation


def _make(shape, dtype, device):
    m, n = shape
    return Sample((torch.randn(m, n, dtype=dtype, device=device), torch.rand(n, dtype=dtype, device=device) + 0.5))


def _bytes(sample, mode):
    x = sample.args[0]
    return (2 if mode == "fwd" else 3) * x.numel() * x.element_size()


def _eager(sample):
    x, w = sample.args
    return lambda x=x, w=w: x * w


def _missing_peer(sample):
    raise ImportError("No module named 'some_peer_package'")


def _dropout(x, *, backend=None):
    keep = torch.rand_like(x) >= 0.5
    return x * keep * (3.0 if backend == "tilelang" else 2.0)


def _dropout_check(sample, outputs, grads, upstream):
    """Every output element is 0 or 2x its input; every gradient element is 0 or 2x its upstream gradient."""
    x, y = sample.args[0].detach().float(), outputs[0].detach().float()
    kept = y != 0
    assert torch.equal(y[kept], 2 * x[kept]), "an output element is neither 0 nor 2x"
    for g in grads:
        u = upstream[0].float()
        assert torch.equal(g.float()[kept], 2 * u[kept]) and not g[~kept].any(), "a gradient element is wrong"
    return 0.0


def _mm_make(shape, dtype, device):
    m, n, k = shape
    return Sample((torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, n, dtype=dtype, device=device)))


def _mm_flops(sample, mode):
    """2mnk a product: one in the forward, two in the backward (dx = dy w^T, dw = x^T dy)."""
    (m, k), n = sample.args[0].shape, sample.args[1].shape[1]
    return (2 if mode == "fwd" else 4) * m * n * k


def _operators():
    scale = Operator("scale", fn=_scale, reference=lambda x, w: x * w, samples=lambda d, t: [], grad_inputs=(0, 1),
                     bench=BenchSpec(shapes=[(8, 16), (4, 32)], make=_make, bytes=_bytes, eager=_eager,
                                     peers={"good": lambda s: (lambda: s.args[0] * s.args[1]),
                                            "missing": _missing_peer, "absent": lambda s: None},
                                     shape_help="ROWSxCOLS"))
    noisy = Operator("noisy", fn=_dropout, reference=lambda x: x, samples=lambda d, t: [], grad_inputs=(0,),
                     bench=BenchSpec(shapes=[(8, 16)], make=lambda sh, dt, dev: Sample((torch.randn(*sh, dtype=dt),)),
                                     bytes=lambda s, m: 2 * s.args[0].numel() * s.args[0].element_size(),
                                     eager=lambda s: (lambda x=s.args[0]: _dropout(x)), check=_dropout_check))
    fwd_only = Operator("fwd_only", fn=lambda x, *, backend=None: x.sum(-1), reference=lambda x: x.sum(-1),
                        samples=lambda d, t: [], forward_only="a reduction kept forward-only here",
                        bench=BenchSpec(shapes=[(8, 16)], make=lambda sh, dt, dev: Sample((torch.randn(*sh, dtype=dt),)),
                                        bytes=lambda s, m: s.args[0].numel() * s.args[0].element_size(),
                                        eager=lambda s: (lambda x=s.args[0]: x.sum(-1))))
    plain = Operator("plain", fn=_scale, reference=lambda x, w: x * w, samples=lambda d, t: [])
    matmul = Operator("matmul", fn=lambda x, w, *, backend=None: x @ w, reference=lambda x, w: x @ w,
                      samples=lambda d, t: [], grad_inputs=(0, 1),
                      bench=BenchSpec(shapes=[(8, 16, 32), (4, 8, 64)], make=_mm_make, flops=_mm_flops,
                                      eager=lambda s: (lambda x=s.args[0], w=s.args[1]: x @ w), shape_help="MxNxK"))
    return {op.name: op for op in (scale, noisy, fwd_only, plain, matmul)}


OPS = _operators()


def run(args, tmp_path, operators=OPS):
    return cli.main(["--device", "cpu", "--no-compile", "--out", str(tmp_path), *args], operators=operators)


# -- the command line ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["--operator", "nope"], "unknown operator 'nope'"),
    (["--operator", "plain"], "'plain' has no benchmark spec"),
    ([], "name an operator"),
    (["--all", "--operator", "scale"], "not allowed with"),
    (["--operator", "scale", "--backends", "triton,cuda"], "unknown backend 'cuda'"),
    (["--operator", "scale", "--dtype", "int8"], "unknown dtype 'int8'"),
    (["--operator", "scale", "--mode", "fwd,sideways"], "unknown mode 'sideways'"),
    (["--operator", "scale", "--shapes", "32768x"], "malformed shape '32768x'"),
    (["--operator", "scale", "--shapes", "64x0"], "malformed shape '64x0'"),
    (["--operator", "scale", "--shapes", "4x4,4x4x4"], "shape '4x4x4' has 3 parts; scale takes 2 (ROWSxCOLS)"),
    (["--operator", "scale", "--device", "tpu"], "unknown device 'tpu'"),
    (["--operator", "scale", "--warm", "-1"], "--warm -1: the number of processes"),
])
def test_usage_errors_name_the_culprit(args, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(args, operators=OPS)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "tle-bench: error:" in err and message in err


def test_parsing():
    a = cli.parse_args(["--operator", "scale", "--operator", "noisy", "--operator", "scale", "--backends",
                        "tilelang, torch,tilelang", "--shapes", "8x16,2x3", "--mode", "full,fwd",
                        "--dtype", "fp16"], OPS)
    assert a.operators == ["scale", "noisy"]
    assert a.backend_list == ["tilelang", "torch"]
    assert a.modes == ["fwd", "full"]                       # in the order fwd, bwd, full
    assert a.torch_dtype == torch.float16
    assert a.shape_list == [(8, 16), (2, 3)]
    assert cli.parse_shape("32768x8192xmean") == (32768, 8192, "mean")   # a word part stays a string
    assert cli.parse_shape("1024x64x32xmax") == (1024, 64, 32, "max")     # an x inside a word does not split
    for bad in ("x8", "8x", "8xx8", "mean", "8x-1", "8 x 8"):
        with pytest.raises(ValueError):
            cli.parse_shape(bad)
    a = cli.parse_args(["--all"], OPS)
    assert a.operators == ["fwd_only", "matmul", "noisy", "scale"]   # those with a BenchSpec
    assert a.backend_list == ["triton", "tilelang"] and a.modes == ["fwd", "bwd"] and a.torch_dtype == torch.bfloat16
    cube = dataclasses.replace(OPS["fwd_only"], name="cube", bench=dataclasses.replace(
        OPS["fwd_only"].bench, shapes=[(2, 3, 4)], shape_help="AxBxC"))
    a = cli.parse_args(["--all", "--shapes", "8x16"], {**OPS, "cube": cube})
    assert a.operators == ["fwd_only", "noisy", "scale"]   # --all: the operators the shapes fit
    assert a.skipped == ["shape '8x16' has 2 parts; cube takes 3 (AxBxC)",
                         "shape '8x16' has 2 parts; matmul takes 3 (MxNxK)"]


def test_list_without_cuda(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["--list"], operators=OPS) == 0
    out = capsys.readouterr().out
    assert "scale  ROWSxCOLS: 8x16, 4x32" in out and "good" in out and "plain  (no benchmark spec)" in out
    assert "forward only" in out


def test_list_of_the_real_operators(capsys):
    assert cli.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "rms_norm  ROWSxCOLS: 32768x8192" in out and "liger" in out


def test_exit_2_without_cuda(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["--operator", "scale", "--out", str(tmp_path)], operators=OPS) == 2
    assert "benchmarks run on a GPU machine" in capsys.readouterr().err
    assert not os.listdir(tmp_path)


# -- records, page, plot ------------------------------------------------------------------------------------------
def _rec(shape, mode, backend, value, metric="TB/s", commit="c1"):
    return dict(op="scale", shape=shape, mode=mode, backend=backend, metric=metric, value=value, gpu="G",
                commit=commit, date="2026-01-01", versions={"torch": "x"})


def test_records_merge_replaces_same_key_keeps_others(tmp_path):
    old = [_rec("8x16 bf16", "fwd", "triton", 1.0), _rec("8x16 bf16", "fwd", "triton", 0.5, "ms"),
           _rec("8x16 bf16", "bwd", "triton", 2.0), _rec("4x32 bf16", "fwd", "triton", 3.0),
           _rec("8x16 bf16", "fwd", "liger", 4.0), _rec("8x16 bf16", "fwd", "tilelang", 5.0)]
    new = [_rec("8x16 bf16", "fwd", "triton", 9.0, commit="c2")]
    merged = records.merge(old, new, drop={("scale", "8x16 bf16", "fwd", "tilelang")})
    assert [(r["mode"], r["shape"], r["backend"], r["metric"], r["value"]) for r in merged] == [
        ("bwd", "8x16 bf16", "triton", "TB/s", 2.0), ("fwd", "4x32 bf16", "triton", "TB/s", 3.0),
        ("fwd", "8x16 bf16", "liger", "TB/s", 4.0), ("fwd", "8x16 bf16", "triton", "TB/s", 9.0)]
    path = str(tmp_path / "scale.json")
    records.save(path, old)
    case = Case("scale", "8x16 bf16", "fwd", 100, [Row("triton", "tle", ms=0.5, tbs=2e-7),
                                                   Row("tilelang", "tle", status="fail", note="max error 1")])
    merged = records.update(path, [case], {"gpu": "G", "commit": "c2", "date": "d", "versions": {}})
    assert merged == records.load(path)
    mine = {(r["shape"], r["mode"], r["backend"], r["metric"]): r["value"] for r in merged}
    assert mine[("8x16 bf16", "fwd", "triton", "ms")] == 0.5 and mine[("8x16 bf16", "fwd", "triton", "TB/s")] == 2e-7
    assert ("8x16 bf16", "fwd", "tilelang", "TB/s") not in mine          # a failed implementation loses its figure
    assert mine[("8x16 bf16", "fwd", "liger", "TB/s")] == 4.0 and mine[("8x16 bf16", "bwd", "triton", "TB/s")] == 2.0
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        records.load(str(tmp_path / "bad.json"))


def test_page_keeps_the_notes_section(tmp_path):
    path = str(tmp_path / "scale.md")
    with open(path, "w") as f:
        f.write("# scale: old page\n\n## fwd\n\nold table\n\n## Notes\n\nThe triton row is bound by the copy.\n\n"
                "### detail\n\nkept too\n\n## Appendix\n\nnot kept\n")
    obs = {"gpu": "NVIDIA H200", "commit": "c2", "date": "2026-02-02", "versions": {"torch": "2.11",
                                                                                    "liger-kernel": "0.8.5"}}
    recs = [_rec("8x16 bf16", "fwd", "torch", 2.0), _rec("8x16 bf16", "fwd", "triton", 4.0),
            _rec("8x16 bf16", "bwd", "torch", 1.0, commit="c2"), _rec("8x16 bf16", "bwd", "copy", 5.0, commit="c2")]
    for r in recs[2:]:
        r["date"], r["gpu"] = "2026-02-02", "NVIDIA H200"
    cases = [Case("scale", "8x16 bf16", "bwd", 100, [Row("torch", "anchor", ms=1, tbs=1.0, error=0.01),
                                                     Row("tilelang", "tle", "fail", note="output 0: max error 1"),
                                                     Row("copy", "copy", ms=0.2, tbs=5.0)])]
    page.write(path, OPS["scale"], "tle-bench --operator scale", obs, recs, cases, plots={"bwd": "scale-bwd.png"})
    text = open(path).read()
    assert "`tle-bench --operator scale`" in text
    assert "backends: torch (the reference), triton, tilelang" in text and "bf16" in text
    assert "forward and backward (gradients of x, w)" in text
    assert "rtol 0.0078125 and atol 0.00390625 x max|ref|" in text                 # the criteria for bf16
    assert "date 2026-02-02, commit c2, GPU NVIDIA H200" in text and "liger-kernel 0.8.5" in text
    assert "| triton | 4 (2.00x) * |" in text                                      # an earlier run's, marked
    assert "| tilelang | FAIL |" in text and "output 0: max error 1" in text
    assert "| copy (ceiling) | 5 (5.00x) |" in text and "![scale bwd](scale-bwd.png)" in text
    assert text.count("## Notes") == 1 and text.rstrip().endswith("kept too")
    assert "The triton row is bound by the copy." in text and "not kept" not in text and "old table" not in text
    assert page.kept_notes(text).startswith("## Notes\n\nThe triton row")
    os.remove(path)
    page.write(path, OPS["scale"], "tle-bench", obs, recs, cases)
    assert page.NOTES_PLACEHOLDER in open(path).read()                             # a fresh page has the heading


def test_full_mode_records_and_shows_a_steps_peak_memory():
    obs = {"gpu": "NVIDIA H200", "commit": "c3", "date": "2026-03-03", "versions": {}}
    cases = [Case("scale", "8x16 bf16", "full", 100, [Row("torch", "anchor", ms=2, tbs=1.0, peak_gb=1.5),
                                                      Row("triton", "tle", ms=1, tbs=2.0, peak_gb=0.75)])]
    recs = records.from_cases(cases, obs)
    assert {(r["backend"], r["value"]) for r in recs if r["metric"] == "peak GB"} == {("torch", 1.5), ("triton", 0.75)}
    text = page.render(OPS["scale"], "tle-bench", obs, recs, cases)
    assert "peak memory of a step beyond what was allocated before it" in text
    assert "| torch (anchor) | 1.5 |" in text and "| triton | 0.75 |" in text       # no ratio: lower is better
    fwd = [Case("scale", "8x16 bf16", "fwd", 100, [Row("torch", "anchor", ms=2, tbs=1.0)])]
    assert "peak memory" not in page.render(OPS["scale"], "tle-bench", obs, records.from_cases(fwd, obs), fwd)


def test_page_states_the_operators_own_check():
    text = page.render(OPS["noisy"], "tle-bench", {"gpu": "g"}, [], [Case("noisy", "8x16 bf16", "fwd")])
    assert "the operator's own check (BenchSpec.check): Every output element is 0 or 2x its input" in text


def test_plot_from_synthetic_records(tmp_path):
    pytest.importorskip("matplotlib")
    recs = [_rec(s, "fwd", b, v) for s in ("8x16 bf16", "4x32 bf16") for b, v in
            (("torch", 2.0), ("torch.compile", 3.0), ("triton", 3.5), ("copy", 4.0))]
    recs.append(_rec("4x32 bf16", "fwd", "liger", 3.2))                                # a line with a gap
    recs.append(_rec("8x16 bf16", "fwd", "torch", 0.1, metric="ms"))
    path = str(tmp_path / "scale-fwd.png")
    assert plot.write(path, "scale", "fwd", recs)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert not plot.write(str(tmp_path / "scale-bwd.png"), "scale", "bwd", recs)       # nothing in that mode
    assert not os.path.exists(tmp_path / "scale-bwd.png")


# -- the measuring loop on the CPU ------------------------------------------------------------------------------------
def _values(path):
    return {(r["shape"], r["mode"], r["backend"], r["metric"]): r["value"] for r in json.load(open(path))}


def test_dry_run_checks_then_times(tmp_path, capsys):
    rc = run(["--operator", "scale", "--backends", "triton,tilelang", "--mode", "fwd,bwd,full"], tmp_path)
    assert rc == 1                                          # the wrong tle backend fails the run
    out, err = capsys.readouterr()
    assert "## scale fwd: TB/s (ratio to torch)" in out and "| tilelang | FAIL | FAIL |" in out
    assert "missing (every shape): skipped: not installed" in out and "absent (every shape): skipped: lacks" in out
    assert "6/6" in err and "tilelang: FAIL output 0: max error" in err   # the progress bar, the failure
    recs = json.load(open(tmp_path / "scale.json"))
    assert {r["op"] for r in recs} == {"scale"}
    assert {r["mode"] for r in recs} == {"fwd", "bwd", "full"} and {r["metric"] for r in recs} == {"TB/s", "ms"}
    assert {r["backend"] for r in recs} == {"torch", "good", "triton", "copy"}   # no figure for a wrong one
    assert {r["shape"] for r in recs} == {"8x16 bf16", "4x32 bf16"}
    assert all(set(r) == {"op", "shape", "mode", "backend", "metric", "value", "gpu", "commit", "date", "versions"}
               for r in recs)
    assert recs[0]["gpu"] == "cpu" and {"torch", "triton", "tilelang"} <= set(recs[0]["versions"])
    v = _values(tmp_path / "scale.json")
    for mode, n in (("fwd", 2), ("bwd", 3), ("full", 5)):   # TB/s from BenchSpec.bytes (full: fwd + bwd)
        ms = v[("8x16 bf16", mode, "triton", "ms")]
        assert v[("8x16 bf16", mode, "triton", "TB/s")] == pytest.approx(n * 8 * 16 * 2 / (ms * 1e-3) / 1e12, rel=2e-3)
    text = open(tmp_path / "scale.md").read()
    assert "## fwd" in text and "## bwd" in text and "## full" in text and "| tilelang | FAIL | FAIL |" in text
    assert "wall-clock medians on the CPU: a dry run" in text
    if plot.available():
        assert {"scale-fwd.png", "scale-bwd.png", "scale-full.png"} <= set(os.listdir(tmp_path))
        assert "![scale fwd](scale-fwd.png)" in text

    # a rerun of one mode with the torch backend: its records replace those of the same keys, the rest stay
    with open(tmp_path / "scale.md", "a") as f:
        f.write("\nA hand-written line.\n")
    assert run(["--operator", "scale", "--backends", "torch", "--mode", "bwd", "--shapes", "8x16", "--no-peers"],
               tmp_path) == 0
    v2 = _values(tmp_path / "scale.json")
    assert ("8x16 bf16", "bwd", "tle torch", "TB/s") in v2 and ("4x32 bf16", "full", "good", "TB/s") in v2
    assert v2[("8x16 bf16", "fwd", "triton", "ms")] == v[("8x16 bf16", "fwd", "triton", "ms")]
    text = open(tmp_path / "scale.md").read()
    assert text.rstrip().endswith("A hand-written line.") and "| tle torch |" in text
    assert "--mode bwd --shapes 8x16 --no-peers" in text


def test_dry_run_own_check_and_forward_only(tmp_path, capsys):
    rc = run(["--operator", "noisy", "--operator", "fwd_only", "--backends", "triton,tilelang"], tmp_path)
    assert rc == 1
    out = capsys.readouterr().out
    assert "| triton |" in out and "| tilelang | FAIL |" in out and "neither 0 nor 2x" in out
    assert "8x16 bf16: forward only: a reduction kept forward-only here" in out
    noisy = {(r["mode"], r["backend"]) for r in json.load(open(tmp_path / "noisy.json"))}
    assert {("fwd", "triton"), ("bwd", "triton"), ("fwd", "torch")} <= noisy and ("fwd", "tilelang") not in noisy
    assert {r["mode"] for r in json.load(open(tmp_path / "fwd_only.json"))} == {"fwd"}


def test_dry_run_writes_only_where_told(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--device", "cpu", "--no-compile", "--operator", "scale", "--mode", "fwd", "--shapes", "8x16",
                     "--backends", "triton"], operators=OPS) == 0
    assert "| triton |" in capsys.readouterr().out and not os.listdir(tmp_path)
    (tmp_path / "scale.json").write_text("[{broken")
    assert run(["--operator", "scale"], tmp_path) == 2      # said before measuring, the file left as it was
    assert "scale.json is not valid JSON" in capsys.readouterr().err
    assert (tmp_path / "scale.json").read_text() == "[{broken"


def test_dry_run_in_tflops(tmp_path, capsys):
    # an operator counting its flops: TFLOP/s records and tables, no copy (no bandwidth ceiling)
    rc = run(["--operator", "matmul", "--backends", "triton", "--mode", "fwd,bwd,full"], tmp_path)
    assert rc == 0
    out = capsys.readouterr().out
    assert "## matmul fwd: TFLOP/s (ratio to torch)" in out and "TB/s" not in out and "copy" not in out
    recs = json.load(open(tmp_path / "matmul.json"))
    assert {r["metric"] for r in recs} == {"TFLOP/s", "ms"}
    assert {r["backend"] for r in recs} == {"torch", "triton"}
    v = _values(tmp_path / "matmul.json")
    for mode, n in (("fwd", 2), ("bwd", 4), ("full", 6)):   # TFLOP/s from BenchSpec.flops (full: fwd + bwd)
        ms = v[("8x16x32 bf16", mode, "triton", "ms")]
        assert v[("8x16x32 bf16", mode, "triton", "TFLOP/s")] == pytest.approx(n * 8 * 16 * 32 / ms / 1e9, rel=2e-3)
    text = open(tmp_path / "matmul.md").read()
    assert "TFLOP/s (ratio to torch):" in text and "TFLOP/s counts the operator's BenchSpec.flops" in text
    assert "| triton | " in text and "x) |" in text                                 # a ratio to the anchor
    assert "TB/s" not in text and "copy" not in text
    if plot.available():
        assert {"matmul-fwd.png", "matmul-bwd.png", "matmul-full.png"} <= set(os.listdir(tmp_path))
        assert "![matmul fwd](matmul-fwd.png)" in text


def test_a_bench_spec_counts_bytes_or_flops():
    with pytest.raises(ValueError, match="bytes .* or flops"):
        BenchSpec(shapes=[(8, 16)], make=_make, eager=_eager)


def test_compile_errors_become_a_row(tmp_path, capsys, monkeypatch):
    def broken_compile(fn, **kw):
        def run_it(*a, **k):
            raise RuntimeError("inductor: no C++ compiler here")
        return run_it
    monkeypatch.setattr(torch, "compile", broken_compile)
    rc = cli.main(["--device", "cpu", "--out", str(tmp_path), "--operator", "scale", "--backends", "triton",
                   "--mode", "fwd", "--shapes", "8x16"], operators=OPS)
    assert rc == 0                                          # a peer's failure is noted, not fatal
    out = capsys.readouterr().out
    assert "| torch.compile | error |" in out and "RuntimeError: inductor: no C++ compiler here" in out


def test_dry_run_of_rms_norm(tmp_path, capsys):
    rc = cli.main(["--device", "cpu", "--out", str(tmp_path), "--operator", "rms_norm", "--backends", "torch",
                   "--shapes", "16x64", "--mode", "fwd,bwd", "--no-compile", "--dtype", "fp32"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "| tle torch |" in out and "FAIL" not in out
    v = _values(tmp_path / "rms_norm.json")
    assert {("16x64 fp32", m, b, "TB/s") for m in ("fwd", "bwd") for b in ("torch", "tle torch", "copy")} <= set(v)


def test_support_lines_name_each_gradient_once():
    # layer_norm differentiates weight given by position or by keyword: the page names it once
    from tle.benchmark.page import support_lines
    op = Operator("scale", fn=_scale, reference=lambda x, w: x * w, samples=lambda d, t: [], grad_inputs=(0, 1, "w"))
    assert "- forward and backward (gradients of x, w)" in support_lines(op)


# -- a sweep: one size taken over several values --------------------------------------------------------------------
SWEPT = {**OPS, "swept": dataclasses.replace(OPS["matmul"], name="swept", bench=dataclasses.replace(
    OPS["matmul"].bench, shapes=[(8, 16, 32)], sweep=Sweep("N", (8, 16, 32), 1, (8, 16, 32))))}


def test_sweep_shapes_and_its_errors(capsys):
    sweep = SWEPT["swept"].bench.sweep
    assert sweep.shapes() == [(8, 8, 32), (8, 16, 32), (8, 32, 32)] and sweep.held() == "8xNx32"
    with pytest.raises(ValueError, match="outside the shape"):
        Sweep("N", (8, 16), 2, (8, 16))
    with pytest.raises(ValueError, match="distinct and ascending"):
        Sweep("N", (8, 16), 1, (16, 8))
    for args, message in ((["--operator", "matmul", "--sweep"], "matmul has no sweep (BenchSpec.sweep)"),
                          (["--operator", "swept", "--sweep", "--shapes", "8x8x8"], "not with --shapes")):
        with pytest.raises(SystemExit) as e:
            cli.main(args, operators=SWEPT)
        assert e.value.code == 2 and message in capsys.readouterr().err
    a = cli.parse_args(["--all", "--sweep"], SWEPT)
    assert a.operators == ["swept"] and "scale has no sweep (BenchSpec.sweep)" in a.skipped


def test_dry_run_of_a_sweep(tmp_path, capsys):
    # the default shape alone is one point of the sweep: no section for it
    assert run(["--operator", "swept", "--backends", "triton", "--mode", "fwd"], tmp_path, SWEPT) == 0
    assert "## Against N" not in open(tmp_path / "swept.md").read()
    assert run(["--operator", "swept", "--sweep", "--backends", "triton", "--mode", "fwd,bwd"], tmp_path,
               SWEPT) == 0
    assert {r["shape"] for r in json.load(open(tmp_path / "swept.json"))} == {"8x8x32 bf16", "8x16x32 bf16",
                                                                             "8x32x32 bf16"}
    # the default shapes' run after it: the main tables hold the default shapes, the sweep its own section
    assert run(["--operator", "swept", "--backends", "triton", "--mode", "fwd,bwd"], tmp_path, SWEPT) == 0
    text = open(tmp_path / "swept.md").read()
    main, swept = text.split("## Against N")
    assert "- sweep (`--sweep`): 8xNx32, N = 8, 16, 32" in main
    assert "| implementation | 8x16x32 bf16 |" in main and "8x8x32" not in main.split("## Support")[1]
    assert "Shapes 8xNx32, N from 8 to 32 (`tle-bench --sweep`)." in swept
    assert swept.count("| implementation | 8x8x32 bf16 | 8x16x32 bf16 | 8x32x32 bf16 |") == 4   # ms, TFLOP/s; 2 modes
    assert "### fwd" in swept and "### bwd" in swept and swept.index("## Notes") > swept.index("### bwd")
    if plot.available():
        assert {"swept-fwd-N.png", "swept-bwd-N.png"} <= set(os.listdir(tmp_path))
        assert "![swept fwd against N](swept-fwd-N.png)" in swept
        with open(tmp_path / "swept-fwd-N.png", "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_sweep_plot_needs_its_records(tmp_path):
    pytest.importorskip("matplotlib")
    sweep = SWEPT["swept"].bench.sweep
    labels = [f"{'x'.join(map(str, s))} bf16" for s in sweep.shapes()]
    recs = [dict(_rec(s, "fwd", "triton", 1.0 + i, metric="ms"), op="swept") for i, s in enumerate(labels)]
    assert not plot.write_sweep(str(tmp_path / "a.png"), "swept", "bwd", recs, labels, sweep, "TFLOP/s")
    assert not os.path.exists(tmp_path / "a.png")
    assert plot.write_sweep(str(tmp_path / "b.png"), "swept", "fwd", recs, labels, sweep, "TFLOP/s")


def test_warm_compiles_each_kernel_run_first_in_other_processes(tmp_path, capsys):
    """--warm N: each (operator, shape, kernel backend) runs once, forward and backward, in spawned processes
    before the timed run (here Triton's interpreter on the CPU, as this suite runs it); the torch backend has
    nothing to compile."""
    rc = cli.main(["--device", "cpu", "--out", str(tmp_path), "--operator", "rms_norm", "--backends", "triton,torch",
                   "--shapes", "16x64,8x32", "--mode", "fwd,bwd", "--no-compile", "--dtype", "fp32", "--warm", "2"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "compiling 2 operator runs in 2 processes first" in err
    assert "rms_norm 16x64 triton: compiled" in err and "rms_norm 8x32 triton: compiled" in err


def test_warm_tasks_and_a_failing_one():
    from tle.benchmark import warm
    from tle.ops import OPERATORS
    op = OPERATORS["rms_norm"]
    todo = warm.tasks([(op, [(16, 64)])], ["torch", "triton", "tilelang"], torch.float32, torch.device("cpu"), ["fwd"])
    assert [str(t) for t in todo] == ["rms_norm 16x64 triton", "rms_norm 16x64 tilelang"]
    assert not todo[0].backward
    # a run that raises is a line for the timed run to report, not an error here
    line = warm.run_task(warm.Task("rms_norm", (16, 64), "tilelang", torch.float32, "meta", False))
    assert line.startswith("rms_norm 16x64 tilelang: ") and "compiled" not in line


# -- the dry run's shapes, and backends that cannot run here ---------------------------------------------------
def _scale_on_cuda_only(x, w, *, backend=None):
    if backend == "tilelang":
        raise BackendUnavailable("tle.ops.scale: backend 'tilelang' cannot run on cpu here (CUDA tensors only); "
                                 "usable: torch")
    return x * w


def test_an_unavailable_backend_has_its_own_cell_and_exit_code(tmp_path, capsys):
    op = dataclasses.replace(OPS["scale"], name="cuda_only", fn=_scale_on_cuda_only)
    rc = run(["--operator", "cuda_only", "--backends", "triton,tilelang", "--mode", "fwd,bwd", "--no-peers"],
             tmp_path, {"cuda_only": op})
    assert rc == cli.EXIT_UNAVAILABLE == 3                  # nothing failed; one backend asked for cannot run here
    out, err = capsys.readouterr()
    assert "| tilelang | unavailable | unavailable |" in out and "FAIL" not in out and "| error |" not in out
    assert "tilelang (every shape): unavailable: tle.ops.scale: backend 'tilelang' cannot run on cpu here" in out
    assert "tle-bench: unavailable: tle.ops.scale: backend 'tilelang' cannot run on cpu here (CUDA tensors only)" \
        in err and "usable:" not in err
    assert {r["backend"] for r in json.load(open(tmp_path / "cuda_only.json"))} == {"torch", "triton", "copy"}
    # a wrong backend beside an unavailable one: the failure's code
    wrong = dataclasses.replace(op, fn=lambda x, w, *, backend=None: _scale_on_cuda_only(x, w, backend=backend) + 1)
    assert run(["--operator", "cuda_only", "--backends", "triton,tilelang", "--mode", "fwd"], tmp_path,
               {"cuda_only": wrong}) == 1


def test_the_dry_run_takes_the_small_shapes(tmp_path, capsys):
    spec = dataclasses.replace(OPS["scale"].bench, dry_shapes=[(2, 8)])
    op = dataclasses.replace(OPS["scale"], bench=spec)
    assert run(["--operator", "scale", "--backends", "triton", "--mode", "fwd", "--no-peers"], tmp_path,
               {"scale": op}) == 0
    out = capsys.readouterr().out
    assert "| implementation | 2x8 bf16 |" in out             # not the GPU shapes 8x16, 4x32
    assert run(["--operator", "scale", "--backends", "triton", "--mode", "fwd", "--shapes", "4x4"], tmp_path,
               {"scale": op}) == 0
    assert "| implementation | 4x4 bf16 |" in capsys.readouterr().out


def test_every_operator_has_small_dry_run_shapes():
    from tle.ops import OPERATORS
    for name, op in OPERATORS.items():
        if op.bench is None:
            continue
        assert op.bench.dry_shapes, f"{name}: no dry-run shapes"
        ranks = {len(s) for s in op.bench.shapes}
        for shape in op.bench.dry_shapes:
            assert len(shape) in ranks, f"{name}: dry-run shape {shape} is not of the form of {op.bench.shapes}"
            sample = op.bench.make(shape, torch.float32, torch.device("cpu"))
            tensors = [t for t in (*sample.args, *sample.kwargs.values()) if isinstance(t, torch.Tensor)]
            size = sum(t.numel() * t.element_size() for t in tensors)
            assert 0 < size <= 4 << 20, f"{name}: dry-run shape {shape} makes {size} bytes of inputs"


def test_the_command_on_a_machine_without_a_gpu(tmp_path):
    """`tle-bench --device cpu` as a user starts it (no TRITON_INTERPRET): it starts again with it set, runs
    rms_norm's dry-run shapes with the default backends that run on the CPU (Triton in its interpreter; TileLang
    left out, said on stderr): exit 0."""
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run([sys.executable, "-m", "tle.benchmark", "--device", "cpu", "--operator", "rms_norm",
                        "--no-compile", "--no-peers", "--mode", "fwd"], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "starting again with TRITON_INTERPRET=1" in p.stderr
    assert "tle-bench: --device cpu: backend tilelang left out (TileLang kernels run on CUDA tensors only" in p.stderr
    assert "| implementation | 64x256 bf16 | 32x512 bf16 |" in p.stdout
    triton_row = next(line for line in p.stdout.splitlines() if line.startswith("| triton |"))
    assert "error" not in triton_row and "unavailable" not in triton_row and "FAIL" not in triton_row
    assert "| tilelang |" not in p.stdout


def test_the_default_backends_on_the_cpu_are_those_that_run_there(tmp_path, capsys):
    """In this process Triton runs in its interpreter (tests/cpu sets TRITON_INTERPRET): the default backends
    on the CPU are triton alone; named, tilelang gives its "unavailable" cells and exit code 3."""
    args = ["--operator", "rms_norm", "--no-compile", "--no-peers", "--mode", "fwd", "--shapes", "4x32"]
    assert cli.main(["--device", "cpu", *args]) == 0
    out, err = capsys.readouterr()
    assert "| triton |" in out and "| tilelang |" not in out and "backend tilelang left out" in err
    assert cli.main(["--device", "cpu", *args, "--backends", "triton,tilelang"]) == 3
    out, err = capsys.readouterr()
    assert "| tilelang | unavailable |" in out and "tle-bench: unavailable: tle.ops.rms_norm: backend 'tilelang'" in err
