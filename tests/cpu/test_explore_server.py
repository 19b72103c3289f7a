"""`tle explore`'s server (tle/explore/server.py): loopback only, the token of its URL on every request, only the
file it was started on; each refusal is a status and one line, and the server goes on serving. The page's
actions: lower an edit (errors at their lines), diff a backend's source between two launch configurations, run
the check, save only when asked."""
import os
import shutil
import socket

import pytest

from explore_cases import AUTOTUNED, Client, serve
from tle.cli import main
from tle.explore.session import parse_overrides

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VECTOR_ADD = os.path.join(ROOT, "kernels", "examples", "vector_add.py")


@pytest.fixture
def served(tmp_path):
    """vector_add.py copied to a folder of the test's own (save writes it), served."""
    path = tmp_path / "vector_add.py"
    shutil.copy(VECTOR_ADD, path)
    session, server = serve(str(path), "add_kernel")
    yield Client(server), session, path
    server.shutdown()
    server.server_close()
    session.close()


def _lowers(client: Client, text: str):
    status, view = client.request("POST", "/lower", {"text": text, "stages": False})
    assert status == 200, view
    return view


def test_the_page_is_served_with_the_token_only(served):
    client, _, path = served
    status, page = client.request("GET", f"/?token={client.token}&stages=0", token=None)
    assert status == 200 and 'data-pane="source"' in page and 'data-pane="pane2"' in page   # IR + 2 sources
    assert "save to vector_add.py" in page and "<textarea" in page
    for token, why in ((None, "refused: no token"), ("not-the-token", "refused: wrong token")):
        status, answer = client.request("GET", "/?stages=0", token=token)
        assert (status, answer["error"].split(" (")[0]) == (403, why)
        status, answer = client.request("POST", "/lower", {"text": path.read_text()}, token=token)
        assert status == 403 and answer["error"].startswith(why)
    assert _lowers(client, path.read_text())["errors"] == []     # and it goes on serving


def test_other_paths_are_refused(served):
    client, session, path = served
    for other in ("/etc/passwd", "../vector_add.py", os.path.join(ROOT, "kernels", "softmax.py")):
        status, answer = client.request("GET", f"/source?path={other}")
        assert status == 403 and answer["error"] == f"refused: this server serves only {session.path}, " \
                                                    f"not {other!r}"
        status, answer = client.request("POST", "/lower", {"text": "x = 1", "path": other})
        assert status == 403 and "serves only" in answer["error"]
    for route in ("/etc/passwd", "/../../etc/passwd", "/static/app.js"):
        status, answer = client.request("GET", route)
        assert status == 404 and answer["error"].startswith(f"no such page: {route}")
    status, answer = client.request("GET", f"/source?path={path}")
    assert status == 200 and answer["text"] == path.read_text()
    status, answer = client.request("GET", "/source?path=vector_add.py")
    assert status == 200 and answer["text"] == path.read_text()


def test_malformed_requests_are_refused_and_serving_goes_on(served):
    client, _, path = served
    cases = [
        (dict(raw=b"{not json"), 400, "malformed request: the body is not JSON"),
        (dict(raw=b"\xff\xfe"), 400, "malformed request: the body is not JSON"),
        (dict(body=[1, 2]), 400, "malformed request: the body is not a JSON object"),
        (dict(body={"txt": "x"}), 400, "malformed request: no 'text' in the body"),
        (dict(body={"text": 3}), 400, "malformed request: 'text' must be a str, got int"),
        (dict(body={"text": "", "stages": "yes"}), 400, "malformed request: 'stages' must be a bool, got str"),
        (dict(body={"text": ""}, host="evil.example:80"), 403, "refused: Host 'evil.example:80' is not this server"),
    ]
    for kwargs, status, why in cases:
        got, answer = client.request("POST", "/lower", **kwargs)
        assert got == status and answer["error"].startswith(why), (kwargs, got, answer)
    got, answer = client.request("POST", "/lower")          # no body at all
    assert got == 400 and answer["error"].startswith("malformed request: the body is empty")
    with socket.create_connection(("127.0.0.1", client.port)) as s:     # a body without its length
        s.sendall(f"POST /lower HTTP/1.1\r\nHost: 127.0.0.1:{client.port}\r\nX-Tle-Token: {client.token}\r\n"
                  f"Connection: close\r\n\r\n{{}}".encode())
        assert s.makefile("rb").readline().split()[1] == b"411"
    with socket.create_connection(("127.0.0.1", client.port)) as s:     # not HTTP at all
        s.sendall(b"\x16\x03\x01 hello\r\n\r\n")
        assert b'{"error": "malformed request: Bad HTTP/0.9 request type' in s.makefile("rb").read()
    got, answer = client.request("POST", "/compile", {"text": ""})
    assert got == 404 and "no such action: /compile" in answer["error"]
    got, answer = client.request("POST", "/diff", {"text": path.read_text(), "backend": "cuda", "a": "", "b": ""})
    assert got == 400 and answer["error"].startswith("unknown backend 'cuda'")
    got, answer = client.request("POST", "/diff", {"text": path.read_text(), "backend": "triton", "a": "BLOCK=",
                                                   "b": ""})
    assert got == 400 and answer["error"].startswith("cannot read 'BLOCK='")
    got, _ = client.request("PUT", "/lower", {"text": ""})
    assert got == 501
    assert _lowers(client, path.read_text())["errors"] == []


