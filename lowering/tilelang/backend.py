"""The TileLang backend: generated `@T.prim_func` source, compiled by TileLang (nvcc), launched through
TileLang's runtime. TileLang compiles per shape: tensor shapes and strides, integer scalars and the grid
are part of what a kernel is compiled for.

Without a GPU it compiles for sm_90a (CUDA source and PTX); kernels run only on CUDA tensors. Without nvcc
it still lowers (IR, generated source, the interpreter of TileLang programs); only the stages that compile
and launches raise CompilerUnavailable.
"""
from __future__ import annotations

import hashlib
import operator
import os
import shutil
import threading

from .. import backend as api
from ..backend import triton_debug
from ..errors import CompilerUnavailable
from ..files import default_cache_dir, load_module, write_once
from ..ir import ops
from ..ir.core import KernelIR
from ..spec import Spec
from ..transforms import (drop_overwritten_buffer_carries, expand_descriptors, fold_constants, fold_dot_accumulators,
                          hoist_guarded_loads, pipeline_async_loads, rewrite_inductions)
from .block_size import check_block_size
from .codegen import PASS_CONFIGS_NAME, generate
from .divergent_barriers import check_barriers
from .placements import placements
from .rules import RULES
from .shared_memory import shared_memory_error
from .stage_reuse import check_stage_reuse

STAGES = ("cuda", "ptx")


def _target():
    try:
        import torch
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            arch = f"sm_{major}{minor}" + ("a" if major == 9 else "")
            return {"kind": "cuda", "arch": arch}
    except Exception:
        pass
    return {"kind": "cuda", "arch": "sm_90a"}


# Triton takes the hardware's approximate fp32 instructions for `/` (div.full), exp (ex2.approx) and sqrt
# (sqrt.approx); nvcc's fast math gives TileLang's kernels the same kind. Without it a division (a sigmoid) or
# an exp is an IEEE-exact instruction sequence: gelu's forward and geglu's backward were compute-bound on it.
PASS_CONFIGS = {"tl.enable_fast_math": True}


def _shared_memory_limit() -> int | None:
    """Bytes of shared memory a block may ask for on the current GPU (None without one)."""
    import torch
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(torch.cuda.current_device()).shared_memory_per_block_optin


def compile_unavailable_reason() -> str | None:
    """Why TileLang cannot compile here (None if it can): it builds the CUDA source with nvcc. Lowering, the
    generated source and the interpreter of TileLang programs do not need it."""
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    if shutil.which("nvcc") is None and not os.path.exists(os.path.join(home, "bin", "nvcc")):
        return "no nvcc: TileLang compiles its CUDA source with nvcc (the CUDA toolkit); none is on PATH or in " \
               f"CUDA_HOME ({home})"
    return None


def compile_prim_func(func, kernel_configs: dict | None = None):
    """TileLang's compiled kernel of a `@T.prim_func`, for this machine's GPU, with the backend's pass configs
    and those the kernel asks for (`kernel_configs`, the generated module's PASS_CONFIGS)."""
    why = compile_unavailable_reason()
    if why is not None:
        raise CompilerUnavailable("tilelang", why)
    return _import_tilelang().compile(func, out_idx=None, target=_target(),
                                      pass_configs={**PASS_CONFIGS, **(kernel_configs or {})})


def _import_tilelang():
    # keep TileLang's own disk cache beside ours unless the user chose a place
    os.environ.setdefault("TILELANG_CACHE_DIR", os.path.join(default_cache_dir(), "tilelang"))
    import logging

    import tilelang
    logging.getLogger("tilelang").setLevel(logging.WARNING)   # it logs every compile at INFO
    return tilelang


# one generated module imported at a time: TileLang's script parser, which runs at the import, keeps state
# of its own; compiles (Compiled.precompile from an autotuner's threads) overlap
_PARSING = threading.Lock()

_AS_IS, _FLAT_VIEW, _SPAN, _ONE_ELEMENT = "as is", "flat view", "span", "one element"


def _how_passed(a) -> tuple[str, int]:
    """(how the kernel takes argument `a`, the extent of its flat buffer)."""
    if not a.is_tensor:
        return _AS_IS, 0
    extent = a.extent
    if extent == 0:
        return _ONE_ELEMENT, 1
    # the kernel takes every tensor as the flat storage span it addresses
    return (_FLAT_VIEW if _contiguous(a.shape, a.strides) else _SPAN), extent


