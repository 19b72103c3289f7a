"""T.Pipelined loops that name each statement's stage (`order=`, `stage=`), run in TileLang's schedule.

TileLang runs statement j of iteration i at step i + stage[j], the statements of one step in `order`,
and gives a buffer written in one stage and read in a later one a version per iteration in flight
(iteration i uses version i mod versions). The interpreter runs the same schedule with the same
versions, so a stage list that reads data before its stage has written it gives the wrong numbers here
too. A T.Pipelined loop without a stage list is TileLang's to plan; it keeps the loop's meaning, and the
interpreter runs it in order.
"""
from __future__ import annotations

from .errors import Unsupported
from .expressions import key
from .memory import GLOBAL


def accesses(node, buffer) -> tuple[set[int], set[int]]:
    """(allocations read, allocations written) anywhere under `node`."""
    reads, writes = set(), set()

    def visit(n):
        kind = type(n).__name__
        if kind == "BufferStore":
            writes.add(key(n.buffer.data))
        elif kind == "BufferLoad":
            reads.add(key(n.buffer.data))
        elif kind == "Call" and n.op.name == "tl.region":
            mode = int(n.args[1].value)
            target = key(n.args[0].buffer.data)
            if mode & 1:
                reads.add(target)
            if mode & 2:
                writes.add(target)
            for i in n.args[0].indices:
                visit(i)
            return
        elif kind == "Call" and n.op.name.startswith("tl.atomic"):
            writes.add(key(n.args[0].args[0].buffer.data))
        for child in _children(n):
            visit(child)
    visit(node)
    return reads, writes


def _children(n):
    kind = type(n).__name__
    if kind == "SeqStmt":
        return list(n.seq)
    out = []
    for attr in ("body", "then_case", "else_case", "value", "condition", "a", "b", "true_value",
                 "false_value", "block", "min", "extent"):
        v = getattr(n, attr, None)
        if v is not None and not isinstance(v, (int, float, str)) and hasattr(v, "__chandle__"):
            out.append(v)
    for attr in ("indices", "args"):
        out.extend(getattr(n, attr, None) or [])
    return out


def staged(loop, body_stmts, compile_stmt, buffer):
    """A closure running `loop` (a T.Pipelined For with `tl_pipeline_stage`) in TileLang's schedule.
    `body_stmts`: the loop body's statements (lets first)."""
    ann = loop.annotations
    stage = [int(s) for s in ann["tl_pipeline_stage"]]
    order = [int(o) for o in ann["tl_pipeline_order"]] if "tl_pipeline_order" in ann else list(range(len(stage)))
    lets, stmts = [], []
    for s in body_stmts:
        if type(s).__name__ == "Bind" and not stmts:
            lets.append(s)
        elif type(s).__name__ == "Bind":
            raise Unsupported("a let between the statements of a T.Pipelined loop with a stage list")
        else:
            stmts.append(s)
    if len(stmts) != len(stage) or sorted(order) != list(range(len(stage))):
        raise Unsupported(f"a T.Pipelined loop with {len(stmts)} statements, stage={stage}, order={order}")
    versions: dict[int, int] = {}
    rw = [accesses(s, buffer) for s in stmts]
    for j, (_, written) in enumerate(rw):
        for k, (read, _) in enumerate(rw):
            if stage[k] > stage[j]:
                for b in written & read:
                    versions[b] = max(versions.get(b, 1), stage[k] - stage[j] + 1)
    run_lets = [compile_stmt(s) for s in lets]
    let_keys = [key(s.var) for s in lets]
    run_stmts = [compile_stmt(s) for s in stmts]
    iv = key(loop.loop_var)
    last = max(stage)

    def run(fr, start, count):
        storages = fr.memory.storages
        kept = {b: storages[b] for b in versions if storages[b].scope != GLOBAL}
        copies = {b: [kept[b].clone() for _ in range(versions[b])] for b in kept}
        envs = {}
        try:
            for step in range(count + last):
                for j in order:
                    i = step - stage[j]
                    if not 0 <= i < count:
                        continue
                    if i not in envs:
                        fr.env[iv] = start + i
                        for r in run_lets:
                            r(fr)
                        envs[i] = {k: fr.env[k] for k in [iv, *let_keys]}
                    else:
                        fr.env.update(envs[i])
                    for b, vs in copies.items():
                        storages[b] = vs[i % len(vs)]
                    run_stmts[j](fr)
                envs.pop(step - last, None)
        finally:
            for b, st in kept.items():
                if count:
                    st.assign(copies[b][(count - 1) % len(copies[b])])
                storages[b] = st
    return run
