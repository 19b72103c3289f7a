"""`tle compare --html FILE`: the page of tle/explore/page.py for each kernel compared, written as one file that
needs nothing else (no server): the kernel's source, the tile IR, each backend's generated source and the compiler
stages built here, with the summary rows (lowered, compiled, checked, time) and each backend's notes on top."""
from __future__ import annotations

import inspect
import os

from tle.explore.page import Pane, html_page, notes_of, panes_of
from tle.explore.stages import backend_stage_panes, stage_notes


def stage_panes(lowered: dict, built: set[str]) -> list[Pane]:
    """The compiler stages of each backend that compiled here (`built`): Triton's TTGIR and PTX, TileLang's CUDA
    and PTX, each with its lines' kernel source lines where the toolchain keeps locations (tle/explore/stages.py);
    a stage that cannot be read is left out."""
    return [pane for backend, lw in lowered.items() if backend in built for pane in backend_stage_panes(backend, lw)]


def kernel_page(job, rows, built: set[str]) -> str:
    """The page of one compared kernel (a tle.cli _Job and its summary rows)."""
    fn = job.kernel.fn
    path = inspect.getsourcefile(fn)
    with open(path) as f:
        text = f.read()
    lines, first = inspect.getsourcelines(fn)
    header = [f"{os.path.relpath(path)} :: {job.kernel.__name__}, example launch '{job.size}'"]
    for r in rows:
        header.append(f"{r.backend}: lowered {r.lowered}; compiled {r.compiled}; checked {r.checked}; "
                      f"time {r.time}")
    for backend, error in job.errors.items():
        header.append(f"{backend}: {error}")
    for backend, lw in job.lowered.items():
        header += [f"{backend} note: {n}" for n in lw.compiled.notes]
    panes = panes_of(job.lowered) + stage_panes(job.lowered, built)
    notes = merged(notes_of(job.lowered), stage_notes(job.lowered, built))
    return html_page(f"tle: {job.kernel.__name__}", os.path.basename(path), text, panes, notes,
                     header, kernel_lines=(first, first + len(lines) - 1))


def merged(*notes: dict[int, list[str]]) -> dict[int, list[str]]:
    """Notes by source line, from several readers (the lowerings, the compiler stages), in that order."""
    out: dict[int, list[str]] = {}
    for each in notes:
        for line, texts in each.items():
            out.setdefault(line, []).extend(texts)
    return out


def page_paths(path: str, jobs) -> list[str]:
    """Where each kernel's page goes: `path` for one kernel, else `<stem>.<kernel>.html` beside it."""
    if len(jobs) == 1:
        return [path]
    stem = path[:-5] if path.endswith(".html") else path
    return [f"{stem}.{job.kernel.__name__}.html" for job in jobs]
