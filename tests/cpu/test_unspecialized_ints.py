"""Int parameters named in `tle.jit(do_not_specialize=...)` (seeds, offsets: a new value at every launch) are
taken as plain runtime ints by Triton too: its jit is told so, and the launch does not tell its compiled kernels
apart by the class (== 1, multiple of 16, other) of those values. Without this, a dropout kernel launched with
a fresh Philox offset each step compiled a new kernel for each class combination it met."""
import os
import subprocess
import sys

import torch
import triton.language as tl

import tle


def _add_seed(x_ptr, y_ptr, n, seed, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=ok) + seed, mask=ok)


add_seed = tle.jit(_add_seed, do_not_specialize=("seed",))
add_seed_specialized = tle.jit(_add_seed)


def _lowered(kernel):
    x = torch.empty(100, dtype=torch.int32, device="meta")
    return kernel.lower(x, x, 100, 7, BLOCK=64, backend="triton", grid=(2,))


def test_triton_jit_is_told_which_ints_not_to_specialize():
    lowered = _lowered(add_seed)
    assert "@triton.jit(do_not_specialize=['seed'])" in lowered.source
    # Triton's own reading of the decorator (its jit, outside the interpreter this suite runs in)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    read = subprocess.run([sys.executable, "-c", "import sys; from tle.lowering.files import load_module; "
                           "fn = getattr(load_module(sys.argv[1], 'm'), sys.argv[2]); "
                           "print(*[p.name for p in fn.params if p.do_not_specialize])",
                           lowered.compiled.path, lowered.kernel.name], env=env, capture_output=True, text=True)
    assert read.stdout.split() == ["seed"], read.stderr
    assert "@triton.jit\n" in _lowered(add_seed_specialized).source


def test_the_launch_key_leaves_out_unspecialized_ints():
    params = [a.name for a in _lowered(add_seed).compiled.spec.args]
    keyed = [params[i] for i in _lowered(add_seed).compiled._int_positions]
    assert keyed == ["n"]
    keyed = [params[i] for i in _lowered(add_seed_specialized).compiled._int_positions]
    assert keyed == ["n", "seed"]


def test_values_of_every_class_reach_the_kernel():
    x = torch.arange(100, dtype=torch.int32)
    for seed in (1, 16, 7, -32):
        y = torch.empty_like(x)
        add_seed[(2,)](x, y, 100, seed, BLOCK=64, backend="triton")
        assert torch.equal(y, x + seed)