def _passer(how: str, extent: int):
    """The function that turns an argument into what the kernel takes (see _how_passed)."""
    if how is _AS_IS:
        return _as_is
    if how is _FLAT_VIEW:
        return _flat_view
    if how is _SPAN:
        import torch
        size, stride = (extent,), (1,)
        return lambda a: torch.as_strided(a, size, stride)
    # TileLang has no zero-size buffers: the kernel declares one element, which nothing in bounds can read;
    # an empty tensor is passed as a fresh one-element tensor
    return _one_element


def _as_is(a):
    return a


_flat_view = operator.methodcaller("view", -1)
_one_element = operator.methodcaller("new_empty", 1)


def _contiguous(shape, strides) -> bool:
    """torch's is_contiguous for these sizes and strides: dimensions of size 1 may have any stride."""
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


class TileLangCompiled(api.Compiled):
    stages = STAGES

    def __init__(self, ir: KernelIR, spec: Spec, source: str, path: str, notes: list[str],
                 interpreted_path: str | None = None):
        self.ir = ir
        self.spec = spec
        self.source = source
        self.path = path
        self.notes = notes
        # the program the interpreter runs, where it is not `path`'s: tle.raw.dialect functions written as
        # thread-level TIR rather than CUDA device functions (raw_call.py)
        self.interpreted_path = interpreted_path
        self._kernel = None
        self._program = None
        self._checked = False       # the compiled block size, barriers and stages, checked at the first launch
        self._cuda_lines = None     # the CUDA source with TileLang's #line directives (cuda_with_line_directives)
        # how each argument is passed (the kernel is compiled for these shapes and strides): as it is (a
        # scalar), as a flat view, as the strided span it addresses, or as a fresh one-element tensor (empty)
        self._passers = tuple(_passer(*_how_passed(a)) for a in spec.args)

    def _module(self, path: str | None = None):
        _import_tilelang()
        path = path or self.path
        return load_module(path, f"tle_gen_tilelang_{os.path.basename(path)[:-3]}")

    def prim_func(self, interpreted: bool = False):
        """The generated `@T.prim_func`, as TileLang parses it (nothing compiled); `interpreted`: the program the
        interpreter runs in its place (the same but for raw functions' form)."""
        return getattr(self._module(self.interpreted_path if interpreted else None), self.ir.name)

    @property
    def kernel(self):
        if self._kernel is None:
            with _PARSING:
                mod = self._module()
            self._kernel = compile_prim_func(getattr(mod, self.ir.name), getattr(mod, PASS_CONFIGS_NAME, None))
        return self._kernel

    def precompile(self) -> None:
        # the kernel is compiled for the lowering's shapes: all of it can be built before a launch (TileLang's
        # compile releases the GIL, and nvcc is a subprocess, so configs build side by side in threads)
        self.kernel

    def _flat(self, args) -> list:
        # one call per argument, chosen at lowering: this runs on every launch
        return [pass_(a) for pass_, a in zip(self._passers, args)]

    def launch(self, grid, args):
        if not self._checked:
            cuda = self.kernel.get_kernel_source()
            check_block_size(cuda, self.ir)
            check_barriers(cuda, self.ir)
            check_stage_reuse(cuda, self.ir)
            self._checked = True
        try:
            self.kernel(*self._flat(args))
        except Exception as err:
            better = shared_memory_error(err, self.ir, _shared_memory_limit())
            if better is None:
                raise
            raise better from err

    def interpret(self, args, strict_reads: bool = False):
        """Run the generated program on CPU tensors through the interpreter of TileLang programs (a test
        oracle, see interpreter/): the tensors are written in place; returns its Report."""
        from .interpreter import Program
        if self._program is None:
            self._program = Program(self.prim_func(interpreted=True))
        return self._program.run(self._flat(args), strict_reads=strict_reads)

    def placements(self) -> list[tuple[int, str]]:
        return placements(self.source, self.line_map)

    def stage(self, name: str) -> str:
        if name == "source":
            return self.source
        if name == "cuda":
            return self.kernel.get_kernel_source()
        if name == "ptx":
            return self._ptx()
        raise KeyError(f"tilelang stages are source, {', '.join(STAGES)}; got '{name}'")

    def _ptx(self) -> str:
        """The PTX of the kernel's CUDA source, compiled with the flags TileLang's build of it takes: its pass
        configs' fast math among them (TileLang's own PTX export leaves that out, and shows exp2f, division and
        sqrt as the precise sequences the kernel that runs does not have)."""
        from tilelang.contrib import nvcc
        k = self.kernel
        flags = list(k.compile_flags or [])
        if (k.pass_configs or {}).get("tl.enable_fast_math"):
            flags.append("--use_fast_math")
        with k.target:
            return nvcc.get_ptx_from_source(k.get_kernel_source(), compile_flags=flags)

    def cuda_with_line_directives(self) -> str | None:
        """The kernel's CUDA source as TileLang writes it with a `#line` directive before each statement that
        has a line in the generated source (the pass config tl.emit_line_directives), or None where this
        TileLang has no such config. It is lowered again for this, not compiled: the kernel that is built and
        launched, its cache key and its CUDA source stay as they are."""
        if self._cuda_lines is None:
            tilelang = _import_tilelang()
            key = getattr(tilelang.transform.PassConfigKey, "TL_EMIT_LINE_DIRECTIVES", None)
            if key is None:
                return None
            k = self.kernel
            with _PARSING:
                func = getattr(self._module(), self.ir.name)
            with tilelang.transform.PassContext(opt_level=3, config={**(k.pass_configs or {}), key: True}), k.target:
                self._cuda_lines = tilelang.lower(func, target=k.target, enable_device_compile=False).kernel_source
        return self._cuda_lines


