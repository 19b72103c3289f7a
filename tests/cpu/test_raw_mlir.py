"""TLE-Raw: raw MLIR functions are built, verified and read; TileLang renders any of them, Triton only
element-wise ones, and the Triton rendering computes what the MLIR says (checked in the interpreter)."""
import importlib.util
import math
import textwrap
from typing import Annotated

import pytest
import torch

pytest.importorskip("jaxlib.mlir")

import tle  # noqa: E402
import tle.raw  # noqa: E402
from tle.lowering.errors import LoweringError, UnsupportedConstruct  # noqa: E402
from tle.lowering.tilelang.raw_render import render_tilelang  # noqa: E402
from tle.lowering.triton.raw_render import elementwise, render_triton, require_elementwise  # noqa: E402
from tle.raw.mlir import arith, ir, math as mmath, nvvm, scf, tensor  # noqa: E402

F1024 = Annotated[ir.RankedTensorType, "tensor<1024xf32>"]
F256 = Annotated[ir.RankedTensorType, "tensor<256xf32>"]
I256 = Annotated[ir.RankedTensorType, "tensor<256xi32>"]
H256 = Annotated[ir.RankedTensorType, "tensor<256xf16>"]


def i32():
    return ir.IntegerType.get_signless(32)


def thread_index():
    return arith.index_cast(ir.IndexType.get(), nvvm.ThreadIdXOp(i32()).res)


@tle.raw.language(name="mlir")
@tle.raw.hardware_constraint(threads_dim=1, sync_scope="block")
def vector_add_tile(x: F1024, y: F1024, output: F1024):
    tidx = nvvm.ThreadIdXOp(ir.IntegerType.get_signless(32)).res
    bidx = nvvm.BlockIdXOp(ir.IntegerType.get_signless(32)).res
    bdimx = nvvm.BlockDimXOp(ir.IntegerType.get_signless(32)).res
    idx = arith.addi(arith.muli(bidx, bdimx), tidx)
    idx = arith.index_cast(ir.IndexType.get(), idx)
    xval = tensor.extract(x, [idx])
    yval = tensor.extract(y, [idx])
    result = arith.addf(xval, yval)
    tensor.insert(result, output, [idx])


@tle.raw.language(name="mlir")
def shifted(x: F1024, output: F1024):
    """out[t] = x[t + 1]: every thread reads its neighbour's element."""
    i = thread_index()
    j = arith.addi(i, arith.constant(ir.IndexType.get(), 1))
    tensor.insert(tensor.extract(x, [j]), output, [i])


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- building ----------------------------------------------------------------------------------------------
def test_seed_builds_verifies_and_round_trips():
    f = vector_add_tile
    assert isinstance(f, tle.raw.RawFunction)
    assert f.name == "vector_add_tile" and f.file == __file__
    assert f.params == ("x", "y", "output")
    assert f.param_types == ("tensor<1024xf32>",) * 3
    assert f.tiles == (((1024,), "fp32"),) * 3
    assert (f.threads_dim, f.sync_scope) == (1, "block")
    text = f.mlir_text
    assert "func.func @vector_add_tile" in text and "tensor.insert" in text and "nvvm.read.ptx.sreg.tid.x" in text
    assert f.build() is text                                  # cached
    assert str(f.module()) == text                            # the kept text is a fixed point of print/parse
    body = f.body()
    assert [a.name for a in body.args] == ["x", "y", "output"]
    assert body.outputs == (2,) and body.inputs == (0, 1)
    assert body.args[2].shape == (1024,) and body.args[2].dtype == "fp32"
    assert body.loc.line == vector_add_tile.line and body.loc.file == __file__


def test_decorators_in_either_order():
    @tle.raw.hardware_constraint(threads_dim=2, sync_scope="none")
    @tle.raw.language(name="mlir")
    def g(x: F1024, out: F1024):
        tensor.insert(tensor.extract(x, [thread_index()]), out, [thread_index()])

    assert (g.threads_dim, g.sync_scope) == (2, "none")
    assert g.body().outputs == (1,)
    # without the decorator: one thread axis, block scope
    assert (shifted.threads_dim, shifted.sync_scope) == (1, "block")


