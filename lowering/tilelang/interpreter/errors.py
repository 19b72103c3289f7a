"""What the interpreter reports when a program does something with no defined result."""
from __future__ import annotations


class InterpreterError(Exception):
    """A TileLang program did something whose result is undefined on the GPU (or that the interpreter
    does not model). `where` names the statement (its TIR text) and the block running it."""

    kind = "error"

    def __init__(self, message: str, where: str = ""):
        self.message = message
        self.where = where
        super().__init__(f"{message}{f' ({where})' if where else ''}")


class OutOfBounds(InterpreterError):
    kind = "out-of-bounds access"


class UninitializedRead(InterpreterError):
    kind = "read of memory nothing wrote"


class Race(InterpreterError):
    kind = "data race"


class DivisionByZero(InterpreterError):
    kind = "integer division by zero"


class DeviceAssertionFailed(InterpreterError):
    """A `tl.device_assert_with_msg` whose condition is false in an active lane (on the GPU: the message is
    printed and the kernel traps)."""
    kind = "failed device assertion"


class FalseAssumption(InterpreterError):
    """A `T.assume` (tl.assume) whose condition is false: on the GPU the compiler may have simplified code on
    the strength of it, so what the kernel computes is undefined."""
    kind = "false assumption (tl.assume)"


class Misaligned(InterpreterError):
    """A copy of a fixed width (cp.async of 4, 8 or 16 bytes) at an address that is not a multiple of the
    width: on the GPU the access faults (misaligned address)."""
    kind = "misaligned address"


class Unsupported(InterpreterError):
    """A construct the interpreter does not model: it says so rather than guess."""
    kind = "construct the interpreter does not model"


class Deadlock(InterpreterError):
    """Every role of a block that has not finished waits on an mbarrier phase that no running role can
    complete any more: on the GPU the block hangs."""
    kind = "deadlock"


class BarrierOverflow(InterpreterError):
    """More threads arrive on an mbarrier in one phase than it was initialised to expect."""
    kind = "more arrivals on an mbarrier than its phase expects"


class ProductNeverWaited(InterpreterError):
    """A warp group's T.wgmma_gemm with no T.wait_wgmma (or T.gemm) after it: its result is undefined."""
    kind = "product never waited for"
