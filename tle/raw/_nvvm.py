"""nvvm for raw functions, the same on every version of the bindings.

The special-register ops take their result type positionally, in both spellings: `nvvm.ThreadIdXOp(i32).res`
and `nvvm.read_ptx_sreg_tid_x(i32)` (FlagTree's; newer bindings only accept `results=[...]`); the second
returns the value itself. `barrier0()` is a whole-block barrier: `nvvm.barrier0` where the dialect still has
it, else `nvvm.barrier` without operands. Everything else is the bindings' nvvm.
"""
from tle.lowering.raw import bindings as _bindings

_REGISTERS = {"ThreadId": "tid", "BlockDim": "ntid", "BlockId": "ctaid", "GridDim": "nctaid"}


def _special(cls_name: str, op_name: str):
    def make(result_type=None, *, results=None, loc=None, ip=None):
        ir = _bindings.load().ir
        if results is not None:
            (result_type,) = results
        if result_type is None:
            result_type = ir.IntegerType.get_signless(32)
        return ir.Operation.create(op_name, results=[result_type], loc=loc, ip=ip).opview

    make.__name__ = make.__qualname__ = cls_name
    make.__doc__ = f"Create `{op_name}` (result type i32 unless given); its value is `.res`."
    return make


def _value_of(make, name: str):
    def read(result_type=None, *, results=None, loc=None, ip=None):
        return make(result_type, results=results, loc=loc, ip=ip).res

    read.__name__ = read.__qualname__ = name
    read.__doc__ = make.__doc__.replace("its value is `.res`", "returns its value")
    return read


for _cls, _reg in _REGISTERS.items():
    for _axis in "xyz":
        _op = f"nvvm.read.ptx.sreg.{_reg}.{_axis}"
        globals()[f"{_cls}{_axis.upper()}Op"] = _special(f"{_cls}{_axis.upper()}Op", _op)
        globals()[f"read_ptx_sreg_{_reg}_{_axis}"] = _value_of(globals()[f"{_cls}{_axis.upper()}Op"],
                                                               f"read_ptx_sreg_{_reg}_{_axis}")


def barrier0(*, loc=None, ip=None):
    """A barrier of the whole block (all threads of the call)."""
    b = _bindings.load()
    if b.ir.Context.current.is_registered_operation("nvvm.barrier0"):
        return b.ir.Operation.create("nvvm.barrier0", loc=loc, ip=ip).opview
    return b.nvvm.BarrierOp(loc=loc, ip=ip)


Barrier0Op = barrier0


def __getattr__(name):
    return getattr(_bindings.load().nvvm, name)
