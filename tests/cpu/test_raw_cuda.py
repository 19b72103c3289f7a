"""tle.raw.dialect functions as CUDA __device__ functions (lowering/tilelang/raw_cuda.py): key lines of the text,
what is refused, and (where nvcc is installed) every rendered function compiled for sm_90a against TileLang's
own CUDA header, each inside a small __global__ wrapper."""
import os
import re
import shutil
import subprocess

import pytest

pytest.importorskip("jaxlib.mlir")

from tle.lowering.errors import UnsupportedConstruct  # noqa: E402
from tle.lowering.tilelang.raw_cuda import c_string, device_function, literal  # noqa: E402
from tle.raw import InOut, Input, dialect  # noqa: E402
from tle.raw.mlir import arith, ir, llvm, math as mmath, memref, nvvm, scf  # noqa: E402
import raw_dialect_functions as F  # noqa: E402
import raw_dialect_kernels as K  # noqa: E402
from flagtree_edsls import dialect_functions, raw_tutorials  # noqa: E402

RENDERED: dict[str, str] = {}        # every function rendered here, compiled together at the end


def render(fn, name, shapes, pointees=None):
    text = device_function(fn.body(), name, shapes, pointees or {})
    RENDERED[name] = text
    return text


def has(text, *pieces):
    for p in pieces:
        assert p in text, f"{p!r} not in:\n{text}"


def i32():
    return ir.IntegerType.get_signless(32)


def index():
    return ir.IndexType.get()


# -- functions of the other tests -------------------------------------------------------------------------
def test_signature_and_tiles():
    text = render(F.tree_sum, "tree_sum", [(128,), (128,)])
    has(text, "__device__ __forceinline__ int tree_sum(float* acc, float* x) {", "return 0;\n}",
        "int v0 = (int)threadIdx.x;", "int v2 = (int)blockDim.x;", "__syncthreads();")
    assert re.search(r"const int v\d+ = 128; +// memref.dim  line \d+", text)          # the shape passed
    assert re.search(r"float v\d+ = x\[v\d+\]; +// memref.load", text)
    assert re.search(r"acc\[v\d+\] = v\d+; +// memref.store", text)
    # scf.while: the carried value outside the loop, the result set where the condition fails
    assert re.search(r"while \(true\) \{ +// scf.while", text)
    assert re.search(r"if \(!v\d+\) \{ +// scf.condition", text)
    assert "break;" in text
    # ceildivsi: truncating quotient moved up where the exact one is positive
    assert re.search(r"v(\d+) / v(\d+) \+ \(v\1 % v\2 != 0 && \(\(v\1 < 0\) == \(v\2 < 0\)\) \? 1 : 0\)", text)


def test_pointers_and_scalars():
    text = render(F.grid_stride_add, "grid_stride_add", [(), (), (), ()], {0: "fp32", 1: "fp32", 2: "fp32"})
    has(text, "int grid_stride_add(float* out, float* x, float* y, int n)", "(int)blockIdx.x", "(int)gridDim.x")
    assert re.search(r"float\* v\d+ = x \+ v\d+; +// llvm.getelementptr", text)
    assert re.search(r"float v\d+ = \*v\d+; +// llvm.load", text)
    assert re.search(r"\*v\d+ = v\d+; +// llvm.store", text)
    assert re.search(r"for \(int (v\d+) = v\d+; \1 < v\d+; \1 \+= v\d+\) \{ +// scf.for", text)


def test_two_dimensional_tiles_and_loop_carried_values():
    text = render(F.accumulate_product, "accumulate_product", [(8, 32), (8, 16), (16, 32)])
    assert re.search(r"a\[v\d+ \* 16 \+ v\d+\]", text) and re.search(r"b\[v\d+ \* 32 \+ v\d+\]", text)
    carried = re.search(r"float (v\d+) = v\d+; +// scf.for iter_arg", text).group(1)
    assert re.search(rf"\n +{carried} = v\d+;\n", text)                # written back at the end of each step
    assert re.search(rf"float v\d+ = {carried}; +// scf.for result", text)


