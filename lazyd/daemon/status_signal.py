"""A daemon-wide signal that something `lazyctl status` and systemd's STATUS= show may have changed.

Raised by the runtimes at the end of every lifecycle input, by the era lanes when a session starts
or stops waiting for its lane, and by the registry when a row comes or goes; the STATUS= loop waits
on it rather than a timer. An event exists only while someone waits, so raising it on the relay's
hot path costs one comparison.
"""

from __future__ import annotations

import trio


class Changes:
    """`note()` from anywhere in the loop; `await wait()` returns after the next `note()`."""

    def __init__(self) -> None:
        self._event: trio.Event | None = None

    def note(self) -> None:
        event = self._event
        if event is not None:
            self._event = None
            event.set()

    async def wait(self) -> None:
        if self._event is None:
            self._event = trio.Event()
        await self._event.wait()
