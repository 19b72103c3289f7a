"""Every IR op has a lowering rule or a declared reason it is unsupported on every backend, and every
attribute of every op is honored, dropped with a note, or refused there: nothing is ignored silently."""
import pytest

import triton.language as tl

import tle
from tle.lowering.backend import backend_names, get_backend
from tle.lowering.errors import UnsupportedConstruct
from tle.lowering.ir import ops
from tle.lowering.ir.core import Loc, Op
from tle.lowering.ir.ops import OPS, InputPrecision, OpDef
from tle.lowering.rules import DROPPED, HONORED, REFUSED, Rules

BACKENDS = backend_names()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", sorted(OPS.values()), ids=lambda d: d.name)
def test_every_op_has_a_rule_or_a_reason(backend, op):
    rules = get_backend(backend).rules
    reason = rules.unsupported_reason(op)
    assert rules.has_rule(op) or reason, f"{backend}: op '{op.name}' has no lowering rule and no declared reason"
    assert not (rules.has_rule(op) and reason), f"{backend}: op '{op.name}' has a rule and is declared unsupported"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op, attr", [pytest.param(d, a, id=f"{d.name}-{a}")
                                      for d in sorted(OPS.values()) for a in sorted(d.attrs)])
def test_every_attribute_has_a_treatment(backend, op, attr):
    rules = get_backend(backend).rules
    if rules.unsupported_reason(op):
        return          # the op itself is an error there, with its reason
    treatments = rules.treatments(op, attr)
    assert treatments, f"{backend}: {op.name}.{attr} is neither honored, dropped nor refused"
    for t in treatments:
        assert t.kind in (HONORED, DROPPED, REFUSED)
        assert t.kind == HONORED or t.detail, f"{backend}: {op.name}.{attr} is {t.kind} without saying why"


def test_tables_reject_ops_and_attributes_the_ir_does_not_have():
    rules = Rules("test")
    with pytest.raises(ValueError, match="is not an IR op of lowering/ir/ops.py"):
        rules.rule(OpDef("frobnicate", ()))
    with pytest.raises(ValueError, match="op 'load' has no attribute 'colour'"):
        rules.drops(ops.LOAD, "colour", why="no")
    rules.rule(ops.LOAD)(lambda g, op: "x")
    with pytest.raises(ValueError, match="two lower rules for op 'load'"):
        rules.rule(ops.LOAD)(lambda g, op: "y")


def _op(defn, **attrs):
    """A `defn` op at kernel.py:12, its operands absent (None) and its variadic groups empty."""
    operands = [None for name in defn.operands if not name.startswith("*")]
    return Op(defn, operands, [], attrs, loc=Loc("kernel.py", 12))


def test_an_unsupported_op_is_an_error_with_its_declared_reason():
    rules = Rules("test")
    rules.unsupported(ops.DOT, "no matrix units here")
    with pytest.raises(UnsupportedConstruct, match=r"kernel.py:12: \[test\] backend 'test' cannot express "
                                                   r"tl.dot: no matrix units here"):
        rules.get(_op(ops.DOT))


class _Kernel:
    def __init__(self, *ops):
        self.ops = ops

    def walk(self):
        return iter(self.ops)


def test_dropped_and_refused_attributes():
    rules = Rules("test")
    rules.drops(ops.LOAD, "cache_modifier", "eviction_policy", why="hint dropped here")
    rules.honors(ops.LOAD, "volatile")
    rules.refuses(ops.DOT, "input_precision", why="products are TF32 here", when=lambda v: v is InputPrecision.IEEE)
    notes = rules.check_attributes(_Kernel(_op(ops.LOAD, cache_modifier=".cg", eviction_policy="evict_last",
                                                volatile=True), _op(ops.LOAD, cache_modifier=""),
                                           _op(ops.DOT, input_precision=InputPrecision.TF32)))
    assert notes == ["line 12: tl.load(cache_modifier='.cg', eviction_policy='evict_last'): hint dropped here"]
    with pytest.raises(UnsupportedConstruct, match=r"kernel.py:12: .*tl.dot\(input_precision='ieee'\): "
                                                   r"products are TF32 here"):
        rules.check_attributes(_Kernel(_op(ops.DOT, input_precision=InputPrecision.IEEE)))


