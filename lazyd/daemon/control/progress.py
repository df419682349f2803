"""What a long control op (`check`, `wake`) is doing now, for lazyctl's live status line.

An op reports steps with `report("handshake (pid 123)")` wherever it is, in any task it started:
the callback travels in a context variable, which trio copies into the tasks an op spawns, so no
signature changes hands. The connection that runs the op (`Pump`) sends the latest step as a
`progress` frame whenever it changed, coalescing steps that come faster than frames go out, and
always sends the last one before the reply, so what lazyctl shows last is what happened last.
With no pump (the ctl did not ask, or a caller outside a connection) `report` does nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import trio

__all__ = ["report", "Pump"]

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
                await self._send_latest()

    async def flush(self) -> None:
        """Send the last step if it was not sent yet; call it after `run` was cancelled."""
        await self._send_latest()

    async def _send_latest(self) -> None:
        step = self._latest
        if step is not None and step != self._sent:
            self._sent = step
            await self._send(step)
