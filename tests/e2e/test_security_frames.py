"""Hostile bytes against a real daemon: oversize frames, msgpack bombs, slowloris (RELIABILITY 32-34).

Testing policy: every attack is made on a raw socket against a real `python -m lazyd.daemon`,
and each test shows three things: the attacking connection is closed, the daemon's memory
(`/proc/<pid>/status`) stayed bounded, and a connection opened *before* the attack still gets
answers afterwards. Deadlines are shortened through a test seam the suite puts in the daemon
(`LAZYD_TEST_DEADLINE_S`, tests/e2e/seams/sitecustomize.py); the slow peers trickle bytes at a
fixed pace (the stimulus), and every wait for an outcome polls a socket or /proc with a bounded
deadline. The helpers at the top are shared by the other `test_security_*` modules.
"""

from __future__ import annotations

import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from lazyd.protocol import wire
from lazyd.protocol.frames import Ctl
from tests.conftest import FIXTURE_SERVER, UserEnv
from tests.unit.wire_bombs import BOMBS
from tests.e2e.raw_daemon_support import Conn, STEP_S, daemon_log, hello, launch_daemon, ping, wait_for_log
from tests.e2e.faults_support import seam_env

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024
FRAME_LIMIT = 16 * MIB + 64 * 1024  # docs/protocol.md: MAX_FRAME_BYTES (16 MiB + 64 KiB)
TRICKLE_PACE_S = 0.1  # one byte per pace: slow enough to trip a 1 s deadline within a few bytes


# ---- helpers of this module (the shared ones are in raw_daemon_support.py) -----------------------


def closed_by_peer(sock: socket.socket, bound_s: float = STEP_S) -> bytes:
    """Wait until the peer closes `sock` (EOF or reset); return whatever it sent before that."""
    received = b""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        readable, _, _ = select.select([sock], [], [], deadline - time.monotonic())
        if not readable:
            break
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return received
        if not chunk:
            return received
        received += chunk
    raise AssertionError(f"the daemon kept the connection open for {bound_s} s (received {received[:200]!r})")


def proc_status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@pytest.fixture
def quick_daemon(user_env: UserEnv) -> Iterator[subprocess.Popen[bytes]]:
    """A daemon whose hello timeout, frame deadline and control send deadline are 1 s (10, 30, 30)."""
    proc = launch_daemon(user_env, env=seam_env(deadline_s="1"))
    yield proc
    proc.terminate()
    proc.wait(timeout=STEP_S)


