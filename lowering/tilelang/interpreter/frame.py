"""What a running block's statements see (Frame: its memory, threads and values), and the helpers every
statement compiler uses: constant operands, where a node stands, errors located at their statement."""
from __future__ import annotations

import re

import torch

from . import roles
from .errors import InterpreterError, Unsupported
from .memory import Memory

_DECLARATION = re.compile(r"^\w+ = T\.(Buffer|handle|int32|int64|float32)\b")


class Frame:
    """The state a closure runs against: variable values, active lanes, memory, the block."""

    def __init__(self, memory: Memory, threads: int):
        self.env: dict[int, torch.Tensor] = {}
        self.mask = None            # bool tensor over the lanes, None when all are active
        self.lanes = ()             # the T.Parallel nest's shape in scope (() outside)
        self.in_parallel = False
        self.in_tile_op = False     # lanes are a tile operator's elements (T.copy, T.gemm, ...)
        self.varying = frozenset()  # variables holding one value per thread (read-only inside T.Parallel)
        self.log = None             # ParallelLog of the T.Parallel nest running
        self.ids = None             # lane ids of that nest
        self.memory = memory
        self.threads = threads
        self.block = -1
        self.block_index: dict[str, int] = {}
        self.barriers: dict[int, list] = {}     # the block's mbarriers, by allocation
        self.products_in_flight: list = []      # T.wgmma_gemm issued and not yet waited for (tileops.py)
        self.role = None                        # the roles.Role running, None outside a role split
        self.thread_range = None                # the role's threads, (lo, hi) of the block's
        self.role_order = roles.LOWEST_FIRST    # the scheduling policy of role splits (roles.py)
        self.role_switch = roles.AT_WAIT

    def thread_varying(self, t: torch.Tensor) -> bool:
        return not self.in_parallel and not self.in_tile_op and t.dim() > 0

    def lane_ids(self, shape) -> torch.Tensor:
        ids = self.ids[tuple(slice(0, s) for s in self.lanes)]
        return ids.expand(shape)


def const_int(node, what: str) -> int:
    if type(node).__name__ != "IntImm":
        raise Unsupported(f"{what} that is not a constant ({node})")
    return int(node.value)


def where(node, fr: Frame) -> str:
    # the printer declares the buffers a statement uses before the statement itself
    lines = [ln.strip() for ln in node.script().splitlines()]
    text = next((ln for ln in lines if ln and not ln.startswith("#") and not _DECLARATION.match(ln)),
                type(node).__name__)
    if len(text) > 160:
        text = text[:157] + "..."
    blk = ", ".join(f"{k}={v}" for k, v in fr.block_index.items())
    place = [f"in block ({blk})"] if blk else []
    if fr.role is not None:
        place.append(fr.role.name)
    return " ".join([f"`{text}`", ", ".join(place)]) if place else f"`{text}`"


def located(node, run):
    def located(fr):
        try:
            run(fr)
        except InterpreterError as e:
            if not e.where:
                e.where = where(node, fr)
                e.args = (f"{e.message} ({e.where})",)
            raise
    return located
