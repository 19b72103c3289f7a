"""How the interpreter runs loops (a mixin of Program): serial and pipelined loops, the grid loop and
T.Parallel nests, one lane per iteration."""
from __future__ import annotations

import math

import torch

from . import dtypes, pipeline
from .errors import Unsupported
from .expressions import key
from .frame import const_int
from .memory import ParallelLog

_SERIAL_KINDS = (0, 3)      # ForKind SERIAL, UNROLLED
_PARALLEL, _THREAD_BINDING = 1, 4


class Loops:
    """Program's loops (see the module doc)."""

    def _For(self, node):
        kind = int(node.kind)
        if kind == _THREAD_BINDING:
            return self._grid_loop(node)
        if kind == _PARALLEL:
            return self._parallel(node)
        if kind not in _SERIAL_KINDS:
            raise Unsupported(f"a loop of kind {node.kind}")
        if node.step is not None and not (type(node.step).__name__ == "IntImm" and int(node.step.value) == 1):
            raise Unsupported(f"a loop with step {node.step}")
        if "tl_pipeline_stage" in node.annotations:
            body = list(node.body.seq) if type(node.body).__name__ == "SeqStmt" else [node.body]
            scheduled = pipeline.staged(node, body, self.stmt, self.buffer)
            return self._serial(node, scheduled=scheduled)
        return self._serial(node)

    def _serial(self, node, scheduled=None):
        k, dt = key(node.loop_var), str(node.loop_var.dtype)
        lo, extent = self.expr(node.min), self.expr(node.extent)
        body = None if scheduled is not None else self.stmt(node.body)

        def loop(fr):
            start, count = lo(fr), extent(fr)
            if start.dim() == 0 and count.dim() == 0:
                if scheduled is not None:
                    scheduled(fr, start.to(dtypes.storage(dt)), int(count))
                    return
                for i in range(int(count)):
                    fr.env[k] = (start + i).to(dtypes.storage(dt))
                    body(fr)
                return
            if scheduled is not None:
                raise Unsupported("a T.Pipelined loop whose trip count differs between lanes")
            # lanes run different trip counts: step them together, each active while it has iterations left
            saved = fr.mask
            try:
                for i in range(int(count.max()) if count.numel() else 0):
                    live = count > i
                    active = live if saved is None else saved & live
                    if not active.any():
                        continue
                    fr.mask = active
                    fr.env[k] = (start + i).to(dtypes.storage(dt))
                    body(fr)
            finally:
                fr.mask = saved
        return loop

    def _grid_loop(self, node):
        tag = str(node.thread_binding.thread_tag) if node.thread_binding is not None else ""
        if not tag.startswith("blockIdx."):
            raise Unsupported(f"a loop bound to {tag or 'a thread'}")
        k, extent, axis = key(node.loop_var), const_int(node.extent, "a grid extent"), tag[-1]
        innermost = not _has_grid_loop(node.body)
        body = self.stmt(node.body)
        name = {"x": "bx", "y": "by", "z": "bz"}[axis]

        def blocks(fr):
            for b in range(extent):
                fr.env[k] = torch.tensor(b, dtype=torch.int32)
                fr.block_index[name] = b
                if innermost:
                    fr.block = fr.memory.report.blocks
                    fr.memory.report.blocks += 1
                body(fr)
        return blocks

    def _parallel(self, outer):
        """A T.Parallel nest: every parallel loop in it gets an axis of the lane grid, by depth."""
        nest = getattr(self, "_nest", None)
        if nest is not None:                # a parallel loop inside another: the next lane axis
            return self._lane_axis(outer, nest)
        extents: list[int] = []
        self._nest = extents
        try:
            run_outer = self._lane_axis(outer, extents)
        finally:
            self._nest = None
        reads, writes = pipeline.accesses(outer, self.buffer)
        # buffers whose elements two iterations could both touch: read and written, or written twice
        tracked = (reads & writes) | _stored_twice(outer)
        names = {i.data: i.name for i in self._buffers.values() if i.data in tracked}

        def nest_run(fr):
            if fr.mask is not None and fr.mask.dim():
                raise Unsupported("T.Parallel under a thread-dependent condition")
            state = fr.lanes, fr.in_parallel, fr.varying, fr.log, fr.ids, fr.env
            fr.env = dict(fr.env)           # the nest's loop variables and lets end with it
            fr.lanes = (1,) * len(extents)
            fr.in_parallel = True
            fr.varying = frozenset(k for k, v in fr.env.items() if v.dim() > 0)
            fr.log = ParallelLog(tracked, names) if tracked else None
            fr.ids = torch.arange(math.prod(extents)).reshape(extents)
            try:
                run_outer(fr)
                if fr.log is not None:
                    fr.log.check(fr.ids)
            finally:
                fr.lanes, fr.in_parallel, fr.varying, fr.log, fr.ids, fr.env = state
        return nest_run

    def _lane_axis(self, node, extents: list[int]):
        depth = self._lane_depth if extents else 0
        e = const_int(node.extent, "a T.Parallel extent")
        start = const_int(node.min, "a T.Parallel start")
        if depth == len(extents):
            extents.append(e)
        else:
            extents[depth] = max(extents[depth], e)
        k, dt = key(node.loop_var), dtypes.storage(str(node.loop_var.dtype))
        self._lane_depth = depth + 1
        try:
            body = self.stmt(node.body)
        finally:
            self._lane_depth = depth

        def run(fr):
            shape = [1] * len(extents)
            shape[depth] = e
            fr.env[k] = (start + torch.arange(e)).to(dt).reshape(shape)
            saved = fr.lanes
            fr.lanes = tuple(e if i == depth else s for i, s in enumerate(saved))
            try:
                body(fr)
            finally:
                fr.lanes = saved
        return run


def _stored_twice(node) -> set[int]:
    """Allocations that more than one store statement under `node` writes."""
    seen, twice = set(), set()

    def visit(n):
        kind = type(n).__name__
        if kind == "BufferStore":
            k = key(n.buffer.data)
            (twice if k in seen else seen).add(k)
        elif kind == "SeqStmt":
            for s in n.seq:
                visit(s)
        else:
            for attr in ("body", "then_case", "else_case"):
                child = getattr(n, attr, None)
                if child is not None:
                    visit(child)
    visit(node)
    return twice


def _has_grid_loop(node) -> bool:
    kind = type(node).__name__
    if kind == "For":
        return int(node.kind) == _THREAD_BINDING or _has_grid_loop(node.body)
    if kind == "SeqStmt":
        return any(_has_grid_loop(s) for s in node.seq)
    return False
