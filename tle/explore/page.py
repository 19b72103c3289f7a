"""One self-contained HTML page (no external assets) showing a kernel's source beside the panes each lowering
produced. Every pane line that came from a kernel line carries that line's number (`data-src`) and colour;
clicking a source line highlights, in every pane, the lines it became; hovering a generated line says where it
came from. The notes of each backend (how each load and store was lowered) are shown at their source lines."""
from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

_IR_LINE = re.compile(r"#\s*line (\d+)\s*$")


@dataclass
class Pane:
    """A text shown beside the source: `line_map` takes its lines (from 1) to kernel source lines."""
    title: str
    text: str
    line_map: dict[int, int] = field(default_factory=dict)
    backend: str = ""


def ir_line_map(ir_text: str) -> dict[int, int]:
    """The tile IR's own line map: each op's line ends with `# line N` (lowering/ir/printer.py)."""
    out = {}
    for number, line in enumerate(ir_text.splitlines(), 1):
        m = _IR_LINE.search(line)
        if m:
            out[number] = int(m.group(1))
    return out


def panes_of(lowered: dict) -> list[Pane]:
    """The panes of each backend's lowering (backend -> tle.jit.Lowered): the tile IR once (the frontend's, the
    same for every backend), then each backend's generated source."""
    panes = []
    for backend, lw in lowered.items():
        if not panes:
            panes.append(Pane("tile IR", lw.ir, ir_line_map(lw.ir)))
        panes.append(Pane(f"{backend} source", lw.source, dict(lw.compiled.line_map), backend))
    return panes


_NOTE_LINES = re.compile(r"^lines? (\d+(?:, \d+)*): ")


def note_lines(note: str) -> list[int]:
    """The source lines a lowering note is about: notes start 'line N: ...' or 'lines N, M: ...'."""
    m = _NOTE_LINES.match(note)
    return [int(n) for n in m.group(1).split(", ")] if m else []


def notes_of(lowered: dict) -> dict[int, list[str]]:
    """Source line -> what each backend did there: its access report (box, strided, gather, general; what went
    through shared memory), its notes that name a line (hints dropped), and its placements (shared buffers,
    pipelined loops)."""
    notes: dict[int, list[str]] = {}
    for backend, lw in lowered.items():
        for line, op, kind, how in lw.compiled.access_report:
            notes.setdefault(line, []).append(f"{backend}: {op} ({kind}) as {how}")
        for note in lw.compiled.notes:
            for line in note_lines(note):
                notes.setdefault(line, []).append(f"{backend}: {_NOTE_LINES.sub('', note)}")
        for line, what in lw.compiled.placements():
            notes.setdefault(line, []).append(f"{backend}: {what}")
    return notes


def _hue(line: int) -> int:
    return (line * 137) % 360          # the golden angle: neighbouring lines get far-apart colours


def _line(number: int, text: str, src: int | None, where: str, note: list[str] | None = None,
          errors: list[str] | None = None) -> str:
    attrs = f' data-line="{number}"'
    classes = "ln" + (" mapped" if src else "") + (" error" if errors else "")
    if src:
        attrs += f' data-src="{src}" style="--hue:{_hue(src)}" title="from {html.escape(where)}:{src}"'
    mark = ""
    if note:
        attrs += ' data-note="1"'
        mark = f'<span class="note" title="{html.escape(chr(10).join(note))}">&#9679;</span>'
    row = f'<div class="{classes}"{attrs}><span class="no">{number}</span>{mark}' \
          f'<code>{html.escape(text) or " "}</code></div>'
    for e in errors or ():                # the message right under its line, as a compiler's would be
        row += f'<div class="errmsg" data-line="{number}">{html.escape(e)}</div>'
    return row


def main_html(source_name: str, source_text: str, panes: list[Pane], notes: dict[int, list[str]] | None = None,
              kernel_lines: tuple[int, int] | None = None, errors: dict[int, list[str]] | None = None) -> str:
    """The panes: the kernel's file first, then `panes`. `source_text` is the kernel's whole file (line maps count
    the file's lines); `kernel_lines` (first, last) marks the kernel's own lines; `notes` and `errors` are shown
    at their source lines (errors of no line above the file)."""
    notes, errors = notes or {}, dict(errors or {})
    first, last = kernel_lines or (1, len(source_text.splitlines()))
    source_rows = [f'<div class="errmsg" data-line="0">{html.escape(e)}</div>' for e in errors.pop(0, ())]
    for n, text in enumerate(source_text.splitlines(), 1):
        row = _line(n, text, n if first <= n <= last else None, source_name, notes.get(n), errors.get(n))
        source_rows.append(row.replace('class="ln', 'class="ln src', 1))
    sections = [_section("kernel source", source_name, "source", source_rows)]
    for i, pane in enumerate(panes):
        rows = [_line(n, text, pane.line_map.get(n), source_name)
                for n, text in enumerate(pane.text.splitlines(), 1)]
        sections.append(_section(pane.title, "", f"pane{i}", rows))
    return "\n".join(sections)


