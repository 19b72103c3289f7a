"""The Triton backend: generated `@triton.jit` source, compiled by Triton, launched with Triton's launcher.

Stages (ttir, ttgir, llir, ptx) come from `triton.compile` for the present GPU, or for sm_90a where
there is none. Under TRITON_INTERPRET=1 the kernel runs on the CPU in Triton's interpreter.
"""
from __future__ import annotations

import contextlib
import hashlib
import os

import triton
from triton import knobs
from triton.runtime import _allocation, driver as _triton_driver

from .. import backend as api
from ..errors import LoweringError, UnsupportedConstruct
from ..files import load_module, write_once
from ..ir import ops
from ..ir.core import KernelIR
from ..ir.ops import LoopKind, Trait
from ..spec import Spec
from ..transforms import bound_guarded_loops, drop_overwritten_buffer_carries, pipeline_async_loads
from . import interpreter_fix
from .codegen import TritonCodegen
from .llvm_call import LIBRARY
from .placements import placements
from .rules import RULES
from .stages import STAGES, compile_stages, compile_stages_elsewhere
from .statements import how_issued


def interpret_mode() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def interpreter_mismatch() -> str | None:
    """Why Triton cannot run as TRITON_INTERPRET now asks (None if it can): Triton reads the variable once, at
    its import, when it makes its own library functions (tl.sigmoid, tl.cdiv, ...) interpreted or compiled;
    set or unset after that import, every launch fails deep inside Triton."""
    import triton.language.standard as standard
    from triton.runtime.interpreter import InterpretedFunction
    imported_interpreted = isinstance(standard.sigmoid, InterpretedFunction)
    if interpret_mode() == imported_interpreted:
        return None
    now, then = ("set", "unset") if interpret_mode() else ("unset", "set")
    return (f"TRITON_INTERPRET is {now} now but was {then} when Triton was imported (Triton reads it once, at "
            f"import); {now} it before Python starts (e.g. TRITON_INTERPRET={int(interpret_mode())} python ...) or "
            f"before the first import of triton or tle")


def _int_class(v):
    """How Triton specializes an int argument: 1 becomes a constant, multiples of 16 are marked divisible
    (None: not a plain int; such launches always go through Triton's jit)."""
    if type(v) is not int:
        return None
    return 1 if v == 1 else 16 if v % 16 == 0 else 0


def _torch_scratch(size: int, alignment: int, stream):
    """Global scratch for a kernel that makes tensor descriptors on the device (Triton writes them there),
    from torch's caching allocator: freed after the launch, reused only by work ordered after the kernel."""
    import torch
    return torch.empty(size, dtype=torch.int8, device="cuda")


@contextlib.contextmanager
def _scratch_allocator():
    """Triton asks the program for an allocator (triton.set_allocator) before launching a kernel that makes
    descriptors; where the program set none, lend one for this launch only."""
    if _allocation._allocator.get() is not _allocation._NULL_ALLOCATOR:
        yield
        return
    token = _allocation._allocator.set(_torch_scratch)
    try:
        yield
    finally:
        _allocation._allocator.reset(token)


def _launch_hooks_set() -> bool:
    """Whether a launch hook (a profiler such as proton) is installed: Triton's knobs hold a chain of hooks,
    empty by default (None in older releases)."""
    for hook in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return True
    return False