def test_from_text():
    f = tle.raw.from_text(textwrap.dedent("""
        func.func @scale(%x: tensor<8xf32>, %o: tensor<8xf32>) {
          %t = nvvm.read.ptx.sreg.tid.x : i32
          %i = arith.index_cast %t : i32 to index
          %v = tensor.extract %x[%i] : tensor<8xf32>
          %two = arith.constant 2.0 : f32
          %w = arith.mulf %v, %two : f32
          %o2 = tensor.insert %w into %o[%i] : tensor<8xf32>
          return
        }"""), threads_dim=1, sync_scope="none")
    assert f.name == "scale" and f.params == ("arg0", "arg1") and f.file == __file__
    assert f.sync_scope == "none"
    assert "arith.mulf" in f.mlir_text
    ew = require_elementwise(f.body(), (8,))
    lines, out = render_triton(ew, ["a", "b"])
    assert lines == ["raw_scale_0 = (a * 2.0)"] and out == {1: "raw_scale_0"}


def test_from_text_picks_a_function_by_name():
    text = """
        func.func @a(%x: tensor<4xf32>) { return }
        func.func @b(%x: tensor<4xi32>) { return }"""
    assert tle.raw.from_text(text, name="b").param_types == ("tensor<4xi32>",)
    with pytest.raises(LoweringError, match="name="):
        tle.raw.from_text(text)


@pytest.mark.parametrize("kwargs, exc, word", [
    ({"threads_dim": 0}, ValueError, "threads_dim"),
    ({"threads_dim": 4}, ValueError, "threads_dim"),
    ({"threads_dim": "1"}, TypeError, "threads_dim"),
    ({"threads_dim": True}, TypeError, "threads_dim"),
    ({"sync_scope": "grid"}, ValueError, "sync_scope"),
    ({"sync_scope": None}, TypeError, "sync_scope"),
])
def test_bad_hardware_constraint(kwargs, exc, word):
    with pytest.raises(exc, match=word):
        tle.raw.hardware_constraint(**kwargs)
    with pytest.raises(exc, match=word):
        tle.raw.from_text("func.func @f(%x: tensor<4xf32>) { return }", **kwargs)


def test_bad_decorator_use():
    with pytest.raises(ValueError, match="name"):
        tle.raw.language(name="ptx")
    with pytest.raises(TypeError, match="language"):
        @tle.raw.language
        def f(x: F1024):
            pass
    with pytest.raises(TypeError, match="parentheses"):
        @tle.raw.hardware_constraint
        def g(x: F1024):
            pass
    with pytest.raises(ValueError, match="already"):
        tle.raw.hardware_constraint(threads_dim=1)(vector_add_tile)
    with pytest.raises(TypeError, match="'y' needs a type"):
        @tle.raw.language(name="mlir")
        def h(x: F1024, y):
            pass
    with pytest.raises(TypeError, match="statically shaped"):
        @tle.raw.language(name="mlir")
        def k(x: Annotated[ir.RankedTensorType, "tensor<?xf32>"]):
            pass


def test_call_outside_a_kernel():
    with pytest.raises(RuntimeError, match=r"tle.call can only be used inside a @tle.jit kernel"):
        tle.raw.call(vector_add_tile, args=[1, 2, 3], hardware={"threads": (1024,)})
    with pytest.raises(TypeError, match="tle.call"):
        vector_add_tile(1, 2, 3)


# -- errors ------------------------------------------------------------------------------------------------
def test_invalid_mlir_names_the_function():
    @tle.raw.language(name="mlir")
    def bad_add(x: F1024, out: F1024):
        i = thread_index()
        tensor.insert(tensor.extract(x, [i]), out, [i])
        arith.addf(nvvm.ThreadIdXOp(i32()).res, nvvm.ThreadIdXOp(i32()).res)   # addf on i32

    with pytest.raises(LoweringError) as e:
        bad_add.build()
    msg = str(e.value)
    assert "bad_add" in msg and f"{__file__}:{bad_add.line}" in msg and "arith.addf" in msg


def test_a_failing_body_names_its_line():
    @tle.raw.language(name="mlir")
    def broken(x: F1024):
        tensor.extract(x)    # noqa  (indices missing)

    with pytest.raises(LoweringError, match=rf"broken.*at {__file__}:{broken.line + 1}"):
        broken.build()


