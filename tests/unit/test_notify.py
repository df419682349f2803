"""sd_notify wrapper (lazyd/daemon/notify.py): what reaches systemd, and what never reaches children.

Testing policy: the "systemd" here is a real AF_UNIX datagram socket owned by the test, bound in
tmp (and once in the abstract namespace, which systemd also uses); the variables are set in the
real process environment with monkeypatch, which restores them afterwards. Timed loops run on
trio's autojump clock, so "every 5 s" is checked exactly and costs nothing.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from lazyd.daemon.status_signal import Changes
from lazyd.daemon.notify import MAX_STATUS_CHARS, Notifier, clean_status

DATAGRAM_BYTES = 4096


@pytest.fixture
def notify_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A bound datagram socket standing in for systemd; NOTIFY_SOCKET points at it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify.sock"
    sock.bind(str(path))
    sock.setblocking(False)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    yield sock
    sock.close()


def received(sock: socket.socket) -> list[str]:
    """Every datagram waiting on `sock`, oldest first (never blocks: they were sent already)."""
    out = []
    while True:
        try:
            out.append(sock.recv(DATAGRAM_BYTES).decode())
        except BlockingIOError:
            return out


def test_without_notify_socket_every_notification_is_a_quiet_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")
    notifier = Notifier.from_environ()
    assert notifier.watchdog_interval_s is None
    assert [notifier.ready("x"), notifier.status("y"), notifier.watchdog(), notifier.stopping()] == [False] * 4
    assert "WATCHDOG_USEC" not in os.environ


def test_ready_status_and_stopping_arrive_as_sd_notify_assignments(notify_socket: socket.socket) -> None:
    notifier = Notifier.from_environ()
    assert notifier.ready("1 servers: 1 running")
    assert notifier.status("2 servers: 2 running")
    assert notifier.stopping()
    assert received(notify_socket) == [
        "READY=1\nSTATUS=1 servers: 1 running",
        "STATUS=2 servers: 2 running",
        "STOPPING=1\nSTATUS=stopping",
    ]


def test_an_unchanged_status_is_not_sent_again(notify_socket: socket.socket) -> None:
    notifier = Notifier.from_environ()
    notifier.ready("same")
    assert not notifier.status("same")
    assert notifier.status("other")
    assert not notifier.status("other")
    assert received(notify_socket) == ["READY=1\nSTATUS=same", "STATUS=other"]


def test_a_status_with_newlines_cannot_inject_another_assignment(notify_socket: socket.socket) -> None:
    notifier = Notifier.from_environ()
    notifier.status("bad\nREADY=1\n" + "x" * 500)
    (datagram,) = received(notify_socket)
    assert "\n" not in datagram
    assert datagram == "STATUS=" + clean_status("bad READY=1 " + "x" * 500)
    assert len(datagram) == len("STATUS=") + MAX_STATUS_CHARS


def test_the_variables_are_removed_so_children_never_inherit_them(
    notify_socket: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "2000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    notifier = Notifier.from_environ()
    for key in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        assert key not in os.environ
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(sorted(k for k in os.environ if 'NOTIFY' in k or 'WATCHDOG' in k))"],
        capture_output=True, text=True, check=True, timeout=30,
    )
    assert child.stdout.strip() == "[]"
    # The notifier read the values before removing them.
    assert notifier.watchdog_interval_s == 1.0


def test_an_abstract_namespace_notify_socket_is_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"lazyd-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.setblocking(False)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert Notifier.from_environ().ready("up")
        assert received(sock) == ["READY=1\nSTATUS=up"]


def test_a_notify_socket_that_does_not_exist_disables_notifications_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens"))
    with caplog.at_level(logging.WARNING, logger="lazyd.notify"):
        notifier = Notifier.from_environ()
    assert not notifier.ready("up")  # nothing to send it to, and no error
    assert "NOTIFY_SOCKET" not in os.environ
    assert any("cannot reach the notify socket" in r.getMessage() for r in caplog.records)


def test_a_notify_socket_that_went_away_fails_quietly_after_one_warning(
    notify_socket: socket.socket, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = Notifier.from_environ()
    notify_socket.close()
    with caplog.at_level(logging.DEBUG, logger="lazyd.notify"):
        results = [notifier.watchdog() for _ in range(3)]
    assert results == [False, False, False]
    levels = [r.levelno for r in caplog.records if r.getMessage().startswith("sd_notify WATCHDOG to")]
    assert levels == [logging.WARNING, logging.DEBUG, logging.DEBUG]


@pytest.mark.parametrize(
    ("usec", "pid", "interval_s"),
    [
        ("10000000", None, 5.0),
        ("10000000", "self", 5.0),
        ("10000000", "1", None),  # systemd meant another process
        ("0", None, None),
        ("-5", None, None),
        ("soon", None, None),
        (None, None, None),
    ],
)
def test_the_watchdog_interval_is_half_of_watchdog_usec_and_only_for_our_pid(
    notify_socket: socket.socket, monkeypatch: pytest.MonkeyPatch, usec: str | None, pid: str | None,
    interval_s: float | None,
) -> None:
    if usec is not None:
        monkeypatch.setenv("WATCHDOG_USEC", usec)
    if pid is not None:
        monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()) if pid == "self" else pid)
    assert Notifier.from_environ().watchdog_interval_s == interval_s


async def test_the_watchdog_is_pinged_every_half_timeout(
    notify_socket: socket.socket, monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "10000000")
    notifier = Notifier.from_environ()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(notifier.watchdog_loop)
        await trio.sleep(12)  # pings at 0, 5 and 10 s
        nursery.cancel_scope.cancel()
    assert received(notify_socket) == ["WATCHDOG=1"] * 3


async def test_without_a_watchdog_the_loop_returns_at_once(
    notify_socket: socket.socket, autojump_clock: trio.testing.MockClock
) -> None:
    notifier = Notifier.from_environ()
    with trio.fail_after(1):
        await notifier.watchdog_loop()
    assert received(notify_socket) == []


async def test_the_status_loop_sends_a_status_only_when_it_changed(
    notify_socket: socket.socket, autojump_clock: trio.testing.MockClock
) -> None:
    notifier = Notifier.from_environ()
    texts = iter(["a", "a", "b", "b", "b", "c"])

    async def a_change_every_second() -> None:
        await trio.sleep(1.0)  # the pace under test: a change every second, in virtual time (autojump clock)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(notifier.status_loop, lambda: next(texts, "c"), a_change_every_second)
        await trio.sleep(10)  # ten seconds of virtual time (autojump clock): the span under test
        nursery.cancel_scope.cancel()
    assert received(notify_socket) == ["STATUS=a", "STATUS=b", "STATUS=c"]


async def test_the_status_is_recomputed_only_after_a_change_and_at_most_twice_a_second(
    notify_socket: socket.socket, autojump_clock: trio.testing.MockClock
) -> None:
    notifier = Notifier.from_environ()
    changes = Changes()
    computed: list[float] = []

    def summary() -> str:
        computed.append(trio.current_time())
        return f"status {len(computed)}"

    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        nursery.start_soon(notifier.status_loop, summary, changes.wait)
        await trio.sleep(100)  # nothing changes: no timer recomputes it
        assert [t - start for t in computed] == [0.0]
        for _ in range(50):  # a burst of changes is one update, half a second later
            changes.note()
            await trio.sleep(0.001)  # the burst's pace, in virtual time (autojump clock)
        await trio.sleep(10)  # well past the half-second coalescing, in virtual time (autojump clock)
        assert len(computed) == 2 and computed[1] - computed[0] == pytest.approx(100.5, abs=0.01)
        nursery.cancel_scope.cancel()
    assert received(notify_socket) == ["STATUS=status 1", "STATUS=status 2"]


async def test_a_status_the_full_notify_queue_refused_is_sent_again_without_another_change(
    notify_socket: socket.socket, autojump_clock: trio.testing.MockClock
) -> None:
    notifier = Notifier.from_environ()
    filler = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    filler.setblocking(False)
    address = notify_socket.getsockname()
    try:
        while True:  # fill the manager's queue, as watchdog pings do while nobody reads
            filler.sendto(b"WATCHDOG=1", address)
    except BlockingIOError:
        pass
    filler.close()
    changes = Changes()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(notifier.status_loop, lambda: "1 servers: 1 running", changes.wait)
        await trio.sleep(0.1)  # virtual time (autojump clock): runs until every task waits, then 0.1 s on
        assert notifier.unsent
        queued = received(notify_socket)  # the manager reads its queue again
        assert "STATUS=1 servers: 1 running" not in queued
        await trio.sleep(1.0)  # no change meanwhile
        assert received(notify_socket) == ["STATUS=1 servers: 1 running"]
        assert not notifier.unsent
        nursery.cancel_scope.cancel()