class TritonCompiled(api.Compiled):
    stages = STAGES

    def __init__(self, ir: KernelIR, spec: Spec, source: str, path: str, llvm_path: str | None = None,
                 raw_sites=()):
        self.ir = ir
        self.spec = spec
        self.source = source
        self.path = path
        self.llvm_path = llvm_path              # the .ll of the kernel's tle.raw.dialect calls, linked at compile
        self.raw_sites = tuple(raw_sites)       # those calls (RAW_CALL ops)
        self.notes = list(ir.notes)
        self._fn = None
        self._compiled = None
        self.interpreted = interpret_mode()     # what this lowering was built for (part of its cache key)
        # positions of the int arguments whose values Triton specializes on (== 1, divisible by 16)
        self._int_positions = tuple(i for i, a in enumerate(spec.args) if not a.is_tensor
                                    and a.type.elem.is_int and not a.type.elem.is_bool
                                    and a.name not in ir.unspecialized)
        self._kernels: dict = {}                # (device, int classes) -> Triton's CompiledKernel
        # a kernel making descriptors on the device needs scratch memory from an allocator (not in the interpreter)
        self._needs_scratch = not self.interpreted and any(op.defn is ops.MAKE_DESCRIPTOR for op in ir.walk())

    @property
    def fn(self):
        if self._fn is None:
            mod = load_module(self.path, f"tle_gen_triton_{os.path.basename(self.path)[:-3]}")
            self._fn = getattr(mod, self.ir.name)
        return self._fn

    def launch(self, grid, args):
        if not self._needs_scratch:          # the common case: no context manager on the launch path
            self._launch(grid, args)
            return
        with _scratch_allocator():
            self._launch(grid, args)

    def compile_options(self) -> dict:
        """The options every compilation of the kernel takes, the launch's and the stages' alike."""
        options = {"num_warps": self.ir.num_warps, "num_stages": self.ir.num_stages}
        if self.llvm_path is not None:
            options["extern_libs"] = {LIBRARY: self.llvm_path}
        return options

    def _launch(self, grid, args):
        if self.interpreted:
            if self.raw_sites:
                op = self.raw_sites[0]
                raise UnsupportedConstruct(f"tle.raw.call({op.attrs['fn'].name}) of a tle.raw.dialect function",
                                           "triton", op.loc, "it runs as LLVM IR linked into the compiled kernel, "
                                           "which Triton's interpreter (TRITON_INTERPRET=1) cannot run; launch on a "
                                           "GPU, or use backend='tilelang'")
            interpreter_fix.apply()
            self.fn[grid](*args, **self.compile_options())
            return
        # Triton's own launch binds and specializes every argument again on each call (about 16 us on an
        # H200 host); the lowering's key already fixes the dtypes and the pointers' alignment, so only the
        # device and the classes Triton gives int values remain to tell its compiled kernels apart
        driver = _triton_driver.active
        device = driver.get_current_device()
        key = (device, *[_int_class(args[i]) for i in self._int_positions])
        kernel = self._kernels.get(key)
        if kernel is None or _launch_hooks_set():
            # the first launch of a class goes through Triton's jit, which compiles (or finds) the kernel;
            # so does every launch while a launch hook (a profiler) wants Triton's launch metadata
            kernel = self.fn[grid](*args, **self.compile_options())
            if None not in key:
                self._kernels[key] = kernel
            return
        kernel.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1,
                   driver.get_current_stream(device), kernel.function, kernel.packed_metadata, None, None, None,
                   *args)

    def _stages(self) -> dict[str, str]:
        if self._compiled is None:
            sig, aligned = {}, []
            for i, (p, a) in enumerate(zip(self.ir.params, self.spec.args)):
                t = p.value.type
                if t.is_pointer:   # our dtype names are Triton's signature names
                    sig[p.name] = "*" + t.elem.elem.name
                    if a.aligned16:
                        aligned.append(i)
                else:
                    sig[p.name] = t.elem.name
            # debug as a launch compiles it: Triton keeps tl.device_assert only in debug mode
            options = {**self.compile_options(), "debug": api.triton_debug()}
            if interpret_mode():
                self._compiled = compile_stages_elsewhere(self.path, self.ir.name, sig, aligned, options)
            else:
                self._compiled = compile_stages(self.fn, sig, aligned, options)
        return self._compiled

    def placements(self) -> list[tuple[int, str]]:
        return placements(self.source, self.line_map)

    def stage(self, name: str) -> str:
        if name == "source":
            return self.source
        if name not in STAGES:
            raise KeyError(f"triton stages are {', '.join(('source',) + STAGES)}; got '{name}'")
        return self._stages()[name]


# tle.gpu buffers are register tiles on stock Triton, which has no explicit shared memory
_BUFFER_SITES = {ops.ALLOC: "a register tile (stock Triton has no explicit shared memory; it stages through "
                            "shared memory itself)",
                 ops.LOCAL_LOAD: "the register tile itself", ops.LOCAL_STORE: "the tile becomes the buffer's value",
                 ops.LOCAL_GATHER: "tl.gather from the register tile (a load through tle.gpu.local_ptr)",
                 ops.LOCAL_SCATTER: "a select over the register tile's elements (a store through tle.gpu.local_ptr)"}




