"""The Triton backend: generated `@triton.jit` source, compiled by Triton, launched with Triton's launcher.

Stages (ttir, ttgir, llir, ptx) come from `triton.compile` for the present GPU, or for sm_90a where
there is none. Under TRITON_INTERPRET=1 the kernel runs on the CPU in Triton's interpreter.
"""
from __future__ import annotations

import hashlib
import os

import triton

from .. import backend as api
from ..errors import LoweringError
from ..files import load_module, write_once
from ..ir.core import KernelIR
from ..transforms import bound_guarded_loops, how_issued, pipeline_async_loads
from ..spec import Spec
from .codegen import generate

STAGES = ("ttir", "ttgir", "llir", "ptx")


def interpret_mode() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _gpu_target():
    from triton.backends.compiler import GPUTarget
    try:
        import torch
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return GPUTarget("cuda", major * 10 + minor, 32)
    except Exception:
        pass
    return GPUTarget("cuda", 90, 32)


class TritonCompiled(api.Compiled):
    stages = STAGES

    def __init__(self, ir: KernelIR, spec: Spec, source: str, path: str):
        self.ir = ir
        self.spec = spec
        self.source = source
        self.path = path
        self.notes = list(ir.notes)
        self._fn = None
        self._compiled = None

    @property
    def fn(self):
        if self._fn is None:
            mod = load_module(self.path, f"tle_gen_triton_{os.path.basename(self.path)[:-3]}")
            self._fn = getattr(mod, self.ir.name)
        return self._fn

    def launch(self, grid, args):
        self.fn[grid](*args, num_warps=self.spec.num_warps, num_stages=self.spec.num_stages)

    def _compile_for_stages(self):
        if self._compiled is None:
            from triton.compiler import ASTSource
            sig, attrs = {}, {}
            for i, (p, a) in enumerate(zip(self.ir.params, self.spec.args)):
                t = p.value.type
                if t.is_pointer:   # our dtype names are Triton's signature names
                    sig[p.name] = "*" + t.elem.elem.name
                    if a.aligned16:
                        attrs[(i,)] = [["tt.divisibility", 16]]
                else:
                    sig[p.name] = t.elem.name
            fn = self.fn
            if not isinstance(fn, triton.runtime.jit.JITFunction):
                # The interpreter wraps functions; compile stages from a plain JIT of the same source.
                fn = triton.runtime.jit.JITFunction(fn.fn)
            src = ASTSource(fn=fn, signature=sig, constexprs={}, attrs=attrs)
            self._compiled = triton.compile(src, target=_gpu_target(),
                                            options={"num_warps": self.spec.num_warps,
                                                     "num_stages": self.spec.num_stages})
        return self._compiled

    def stage(self, name: str) -> str:
        if name == "source":
            return self.source
        if name not in STAGES:
            raise KeyError(f"triton stages are {', '.join(('source',) + STAGES)}; got '{name}'")
        asm = self._compile_for_stages().asm
        return asm[name]


def _access_report(ir: KernelIR):
    """Triton gets every access as written; the report gives each one's class for reference."""
    from ..analysis import classify_accesses
    out = []
    for a in classify_accesses(ir).values():
        how = "tl.load" if a.op.name == "load" else "tl.store" if a.op.name == "store" else f"tl.atomic_{a.op.attrs['kind']}"
        if a.op.name == "load" and a.op.attrs.get("is_async"):
            how += f", is_async: {how_issued(a.op)}"
        if a.reason and a.kind in ("general", "strided"):
            how += f" ({a.reason}, with integer arguments unknown until launch)"
        out.append((a.line, a.op.name, a.kind, how))
    for op in ir.walk():
        if op.name == "raw_call":
            out.append((op.loc.line, "tle.call", "raw", "element-wise: inlined as tile code"))
    return sorted(out)


class Backend(api.Backend):
    name = "triton"

    def unavailable_reason(self):
        return None  # triton is a dependency; without a GPU it lowers, compiles stages and interprets

    def launch_unavailable_reason(self, device):
        if interpret_mode():
            return None if device.type == "cpu" else \
                "TRITON_INTERPRET=1 runs on CPU tensors; pass CPU tensors or unset TRITON_INTERPRET"
        import torch
        if device.type != "cuda" or not torch.cuda.is_available():
            return "no CUDA device here (set TRITON_INTERPRET=1 to run on the CPU in Triton's interpreter)"
        return None

    def lower(self, ir: KernelIR, spec: Spec, cache_dir: str) -> TritonCompiled:
        bound_guarded_loops(ir)
        ir.notes.extend(pipeline_async_loads(ir, spec.num_stages))
        source = generate(ir)
        digest = hashlib.sha256((source + triton.__version__ + str(interpret_mode())).encode()).hexdigest()[:20]
        path = os.path.join(cache_dir, "triton", f"{ir.name}_{digest}.py")
        write_once(path, source)
        if not ir.params and not ir.body.ops:
            raise LoweringError("empty kernel", ir.loc, "triton")
        compiled = TritonCompiled(ir, spec, source, path)
        compiled.access_report = _access_report(ir)
        return compiled
