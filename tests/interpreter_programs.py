"""Small hand-written TileLang programs, one or a few constructs each, for the interpreter of TileLang
programs: PROGRAMS have a defined result and a torch reference (the CPU tests run them through the
interpreter, the GPU tests through compiled TileLang too); the others do something with no defined
result that the interpreter must report."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

import torch

HEADER = "import tilelang.language as T\n\n\n"


@dataclass
class Case:
    source: str
    make: Callable | None = None     # () -> (args, {argument index: expected tensor after the run})
    atol: float = 1e-6               # also the rtol
    strict: bool = True              # strict_reads for the interpreter
    predicated: dict = field(default_factory=dict)   # the reads past a global tensor it must count


PROGRAMS: dict[str, Case] = {}
ERRORS: dict[str, Case] = {}


def write_program(folder, name: str) -> str:
    """Write program `name` to a file (TileLang's parser reads functions from their source file)."""
    case = PROGRAMS.get(name) or ERRORS[name]
    path = os.path.join(str(folder), f"{name}.py")
    with open(path, "w") as f:
        f.write(HEADER + case.source.strip() + "\n")
    return path


def _nan(*shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype)


# -- T.copy: the global side predicated, per dimension of the view --------------------------------------
def _copy_edges():
    x, y = torch.randn(10), torch.full((16,), -7.0)
    z, w = torch.randn(20), _nan(16)
    want_y = y.clone()
    want_y[12:16] = x[6:10]                          # the copy's last four elements fall past y
    want_y[0:8] = torch.cat([x[3:10], torch.zeros(1)])
    zv = z.view(4, 5)
    want_w = torch.zeros(4, 4)
    want_w[:2, :2] = zv[2:4, 3:5]                    # rows 2..5, columns 3..6 of a 4x5 view
    return [x, y, z, w], {1: want_y, 3: want_w.view(-1)}


PROGRAMS["copy_edges"] = Case('''
@T.prim_func
def copy_edges(x: T.Tensor((10,), 'float32'), y: T.Tensor((16,), 'float32'), z: T.Tensor((20,), 'float32'),
               w: T.Tensor((16,), 'float32')):
    with T.Kernel(1, threads=32) as bx:
        zv = T.StridedTensor((4, 5), (5, 1), 'float32', data=z.data)
        wv = T.StridedTensor((4, 4), (4, 1), 'float32', data=w.data)
        f = T.alloc_fragment((8,), 'float32')
        g = T.alloc_fragment((8,), 'float32')
        h = T.alloc_fragment((4, 4), 'float32')
        T.copy(x[6:14], f)
        T.copy(f, y[12:20])
        T.copy(x[bx + 3:bx + 11], g)
        T.copy(g, y[0:8])
        T.copy(zv[2:6, 3:7], h)
        T.copy(h, wv[0:4, 0:4])
''', _copy_edges)


# -- T.Parallel: masked stores, lazy T.if_then_else, fragments and shared buffers ------------------------
def _parallel_masks():
    x = torch.randn(64)
    y, z = _nan(64), torch.full((64,), -7.0)
    i = torch.arange(64)
    want_y = torch.where(i + 60 < 64, x[(i + 60) % 64], -1.0) * 2 + torch.where(i % 3 == 0, x, 0.0)
    want_z = z.clone()
    want_z[i % 2 == 1] = x[i % 2 == 1] + 1
    return [x, y, z], {1: want_y, 2: want_z}


PROGRAMS["parallel_masks"] = Case('''
@T.prim_func
def parallel_masks(x: T.Tensor((64,), 'float32'), y: T.Tensor((64,), 'float32'), z: T.Tensor((64,), 'float32')):
    with T.Kernel(1, threads=64) as bx:
        a = T.alloc_fragment((64,), 'float32')
        s = T.alloc_shared((64,), 'float32')
        for i in T.Parallel(64):
            a[i] = T.if_then_else(i + 60 < 64, x[i + 60], -1.0)
        for i in T.Parallel(64):
            s[i] = T.if_then_else(i % 3 == 0, x[i], 0.0)
        for i in T.Parallel(64):
            y[i] = a[i] * 2.0 + s[i]
        for i in T.Parallel(64):
            if i % 2 == 1:
                z[i] = x[i] + 1.0
''', _parallel_masks)


# -- T.gemm with each pair of transpose flags, accumulating ----------------------------------------------
def _gemm_flags():
    a = (torch.randn(64, 32) / 4).half()
    b = (torch.randn(32, 64) / 4).half()
    af, bf = a.float(), b.float()
    outs = [_nan(64 * 64) for _ in range(4)]
    want = [2 * af @ bf, af @ bf, af @ bf, af @ bf]
    return [a.view(-1), a.t().contiguous().view(-1), b.view(-1), b.t().contiguous().view(-1), *outs], \
        {4 + k: w.view(-1) for k, w in enumerate(want)}


PROGRAMS["gemm_flags"] = Case('''
@T.prim_func
def gemm_flags(a: T.Tensor((2048,), 'float16'), at: T.Tensor((2048,), 'float16'), b: T.Tensor((2048,), 'float16'),
               bt: T.Tensor((2048,), 'float16'), c0: T.Tensor((4096,), 'float32'), c1: T.Tensor((4096,), 'float32'),
               c2: T.Tensor((4096,), 'float32'), c3: T.Tensor((4096,), 'float32')):
    with T.Kernel(1, threads=128) as bx:
        av = T.StridedTensor((64, 32), (32, 1), 'float16', data=a.data)
        atv = T.StridedTensor((32, 64), (64, 1), 'float16', data=at.data)
        bv = T.StridedTensor((32, 64), (64, 1), 'float16', data=b.data)
        btv = T.StridedTensor((64, 32), (32, 1), 'float16', data=bt.data)
        sa = T.alloc_shared((64, 32), 'float16')
        sat = T.alloc_shared((32, 64), 'float16')
        sb = T.alloc_shared((32, 64), 'float16')
        sbt = T.alloc_shared((64, 32), 'float16')
        acc = T.alloc_fragment((64, 64), 'float32')
        T.copy(av[0:64, 0:32], sa)
        T.copy(atv[0:32, 0:64], sat)
        T.copy(bv[0:32, 0:64], sb)
        T.copy(btv[0:64, 0:32], sbt)
        T.clear(acc)
        T.gemm(sa, sb, acc)
        T.gemm(sa, sb, acc)
        T.copy(acc, T.StridedTensor((64, 64), (64, 1), 'float32', data=c0.data)[0:64, 0:64])
        T.clear(acc)
        T.gemm(sat, sb, acc, transpose_A=True)
        T.copy(acc, T.StridedTensor((64, 64), (64, 1), 'float32', data=c1.data)[0:64, 0:64])
        T.clear(acc)
        T.gemm(sa, sbt, acc, transpose_B=True)
        T.copy(acc, T.StridedTensor((64, 64), (64, 1), 'float32', data=c2.data)[0:64, 0:64])
        T.clear(acc)
        T.gemm(sat, sbt, acc, transpose_A=True, transpose_B=True)
        T.copy(acc, T.StridedTensor((64, 64), (64, 1), 'float32', data=c3.data)[0:64, 0:64])
''', _gemm_flags, atol=1e-4)


# -- reductions along each axis ----------------------------------------------------------------------------
def _reductions():
    x = torch.randn(8, 32)
    outs = [_nan(8), _nan(8), _nan(32), _nan(1)]
    want = [x.sum(1), x.max(1).values, x.min(0).values, x.abs().sum().reshape(1)]
    return [x.view(-1), *outs], {1 + k: w for k, w in enumerate(want)}


PROGRAMS["reductions"] = Case('''
@T.prim_func
def reductions(x: T.Tensor((256,), 'float32'), s: T.Tensor((8,), 'float32'), m: T.Tensor((8,), 'float32'),
               n: T.Tensor((32,), 'float32'), t: T.Tensor((1,), 'float32')):
    with T.Kernel(1, threads=128) as bx:
        xv = T.StridedTensor((8, 32), (32, 1), 'float32', data=x.data)
        f = T.alloc_fragment((8, 32), 'float32')
        a = T.alloc_fragment((256,), 'float32')
        rs = T.alloc_fragment((8,), 'float32')
        rm = T.alloc_fragment((8,), 'float32')
        rn = T.alloc_fragment((32,), 'float32')
        rt = T.alloc_fragment((1,), 'float32')
        T.copy(xv[0:8, 0:32], f)
        T.reduce_sum(f, rs, dim=1)
        T.reduce_max(f, rm, dim=1)
        T.reduce_min(f, rn, dim=0)
        for i in T.Parallel(256):
            a[i] = T.abs(x[i])
        T.reduce_sum(a, rt, dim=0)
        T.copy(rs, s[0:8])
        T.copy(rm, m[0:8])
        T.copy(rn, n[0:32])
        T.copy(rt, t[0:1])
''', _reductions, atol=1e-5)


# -- integer semantics, casts and reinterpretation --------------------------------------------------------
def _integers():
    a = torch.tensor([-7, 7, -8, 8, -1, 0, 13, -13], dtype=torch.int32)
    b = torch.tensor([2, -2, 3, -3, 4, 5, -6, 6], dtype=torch.int32)
    f = torch.tensor([-2.5, 2.5, -0.7, 0.7, 1e3, -1e3, 3.99, -3.99])
    outs = [torch.full((8,), -99, dtype=torch.int32) for _ in range(6)]
    bf = _nan(8, dtype=torch.bfloat16)
    want = [torch.div(a, b, rounding_mode="trunc"), torch.fmod(a, b), torch.div(a, b, rounding_mode="floor"),
            torch.remainder(a, b), ((a << 3) ^ (a >> 1)) | (b & 6), f.to(torch.int32)]
    return [a, b, f, *outs, bf], {3 + k: w for k, w in enumerate(want)} | {9: (f * 1.001).to(torch.bfloat16)}


PROGRAMS["integers"] = Case('''
@T.prim_func
def integers(a: T.Tensor((8,), 'int32'), b: T.Tensor((8,), 'int32'), f: T.Tensor((8,), 'float32'),
             q: T.Tensor((8,), 'int32'), r: T.Tensor((8,), 'int32'), fq: T.Tensor((8,), 'int32'),
             fr: T.Tensor((8,), 'int32'), bits: T.Tensor((8,), 'int32'), t: T.Tensor((8,), 'int32'),
             h: T.Tensor((8,), 'bfloat16')):
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(8):
            q[i] = T.truncdiv(a[i], b[i])
            r[i] = T.truncmod(a[i], b[i])
            fq[i] = a[i] // b[i]
            fr[i] = a[i] % b[i]
            bits[i] = T.shift_left(a[i], 3) ^ T.shift_right(a[i], 1) | (b[i] & 6)
            t[i] = T.cast(f[i], 'int32')
            h[i] = T.cast(f[i] * 1.001, 'bfloat16')
''', _integers)


def _divide():
    a, b = torch.arange(8, dtype=torch.int32), torch.tensor([1, 2, 0, 1, 1, 1, 1, 1], dtype=torch.int32)
    return [a, b, torch.zeros(8, dtype=torch.int32), 1], {2: torch.tensor([0, 0, -1, 3, 4, 5, 6, 7], dtype=torch.int32)}


PROGRAMS["divide"] = Case('''
@T.prim_func
def divide(a: T.Tensor((8,), 'int32'), b: T.Tensor((8,), 'int32'), out: T.Tensor((8,), 'int32'), guard: T.int32):
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(8):
            if guard == 1:
                out[i] = T.if_then_else(b[i] != 0, T.truncdiv(a[i], b[i]), -1)
            else:
                out[i] = T.truncdiv(a[i], b[i])
''', _divide)


# -- math functions ------------------------------------------------------------------------------------------
def _math():
    x = torch.linspace(-3, 3, 64)
    y = _nan(64)
    want = (torch.exp2(x) + torch.log2(x.abs() + 1) + torch.rsqrt(x.abs() + 0.5) + torch.sigmoid(x) + torch.erf(x)
            + torch.sqrt(x.abs()) + torch.floor(x) - torch.ceil(x) + torch.sin(x) * torch.cos(x)
            + torch.maximum(x, -x * 0.5) - torch.minimum(x, torch.zeros(()) ) + torch.fmod(x, torch.tensor(1.25))
            + torch.tanh(x))
    return [x, y], {1: want}


PROGRAMS["math"] = Case('''
@T.prim_func
def math(x: T.Tensor((64,), 'float32'), y: T.Tensor((64,), 'float32')):
    with T.Kernel(1, threads=64) as bx:
        for i in T.Parallel(64):
            y[i] = (T.exp2(x[i]) + T.log2(T.abs(x[i]) + 1.0) + T.rsqrt(T.abs(x[i]) + 0.5) + T.sigmoid(x[i])
                    + T.erf(x[i]) + T.sqrt(T.abs(x[i])) + T.floor(x[i]) - T.ceil(x[i]) + T.sin(x[i]) * T.cos(x[i])
                    + T.max(x[i], x[i] * -0.5) - T.min(x[i], 0.0) + T.fmod(x[i], 1.25) + T.tanh(x[i]))
''', _math, atol=1e-5)


# -- atomics: a statement outside T.Parallel runs on every thread ------------------------------------------
def _atomics():
    v = torch.randint(0, 8, (100,), dtype=torch.int32)
    hist, once, every, top = torch.zeros(8, dtype=torch.int32), torch.zeros(1), torch.zeros(1), torch.full((2,), -1e9)
    want_top = torch.tensor([v.max().float().item(), -1e9])
    return [v, hist, once, every, top], {1: torch.bincount(v.long(), minlength=8).int(), 2: torch.tensor([2.5]),
                                        3: torch.tensor([64 * 1.5]), 4: want_top}


PROGRAMS["atomics"] = Case('''
@T.prim_func
def atomics(v: T.Tensor((100,), 'int32'), hist: T.Tensor((8,), 'int32'), once: T.Tensor((1,), 'float32'),
            every: T.Tensor((1,), 'float32'), top: T.Tensor((2,), 'float32')):
    with T.Kernel(1, threads=64) as bx:
        for i in T.Parallel(128):
            if i < 100:
                T.atomic_add(hist[v[i]], 1)
                T.atomic_max(top[0], T.cast(v[i], 'float32'))
        if T.get_thread_binding() == 0:
            T.atomic_add(once[0], 2.5)
        T.atomic_add(every[0], 1.5)
''', _atomics)


# -- thread-level code: per-thread values, loops of different lengths, per-thread variables ---------------
def _thread_level():
    x, y = torch.randn(64), _nan(64)
    tail = torch.flip(torch.cumsum(torch.flip(x[:40], [0]), 0), [0])
    want = torch.zeros(64)
    want[:40] = tail
    want[32:] *= -1
    return [x, y, 40], {1: want}


PROGRAMS["thread_level"] = Case('''
@T.prim_func
def thread_level(x: T.Tensor((64,), 'float32'), y: T.Tensor((64,), 'float32'), n: T.int32):
    with T.Kernel(1, threads=64) as bx:
        s = T.alloc_shared((64,), 'float32')
        acc = T.alloc_var('float32', init=0.0)
        tid = T.get_thread_binding(0)
        for i in T.Parallel(64):
            s[i] = x[i]
        for k in T.serial(tid, n):
            acc = acc + s[k]
        if tid < 32:
            y[tid] = acc
        else:
            y[tid] = -acc
''', _thread_level, atol=1e-5)


# -- T.Pipelined in TileLang's schedule: a buffer written in stage 0 and read in stage 1 needs versions ----
def _pipeline_versions():
    x, y, z = torch.randn(4 * 32), _nan(32), _nan(32)
    want = sum(x[k * 32:(k + 1) * 32] * (k + 1) for k in range(4))
    return [x, y, z], {1: want, 2: want}


PROGRAMS["pipeline_versions"] = Case('''
@T.prim_func
def pipeline_versions(x: T.Tensor((128,), 'float32'), y: T.Tensor((32,), 'float32'), z: T.Tensor((32,), 'float32')):
    with T.Kernel(1, threads=32) as bx:
        s = T.alloc_shared((32,), 'float32')
        s2 = T.alloc_shared((32,), 'float32')
        acc = T.alloc_fragment((32,), 'float32')
        T.clear(acc)
        for k in T.Pipelined(4, num_stages=2, order=[0, 1], stage=[0, 1]):
            for i in T.Parallel(32):
                s[i] = x[k * 32 + i]
            for i in T.Parallel(32):
                acc[i] = acc[i] + s[i] * T.cast(k + 1, 'float32')
        T.copy(acc, y[0:32])
        T.clear(acc)
        for k in T.Pipelined(4, num_stages=2):
            T.copy(x[k * 32:k * 32 + 32], s2)
            for i in T.Parallel(32):
                acc[i] = acc[i] + s2[i] * T.cast(k + 1, 'float32')
        T.copy(acc, z[0:32])
''', _pipeline_versions, atol=1e-5)


# -- reads past a global tensor in T.Parallel: zero, as TileLang's safe-memory pass makes them -------------
def _global_overread():
    x, y = torch.randn(64), _nan(64)
    return [x, y], {1: torch.cat([x[8:], torch.zeros(8)]) + torch.cat([torch.zeros(4), x[:60]])}


PROGRAMS["global_overread"] = Case('''
@T.prim_func
def global_overread(x: T.Tensor((64,), 'float32'), y: T.Tensor((64,), 'float32')):
    with T.Kernel(1, threads=64) as bx:
        for i in T.Parallel(64):
            y[i] = x[i + 8] + x[i - 4]
''', _global_overread, strict=False, predicated={"x": 12})


def _bf16_arith():
    x = torch.randn(64).bfloat16()
    w = torch.randn(64).bfloat16()
    return [x, w, _nan(64, dtype=torch.bfloat16)], {2: x * w + x}


PROGRAMS["bf16_arith"] = Case('''
@T.prim_func
def bf16_arith(x: T.Tensor((64,), 'bfloat16'), w: T.Tensor((64,), 'bfloat16'), y: T.Tensor((64,), 'bfloat16')):
    with T.Kernel(1, threads=64) as bx:
        for i in T.Parallel(64):
            y[i] = x[i] * w[i] + x[i]
''', _bf16_arith, atol=8e-3)


# -- programs with no defined result ---------------------------------------------------------------------------
ERRORS["shared_off_by_one"] = Case('''
@T.prim_func
def shared_off_by_one(x: T.Tensor((64,), 'float32'), y: T.Tensor((64,), 'float32')):
    with T.Kernel(1, threads=64) as bx:
        s = T.alloc_shared((64,), 'float32')
        for i in T.Parallel(64):
            s[i] = x[i]
        for i in T.Parallel(64):
            y[i] = s[i + 1]
''')

ERRORS["negative_copy_start"] = Case('''
@T.prim_func
def negative_copy_start(x: T.Tensor((10,), 'float32'), y: T.Tensor((8,), 'float32')):
    with T.Kernel(1, threads=32) as bx:
        g = T.alloc_fragment((8,), 'float32')
        T.copy(x[bx - 3:bx + 5], g)
        T.copy(g, y[0:8])
''')

ERRORS["negative_index"] = Case('''
@T.prim_func
def negative_index(x: T.Tensor((10,), 'float32'), y: T.Tensor((8,), 'float32')):
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(8):
            y[i] = x[bx - 1]
''')

ERRORS["global_overwrite"] = Case('''
@T.prim_func
def global_overwrite(x: T.Tensor((64,), 'float32'), y: T.Tensor((64,), 'float32')):
    with T.Kernel(1, threads=64) as bx:
        for i in T.Parallel(64):
            y[i + 1] = x[i]
''')

ERRORS["half_cleared"] = Case('''
@T.prim_func
def half_cleared(y: T.Tensor((64,), 'float32')):
    with T.Kernel(1, threads=64) as bx:
        acc = T.alloc_fragment((64,), 'float32')
        for i in T.Parallel(32):
            acc[i] = 0.0
        for i in T.Parallel(64):
            y[i] = acc[i] + 1.0
''')

ERRORS["blocks_collide"] = Case('''
@T.prim_func
def blocks_collide(y: T.Tensor((4,), 'float32'), differ: T.int32):
    with T.Kernel(2, threads=32) as bx:
        y[0] = T.if_then_else(differ == 1, T.cast(bx, 'float32'), 7.0)
''')

ERRORS["blocks_read_each_other"] = Case('''
@T.prim_func
def blocks_read_each_other(y: T.Tensor((4,), 'float32')):
    with T.Kernel(2, threads=32) as bx:
        if bx == 0:
            y[0] = 1.0
        else:
            y[1] = y[0] + 1.0
''')

ERRORS["parallel_shift"] = Case('''
@T.prim_func
def parallel_shift(x: T.Tensor((64,), 'float32'), y: T.Tensor((64,), 'float32')):
    with T.Kernel(1, threads=64) as bx:
        s = T.alloc_shared((64,), 'float32')
        for i in T.Parallel(64):
            s[i] = x[i]
        for i in T.Parallel(63):
            s[i] = s[i + 1] * 2.0
        for i in T.Parallel(64):
            y[i] = s[i]
''')

ERRORS["pipeline_backwards"] = Case('''
@T.prim_func
def pipeline_backwards(x: T.Tensor((128,), 'float32'), y: T.Tensor((32,), 'float32')):
    with T.Kernel(1, threads=32) as bx:
        s = T.alloc_shared((32,), 'float32')
        acc = T.alloc_fragment((32,), 'float32')
        T.clear(acc)
        for k in T.Pipelined(4, num_stages=2, order=[0, 1], stage=[1, 0]):
            for i in T.Parallel(32):
                s[i] = x[k * 32 + i]
            for i in T.Parallel(32):
                acc[i] = acc[i] + s[i]
        T.copy(acc, y[0:32])
''')

ERRORS["parallel_in_thread_branch"] = Case('''
@T.prim_func
def parallel_in_thread_branch(y: T.Tensor((64,), 'float32')):
    with T.Kernel(1, threads=64) as bx:
        if T.get_thread_binding() < 32:
            for i in T.Parallel(64):
                y[i] = 1.0
''')

# cp.async of 8 fp16 elements (16 bytes) per thread, landing on an mbarrier, `shift` elements into x and `into`
# elements into s: 16-byte aligned only where both are multiples of 8 (and x's own address is aligned)
ERRORS["cp_async_alignment"] = Case('''
@T.prim_func
def cp_async_alignment(x: T.Tensor((136,), 'float16'), y: T.Tensor((128,), 'float16'), shift: T.int32,
                       into: T.int32):
    with T.Kernel(1, threads=16) as bx:
        s = T.alloc_shared((136,), 'float16')
        full = T.alloc_barrier(arrive_count=16)
        tx = T.get_thread_binding()
        T.ptx_cp_async(T.access_ptr(s[tx * 8 + into], 'w', 8), T.access_ptr(x[tx * 8 + shift], 'r', 8), 8,
                       tx < 15)
        T.cp_async_barrier_noinc(full[0])
        T.barrier_wait(full[0], 0)
        for i in T.Parallel(128):
            y[i] = s[i]
''')