def test_invalid_text_names_the_function():
    with pytest.raises(LoweringError, match="(?s)'f'.*tensor.extract"):
        tle.raw.from_text("func.func @g(%a: tensor<4xi32>) { %b = tensor.extract %a[] : tensor<4xi32> \n"
                          " return }", name="f")
    with pytest.raises(LoweringError, match="not valid MLIR"):
        tle.raw.from_text("func.func @g(%a: tensor<4xi32>) { %c = arith.addf %a, %a : i32 \n return }")


@pytest.mark.parametrize("op, text", [
    ("memref.alloc", "%m = memref.alloc() : memref<4xf32>"),
    ("gpu.thread_id", "%g = gpu.thread_id x"),
    ("vector.broadcast", "%c = arith.constant 1.0 : f32\n %v = vector.broadcast %c : f32 to vector<4xf32>"),
])
def test_unsupported_op_names_op_and_backend(op, text):
    f = tle.raw.from_text(f"func.func @uses_{op.split('.')[0]}(%x: tensor<4xf32>) {{\n {text}\n return }}")
    with pytest.raises(UnsupportedConstruct) as e:
        render_tilelang(f.body(), ["x"], ["tx"], [4])
    assert e.value.construct == op and e.value.backend == "tilelang" and op in str(e.value)
    with pytest.raises(UnsupportedConstruct) as e:
        elementwise(f.body(), (4,))
    assert e.value.construct == op and e.value.backend == "triton"


def test_hardware_constraint_is_checked_against_the_body():
    text = """func.func @f(%x: tensor<4xf32>) {
        %t = nvvm.read.ptx.sreg.tid.y : i32
        nvvm.barrier
        return }"""
    with pytest.raises(LoweringError, match="threads_dim=1"):
        tle.raw.from_text(text, threads_dim=1).body()
    with pytest.raises(LoweringError, match="sync_scope"):
        tle.raw.from_text(text, threads_dim=2, sync_scope="none").body()
    assert tle.raw.from_text(text, threads_dim=2).body()


# -- TileLang ----------------------------------------------------------------------------------------------
def test_render_tilelang_seed():
    lines = render_tilelang(vector_add_tile.body(), ["xs", "ys", "outs"], ["tx"], [1024], indent=2)
    assert lines == ["        raw_vector_add_tile_0 = xs[tx]",
                     "        raw_vector_add_tile_1 = ys[tx]",
                     "        raw_vector_add_tile_2 = (raw_vector_add_tile_0 + raw_vector_add_tile_1)",
                     "        outs[tx] = raw_vector_add_tile_2"]
    assert render_tilelang(vector_add_tile.body(), ["a", "b", "c"], ["t"], [1024], prefix="r1_")[0] == "r1_0 = a[t]"


