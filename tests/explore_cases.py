"""What the tests of `tle explore` share: a kernel file that autotunes, a client of the server, and a server
started on a file in a thread of the test's process."""
import http.client
import json
import threading

from tle.explore.server import ExploreServer
from tle.explore.session import Session

AUTOTUNED = '''
import torch
import triton.language as tl
import tle


@tle.autotune(configs=[tle.Config({"BLOCK": 64}, num_warps=2), tle.Config({"BLOCK": 128}, num_warps=4)],
              key=["n"])
@tle.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


@tle.example(scale_kernel.kernel)
def _example(device, size):
    x = torch.randn(300, device=device)
    out = torch.empty_like(x)
    return tle.Launch(grid=(5,), args=(x, out, 300), kwargs={}, outputs={"out": out},
                      reference=lambda: {"out": x * 2.0})
'''


class Client:
    """Requests to a running ExploreServer, with its token unless told otherwise; (status, JSON or text)."""

    def __init__(self, server: ExploreServer):
        self.port, self.token = server.server_port, server.token

    def request(self, method: str, route: str, body=None, token: str | None = "default", host: str | None = None,
                raw: bytes | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        headers = {"Host": host or f"127.0.0.1:{self.port}"}
        if token == "default":
            token = self.token
        if token:
            headers["X-Tle-Token"] = token
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        if data is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, route, body=data, headers=headers)
        r = conn.getresponse()
        payload = r.read()
        conn.close()
        kind = r.getheader("Content-Type", "")
        return r.status, (json.loads(payload) if kind.startswith("application/json") else payload.decode())


def serve(path: str, name: str, on_gpu: bool = False):
    """A session on the kernel `name` of the file at `path`, served from a thread; (session, server)."""
    session = Session(path, name, "small", on_gpu=on_gpu)
    server = ExploreServer(session, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return session, server
