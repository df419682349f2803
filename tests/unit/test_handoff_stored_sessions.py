"""Hand-off sessions kept in systemd's fd store (lazyd/daemon/handoff/stored_sessions.py): what is stored and
removed, how what comes back is grouped, and how a kept session is reopened from its waiter.

Testing policy: the store is a real datagram socket read by the test (what systemd's notify socket
receives); the waiter is a real process that connected to the test's socket and holds a real
region and hello. The whole path under a real user manager: tests/e2e/test_systemd_manager.py.
"""

from __future__ import annotations

import array
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lazyd.daemon.handoff import stored_sessions
from lazyd.daemon.handoff.outbox import ClientEnds
from lazyd.daemon.upgrade.stored_servers import FdStore
from lazyd.protocol.frames import Hello
from lazyd.handoff.region import LAYOUT

STEP_S = 10.0


class Store:
    """The notify socket's side: every datagram the keeper sends, with the descriptors it carried."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0)
        self.path = str(path)

    def messages(self) -> list[tuple[dict[str, str], list[int]]]:
        got: list[tuple[dict[str, str], list[int]]] = []
        while True:
            try:
                data, ancillary, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(8 * 4))
            except BlockingIOError:
                return got
            fds = array.array("i")
            for _, _, payload in ancillary:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
            got.append((dict(line.split("=", 1) for line in data.decode().splitlines()), list(fds)))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "notify")
    yield s
    s.sock.close()


def same_file(a: int, b: int) -> bool:
    sa, sb = os.fstat(a), os.fstat(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


async def test_a_handed_off_session_stores_its_socket_and_both_client_pipes_unpolled_and_drops_exactly_those(
        store: Store) -> None:
    keeper = stored_sessions.Keeper(FdStore(store.path))
    shim_a, shim_b = socket.socketpair()
    stdin_r, stdin_w = os.pipe2(os.O_NONBLOCK)  # as the shim passes them (shim/handoff.py)
    stdout_r, stdout_w = os.pipe2(os.O_NONBLOCK)
    ends = ClientEnds(stdin_r, stdout_w)
    try:
        keeper.keep(4242, shim_a.fileno(), ends)
        stored = store.messages()
        assert [m["FDNAME"] for m, _ in stored] == ["hs-4242", "hs-4242-in", "hs-4242-out"]
        assert all(m["FDSTORE"] == "1" and m["FDPOLL"] == "0" and len(fds) == 1 for m, fds in stored)
        for (_, fds), mine in zip(stored, (shim_a.fileno(), stdin_r, stdout_w)):
            assert same_file(fds[0], mine)
            os.close(fds[0])
        keeper.drop(4242)
        removed = store.messages()
        assert [(m["FDNAME"], m["FDSTOREREMOVE"], fds) for m, fds in removed] == [
            ("hs-4242", "1", []), ("hs-4242-in", "1", []), ("hs-4242-out", "1", [])]
    finally:
        ends.close()
        for fd in (stdin_w, stdout_r):
            os.close(fd)
        shim_a.close()
        shim_b.close()


async def test_one_socket_both_ways_is_stored_once_since_the_store_keeps_a_description_once(store: Store) -> None:
    keeper = stored_sessions.Keeper(FdStore(store.path))
    shim_a, shim_b = socket.socketpair()
    client, other = socket.socketpair()
    ends = ClientEnds(os.dup(client.fileno()), os.dup(client.fileno()))
    try:
        keeper.keep(7, shim_a.fileno(), ends)
        stored = store.messages()
        for _, fds in stored:
            os.close(fds[0])
        assert [m["FDNAME"] for m, _ in stored] == ["hs-7", "hs-7-io"]
    finally:
        ends.close()
        for s in (shim_a, shim_b, client, other):
            s.close()


def test_a_session_carried_over_by_an_upgrade_drops_the_names_its_predecessor_stored_and_only_those(
        store: Store) -> None:
    fdstore = FdStore(store.path)
    fdstore.given(["hs-99", "hs-99-in", "hs-99-out", "hs-7"])  # the names an upgrade's state carries
    stored_sessions.Keeper(fdstore).drop(99)
    assert [m["FDNAME"] for m, _ in store.messages()] == ["hs-99", "hs-99-in", "hs-99-out"]
    assert fdstore.names == {"hs-7"}


def test_what_the_store_gives_back_is_grouped_by_session_and_the_servers_names_are_left() -> None:
    fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(6)]
    given = {"srv-abc-12-in": fds[0], "lazyd-secrets": fds[1], "hs-12": fds[2], "hs-12-in": fds[3],
             "hs-13": fds[4], "hs-x-in": fds[5]}
    sessions = stored_sessions.take_kept(given)
    try:
        assert given == {"srv-abc-12-in": fds[0], "lazyd-secrets": fds[1]}
        assert sorted((s.pid, sorted(s.fds)) for s in sessions) == [(12, ["hs-12", "hs-12-in"]), (13, ["hs-13"])]
        with pytest.raises(OSError):
            os.fstat(fds[5])  # a name that is not one of ours: closed, not kept open
    finally:
        for s in sessions:
            s.close()
        os.close(fds[0])
        os.close(fds[1])


DOUBLED = """
import os
from lazyd.daemon.upgrade.stored_servers import stored_fds
for at in (4, 5, 6):  # what systemd passes after the socket at 3
    os.dup2(os.open(os.devnull, os.O_RDONLY), at)
got = stored_fds({"LISTEN_FDNAMES": "lazyd.socket:hs-1:hs-1:hs-2"}, 4)
def is_open(fd):
    try:
        return os.fstat(fd) is not None
    except OSError:
        return False