@tle.raw.language(name="mlir")
def control_flow(x: F256, out: F256):
    """A loop carrying a float and the output tile, a branch with a result, and a barrier."""
    f32, index = ir.F32Type.get(), ir.IndexType.get()
    i = thread_index()
    v = tensor.extract(x, [i])
    positive = arith.cmpf(arith.CmpFPredicate.OGT, v, arith.constant(f32, 0.0))
    loop = scf.ForOp(arith.constant(index, 0), arith.constant(index, 3), arith.constant(index, 1),
                     [mmath.exp(v), out])
    with ir.InsertionPoint(loop.body):
        acc, tile = loop.inner_iter_args
        nxt = arith.addf(acc, v)
        scf.YieldOp([nxt, tensor.insert(nxt, tile, [i])])
    branch = scf.IfOp(positive, [f32], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp([loop.results[0]])
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp([arith.negf(v)])
    nvvm.barrier0()
    tensor.insert(branch.results[0], loop.results[1], [i])


def test_render_tilelang_control_flow():
    lines = render_tilelang(control_flow.body(), ["xs", "outs"], ["tx"], [256])
    text = "\n".join(lines)
    assert "T.alloc_var('float32', init=" in text and "in T.serial(3):" in text
    assert "if raw_control_flow_" in text and "else:" in text and "T.sync_threads()" in text
    assert text.count("outs[tx] = ") == 2       # both inserts write the output buffer


def test_rendered_tilelang_parses_and_computes_what_the_mlir_says(tmp_path):
    pytest.importorskip("tilelang.language")
    body = control_flow.body()
    lines = render_tilelang(body, ["x", "out"], ["tx"], [256], indent=2)
    src = textwrap.dedent("""\
        import tilelang.language as T


        @T.prim_func
        def k(x: T.Tensor((256,), "float32"), out: T.Tensor((256,), "float32")):
            with T.Kernel(1, threads=256) as bx:
                tx = T.get_thread_binding(0)
        """) + "\n".join(lines) + "\n"
    (tmp_path / "raw_tl.py").write_text(src)
    func = _load(tmp_path / "raw_tl.py", "raw_tl").k
    script = func.script()
    assert "T.exp" in script and "out[tx]" in script
    from tle.lowering.tilelang.interpreter import Program
    x, out = torch.randn(256), torch.full((256,), float("nan"))
    Program(func).run([x, out])                       # the thread-level code, run per thread
    torch.testing.assert_close(out, torch.where(x > 0, torch.exp(x) + 3 * x, -x))


# -- Triton ------------------------------------------------------------------------------------------------
def test_elementwise_seed():
    ew, why = elementwise(vector_add_tile.body(), (1024,))
    assert ew is not None and why == ""
    assert ew.shape == (1024,) and ew.outputs == (2,)
    lines, out = render_triton(ew, ["x", "y", "o"])
    assert lines == ["raw_vector_add_tile_0 = (x + y)"] and out == {2: "raw_vector_add_tile_0"}


def test_elementwise_checks_the_thread_count():
    ew, why = elementwise(vector_add_tile.body(), (512,))
    assert ew is None and "512 threads" in why


def test_not_elementwise_is_rejected_on_triton_but_renders_on_tilelang():
    ew, why = elementwise(shifted.body(), (1024,))
    assert ew is None and "other than the tile element" in why
    with pytest.raises(UnsupportedConstruct) as e:
        require_elementwise(shifted.body(), (1024,))
    assert e.value.backend == "triton" and "shifted" in str(e.value)
    lines = render_tilelang(shifted.body(), ["xs", "outs"], ["tx"], [1024])
    assert lines == ["raw_shifted_0 = (tx + 1)", "raw_shifted_1 = xs[raw_shifted_0]", "outs[tx] = raw_shifted_1"]


def test_reversed_read_is_not_elementwise_but_a_reversed_tile_is():
    rev = tle.raw.from_text("""func.func @rev(%x: tensor<16xf32>, %o: tensor<16xf32>) {
        %t = nvvm.read.ptx.sreg.tid.x : i32
        %i = arith.index_cast %t : i32 to index
        %c15 = arith.constant 15 : index
        %j = arith.subi %c15, %i : index
        %v = tensor.extract %x[%j] : tensor<16xf32>
        %o2 = tensor.insert %v into %o[%i] : tensor<16xf32>
        return }""")
    assert elementwise(rev.body(), (16,))[0] is None
    both = tle.raw.from_text(rev.mlir_text.replace("into %arg1[%1]", "into %arg1[%2]"))
    assert "%arg1[%2]" in both.mlir_text     # thread t computes element 15-t from element 15-t: element-wise
    assert elementwise(both.body(), (16,))[0] is not None


def test_loops_and_barriers_are_not_elementwise():
    ew, why = elementwise(control_flow.body(), (256,))
    assert ew is None and "scf.for" in why


@tle.raw.language(name="mlir")
@tle.raw.hardware_constraint(threads_dim=1, sync_scope="none")
def activation(x: F256, k: I256, out: F256, half: H256, bits: I256):
    f32, index = ir.F32Type.get(), ir.IndexType.get()
    i = arith.index_cast(index, arith.addi(arith.muli(nvvm.BlockIdXOp(i32()).res, nvvm.BlockDimXOp(i32()).res),
                                           nvvm.ThreadIdXOp(i32()).res))
    v = tensor.extract(x, [i])
    m = tensor.extract(k, [i])
    zero, one = arith.constant(f32, 0.0), arith.constant(f32, 1.0)
    three = arith.constant(i32(), 3)
    positive = arith.cmpf(arith.CmpFPredicate.OGT, v, zero)
    a = arith.select(positive, mmath.exp(arith.negf(v)), mmath.tanh(v))                  # exp, tanh, select
    q = arith.sitofp(f32, arith.divsi(m, three))                                         # C division
    r = arith.sitofp(f32, arith.remsi(m, three))
    b = arith.maximumf(arith.mulf(q, arith.constant(f32, 0.25)), r)
    below = arith.cmpi(arith.CmpIPredicate.ult, m, three)                               # unsigned: -1 is huge
    c = arith.select(below, arith.sitofp(f32, m), arith.constant(f32, -1.0))
    u = arith.cmpf(arith.CmpFPredicate.ULT, v, one)                                      # unordered less
    d = arith.select(u, mmath.sqrt(mmath.absf(v)), arith.divf(one, v))
    n = arith.fptosi(i32(), arith.mulf(v, arith.constant(f32, 4.0)))
    e = arith.sitofp(f32, arith.trunci(i32(), arith.extsi(ir.IntegerType.get_signless(64), n)))
    total = arith.addf(arith.addf(arith.addf(a, b), arith.addf(c, d)), arith.mulf(e, arith.constant(f32, 0.5)))
    tensor.insert(total, out, [i])
    tensor.insert(arith.truncf(ir.F16Type.get(), total), half, [i])
    shifted_bits = arith.xori(arith.shrsi(m, arith.constant(i32(), 1)), arith.shli(m, arith.constant(i32(), 2)))
    tensor.insert(arith.maxsi(shifted_bits, arith.minsi(m, three)), bits, [i])


def _triton_kernel(tmp_path, raw, n):
    """A @triton.jit kernel that loads every argument tile, runs the rendered raw function and stores the
    outputs, written to a file (Triton reads a kernel's source)."""
    body = raw.body()
    ew = require_elementwise(body, (n,))
    names = [a.name for a in body.args]
    lines, finals = render_triton(ew, names)
    src = ["import triton", "import triton.language as tl", "", "", "@triton.jit",
           f"def kernel({', '.join(p + '_ptr' for p in names)}):", f"    offs = tl.arange(0, {n})"]
    src += [f"    {p} = tl.load({p}_ptr + offs)" for p in names]
    src += [f"    {line}" for line in lines]
    src += [f"    tl.store({names[k]}_ptr + offs, {v})" for k, v in finals.items()]
    (tmp_path / "raw_triton_kernel.py").write_text("\n".join(src) + "\n")
    return _load(tmp_path / "raw_triton_kernel.py", "raw_triton_kernel").kernel, lines


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # the interpreter's numpy on 1/0 and NaN casts
def test_rendered_triton_computes_what_the_mlir_says(tmp_path):
    n = 256
    kernel, lines = _triton_kernel(tmp_path, activation, n)
    assert any("tl.where(" in line for line in lines) and any("tl.exp(" in line for line in lines)
    x, k = _activation_inputs(n)
    out, half, bits = torch.empty(n), torch.empty(n, dtype=torch.float16), torch.empty(n, dtype=torch.int32)
    kernel[(1,)](x, k, out, half, bits)
    _check_activation(x, k, out, half, bits)


def _activation_inputs(n):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, generator=g) * 3
    x[:4] = torch.tensor([0.0, -0.0, float("nan"), 1.0])
    k = torch.randint(-20, 20, (n,), generator=g, dtype=torch.int32)
    return x, k


