"""The progress pump (daemon side) and the status line (lazyctl side), without a daemon."""

from __future__ import annotations

import io
import os
import pty
import select

import pytest
import trio

from lazyd.ctl.progress import StatusLine
from lazyd.daemon.control import progress
from lazyd.errors import WireError
from lazyd.protocol.frames import Progress, validate_walked


async def test_the_pump_coalesces_fast_steps_and_always_sends_the_last_one(autojump_clock: trio.abc.Clock) -> None:
    sent: list[str] = []

    async def send(step: str) -> None:
        sent.append(step)
        await trio.sleep(1)  # a slow peer: steps pile up meanwhile

    pump = progress.Pump(send)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump.run)
        with pump.reporting():
            progress.report("starting the server")
            await trio.sleep(0.1)  # steps arriving faster than the peer takes them, in virtual time (autojump clock)
            for page in range(1, 5):
                progress.report(f"listings: tools/list page {page}")
            await trio.sleep(0.1)  # virtual time (autojump clock), as above
            progress.report("stopping the server")
        nursery.cancel_scope.cancel()
    await pump.flush()
    assert sent == ["starting the server", "stopping the server"]


async def test_report_outside_a_pump_does_nothing_and_a_pump_reaches_the_tasks_an_op_starts() -> None:
    progress.report("nobody listens")  # no error
    sent: list[str] = []

    async def send(step: str) -> None:
        sent.append(step)

    async def worker() -> None:
        progress.report("from a child task")

    pump = progress.Pump(send)
    with pump.reporting():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker)
    await pump.flush()
    assert sent == ["from a child task"]


def test_a_progress_frame_must_carry_a_step_text() -> None:
    assert validate_walked({"t": "progress", "step": "handshake"}) == Progress("handshake")
    with pytest.raises(WireError, match="'progress' frame field 'step' must be a str"):
        validate_walked({"t": "progress", "step": 3})


def _read_pty(controller: int, until: str, count: int, timeout_s: float = 10.0) -> str:
    """What the terminal side received, once `until` arrived `count` times: the kernel hands pty
    output to the other side asynchronously, so one read can return only part of it under load."""
    written = ""
    while written.count(until) < count:
        ready, _, _ = select.select([controller], [], [], timeout_s)
        if not ready:
            break  # the assertion below says what was missing
        written += os.read(controller, 4096).decode()
    return written


def test_the_status_line_draws_and_erases_on_a_terminal_only() -> None:
    controller, terminal = pty.openpty()
    try:
        with os.fdopen(terminal, "w", closefd=False) as tty:
            line = StatusLine("checking x", json_mode=False, stream=tty)
            assert line.active
            line.update("handshake (pid 7)")
            line.clear()
        written = _read_pty(controller, until="\x1b[K", count=2)
        assert written.startswith("\r\x1b[Kchecking x: handshake (pid 7) (") and written.endswith("s)\r\x1b[K")
    finally:
        os.close(controller)
        os.close(terminal)
    pipe = io.StringIO()
    for json_mode, stream in ((False, pipe), (True, pipe)):
        quiet = StatusLine("checking x", json_mode=json_mode, stream=stream)
        quiet.update("handshake")
        quiet.clear()
        assert not quiet.active
    assert pipe.getvalue() == ""


def test_with_stderr_closed_the_status_line_stays_off_and_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stderr", None)  # what Python sets for `lazyctl wake x 2>&-`
    line = StatusLine("waking x", json_mode=False)
    assert not line.active
    line.update("starting")
    line.draw()
    line.clear()