def _access_report(ir: KernelIR):
    """Triton gets every access as written; the report gives each one's class for reference."""
    from ..analysis import classify_accesses
    out = []
    for a in classify_accesses(ir).values():
        if a.op.defn in (ops.COPY_IN, ops.COPY_OUT):
            out.append((a.line, "tle.gpu.copy", a.kind, "tl.load into the buffer's register tile"
                        if a.op.defn is ops.COPY_IN else "tl.store of the buffer's register tile"))
            continue
        how = {ops.LOAD: "tl.load", ops.STORE: "tl.store", ops.ATOMIC_CAS: "tl.atomic_cas"}.get(
            a.op.defn, f"tl.atomic_{a.op.attrs.get('kind')}")
        if a.op.defn is ops.LOAD and a.op.attrs.get("is_async"):
            how += f", is_async: {how_issued(a.op)}"
        if a.reason and a.kind in ("general", "strided"):
            how += f" ({a.reason}, with integer arguments unknown until launch)"
        out.append((a.line, a.op.name, a.kind, how))
    for op in ir.walk():
        if op.defn is ops.RAW_CALL and getattr(op.attrs["fn"], "flagtree", False):
            out.append((op.loc.line, "tle.raw.call", "raw", "LLVM IR linked into the kernel, run by every thread; "
                                                            "tiles copied through shared memory"))
        elif op.defn is ops.RAW_CALL:
            out.append((op.loc.line, "tle.call", "raw", "element-wise: inlined as tile code"))
        elif op.defn in _BUFFER_SITES:
            out.append((op.loc.line, f"tle.gpu.{op.name}", "buffer", _BUFFER_SITES[op.defn]))
        elif op.has(Trait.DESCRIPTOR):
            out.append((op.loc.line, op.spelling, "descriptor",
                        "a tensor-descriptor access, as written (TMA on Hopper)"))
        elif op.defn is ops.FOR and op.attrs.get("kind") is LoopKind.PIPELINE:
            stages = op.attrs.get("num_stages")
            out.append((op.loc.line, "tle.gpu.pipeline", "loop", "tl.range" + (
                f"(num_stages={stages}): Triton's software pipelining" if stages is not None else
                " with the launch's num_stages")))
    return sorted(out)


class Backend(api.Backend):
    name = "triton"
    rules = RULES
    # what `tle compare` does with a lowering, with or without a GPU: compile it to this stage for target()
    # (reaching ptx runs Triton's compiler down to ptxas's check of the PTX); and, without a GPU, run it on
    # CPU tensors by launching it as usual, which TRITON_INTERPRET=1 sends to Triton's interpreter
    build_stage = "ptx"
    cpu_run = ("launch", "Triton interpreter")

    def target(self) -> str:
        """The architecture the stages are compiled for here: this machine's GPU, else sm_90a."""
        from triton.backends.nvidia.compiler import sm_arch_from_capability

        from .stages import gpu_target
        return sm_arch_from_capability(gpu_target().arch)

    def unavailable_reason(self):
        return None  # triton is a dependency; without a GPU it lowers, compiles stages and interprets

    def launch_unavailable_reason(self, device):
        mismatch = interpreter_mismatch()
        if mismatch is not None:
            return mismatch
        if interpret_mode():
            return None if device.type == "cpu" else \
                "TRITON_INTERPRET=1 runs on CPU tensors; pass CPU tensors or unset TRITON_INTERPRET"
        import torch
        if device.type != "cuda" or not torch.cuda.is_available():
            return "no CUDA device here (set TRITON_INTERPRET=1 to run on the CPU in Triton's interpreter)"
        return None

    def launched_warps(self, num_warps: int) -> tuple[int, str]:
        """Triton launches a power of two of warps: a kernel asking for 4 x (warp groups), say 12, runs on the
        largest power of two below it. The warps' number never changes a result."""
        if num_warps & (num_warps - 1) == 0:
            return num_warps, ""
        return 1 << (num_warps.bit_length() - 1), "Triton launches a power of two of warps"

    def lower(self, ir: KernelIR, spec: Spec, cache_dir: str) -> TritonCompiled:
        bound_guarded_loops(ir)
        drop_overwritten_buffer_carries(ir)
        ir.notes.extend(pipeline_async_loads(ir, ir.num_stages))
        ir.notes.extend(RULES.check_attributes(ir))
        gen = TritonCodegen(ir)
        source = gen.generate()
        llvm = gen.raw_library.text() if gen.raw_library is not None else ""
        digest = hashlib.sha256((source + llvm + triton.__version__ + str(interpret_mode())).encode()).hexdigest()[:20]
        path = os.path.join(cache_dir, "triton", f"{ir.name}_{digest}.py")
        llvm_path = None
        if llvm:             # beside the source, which finds it by its own path
            llvm_path = os.path.splitext(path)[0] + ".ll"
            write_once(llvm_path, llvm)
        write_once(path, source)
        if not ir.params and not ir.body.ops:
            raise LoweringError("empty kernel", ir.loc, "triton")
        compiled = TritonCompiled(ir, spec, source, path, llvm_path, gen.raw_library.sites if llvm else ())
        compiled.llvm = llvm or None
        compiled.access_report = _access_report(ir)
        compiled.line_map = gen.line_map
        return compiled