def _check_activation(x, k, out, half, bits):
    """What `activation` computes, in torch."""
    a = torch.where(x > 0, torch.exp(-x), torch.tanh(x))
    q = torch.div(k, 3, rounding_mode="trunc").float()
    r = torch.fmod(k, 3).float()
    b = torch.maximum(q * 0.25, r)                           # NaN-propagating, as arith.maximumf
    c = torch.where((k >= 0) & (k < 3), k.float(), torch.tensor(-1.0))
    d = torch.where(~(x >= 1.0), torch.sqrt(x.abs()), 1.0 / x)
    e = torch.trunc(x * 4).nan_to_num(0.0)
    ref = a + b + c + d + e * 0.5
    finite = ~torch.isnan(x)
    torch.testing.assert_close(out[finite], ref[finite], rtol=1e-5, atol=1e-5)
    assert torch.isnan(out[2])                              # ult is true on NaN: sqrt(|nan|)
    torch.testing.assert_close(half[finite], ref[finite].half())
    ref_bits = torch.maximum((k >> 1) ^ (k << 2), torch.minimum(k, torch.tensor(3, dtype=torch.int32)))
    assert torch.equal(bits, ref_bits)


def test_constant_output_is_broadcast(tmp_path):
    fill = tle.raw.from_text("""func.func @fill(%o: tensor<8xf32>) {
        %t = nvvm.read.ptx.sreg.tid.x : i32
        %i = arith.index_cast %t : i32 to index
        %c = arith.constant 0x7F800000 : f32
        %o2 = tensor.insert %c into %o[%i] : tensor<8xf32>
        return }""")
    kernel, lines = _triton_kernel(tmp_path, fill, 8)
    out = torch.zeros(8)
    kernel[(1,)](out)
    assert torch.equal(out, torch.full((8,), math.inf))


