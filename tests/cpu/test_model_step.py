"""tle-bench --model llama-block on the CPU: the dry run's stack, its variants' checks against the fp32 stack, the
page and the records; usage errors; a variant that raises or is wrong is a row that says so and exit code 1."""
import dataclasses
import json

import pytest
import torch

from tle.benchmark import cli, llama_block, model_step


def test_dry_run_checks_times_and_writes_the_page(tmp_path, capsys):
    code = cli.main(["--model", "llama-block", "--device", "cpu", "--backends", "torch,triton", "--no-compile",
                     "--reps", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    record = json.loads((tmp_path / "llama_block.json").read_text())
    rows = {r["variant"]: r for r in record["rows"]}
    assert list(rows) == ["torch", "liger", "tle torch", "tle triton"]
    assert rows["liger"]["status"] in ("skipped", "ok")
    for name in ("torch", "tle torch", "tle triton"):
        r = rows[name]
        assert r["status"] == "ok" and r["ms"] > 0, r
        assert r["loss_error"] < model_step.LOSS_TOLERANCE and r["grad_error"] < model_step.GRAD_TOLERANCE
    assert record["config"]["hidden"] == llama_block.DRY_CONFIG.hidden
    md = (tmp_path / "llama_block.md").read_text()
    assert "| tle triton |" in md and "## Notes" in md and "2 layers, hidden 64" in md


def test_page_keeps_its_notes(tmp_path):
    (tmp_path / "llama_block.md").write_text("# old\n\n## Notes\n\nwhat we saw\n")
    rows = [model_step.Row("torch", "peer", ms=2.0, loss=1.0, loss_error=0.0, grad_error=0.01, worst="head")]
    model_step.write(str(tmp_path), rows, llama_block.DRY_CONFIG, "tle-bench --model llama-block",
                     {"date": "d", "commit": "c", "gpu": "cpu", "versions": {"torch": torch.__version__}})
    md = (tmp_path / "llama_block.md").read_text()
    assert md.count("## Notes") == 1 and "what we saw" in md and "| torch | 2 | 1.00x |" in md


def test_a_wrong_variant_fails_and_a_raising_one_is_a_row(monkeypatch, capsys):
    def wrong(backend):
        ops = llama_block.tle_ops(backend)
        return dataclasses.replace(ops, rms_norm=lambda x, w, eps: 1.1 * ops.rms_norm(x, w, eps))

    def raising(backend):
        def boom(*a):
            raise RuntimeError("no kernel here")
        return dataclasses.replace(llama_block.tle_ops(backend), attention=boom)

    for make, status in ((wrong, "fail"), (raising, "error")):
        monkeypatch.setattr(model_step, "tle_ops", make)
        code = cli.main(["--model", "llama-block", "--device", "cpu", "--backends", "torch", "--no-compile",
                         "--no-peers", "--reps", "1"])
        out = capsys.readouterr().out
        assert code == model_step.EXIT_FAILED
        line = next(x for x in out.splitlines() if x.startswith("| tle torch |"))
        assert f"| {status}" in line, line
    assert "no kernel here" in line


def test_warm_compiles_one_part_on_tle_and_says_what_failed():
    one_layer = dataclasses.replace(llama_block.DRY_CONFIG, layers=1)
    line = model_step.warm_part(model_step.WarmTask(one_layer, "cpu", "triton", "attention"))
    assert line.startswith("triton attention: compiled"), line
    line = model_step.warm_part(model_step.WarmTask(one_layer, "cpu", "triton", "no_such_part"))
    assert line.startswith("triton no_such_part: AttributeError"), line


@pytest.mark.parametrize("args, message", [
    (["--layers", "0"], "--layers 0: a positive size"),
    (["--heads", "5"], "the heads must divide the hidden size"),
    (["--backends", "cuda"], "unknown backend 'cuda'"),
    (["--reps", "0"], "at least one timed step"),
    (["--warm", "-1"], "--warm -1"),
])
def test_usage_errors_name_the_culprit(args, message, capsys):
    with pytest.raises(SystemExit) as e:
        model_step.parse_args(["--model", "llama-block", "--device", "cpu", *args])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_the_default_stack_and_its_flops():
    cfg = llama_block.LlamaConfig()
    assert (cfg.hidden, cfg.heads, cfg.kv_heads, cfg.seq, cfg.batch) == (4096, 32, 8, 4096, 2)
    # 3x the forward's products: projections and MLP, causal attention's half of S x S, the head
    t = 2 * 4096
    forward = 2 * (2 * t * 4096 * (2 * 4096 + 2 * 1024 + 3 * 14336) + 2 * 2 * 2 * 32 * 4096 * 4096 * 128 / 2) \
        + 2 * t * 4096 * 128256
    assert llama_block.flops_per_step(cfg) == pytest.approx(3 * forward)
