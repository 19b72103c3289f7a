"""Triton's compilation stages (ttir, ttgir, llir, ptx) of a generated kernel file.

Under TRITON_INTERPRET=1 Triton's own @jit helpers (tl.sum, tl.max, ...) are interpreter functions,
which its compiler cannot inline, so the stages of a kernel that uses them are compiled in a separate
Python process without the variable (`python -m tle.lowering.triton.stages`, JSON in and out).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

STAGES = ("ttir", "ttgir", "llir", "ptx")


def gpu_target():
    from triton.backends.compiler import GPUTarget
    try:
        import torch
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return GPUTarget("cuda", major * 10 + minor, 32)
    except Exception:
        pass
    return GPUTarget("cuda", 90, 32)


def compile_stages(fn, signature: dict, aligned: list[int], options: dict) -> dict[str, str]:
    """{stage: text} for JIT function `fn`; `aligned`: the parameter positions known 16-byte aligned."""
    import triton
    from triton.compiler import ASTSource
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
    src = ASTSource(fn=fn, signature=signature, constexprs={}, attrs=attrs)
    asm = triton.compile(src, target=gpu_target(), options=options).asm
    return {s: asm[s] for s in STAGES}


def compile_stages_elsewhere(path: str, name: str, signature: dict, aligned: list[int], options: dict) -> dict:
    """compile_stages in a fresh process without TRITON_INTERPRET, on kernel `name` of file `path`."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    request = json.dumps({"path": path, "name": name, "signature": signature, "aligned": aligned,
                          "options": options})
    done = subprocess.run([sys.executable, "-m", "tle.lowering.triton.stages"], input=request, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-20:]
        raise RuntimeError("compiling the Triton stages failed:\n" + "\n".join(tail))
    return json.loads(done.stdout)


def _main():
    from ..files import load_module
    req = json.loads(sys.stdin.read())
    mod = load_module(req["path"], "tle_gen_triton_stages_" + os.path.basename(req["path"])[:-3])
    out = compile_stages(getattr(mod, req["name"]), req["signature"], req["aligned"], req["options"])
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    _main()