def test_every_scalar_op_a_raw_body_may_hold_has_one_meaning():
    """lowering/raw/meanings.py: both renderers read an op's form and meaning there, so an op the reader
    accepts and the table lacks would fail inside a renderer."""
    from tle.lowering.raw.body import ARITH_OPS, MATH_OPS
    from tle.lowering.raw.meanings import MEANINGS
    assert set(MEANINGS) == ARITH_OPS | MATH_OPS


# -- TileLang: what the rendering computes, per thread, in the TileLang interpreter -------------------------
_TL_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.int32: "int32"}


def _run_tilelang(tmp_path, raw, tensors):
    """Render `raw` into a one-block T.prim_func over 1-D tensors of one length (a thread per element), run it
    in the TileLang interpreter on `tensors` (written in place) and return the rendered lines."""
    pytest.importorskip("tilelang.language")
    from tle.lowering.tilelang.interpreter import Program
    body, n = raw.body(), tensors[0].numel()
    names = [a.name for a in body.args]
    lines = render_tilelang(body, names, ["tx"], [n], indent=2)
    params = ", ".join(f'{p}: T.Tensor(({n},), "{_TL_DTYPES[t.dtype]}")' for p, t in zip(names, tensors))
    src = (f"import tilelang.language as T\n\n\n@T.prim_func\ndef k({params}):\n"
           f"    with T.Kernel(1, threads={n}) as bx:\n        tx = T.get_thread_binding(0)\n"
           + "\n".join(lines) + "\n")
    (tmp_path / f"raw_tl_{body.name}.py").write_text(src)
    Program(_load(tmp_path / f"raw_tl_{body.name}.py", f"raw_tl_{body.name}").k).run(list(tensors))
    return lines


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # the interpreter's numpy on 1/0 and NaN casts
def test_rendered_tilelang_computes_the_scalar_ops_as_the_mlir_says(tmp_path):
    n = 256
    x, k = _activation_inputs(n)
    out, half, bits = torch.empty(n), torch.empty(n, dtype=torch.float16), torch.empty(n, dtype=torch.int32)
    lines = _run_tilelang(tmp_path, activation, [x, k, out, half, bits])
    assert any("T.if_then_else(" in line for line in lines) and any("T.truncdiv(" in line for line in lines)
    _check_activation(x, k, out, half, bits)


@tle.raw.language(name="mlir")
@tle.raw.hardware_constraint(threads_dim=1, sync_scope="none")
def bits_and_predicates(x: F256, y: F256, k: I256, udiv: I256, mix: I256, flags: I256, cmp: F256,
                        low: F256, raw: I256):
    """Unsigned arithmetic, i1 logic and casts, every float predicate, NaN-propagating minimum, a bitcast,
    and integer arithmetic with literal 0 and 1 (which the renderer folds)."""
    f32, i1 = ir.F32Type.get(), ir.IntegerType.get_signless(1)
    i = thread_index()
    v, w, m = tensor.extract(x, [i]), tensor.extract(y, [i]), tensor.extract(k, [i])
    c0, c1, c3 = (arith.constant(i32(), c) for c in (0, 1, 3))
    m = arith.subi(arith.muli(arith.addi(c0, m), c1), c0)                 # m, through three folds
    seven = arith.addi(c3, arith.constant(i32(), 4))                       # two literals: 7
    zero = arith.muli(c0, m)
    tensor.insert(arith.divui(m, seven), udiv, [i])
    difference = arith.subi(arith.muli(c1, m), c3)                         # a fold with the literal first
    tensor.insert(arith.xori(arith.xori(arith.remui(m, seven), arith.shrui(m, c1)), difference), mix, [i])
    negative = arith.cmpi(arith.CmpIPredicate.slt, m, zero)
    big = arith.cmpi(arith.CmpIPredicate.uge, m, seven)                    # unsigned: every negative m
    odd = arith.trunci(i1, m)
    parts = [arith.extsi(i32(), arith.andi(negative, big)),                # -1 or 0
             arith.extui(i32(), arith.ori(negative, odd)),                 # 1 or 0
             arith.extui(i32(), arith.xori(big, odd)),
             arith.fptoui(i32(), mmath.absf(arith.mulf(v, arith.constant(f32, 2.0))))]
    weights = [1, 2, 4, 16]
    total = zero
    for part, weight in zip(parts, weights):
        total = arith.addi(total, arith.muli(part, arith.constant(i32(), weight)))
    tensor.insert(total, flags, [i])
    score = arith.constant(f32, 0.0)
    for bit, predicate in enumerate(("oeq", "one", "ueq", "une", "ole", "uge", "ord", "uno", "olt", "ugt")):
        hit = arith.cmpf(getattr(arith.CmpFPredicate, predicate.upper()), v, w)
        score = arith.addf(score, arith.mulf(arith.uitofp(f32, arith.extui(i32(), hit)),
                                             arith.constant(f32, float(2 ** bit))))
    tensor.insert(score, cmp, [i])
    nan = arith.constant(f32, float("nan"))
    low_value = arith.select(arith.cmpi(arith.CmpIPredicate.eq, m, c3), nan, arith.minimumf(v, w))
    low_value = arith.addf(low_value, arith.negf(arith.uitofp(f32, arith.remui(m, c3))))
    unsigned_m = arith.mulf(arith.uitofp(f32, m), arith.constant(f32, 1e-9))     # every negative m is huge
    tensor.insert(arith.subf(low_value, unsigned_m), low, [i])
    tensor.insert(arith.bitcast(i32(), v), raw, [i])


