"""Kernels of the FlagTree forms (tle.gpu spellings and layout hints, Triton-language gaps, tle.gpu.local_ptr),
shared by tests/cpu (interpreters) and tests/gpu (compiled on CUDA)."""
import triton.language as tl

import tle


@tle.jit
def hinted_buffers(x_ptr, out_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    plain = tle.gpu.alloc([BLOCK], dtype=tl.float32, layout=None, scope=tle.gpu.smem, nv_mma_shared_layout=False)
    laid = tle.gpu.alloc([BLOCK], dtype=tl.float32, scope=tle.gpu.smem,
                         layout=tle.gpu.swizzled_shared_layout(1, 1, 1, [0]))
    tle.gpu.local_store(laid, 0.0)
    for i in tle.gpu.pipeline(0, N, 1, num_stages=2, loop_unroll_factor=2):
        tle.gpu.copy(x_ptr + i * BLOCK + offs, plain, [BLOCK])
        tle.gpu.local_store(laid, tle.gpu.local_load(laid) + tle.gpu.local_load(plain))
    total = tle.gpu.memory_space(tle.gpu.local_load(laid), "shared_memory")
    tl.store(out_ptr + offs, total)


@tle.jit
def extremes_and_cat(x_ptr, y_ptr, out_ptr, n, B: tl.constexpr):
    offs = tl.arange(0, B)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    lim = min(n, B, 1000)                     # a runtime value among constexprs
    tl.store(out_ptr + tl.arange(0, 2 * B), tl.cat(x, y, can_reorder=True))
    tl.store(out_ptr + 2 * B + offs, max(x, y, 0.5))
    tl.store(out_ptr + 3 * B + offs, tl.where(offs < lim, min(x, y), 0.0))


@tle.jit
def gathers(x_ptr, i_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + r * C + c)
    idx = tl.load(i_ptr + r * C + c)
    rows = tl.gather(x, idx, 0)                   # x[idx[i, j], j]
    cols = x.gather(idx % C, axis=1)              # x[i, idx[i, j] % C]
    tl.store(out_ptr + r * C + c, rows + cols * 1000)


@tle.jit
def gather_in_loop(x_ptr, i_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    acc = tl.zeros([N], dtype=tl.float32)
    for k in range(3):                            # a fresh source each step: the staging copy is reused
        x = tl.load(x_ptr + k * N + offs)
        acc += tl.gather(x, tl.load(i_ptr + k * N + offs), 0)
    tl.store(out_ptr + offs, acc)


@tle.jit
def assumed(x_ptr, out_ptr, n, stride, B: tl.constexpr):
    pid = tl.program_id(0)
    tl.assume(pid >= 0)
    tl.assume(stride > 0)
    offs = pid * B + tl.arange(0, B)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride, mask=offs < n) * 2, mask=offs < n)


@tle.jit
def axpy_through_pointers(x_ptr, y_ptr, out_ptr, numel, alpha, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < numel
    buf = tle.gpu.alloc([BLOCK], dtype=tl.float32)
    ptrs = tle.gpu.local_ptr(buf)                       # made before the copy: it sees the copy's write
    tle.gpu.copy(x_ptr + offsets, buf, [BLOCK], mask=mask, other=0.0)
    v = tl.load(ptrs, mask=mask, other=-1.0)
    tl.store(ptrs, v * alpha + tl.load(y_ptr + offsets, mask=mask), mask=mask)
    tle.gpu.copy(buf, out_ptr + offsets, [BLOCK], mask=mask)


@tle.jit
def slices_in_a_loop(x_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr, S: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    buf = tle.gpu.alloc([R, C], dtype=tl.float32)
    tle.gpu.copy(x_ptr + r * C + c, buf, [R, C])
    for s in range(C // S):                             # column slices, rewritten one by one
        p = tle.gpu.local_ptr(buf, offsets=(r * C + s * S + tl.arange(0, S)[None, :]).to(tl.int32))
        tl.store(p, tl.load(p) * 2 + s)
    backwards = tle.gpu.local_ptr(buf, offsets=R * C - 1 - (r * C + c))
    tl.store(out_ptr + r * C + c, tl.load(backwards - 1 + 1))


@tle.jit
def product_of_pointer_slices(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                              PARTS: tl.constexpr):
    rm = tl.arange(0, M)[:, None]
    rk = tl.arange(0, K)[None, :]
    a = tle.gpu.alloc([M, K], dtype=tl.float16)
    b = tle.gpu.alloc([K, N], dtype=tl.float16)
    tle.gpu.copy(a_ptr + rm * K + rk, a, [M, K])
    tle.gpu.copy(b_ptr + tl.arange(0, K)[:, None] * N + tl.arange(0, N)[None, :], b, [K, N])
    acc = tl.zeros([M, N], dtype=tl.float32)
    W: tl.constexpr = K // PARTS
    for part in range(PARTS):
        a_slice = tle.gpu.local_ptr(a, offsets=rm * K + part * W + tl.arange(0, W)[None, :])
        b_slice = tle.gpu.local_ptr(b, offsets=(part * W + tl.arange(0, W))[:, None] * N + tl.arange(0, N)[None, :])
        acc += tl.dot(tl.load(a_slice), tl.load(b_slice), out_dtype=tl.float32)
    tl.store(c_ptr + rm * N + tl.arange(0, N)[None, :], acc)


@tle.jit
def descriptor_add(a_desc, b_desc, c_desc, ynumel, XBLOCK: tl.constexpr, YBLOCK: tl.constexpr):
    """c = a + b through host tensor descriptors: desc.load / desc.store."""
    pid = tl.program_id(0)
    for yoff in range(0, ynumel, YBLOCK):
        c_desc.store([pid * XBLOCK, yoff], a_desc.load([pid * XBLOCK, yoff]) + b_desc.load([pid * XBLOCK, yoff]))


@tle.jit
def descriptor_copies(a_desc, c_desc, ynumel, XBLOCK: tl.constexpr, YBLOCK: tl.constexpr):
    """c = 2 a through buffers: FlagTree's TMA form copy(desc, buf, shape, offsets) and back."""
    pid = tl.program_id(0)
    a_s = tle.gpu.alloc([XBLOCK, YBLOCK], dtype=a_desc.dtype, scope=tle.gpu.smem)
    c_s = tle.gpu.alloc([XBLOCK, YBLOCK], dtype=a_desc.dtype, scope=tle.gpu.smem)
    for yoff in range(0, ynumel, YBLOCK):
        tle.gpu.copy(a_desc, a_s, [XBLOCK, YBLOCK], [pid * XBLOCK, yoff])
        tle.gpu.local_store(c_s, tle.gpu.local_load(a_s) * 2)
        tle.gpu.copy(c_s, c_desc, [XBLOCK, YBLOCK], [pid * XBLOCK, yoff])


@tle.jit
def asm_fma_and_bits(x_ptr, y_ptr, out_ptr, bits_ptr, BLOCK: tl.constexpr):
    """2x + y in PTX with a register of its own (f registers), and x's bits through an r register."""
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    z = tl.inline_asm_elementwise("{ .reg .f32 %t; mul.f32 %t, $1, 0f40000000; add.f32 $0, %t, $2; }", "=f,f,f",
                                  [x, y], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(out_ptr + offs, z)
    b = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.int32, is_pure=False, pack=1)
    tl.store(bits_ptr + offs, b)
