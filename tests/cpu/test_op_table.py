"""The op table (lowering/ir/ops.py) is the IR's vocabulary: every op declares its operands by name, its
attributes with their types, its traits and its spelling, and nothing can write what the table does not
declare."""
import pytest

from tle.lowering.ir import ops
from tle.lowering.ir import types as ir_types
from tle.lowering.ir.builder import Builder
from tle.lowering.ir.core import Op
from tle.lowering.ir.ops import OPS, AtomicKind, BinaryOp, Trait


def test_every_op_is_declared_completely():
    for name, d in OPS.items():
        assert d.name == name and getattr(ops, name.upper()) is d
        assert all(isinstance(n, str) and n.lstrip("*").isidentifier() for n in d.operands), name
        for attr, a in {**d.attrs, **ops.COMMON_ATTRS}.items():
            assert a.doc and a.type is not None, (name, attr)
        assert d.spelling({}) and not d.spelling({}).startswith("op '"), name


def test_traits_say_what_the_passes_ask():
    assert ops.with_trait(Trait.LOOP) == ops.ops_of(ops.FOR, ops.WHILE)
    assert ops.with_trait(Trait.BRANCH) == ops.ops_of(ops.IF)
    assert ops.with_trait(Trait.BUFFER_WRITE) == ops.ops_of(ops.LOCAL_STORE, ops.COPY_IN, ops.LOCAL_SCATTER)
    assert all("buf" in d.operands for d in ops.with_trait(Trait.BUFFER_WRITE))
    assert ops.with_trait(Trait.SOURCE) == ops.ops_of(ops.CONST, ops.PROGRAM_ID, ops.NUM_PROGRAMS, ops.ARANGE)
    assert ops.with_trait(Trait.STRETCH) == ops.ops_of(ops.SPLAT, ops.BROADCAST)
    assert ops.with_trait(Trait.DESCRIPTOR) == ops.ops_of(ops.DESCRIPTOR_LOAD, ops.DESCRIPTOR_STORE,
                                                          ops.DESCRIPTOR_ATOMIC)
    assert all("desc" in d.operands for d in ops.with_trait(Trait.DESCRIPTOR))
    # a map reads each operand at the result's own index: its operands and result have one shape
    assert ops.with_trait(Trait.MAP) <= ops.with_trait(Trait.ELEMENTWISE) - ops.with_trait(Trait.STRETCH)
    assert ops.with_trait(Trait.MAP).isdisjoint({ops.JOIN, ops.SPLIT, ops.RESHAPE, ops.TRANS, ops.EXPAND_DIMS})
    effects = {d for d in OPS.values() if d.has_effect}
    assert ops.STORE in effects and ops.PRINT in effects and ops.LOCAL_STORE in effects
    assert not effects & {ops.FOR, ops.IF, ops.YIELD, ops.BINARY, ops.DOT, ops.MAKE_DESCRIPTOR}


def _load(b: Builder, **attrs):
    ptr = b.ids.value(ir_types.tile([4], ir_types.PointerType(ir_types.fp32)))
    return b.load(ptr, None, None, attrs)


def _builder() -> Builder:
    b = Builder()
    b._blocks.append(b.new_block([]))
    return b


def test_an_undeclared_attribute_cannot_be_written():
    b = _builder()
    with pytest.raises(ValueError, match="op 'load' has no attribute 'guarded'"):
        _load(b, guarded=True)
    op = _load(b).defining_op
    for write in (lambda: op.attrs.__setitem__("guarded", True), lambda: op.attrs.update(guarded=True),
                  lambda: op.attrs.setdefault("guarded", True), lambda: op.attrs.__ior__({"guarded": True})):
        with pytest.raises(ValueError, match="has no attribute 'guarded'"):
            write()
    with pytest.raises(ValueError, match="has no attribute 'bogus'"):
        op.attrs = {"bogus": 1}
    assert "guarded" not in op.attrs
    op.attrs["warp_group"] = 1                      # an attribute every op may carry
    assert op.attrs["warp_group"] == 1


def test_attribute_values_are_typed():
    b = _builder()
    op = _load(b).defining_op
    with pytest.raises(ValueError, match="attribute 'is_async' takes bool, got 'yes'"):
        op.attrs["is_async"] = "yes"
    with pytest.raises(ValueError, match="attribute 'async' takes AsyncIssue"):
        op.attrs["async"] = "pipelined"
    op.attrs["async"] = ops.plain("why not")
    assert str(op.attrs["async"]) == "plain: why not" and not op.attrs["async"].pipelined
    x = b.ids.value(ir_types.scalar(ir_types.i32))
    add = b.binary("add", x, x).defining_op
    assert add.attrs["op"] is BinaryOp.ADD and str(add.attrs["op"]) == "add" and repr(add.attrs["op"]) == "'add'"
    with pytest.raises(ValueError, match=r"attribute 'op' takes one of \['add'"):
        b.binary("plus", x, x)
    with pytest.raises(ValueError, match="attribute 'kind' takes one of"):
        Op(ops.ATOMIC, [None, None, None], [], {"kind": "nand"})
    assert Op(ops.ATOMIC, [None, None, None], [], {"kind": "xchg"}).attrs["kind"] is AtomicKind.XCHG


def test_operands_by_name_and_group():
    b = _builder()
    i = b.ids.value(ir_types.scalar(ir_types.i32))
    loop = Op(ops.FOR, [i, i, i, i, i], [])
    assert loop.operand("upper") is i and loop.operand_group("inits") == [i, i]
    with pytest.raises(ValueError, match="is a group"):
        loop.operand("inits")
    with pytest.raises(ValueError, match=r"op 'store' takes 3 operands \['ptr', 'value', 'mask'\], got 2"):
        Op(ops.STORE, [i, i], [])
    desc = Op(ops.MAKE_DESCRIPTOR, [i, i, i, i, i], [])
    assert desc.operand_group("shape") == [i, i] and desc.operand_group("strides") == [i, i]
    with pytest.raises(ValueError, match="equal groups"):
        Op(ops.MAKE_DESCRIPTOR, [i, i, i, i], [])


def test_an_op_spells_itself_as_the_kernel_wrote_it():
    assert ops.LOAD.spelling({"is_async": True}) == "tle.load" and ops.LOAD.spelling({}) == "tl.load"
    assert ops.ATOMIC.spelling({"kind": AtomicKind.ADD}) == "tl.atomic_add"
    assert ops.FOR.spelling({"kind": ops.LoopKind.PIPELINE}) == "tle.gpu.pipeline"
    assert ops.SCAN.spelling({"kind": ops.ScanKind.PROD}) == "tl.cumprod"
    assert ops.HINT.spelling({"kind": ops.HintKind.MULTIPLE_OF}) == "tl.multiple_of"
