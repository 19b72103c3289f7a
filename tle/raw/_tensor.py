"""tensor.extract / tensor.insert for raw functions, created generically so that they work with either
bindings (jaxlib has no Python builders for the tensor dialect). Anything else comes from upstream's
tensor module where there is one."""
from tle.lowering.raw import bindings as _bindings


def _indices(indices):
    return list(indices) if isinstance(indices, (list, tuple)) else [indices]


def _ranked(value, what: str):
    ir = _bindings.load().ir
    try:
        return ir.RankedTensorType(value.type)
    except Exception:
        raise TypeError(f"{what} needs a ranked tensor value, got {value.type}") from None


def extract(tensor, indices, *, loc=None, ip=None):
    """Element `indices` of `tensor` (a list of index values, one per dimension)."""
    ir = _bindings.load().ir
    elem = _ranked(tensor, "tensor.extract").element_type
    return ir.Operation.create("tensor.extract", results=[elem], operands=[tensor, *_indices(indices)],
                               loc=loc, ip=ip).result


def insert(scalar, dest, indices, *, loc=None, ip=None):
    """`dest` with element `indices` set to `scalar`. In a raw function this writes the argument's tile."""
    ir = _bindings.load().ir
    _ranked(dest, "tensor.insert")
    return ir.Operation.create("tensor.insert", results=[dest.type], operands=[scalar, dest, *_indices(indices)],
                               loc=loc, ip=ip).result


def __getattr__(name):
    upstream = _bindings.load().tensor
    if upstream is None:
        raise AttributeError(f"tle.raw.mlir.tensor has only extract and insert with these bindings, not {name!r}")
    return getattr(upstream, name)
