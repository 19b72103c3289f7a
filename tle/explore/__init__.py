"""`tle explore` and `tle compare --html`: a kernel and what each backend made of it, side by side in a page, the
lines of every pane linked to the kernel's source lines (Compiled.line_map)."""
from tle.explore.page import Pane, html_page, ir_line_map, panes_of

__all__ = ["Pane", "html_page", "ir_line_map", "panes_of"]