def test_an_edit_is_lowered_with_its_errors_at_their_lines(served):
    client, _, path = served
    text = path.read_text()
    lines = text.splitlines()
    mask = next(i for i, ln in enumerate(lines, 1) if "mask = offsets < n_elements" in ln)
    view = _lowers(client, text.replace("< n_elements", "< n_elementz"))
    assert {(e["who"], e["line"]) for e in view["errors"]} == {("triton", mask), ("tilelang", mask)}
    assert all("n_elementz" in e["message"] for e in view["errors"])
    assert f'<div class="errmsg" data-line="{mask}">' in view["main"]
    defn = next(i for i, ln in enumerate(lines, 1) if ln.startswith("def add_kernel"))
    view = _lowers(client, text.replace("def add_kernel(x_ptr,", "def add_kernel(x_ptr,,"))
    assert [(e["who"], e["line"]) for e in view["errors"]] == [("import", defn)]
    assert view["errors"][0]["message"].startswith("SyntaxError")
    view = _lowers(client, text.replace("add_kernel", "plus_kernel"))
    assert [(e["line"], e["message"]) for e in view["errors"]] == [
        (0, "the file has no @tle.jit kernel named 'add_kernel' (kernels there: plus_kernel)")]
    view = _lowers(client, text.replace("x + y, mask", "x * y + x, mask"))     # fixed and changed: lowered anew
    assert view["errors"] == [] and "x * y + x" in view["main"]
    assert path.read_text() == text                          # nothing was written to the file


def test_diff_between_two_launch_configurations(served):
    client, _, path = served
    status, answer = client.request("POST", "/diff", {"text": path.read_text(), "backend": "triton",
                                                      "a": "", "b": "BLOCK_SIZE=256, num_warps=2"})
    assert status == 200 and not answer["same"]
    assert answer["diff"][0] == "--- triton source, A: the example launch"
    assert any(ln.startswith("+") and "256" in ln for ln in answer["diff"][2:])
    status, answer = client.request("POST", "/diff", {"text": path.read_text(), "backend": "tilelang",
                                                      "a": "BLOCK_SIZE=1024", "b": ""})
    assert status == 200 and answer == {"diff": [], "same": True}   # the example launches BLOCK_SIZE=1024


def test_run_checks_each_backend_in_the_cpu_interpreters(served):
    client, _, path = served
    status, answer = client.request("POST", "/run", {"text": path.read_text()})
    assert status == 200 and answer["where"] == "CPU"
    assert {b: r["ok"] for b, r in answer["rows"].items()} == {"triton": True, "tilelang": True}
    status, answer = client.request("POST", "/run", {"text": path.read_text().replace("x + y, mask", "x - y, mask")})
    assert {b: r["ok"] for b, r in answer["rows"].items()} == {"triton": False, "tilelang": False}


def test_save_writes_the_file_only_when_asked(served):
    client, _, path = served
    edited = path.read_text().replace("x + y, mask", "y + x, mask")
    _lowers(client, edited)
    assert "y + x, mask" not in path.read_text()
    status, answer = client.request("POST", "/save", {"text": edited})
    assert status == 200 and answer == {"saved": str(path)} and path.read_text() == edited


def test_an_autotuned_kernel_offers_its_configs(tmp_path):
    path = tmp_path / "scaled.py"
    path.write_text(AUTOTUNED)
    session, server = serve(str(path), "scale_kernel")
    try:
        client = Client(server)
        view = _lowers(client, AUTOTUNED)
        assert view["errors"] == [] and view["configs"] == ["BLOCK=64, num_warps=2, num_stages=3",
                                                      "BLOCK=128, num_warps=4, num_stages=3"]
        status, answer = client.request("POST", "/diff", {"text": AUTOTUNED, "backend": "triton",
                                                          "a": view["configs"][0], "b": view["configs"][1]})
        assert status == 200 and any(ln.startswith("+") and "128" in ln for ln in answer["diff"])
        status, answer = client.request("POST", "/run", {"text": AUTOTUNED})      # at the first config, no GPU
        assert status == 200 and {b: r["ok"] for b, r in answer["rows"].items()} == {"triton": True,
                                                                                      "tilelang": True}
    finally:
        server.shutdown()
        server.server_close()
        session.close()


def test_overrides_read_as_python_keywords():
    assert parse_overrides(" BLOCK=64, num_warps=4 ,") == {"BLOCK": 64, "num_warps": 4}
    assert parse_overrides("") == {}
    for bad in ("BLOCK", "64", "**x", "BLOCK=f(1)"):
        with pytest.raises(ValueError):
            parse_overrides(bad)


def test_explore_refuses_a_bad_target_before_serving(tmp_path, capsys):
    assert main(["explore", "kernels/nope.py::k"]) == 2
    assert "no such file: kernels/nope.py" in capsys.readouterr().err
    assert main(["explore", f"{VECTOR_ADD}::no_kernel"]) == 2
    assert "no @tle.jit kernel named 'no_kernel'" in capsys.readouterr().err
    broken = tmp_path / "broken.py"
    broken.write_text("import tle\n\ndef f(:\n    pass\n")
    assert main(["explore", f"{broken}::k"]) == 2
    assert f"{broken}:3: SyntaxError" in capsys.readouterr().err