def html_page(title: str, source_name: str, source_text: str, panes: list[Pane],
              notes: dict[int, list[str]] | None = None, header: list[str] | None = None,
              kernel_lines: tuple[int, int] | None = None, errors: dict[int, list[str]] | None = None) -> str:
    """The page as one file that needs nothing else: `header` lines above the panes of main_html."""
    return page_shell(title, header or [], main_html(source_name, source_text, panes, notes, kernel_lines, errors))


def page_shell(title: str, header: list[str], main: str, tools: str = "", aside: str = "", script: str = "",
               body_attrs: str = "", style: str = "") -> str:
    """The page around the panes (`main`): `tools` and `aside` (HTML, above and beside the panes), `script` and
    `style` are what the served page adds (server.py)."""
    head = "".join(f"<p>{html.escape(line)}</p>" for line in header)
    return _TEMPLATE.format(title=html.escape(title), header=head, tools=tools, aside=aside, sections=main,
                            style=_STYLE + style, script=_SCRIPT + script, body_attrs=body_attrs)


def _section(title: str, subtitle: str, key: str, rows: list[str]) -> str:
    sub = f' <small>{html.escape(subtitle)}</small>' if subtitle else ""
    return f'<section class="pane" data-pane="{key}"><h2>{html.escape(title)}{sub}</h2>' \
           f'<div class="body">{"".join(rows)}</div></section>'


_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title><style>{style}</style></head>
<body{body_attrs}><header><h1>{title}</h1><div id="lines">{header}</div>{tools}<p class="hint">Click a line of
the kernel to see what it became in every pane; hover a generated line to see where it came from.</p></header>
<div id="work">{aside}<main>{sections}</main></div>
<script>{script}</script></body></html>
"""

_STYLE = """
body { margin: 0; font: 13px/1.35 system-ui, sans-serif; color: #222; display: flex; flex-direction: column;
       height: 100vh; }
header { flex: none; padding: 6px 12px; border-bottom: 1px solid #ccc; }
header h1 { font-size: 16px; margin: 4px 0; } header p { margin: 2px 0; } .hint { color: #666; }
#work { display: flex; flex: 1; min-height: 0; }
main { display: flex; flex: 1; gap: 6px; padding: 6px; overflow-x: auto; }
.pane { flex: 1 0 30em; min-width: 0; display: flex; flex-direction: column; border: 1px solid #ccc; }
.pane h2 { font-size: 13px; margin: 0; padding: 4px 6px; background: #f3f3f3; border-bottom: 1px solid #ccc; }
.pane h2 small { color: #666; font-weight: normal; }
.body { position: relative; overflow: auto; flex: 1; font: 12px/1.4 ui-monospace, monospace; white-space: pre; }
.ln { display: flex; }
.ln .no { color: #999; min-width: 3.5em; text-align: right; padding-right: 8px; user-select: none; }
.ln.mapped { background: hsl(var(--hue), 70%, 96%); }
.ln.src.mapped { cursor: pointer; }
.ln.hl { background: hsl(var(--hue), 80%, 80%); outline: 1px solid hsl(var(--hue), 60%, 45%); }
.note { color: #c60; padding-right: 4px; cursor: help; }
.ln.error { background: #fdd; }
.errmsg { color: #a00; background: #fee; padding: 1px 4px 1px 4.5em; white-space: pre-wrap; }
"""

_SCRIPT = """
function highlight(src) {
  document.querySelectorAll('.ln.hl').forEach(e => e.classList.remove('hl'));
  document.querySelectorAll('.ln[data-src="' + src + '"]').forEach(e => e.classList.add('hl'));
  document.querySelectorAll('.pane').forEach(p => {      // each pane scrolls to its first lit line, on its own
    const first = p.querySelector('.ln.hl'), body = p.querySelector('.body');
    if (first && p.dataset.pane !== 'source') body.scrollTop = first.offsetTop - body.clientHeight / 3;
  });
}
// one listener for the whole of main: the served page replaces the panes after each lowering
document.querySelector('main').addEventListener('click', ev => {
  const row = ev.target.closest('.ln.src.mapped');
  if (row) highlight(row.dataset.src);
});
"""