@tle.jit
def _copy_hinted(x, y, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(y + offs, tl.load(x + offs, eviction_policy="evict_first", volatile=True))


def test_triton_writes_every_load_attribute_back():
    import torch
    x = torch.zeros(16)
    src = _copy_hinted.lower(x, x, N=16, grid=(1,), backend="triton").source
    assert "tl.load(x + offs, eviction_policy='evict_first', volatile=True)" in src


def test_docs_list_every_attribute_a_backend_does_not_simply_honor():
    import os
    from tle.lowering.rules import attribute_table
    table = attribute_table([get_backend(b).rules for b in BACKENDS])
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "lowering.md")) as f:
        assert table in f.read(), "docs/lowering.md's attribute table differs from the rule tables"


@tle.jit
def _fp32_dot(a, b, c, PRECISION: tl.constexpr):
    i = tl.arange(0, 16)
    x = tl.load(a + i[:, None] * 16 + i[None, :])
    y = tl.load(b + i[:, None] * 16 + i[None, :])
    tl.store(c + i[:, None] * 16 + i[None, :], tl.dot(x, y, input_precision=PRECISION))


@tle.jit
def _volatile_read(x, y):
    i = tl.arange(0, 16)
    tl.store(y + i, tl.load(x + i, volatile=True))


def _tilelang_available():
    why = tle.available_backends().get("tilelang")
    if why is not None:
        pytest.skip(f"TileLang backend unavailable here ({why})")


def test_tilelang_refuses_a_tf32x3_dot_at_the_kernels_line_and_writes_ieee_as_a_loop():
    import torch
    _tilelang_available()
    a = torch.zeros(16, 16)
    line = _fp32_dot.fn.__code__.co_firstlineno + 5     # the tl.dot line (the first is the decorator)
    with pytest.raises(UnsupportedConstruct, match=rf"test_lowering_rules.py:{line}: .*tl.dot\(input_precision="
                                                   r"'tf32x3'\): T.gemm computes fp32 operands in TF32"):
        _fp32_dot.lower(a, a, a, PRECISION="tf32x3", grid=(1,), backend="tilelang")
    assert "T.gemm" in _fp32_dot.lower(a, a, a, PRECISION="tf32", grid=(1,), backend="tilelang").source
    ieee = _fp32_dot.lower(a, a, a, PRECISION="ieee", grid=(1,), backend="tilelang").source
    assert "T.gemm" not in ieee and "for k in T.serial(16):" in ieee
    src = _fp32_dot.lower(a, a, a, PRECISION="ieee", grid=(1,), backend="triton").source
    assert "input_precision='ieee'" in src


def test_tilelang_refuses_a_volatile_load():
    import torch
    _tilelang_available()
    x = torch.zeros(16)
    with pytest.raises(UnsupportedConstruct, match=r"tl.load\(volatile=True\): TileLang's reads cannot be made volatile"):
        _volatile_read.lower(x, x, grid=(1,), backend="tilelang")


def test_an_op_another_pass_rewrites_counts_as_lowered_and_never_reaches_the_rules():
    rules = Rules("test")
    rules.rewritten(ops.DESCRIPTOR_LOAD, by="transforms.expand_descriptors")
    assert rules.has_rule(ops.DESCRIPTOR_LOAD) and not rules.unsupported_reason(ops.DESCRIPTOR_LOAD)
    with pytest.raises(AssertionError, match="should have been rewritten by transforms.expand_descriptors"):
        rules.get(_op(ops.DESCRIPTOR_LOAD))