print(got, [is_open(fd) for fd in (4, 5, 6)])
"""


def test_a_name_the_store_gives_twice_is_left_out_with_both_copies_closed() -> None:
    # In a process of its own: the descriptors at 4, 5 and 6 are this one's (pytest's capture).
    out = subprocess.run([sys.executable, "-c", DOUBLED], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[2]).stdout
    assert out.strip() == "{'hs-2': 6} [False, False, True]"


# ---- reopening a kept session from its waiter ---------------------------------------------

SHELL = """
import os, socket, sys
from lazyd.handoff.region import create_region
from lazyd.protocol import wire
from lazyd.protocol.frames import Hello
from shim.handoff import hello_memfd
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
region = create_region()
hello = hello_memfd(wire.encode(Hello("shim", os.getpid(), ["srv"], "/", {}, {}, None, [], None, True, LAYOUT)))
for fd in (s.fileno(), region, hello):
    os.set_inheritable(fd, True)
# Exec'd again with the region named in its command line, as a waiter is (shim/handoff.py).
os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", f"--resume-handoff={region}"])
"""


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], socket.socket, int]]:
    """A waiter connected to the test's socket: (the process, the daemon's end, its region fd)."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "daemon.sock"))
    listener.listen(1)
    proc = subprocess.Popen([sys.executable, "-c", SHELL.replace("LAYOUT", str(LAYOUT)), str(tmp_path / "daemon.sock")],
                            cwd=Path(__file__).parents[2])
    conn, _ = listener.accept()
    deadline = time.monotonic() + STEP_S
    while not (named := [a for a in Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
                         if a.startswith(b"--resume-handoff=")]):
        assert time.monotonic() < deadline, "the shell never exec'd"
        time.sleep(0.01)
    region = int(named[0].split(b"=")[1])
    try:
        yield proc, conn, region
    finally:
        proc.kill()
        proc.wait()
        conn.close()
        listener.close()


def pipes_for(pid: int) -> tuple[stored_sessions.Kept, list[int]]:
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    return stored_sessions.Kept(pid, {f"hs-{pid}-in": stdin_r, f"hs-{pid}-out": stdout_w}), [stdin_w, stdout_r]


def test_a_kept_session_is_reopened_with_its_shells_hello_and_region_and_the_client_ends_that_came_back(
        shell: tuple[subprocess.Popen[bytes], socket.socket, int]) -> None:
    proc, conn, region = shell
    session, others = pipes_for(proc.pid)
    stdin_r, stdout_w = session.fds[f"hs-{proc.pid}-in"], session.fds[f"hs-{proc.pid}-out"]
    found = stored_sessions.reopen(session, conn.fileno())
    assert not isinstance(found, str), found
    hello, fds = found
    try:
        assert isinstance(hello, Hello) and hello.reclaim and hello.layout == LAYOUT and hello.pid == proc.pid
        assert fds[:2] == [stdin_r, stdout_w] and session.fds == {}
        assert same_file(fds[2], os.open(f"/proc/{proc.pid}/fd/{region}", os.O_RDONLY))
    finally:
        for fd in [*fds, *others]:
            os.close(fd)


def test_a_kept_session_whose_shell_is_gone_or_another_process_is_not_reopened(
        shell: tuple[subprocess.Popen[bytes], socket.socket, int]) -> None:
    proc, conn, _ = shell
    session, others = pipes_for(proc.pid + 1)  # the name says another pid than the socket's peer
    assert "peer is pid" in str(stored_sessions.reopen(session, conn.fileno()))
    session.close()
    proc.kill()
    proc.wait()
    session, more = pipes_for(proc.pid)
    assert stored_sessions.reopen(session, conn.fileno()) == "its waiter is gone"
    assert len(session.fds) == 2  # nothing taken: the caller closes them
    session.close()
    for fd in [*others, *more]:
        os.close(fd)


def test_a_kept_session_missing_a_client_end_is_not_reopened(
        shell: tuple[subprocess.Popen[bytes], socket.socket, int]) -> None:
    proc, conn, _ = shell
    session, others = pipes_for(proc.pid)
    os.close(session.fds.pop(f"hs-{proc.pid}-out"))
    found = stored_sessions.reopen(session, conn.fileno())
    assert isinstance(found, str) and "did not come back" in found, found
    for fd in others:
        os.close(fd)


async def test_a_session_that_does_not_fit_the_store_s_budget_is_not_stored_at_all(store: Store,
                                                                                   caplog: pytest.LogCaptureFixture) -> None:
    # The budget keeps the store under the soft limit systemd passes it below (stored_servers.py).
    keeper = stored_sessions.Keeper(FdStore(store.path, budget=4))
    pairs = [socket.socketpair() for _ in range(2)]
    pipes = [os.pipe2(os.O_NONBLOCK) for _ in range(4)]
    ends = [ClientEnds(pipes[0][0], pipes[1][1]), ClientEnds(pipes[2][0], pipes[3][1])]
    try:
        assert keeper.keep(1, pairs[0][0].fileno(), ends[0]) is True
        assert keeper.keep(2, pairs[1][0].fileno(), ends[1]) is False
        sent = store.messages()
        for _, fds in sent:
            os.close(fds[0])
        assert [m["FDNAME"] for m, _ in sent] == ["hs-1", "hs-1-in", "hs-1-out"]
        assert "the fd store holds 3 descriptors" in caplog.text
        keeper.drop(1)
        store.messages()
        assert keeper.keep(2, pairs[1][0].fileno(), ends[1]) is True  # room again once the first ended
    finally:
        for end in ends:
            end.close()
        for fd in (pipes[0][1], pipes[1][0], pipes[2][1], pipes[3][0]):
            os.close(fd)
        for a, b in pairs:
            a.close()
            b.close()
        for _, fds in store.messages():
            os.close(fds[0])