class Backend(api.Backend):
    name = "tilelang"
    rules = RULES
    specializes_ints = True
    specializes_shapes = True
    specializes_grid = True
    # what `tle compare` does with a lowering, with or without a GPU: compile it to this stage for target()
    # (TileLang's compile: nvcc and ptxas build the CUDA source); and, without a GPU, run it on CPU tensors
    # through Compiled.interpret (the interpreter of TileLang programs, a test oracle)
    build_stage = "cuda"
    cpu_run = ("interpret", "interpreter of TileLang programs")

    def target(self) -> str:
        """The architecture kernels are compiled for here: this machine's GPU, else sm_90a."""
        return _target()["arch"]

    def unavailable_reason(self):
        try:
            _import_tilelang()
        except Exception as e:  # noqa: BLE001 - any import failure makes the backend unusable
            return f"tilelang cannot be imported: {e}"
        return None

    def compile_unavailable_reason(self):
        return compile_unavailable_reason()

    def launch_unavailable_reason(self, device):
        import torch
        if device.type != "cuda" or not torch.cuda.is_available():
            return "TileLang kernels run on CUDA tensors only (no CPU execution)"
        return compile_unavailable_reason()

    def lower(self, ir: KernelIR, spec: Spec, cache_dir: str) -> TileLangCompiled:
        expand_descriptors(ir)         # TileLang has no descriptors: each access is its masked window (T.copy)
        fold_constants(ir)
        fold_dot_accumulators(ir)      # acc += tl.dot(a, b): T.gemm into acc, as Triton's compiler does it
        rewrite_inductions(ir)
        hoist_guarded_loads(ir)
        drop_overwritten_buffer_carries(ir)
        ir.notes.extend(pipeline_async_loads(ir, ir.num_stages))
        ir.notes.extend(RULES.check_attributes(ir))     # refused attributes raise, dropped ones are noted
        # tl.device_assert is checked where Triton would check it: with its debug mode on (debug.py)
        source, notes, report, line_map = generate(ir, spec, spec.grid, debug=triton_debug())
        import tilelang
        digest = hashlib.sha256((source + tilelang.__version__).encode()).hexdigest()[:20]
        path = os.path.join(cache_dir, "tilelang-src", f"{ir.name}_{digest}.py")
        write_once(path, source)
        interpreted_path = None
        if any(op.defn is ops.RAW_CALL and getattr(op.attrs["fn"], "flagtree", False) for op in ir.walk()):
            twin = generate(ir, spec, spec.grid, debug=triton_debug(), raw_form="tir")[0]
            interpreted_path = path[:-3] + "_interpreted.py"
            write_once(interpreted_path, twin)
        compiled = TileLangCompiled(ir, spec, source, path, list(ir.notes) + notes, interpreted_path)
        compiled.access_report = report
        compiled.line_map = line_map
        return compiled
