"""A progress bar over the cases of a run, on stderr: redrawn in place on a terminal, one line per case
otherwise (a log)."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, stream=None, width: int = 24):
        self.total, self.done, self.width = max(total, 1), 0, width
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.monotonic()
        self._last = 0                    # length of the bar now on the terminal's line

    def _line(self, label: str) -> str:
        filled = self.width * self.done // self.total
        bar = "#" * filled + "." * (self.width - filled)
        return f"[{bar}] {self.done}/{self.total} {time.monotonic() - self.start:4.0f}s {label}"

    def _draw(self, label: str) -> None:
        line = self._line(label)
        self.stream.write("\r" + line + " " * max(self._last - len(line), 0))
        self.stream.flush()
        self._last = len(line)

    def step(self, label: str) -> None:
        """A case starts."""
        if self.tty:
            self._draw(label)
        else:
            self.stream.write(self._line(label) + "\n")
            self.stream.flush()

    def show(self, label: str) -> None:
        """What runs now within the case (on a terminal only)."""
        if self.tty:
            self._draw(label)

    def advance(self) -> None:
        """A case is done."""
        self.done = min(self.done + 1, self.total)

    def clear(self) -> None:
        """Take the bar off the terminal's line (before other output)."""
        if self.tty and self._last:
            self.stream.write("\r" + " " * self._last + "\r")
            self.stream.flush()
            self._last = 0

    def note(self, message: str) -> None:
        """A line that stays (a failure, a skipped operator)."""
        self.clear()
        self.stream.write(message + "\n")
        self.stream.flush()

    def close(self) -> None:
        self.clear()
        self.stream.write(self._line("done") + "\n")
        self.stream.flush()