def frame_of(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


# ---- oversize frames (case 32) ----------------------------------------------------------------------


def send_until_refused(sock: socket.socket, total_bytes: int) -> int:
    """Send zeros until the peer refuses them or `total_bytes` went out; return how many went out."""
    chunk = bytes(256 * 1024)
    sent = 0
    try:
        while sent < total_bytes:
            sent += sock.send(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


@pytest.mark.parametrize("where", ["as the hello", "on a control connection", "in a session"])
def test_a_frame_header_above_the_limit_closes_that_connection_before_the_body_is_buffered(
    quick_daemon: subprocess.Popen[bytes], user_env: UserEnv, where: str
) -> None:
    pid = quick_daemon.pid
    bystander = Conn(user_env.socket)
    bystander.open_ctl()
    assert bystander.ctl("ping")["ok"]  # warm: every code path of an answer has run once
    rss_before = proc_status_kib(pid, "VmRSS")
    attacker = Conn(user_env.socket)
    if where == "on a control connection":
        attacker.open_ctl()
    elif where == "in a session":
        attacker.sock.sendall(wire.encode(hello("shim", argv=[sys.executable, str(FIXTURE_SERVER)], env=user_env.env)))
        assert attacker.read()["t"] == "welcome"
    # The header promises one byte more than the limit; then 8 MiB of body follow, as fast as the
    # daemon takes them. A daemon that buffered the body would hold those 8 MiB.
    attacker.sock.sendall(struct.pack(">I", FRAME_LIMIT + 1))
    sent = send_until_refused(attacker.sock, 8 * MIB)
    closed_by_peer(attacker.sock)
    attacker.close()
    rss_after = proc_status_kib(pid, "VmRSS")
    assert rss_after - rss_before < 1024, (rss_before, rss_after, sent)
    assert bystander.ctl("ping")["data"]["pid"] == pid
    bystander.close()
    assert "exceeds MAX_FRAME_BYTES (16842752)" in daemon_log(user_env)  # 16 MiB + 64 KiB


# ---- msgpack bombs (case 33) --------------------------------------------------------------------------


def test_msgpack_bombs_close_only_their_own_connection_and_cost_under_50_mib(
    quick_daemon: subprocess.Popen[bytes], user_env: UserEnv
) -> None:
    pid = quick_daemon.pid
    bystander = Conn(user_env.socket)
    bystander.open_ctl()
    assert bystander.ctl("ping")["ok"]
    peak_before = proc_status_kib(pid, "VmPeak")
    size_before = proc_status_kib(pid, "VmSize")
    for name, body in BOMBS.items():
        for opening in ("none", "ctl"):
            attacker = Conn(user_env.socket)
            if opening == "ctl":
                attacker.open_ctl()
            attacker.sock.sendall(frame_of(body))
            assert closed_by_peer(attacker.sock) == b"", name  # no reply: closed, and that is all
            attacker.close()
        assert bystander.ctl("ping")["data"]["pid"] == pid, name
    assert proc_status_kib(pid, "VmPeak") - peak_before < 50 * 1024
    assert proc_status_kib(pid, "VmSize") - size_before < 50 * 1024
    assert daemon_log(user_env).count("after a bad frame") == 2 * len(BOMBS)
    bystander.close()


# ---- slowloris (case 34) --------------------------------------------------------------------------------


def trickle(sock: socket.socket, data: bytes) -> int | None:
    """Send `data` one byte per pace; return how many bytes went out when the peer closed, or None."""
    for index in range(len(data)):
        readable, _, _ = select.select([sock], [], [], TRICKLE_PACE_S)
        try:
            if readable and sock.recv(1, socket.MSG_PEEK) == b"":
                return index
            sock.send(data[index : index + 1])
        except (BrokenPipeError, ConnectionResetError):
            return index
    return None


def test_a_hello_trickled_byte_by_byte_is_cut_at_the_hello_deadline(
    quick_daemon: subprocess.Popen[bytes], user_env: UserEnv
) -> None:
    bystander = Conn(user_env.socket)
    bystander.open_ctl()
    slow = Conn(user_env.socket)
    frame = wire.encode(hello("ctl", env={"PAD": "x" * 200}))
    cut_at = trickle(slow.sock, frame)
    assert cut_at is not None and cut_at < len(frame), "the daemon waited for the whole trickled hello"
    slow.close()
    wait_for_log(user_env, "no hello within 1 s")
    assert bystander.ctl("ping")["ok"]  # idle between frames for longer than both deadlines: fine
    bystander.close()


@pytest.mark.parametrize("role", ["ctl", "shim"])
def test_a_frame_trickled_after_the_hello_is_cut_at_the_frame_deadline(
    quick_daemon: subprocess.Popen[bytes], user_env: UserEnv, role: str
) -> None:
    bystander = Conn(user_env.socket)
    bystander.open_ctl()
    slow = Conn(user_env.socket)
    if role == "ctl":
        slow.open_ctl()
        frame = wire.encode(Ctl("ping", {"pad": "x" * 300}))
    else:
        slow.sock.sendall(wire.encode(hello("shim", argv=[sys.executable, str(FIXTURE_SERVER)], env=user_env.env)))
        assert slow.read()["t"] == "welcome"
        frame = wire.encode_line(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + b"x" * 300 + b'"}}')
    cut_at = trickle(slow.sock, frame)
    assert cut_at is not None and cut_at < len(frame), "the daemon waited for the whole trickled frame"
    slow.close()
    wait_for_log(user_env, "a frame took longer than 1 s to arrive")
    assert bystander.ctl("ping")["ok"]
    bystander.close()


def test_many_tiny_frames_in_one_read_are_all_served_in_order(
    quick_daemon: subprocess.Popen[bytes], user_env: UserEnv
) -> None:
    # 20,000 requests in one write: the daemon decodes them in batches of one read each and
    # answers every one, in order, without the connection or the daemon stalling. Every 1,000th is
    # an unknown operation, so the order of the replies shows.
    conn = Conn(user_env.socket)
    conn.open_ctl()
    count = 20_000
    ping = wire.encode(Ctl("ping", {}))
    marker = wire.encode(Ctl("no-such-op", {}))
    payload = b"".join(marker if i % 1000 == 999 else ping for i in range(count))
    # From a thread: the replies flow back while the requests are still being written.
    sender = threading.Thread(target=conn.sock.sendall, args=(payload,))
    sender.start()
    replies = [conn.read() for _ in range(count)]
    sender.join(timeout=STEP_S)
    assert all(r["t"] == "reply" for r in replies)
    assert [i for i, r in enumerate(replies) if not r["ok"]] == list(range(999, count, 1000))
    assert all(r["data"]["pid"] == quick_daemon.pid for r in replies if r["ok"])
    conn.close()


def test_a_control_peer_that_never_reads_its_replies_is_cut_at_the_send_deadline(
    quick_daemon: subprocess.Popen[bytes], user_env: UserEnv
) -> None:
    bystander = Conn(user_env.socket)
    bystander.open_ctl()
    greedy = Conn(user_env.socket)
    greedy.open_ctl()
    # Requests keep coming but no reply is read: once the socket buffers are full the daemon's
    # send waits, and after the deadline the connection is closed instead of held for ever.
    requests = wire.encode(Ctl("ping", {})) * 100_000
    sender = threading.Thread(target=send_until_refused_bytes, args=(greedy.sock, requests))
    sender.start()
    wait_for_log(user_env, "closing a control connection that left its reply unread for 1 s")
    sender.join(timeout=STEP_S)
    assert not sender.is_alive()
    greedy.close()
    assert bystander.ctl("ping")["data"]["pid"] == quick_daemon.pid
    bystander.close()


def send_until_refused_bytes(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass  # closed by the daemon, as expected