def test_atomics_return_the_previous_value():
    text = render(F.histogram, "histogram", [(16,), (512,), (16,)])
    assert re.search(r"int v\d+ = atomicAdd\(&counts\[v\d+\], v\d+\); +// memref.atomic_rmw", text)
    assert re.search(r"atomicAdd\(&seen\[v\d+\], v\d+\)", text)


def test_named_barrier_printf_and_assert():
    text = render(K.exp_rows, "exp_rows", [(8, 32), (8, 32), ()])
    has(text, "int exp_rows(float* y, float* x, float scale)", 'asm volatile("bar.sync %0, %1;" :: "r"((int)v',
        'printf("%s", "exp must be positive\\n");', "__trap();", "expf(")
    assert re.search(r'printf\("exp_rows: y\[0\]\[0\]=%f rows=%d\\n", \(double\)v\d+, v\d+\);', text)
    assert re.search(r"x\[v\d+ \* 32 \+ v\d+\]", text)


def test_printf_without_tiles():
    text = render(F.hello, "hello", [])
    has(text, "int hello() {", 'printf("program %d thread %d\\n", v')
    text = render(F.threads_below, "threads_below", [()])
    has(text, "int threads_below(int limit)", 'printf("%s", "thread %d is not below the limit\\n");')


# -- every op: fp16 / bf16 through float, unsigned ops, NaN-propagating max, bitcasts ----------------------
@dialect(name="mlir")
def scalar_ops(out: InOut["memref<?xf32, 3>"], flags: InOut["memref<?xi32, 3>"],  # noqa: F722
               h: Input["f16"], b: Input["bf16"], d: Input["f64"], k: Input["i64"], c: Input["i8"]):  # noqa: F821
    f32 = ir.F32Type.get()
    zero, one = arith.constant(index(), 0), arith.constant(index(), 1)
    hh = arith.addf(arith.mulf(h, h), h)                           # fp16 arithmetic
    bb = arith.maximumf(b, arith.negf(b))                           # bf16, NaN in, NaN out
    x = arith.addf(arith.extf(f32, hh), arith.extf(f32, bb))
    x = arith.maxnumf(x, arith.truncf(f32, d))
    x = arith.addf(x, mmath.tanh(arith.extf(f32, mmath.exp(h))))
    bits = arith.bitcast(i32(), x)
    u = arith.shrui(bits, arith.constant(i32(), 3))
    u = arith.maxui(u, arith.ceildivui(bits, arith.constant(i32(), 7)))
    s = arith.floordivsi(arith.trunci(i32(), k), arith.constant(i32(), -3))
    wide = arith.extsi(ir.IntegerType.get_signless(64), arith.addi(c, c))
    unordered = arith.cmpf(arith.CmpFPredicate.UNO, x, x)
    below = arith.cmpi(arith.CmpIPredicate.ult, u, arith.trunci(i32(), wide))
    pick = arith.select(arith.ori(unordered, below), u, s)
    branch = scf.IfOp(below, [f32], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp([arith.uitofp(f32, u)])
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp([arith.sitofp(f32, arith.fptoui(i32(), x))])
    memref.store(branch.results[0], out, [zero])
    memref.atomic_rmw(arith.AtomicRMWKind.addf, x, out, [one])
    memref.atomic_rmw(arith.AtomicRMWKind.maxs, pick, flags, [zero])
    nvvm.BarrierOp(barrierId=arith.constant(i32(), 2))


def test_scalar_ops():
    text = render(scalar_ops, "scalar_ops", [(4,), (2,), (), (), (), (), ()])
    has(text, "int scalar_ops(float* out, int* flags, half_t h, bfloat16_t b, double d, int64_t k, signed char c)",
        "half_t((float)h * (float)h)", "fmaxf((float)b, (float)v", "__builtin_memcpy(&v", "(unsigned int)v",
        "atomicAdd(&out[v", 'asm volatile("bar.sync %0;" :: "r"((int)v', "tanhf(",
        "half_t(expf((float)h))", "(signed char)(c + c)", "(int64_t)v")
    # maximumf: a NaN operand makes the result NaN
    assert re.search(r"bfloat16_t\(\(\(float\)b != \(float\)b \|\| \(float\)v\d+ != \(float\)v\d+\) \? ", text)
    assert re.search(r"bool v\d+ = v(\d+) != v\1 \|\| v\1 != v\1; +// arith.cmpf", text)
    assert re.search(r"float (v\d+); +// scf.if result", text)
    assert re.search(r"int v\d+ = atomicMax\(&flags\[v\d+\], v\d+\);", text)      # memref.atomic_rmw maxs


def test_literals_and_strings():
    assert literal(1.5, "fp32") == "0x1.8000000000000p+0f"
    assert literal(float("inf"), "fp32") == "__int_as_float(2139095040)"
    assert literal(-2**31, "i32") == "(-2147483647 - 1)"
    assert literal(-1, "i64") == "(int64_t)-1LL"
    assert literal(0.5, "fp16") == "half_t(0x1.0000000000000p-1f)"
    assert literal(True, "i1") == "true"
    assert c_string('a"b\\c\n?') == '"a\\"b\\\\c\\n\\077"'


@dialect(name="mlir")
def wide_atomics(h: InOut["memref<?xf16, 3>"], b: InOut["memref<?xbf16, 3>"], w: InOut["memref<?xi64, 3>"],  # noqa
                 d: InOut["memref<?xf64, 3>"], flags: InOut["memref<?x?xi1, 3>"]):  # noqa: F722
    zero = arith.constant(index(), 0)
    i64 = ir.IntegerType.get_signless(64)
    old = memref.atomic_rmw(arith.AtomicRMWKind.addf, memref.load(h, [zero]), h, [zero])
    as_bf16 = arith.truncf(ir.BF16Type.get(), arith.extf(ir.F32Type.get(), old))
    memref.atomic_rmw(arith.AtomicRMWKind.addf, as_bf16, b, [zero])
    memref.atomic_rmw(arith.AtomicRMWKind.addi, arith.constant(i64, -2**63), w, [zero])
    memref.atomic_rmw(arith.AtomicRMWKind.addf, arith.constant(ir.F64Type.get(), float("nan")), d, [zero])
    memref.store(arith.constant(ir.IntegerType.get_signless(1), 1), flags, [zero, memref.dim(flags, zero)])


def test_atomics_on_halves_wide_and_boolean_tiles():
    text = render(wide_atomics, "wide_atomics", [(4,), (4,), (4,), (4,), (2, 3)])
    has(text, "int wide_atomics(half_t* h, bfloat16_t* b, int64_t* w, double* d, bool* flags)",
        "half_t(__half2float(atomicAdd(reinterpret_cast<__half*>(&h[v",
        "bfloat16_t(__bfloat162float(atomicAdd(reinterpret_cast<__nv_bfloat16*>(&b[v",
        "(int64_t)atomicAdd((unsigned long long*)&w[v", "(int64_t)(-9223372036854775807LL - 1)",
        "__longlong_as_double(", "double v", "const bool v", "const int v")
    assert re.search(r"flags\[v\d+ \* 3 \+ v\d+\] = v\d+;", text)


def test_shapes_must_fit_the_tiles():
    from tle.lowering.errors import LoweringError
    with pytest.raises(LoweringError, match="has 2 axes"):
        device_function(F.accumulate_product.body(), "x", [(8,), (8, 8), (8, 8)], {})


# -- what is refused ------------------------------------------------------------------------------------------
@dialect(name="mlir")
def float_max(acc: InOut["memref<?xf32, 3>"]):  # noqa: F722
    memref.atomic_rmw(arith.AtomicRMWKind.maximumf, arith.constant(ir.F32Type.get(), 1.0), acc,
                      [arith.constant(index(), 0)])


@dialect(name="mlir")
def read_as_i32(p: Input["!llvm.ptr<1>"]):  # noqa: F722
    q = llvm.getelementptr(ir.Type.parse("!llvm.ptr<1>"), p, [], [4], i32(), 0)
    llvm.store(arith.constant(i32(), 0), q)


def test_refusals():
    with pytest.raises(UnsupportedConstruct, match="memref.atomic_rmw max on fp32") as e:
        device_function(float_max.body(), "float_max", [(4,)], {})
    assert e.value.backend == "tilelang"
    with pytest.raises(UnsupportedConstruct, match="llvm.getelementptr over i32 elements") as e:
        device_function(read_as_i32.body(), "read_as_i32", [()], {0: "fp32"})
    assert e.value.loc is not None
    text = render(read_as_i32, "read_as_i32", [()], {0: "i32"})
    assert re.search(r"int\* v\d+ = p \+ 4; +// llvm.getelementptr", text)
    with pytest.raises(ValueError, match="takes 3 arguments"):
        device_function(F.accumulate_product.body(), "x", [(8, 8)], {})


# -- FlagTree's tutorials ---------------------------------------------------------------------------------------
TUTORIAL_CALLS = {      # file: (shapes of its tiles, element types of its pointers by argument position)
    "01-vector-add.py": (16, {0: "fp32", 1: "fp32", 2: "fp32"}),
    "02-fused-softmax.py": (128, {}),
    "03-matrix-multiplication.py": (16, {}),
    "04-hello-world.py": (16, {}),
    "05-topk.py": (256, {3: "i32", 4: "i32", 5: "fp32"}),
}


@pytest.mark.parametrize("path", sorted(TUTORIAL_CALLS))
def test_flagtree_tutorials(path):
    """FlagTree's own raw functions (env TLE_FLAGTREE_PYTHON: a checkout of its python/ folder) as device functions."""
    folder = raw_tutorials()
    if folder is None:
        pytest.skip("no checkout of FlagTree's python/ folder named by TLE_FLAGTREE_PYTHON")
    extent, pointees = TUTORIAL_CALLS[path]
    fns = dialect_functions(os.path.join(folder, path))
    assert fns
    for name, fn in fns.items():
        body = fn.body()
        shapes = [(extent,) * len(a.shape) if a.kind == "tile" else () for a in body.args]
        symbol = re.sub(r"\W", "_", f"tutorial_{path[:2]}_{name}")
        text = render(fn, symbol, shapes, pointees)
        assert text.startswith(f"__device__ __forceinline__ int {symbol}(")
        assert text.rstrip().endswith("return 0;\n}")


# -- nvcc -----------------------------------------------------------------------------------------------------------
def wrapper(text: str) -> str:
    """A __global__ kernel taking the device function's parameters and calling it."""
    name, params = re.match(r"__device__ __forceinline__ int (\w+)\((.*?)\) \{", text).groups()
    names = [p.split()[-1].lstrip("*") for p in params.split(", ")] if params else []
    return f"__global__ void {name}_kernel({params}) {{ {name}({', '.join(names)}); }}\n"


def test_zz_everything_compiles_with_nvcc(tmp_path):
    """Runs last (by name, in file order): compiles every function the tests above rendered, in one unit."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    import tilelang
    tl = os.path.dirname(tilelang.__file__)
    includes = [os.path.join(tl, "src"), os.path.join(tl, "3rdparty", "cutlass", "include")]
    if not os.path.isfile(os.path.join(includes[0], "tl_templates", "cuda", "common.h")):
        pytest.skip("TileLang's CUDA headers are not installed")
    if len(RENDERED) < 5:
        pytest.skip("run with the rendering tests above")
    source = "#include <tl_templates/cuda/common.h>\n\n" + "\n".join(t + wrapper(t) for t in RENDERED.values())
    (tmp_path / "raw.cu").write_text(source)
    cmd = [nvcc, "-c", "-arch=sm_90a", "-std=c++17", "-w", *[f"-I{i}" for i in includes], "-o",
           str(tmp_path / "raw.o"), str(tmp_path / "raw.cu")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    cuobjdump = shutil.which("cuobjdump")
    sass = cuobjdump and subprocess.run([cuobjdump, "-sass", str(tmp_path / "raw.o")], capture_output=True, text=True)
    if sass and sass.returncode == 0:          # every wrapper made it into the object
        for name in RENDERED:
            assert f"{name}_kernel" in sass.stdout
