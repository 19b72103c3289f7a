"""`tle explore` on a GPU: the page's "run" checks and times both backends, and an autotuned kernel shows the
time of each config and the one its autotuner chose; the served page holds every stage compiled for this GPU."""
import os
import re

from explore_cases import AUTOTUNED, Client, serve

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _served(tmp_path, name: str, text: str, kernel: str):
    path = tmp_path / name
    path.write_text(text)
    return serve(str(path), kernel, on_gpu=True)


def test_run_checks_and_times_both_backends(tmp_path):
    text = open(os.path.join(ROOT, "kernels", "examples", "vector_add.py")).read()
    session, server = _served(tmp_path, "vector_add.py", text, "add_kernel")
    try:
        client = Client(server)
        status, answer = client.request("POST", "/run", {"text": text})
        assert status == 200 and answer["where"] == "GPU", answer
        for backend, row in answer["rows"].items():
            assert row["ok"] is True and row["ms"] > 0, (backend, row)
        status, page = client.request("GET", "/")
        titles = re.findall(r'<section class="pane" data-pane="[^"]+"><h2>([^<]+)', page)
        assert [t.strip() for t in titles] == ["kernel source", "tile IR", "triton source", "tilelang source",
                                               "triton ttgir", "triton ptx", "tilelang cuda", "tilelang ptx"]
    finally:
        server.shutdown()
        server.server_close()
        session.close()


def test_run_shows_the_autotuners_choice(tmp_path):
    session, server = _served(tmp_path, "scaled.py", AUTOTUNED, "scale_kernel")
    try:
        status, answer = Client(server).request("POST", "/run", {"text": AUTOTUNED})
        assert status == 200, answer
        for backend, row in answer["rows"].items():
            assert row["ok"] is True, (backend, row)
            tuned = row["autotune"]
            times = {c["config"]: c["ms"] for c in tuned["configs"]}
            assert len(times) == 2 and all(ms > 0 for ms in times.values()), tuned
            assert tuned["chosen"] == min(times, key=times.get)
    finally:
        server.shutdown()
        server.server_close()
        session.close()
