"""`tle explore` as a user starts it: a process that prints its URL (127.0.0.1, a token), serves the page there,
refuses a request without the token, and stops on Ctrl-C."""
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_command_serves_its_page_and_stops_on_ctrl_c():
    target = os.path.join(ROOT, "kernels", "examples", "vector_add.py") + "::add_kernel"
    proc = subprocess.Popen([sys.executable, "-m", "tle.cli", "explore", target], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "TRITON_INTERPRET": "1"})
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
        url = next((m.group(0) for ln in lines for m in [re.search(r"http://127\.0\.0\.1:\d+/\?token=\S+", ln)]
                    if m), None)
        assert url, lines
        with urllib.request.urlopen(url + "&stages=0", timeout=300) as r:
            page = r.read().decode()
        assert r.status == 200 and "tle explore: add_kernel (vector_add.py, small example)" in page
        try:
            urllib.request.urlopen(url.split("?")[0], timeout=60)
            raise AssertionError("served without the token")
        except urllib.error.HTTPError as e:
            assert e.code == 403
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "tle explore: stopped" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
