"""lazyctl's live status line: what a long operation is doing, on a terminal only.

`check`, `wrap --check` and `wake` can take up to a server's start timeout: on a terminal they show
one line, rewritten in place (the subject, the daemon's latest step, the time elapsed), erased
before any real output, so the screen ends as a pipe would. With `--json` or off a terminal,
nothing is written.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from lazyd.config.durations import format_duration

TICK_S = 0.25  # how often the elapsed time is redrawn while the daemon reports nothing new
_ERASE = "\r\x1b[K"  # carriage return, erase to the end of the line
MAX_LINE_CHARS = 120  # kept to one terminal line, or the next redraw would not erase it all


class StatusLine:
    """One live line on `stream` (stderr), active only when it is a terminal and not `--json`."""

    def __init__(self, what: str, *, json_mode: bool, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.active = not json_mode and self.stream is not None and self.stream.isatty()  # None: stderr closed
        self.what = what
        self.step = ""
        self._started = time.monotonic()
        self._shown = False

    def restart(self, what: str) -> None:
        """A new subject (the next registration of a wrap --check): elapsed time starts again."""
        self.what, self.step, self._started = what, "", time.monotonic()
        self.draw()

    def update(self, step: str) -> None:
        self.step = step
        self.draw()

    def draw(self) -> None:
        if not self.active:
            return
        elapsed = format_duration(round(time.monotonic() - self._started, 1))
        text = f"{self.what}: {self.step} ({elapsed})" if self.step else f"{self.what} ({elapsed})"
        if len(text) > MAX_LINE_CHARS:
            text = text[: MAX_LINE_CHARS - 1] + "…"
        self.stream.write(_ERASE + text)
        self.stream.flush()
        self._shown = True

    def clear(self) -> None:
        """Erase the line (before real output, and at the end)."""
        if self.active and self._shown:
            self.stream.write(_ERASE)
            self.stream.flush()
            self._shown = False
