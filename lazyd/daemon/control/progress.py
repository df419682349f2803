"""What a long control op (`check`, `wake`) is doing now, for lazyctl's live status line.

An op calls `report("handshake (pid 123)")` in any task it started: the callback travels in a
context variable, which trio copies into spawned tasks, so no signature carries it. The
connection's `Pump` sends the latest step as a `progress` frame, coalescing fast steps, and always
the last one before the reply. Without a pump `report` does nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import trio

_current: ContextVar[Callable[[str], None] | None] = ContextVar("lazyd_progress", default=None)


def report(step: str) -> None:
    """Say what the current control op is doing (a few words; no secrets: lazyctl shows it)."""
    callback = _current.get()
    if callback is not None:
        callback(step)


class Pump:
    """Carries one op's steps to its connection: `run` sends, `flush` sends what is left."""

    def __init__(self, send: Callable[[str], Awaitable[None]]) -> None:
        self._send = send
        self._latest: str | None = None
        self._sent: str | None = None
        self._changed = trio.Event()

    def _update(self, step: str) -> None:
        self._latest = step
        self._changed.set()

    @contextmanager
    def reporting(self) -> Iterator[None]:
        """Within this block, `report` reaches this pump."""
        token = _current.set(self._update)
        try:
            yield
        finally:
            _current.reset(token)

    async def run(self) -> None:
        """Send each new step until cancelled (a send in progress is finished first: a frame cut
        in half would break the connection)."""
        while True:
            await self._changed.wait()
            self._changed = trio.Event()
            with trio.CancelScope(shield=True):
                await self.flush()

    async def flush(self) -> None:
        """Send the latest step unless it was sent; call it once more after `run` was cancelled."""
        step = self._latest
        if step is not None and step != self._sent:
            self._sent = step
            await self._send(step)