def _wrap32(t: torch.Tensor) -> torch.Tensor:
    """int64 values read as the int32 of their low 32 bits."""
    return ((t + 2**31) % 2**32 - 2**31).to(torch.int32)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_rendered_tilelang_computes_unsigned_ops_i1_logic_casts_and_predicates(tmp_path):
    n = 256
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(n, generator=g) * 4, torch.randn(n, generator=g) * 4
    x[:6] = torch.tensor([float("nan"), 1.0, 2.0, float("nan"), -0.0, 3.0])
    y[:6] = torch.tensor([1.0, float("nan"), 2.0, float("nan"), 0.0, -3.0])
    y[6:40] = x[6:40]                                       # equal pairs: the == and != predicates
    k = torch.randint(-50, 50, (n,), generator=g, dtype=torch.int32)
    k[:3] = torch.tensor([3, -1, -2**31], dtype=torch.int32)
    outs = [torch.zeros(n, dtype=torch.int32) for _ in range(3)] + [torch.zeros(n), torch.zeros(n),
                                                                      torch.zeros(n, dtype=torch.int32)]
    lines = _run_tilelang(tmp_path, bits_and_predicates, [x, y, k, *outs])
    text = "\n".join(lines)
    assert "'uint32'" in text and "T.reinterpret(" in text and "float('nan')" in text
    udiv, mix, flags, cmp, low, raw = outs

    u = k.to(torch.int64) % 2**32                           # the bits of k, read unsigned
    assert torch.equal(udiv, (u // 7).to(torch.int32))
    assert torch.equal(mix, _wrap32((u % 7) ^ (u >> 1) ^ ((k.to(torch.int64) - 3) % 2**32)))
    negative, big, odd = k < 0, u >= 7, (k & 1) == 1
    ref_flags = (-(negative & big).int() + 2 * (negative | odd).int() + 4 * (big ^ odd).int()
                 + 16 * (x * 2).abs().nan_to_num(0.0).to(torch.int64).to(torch.int32))
    finite = ~torch.isnan(x)
    assert torch.equal(flags[finite], ref_flags[finite])
    unordered = torch.isnan(x) | torch.isnan(y)
    predicates = [x == y, (x < y) | (x > y), (x == y) | unordered, ~(x == y), x <= y, ~(x < y),
                  ~unordered, unordered, x < y, ~(x <= y)]
    assert torch.equal(cmp, sum(p.float() * 2 ** bit for bit, p in enumerate(predicates)))
    ref_low = torch.where(k == 3, torch.tensor(float("nan")), torch.minimum(x, y)) - (u % 3).float()
    torch.testing.assert_close(low, ref_low - u.float() * 1e-9, equal_nan=True)
    assert torch.equal(raw, x.view(torch.int32))
