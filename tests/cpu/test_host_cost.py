"""tle-bench --host-cost on the CPU: one forward-and-backward call per implementation timed back to back at each
operator's smallest shape, in rounds; the tables, the page and its records; usage errors."""
import json

import pytest

from tle.benchmark import cli, host_cost


def test_dry_run_times_each_implementation_and_writes_the_page(tmp_path, capsys):
    (tmp_path / "host_cost.md").write_text("# old\n\n## Notes\n\nkept\n")
    code = cli.main(["--host-cost", "--operator", "rms_norm", "--operator", "softmax", "--device", "cpu",
                     "--backends", "torch", "--no-compile", "--no-peers", "--calls", "3", "--rounds", "3",
                     "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "| operator (shape) | torch | tle torch |" in out
    record = json.loads((tmp_path / "host_cost.json").read_text())
    cells = record["cells"]
    assert record["rounds"] == 3 and record["calls"] == 3
    assert [(c["op"], c["impl"]) for c in cells] == [("rms_norm", "torch"), ("rms_norm", "tle torch"),
                                                     ("softmax", "torch"), ("softmax", "tle torch")]
    assert all(c["status"] == "ok" and c["host_us"] > 0 and c["gpu_us"] is None for c in cells)
    # the figure is the median of the rounds
    assert all(len(c["rounds_us"]) == 3 and sorted(c["rounds_us"])[1] == pytest.approx(c["host_us"], abs=0.06)
               for c in cells)
    md = (tmp_path / "host_cost.md").read_text()
    assert "| rms_norm (64x256 bf16) |" in md and md.count("## Notes") == 1 and "kept" in md
    assert "the median of 3 rounds" in md


def test_a_raising_tle_backend_is_a_cell_and_exit_code_1(monkeypatch, capsys):
    from tle.ops import OPERATORS
    op = OPERATORS["softmax"]
    monkeypatch.setattr(op, "fn", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no launch")))
    code = cli.main(["--host-cost", "--operator", "softmax", "--device", "cpu", "--backends", "torch",
                     "--no-compile", "--no-peers", "--calls", "2"])
    assert code == 1 and "| error |" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--operator", "nope"], "unknown operator 'nope'"),
    (["--operator", "softmax", "--calls", "0"], "--calls 0"),
    (["--operator", "softmax", "--rounds", "0"], "--rounds 0"),
    (["--operator", "softmax", "--backends", "cuda"], "unknown backend 'cuda'"),
])
def test_usage_errors_name_the_culprit(args, message, capsys):
    from tle.ops import OPERATORS
    with pytest.raises(SystemExit) as e:
        host_cost.parse_args(["--host-cost", "--device", "cpu", *args], OPERATORS)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_breakdown_counts_the_launches_and_times_the_calls_without_them(tmp_path, capsys):
    code = cli.main(["--host-cost", "--operator", "softmax", "--device", "cpu", "--backends", "triton",
                     "--no-compile", "--no-peers", "--calls", "2", "--breakdown", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    cells = json.loads((tmp_path / "host_cost.json").read_text())["cells"]
    tle_cell = next(c for c in cells if c["kind"] == "tle")
    assert tle_cell["launches"] == 2 and tle_cell["no_launch_us"] > 0     # the forward's kernel and the backward's
    assert all(c["launches"] is None for c in cells if c["kind"] != "tle")
    md = (tmp_path / "host_cost.md").read_text()
    assert "without the backends' launches" in md and "| softmax (64x256 bf16) | triton |" in md


def test_ratio_table_puts_each_tle_row_over_liger():
    cells = [host_cost.Cell("rms_norm", "64x256 bf16", "liger", "peer", host_us=400.0),
             host_cost.Cell("rms_norm", "64x256 bf16", "triton", "tle", host_us=300.0),
             host_cost.Cell("rms_norm", "64x256 bf16", "tilelang", "tle", status="error"),
             host_cost.Cell("softmax", "64x256 bf16", "triton", "tle", host_us=200.0)]   # no Liger row
    assert host_cost.ratio_table(cells)[2:] == ["| rms_norm (64x256 bf16) | triton | 300 | 400 | 0.75x |"]
    assert host_cost.ratio_table(cells[3:]) == []


def test_launches_skipped_are_counted_and_not_made():
    """A skipped launch is counted and writes nothing; a counted one runs."""
    import torch
    from tle.kernels.kl_div import kl_div_bwd_kernel

    def launch(dx):
        kl_div_bwd_kernel[(1,)](torch.ones(64), torch.full((64,), 2.0), dx, 64, 1.0, BLOCK=64, LOG_TARGET=False,
                                PER_ELEMENT=True, backend="triton", num_warps=1)
    skipped, made = torch.full((64,), float("nan")), torch.full((64,), float("nan"))
    with host_cost.launches_counted(skip=True) as count:
        launch(skipped)
    assert count == [1] and skipped.isnan().all()
    with host_cost.launches_counted() as count:
        launch(made)
    assert count == [1] and torch.equal(made, torch.full((64,), -2.0))
