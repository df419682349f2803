"""The waiting end of a hand-off (shim/handoff.py): what it offers, where it waits, and what its
last resort answers when the shim it would exec is gone.

Testing policy: real sealed regions written through the daemon's ledger, the last-resort script
run by a real interpreter in isolated mode, the client's stdout a real pipe; the offer is made on
the real descriptors of a child process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lazyd.handoff import region as hs
from lazyd.daemon.handoff.ledger import Ledger, Mapping
from lazyd.handoff.region import Region
from lazyd.linepeek import error_line
from shim import handoff, slots
from shim.relay import LOST_CODE, LOST_MESSAGE


@pytest.fixture
def fd() -> Iterator[int]:
    region = hs.create_region()
    yield region
    os.close(region)


def call(request_id: int | str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {}}).encode()


def test_the_error_the_waiter_writes_is_the_shim_s_lost_connection_error() -> None:
    assert b'{"jsonrpc":"2.0","id":7' + handoff.ERROR_TAIL == error_line(7, LOST_CODE, LOST_MESSAGE)


def test_with_no_shim_left_to_exec_the_waiter_s_script_answers_what_is_in_flight_itself(fd: int) -> None:
    buf = Mapping(fd)
    try:
        ledger = Ledger(Region(buf))
        for request_id in (1, "1", 2):
            ledger.client_line(call(request_id))
        ledger.answered(2)
        ledger.torn(True)  # the daemon died inside an answer
    finally:
        buf.close()
    os.set_inheritable(fd, True)
    done = subprocess.run([sys.executable, "-I", "-S", "-c", handoff.orphan_script(), "/gone/python",
                           f"--resume-handoff={fd}"], pass_fds=[fd], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split(b"\n")
    assert lines[0] == b"", "the cut answer is ended first"
    answers = [json.loads(line) for line in lines[1:] if line]
    assert [(a["id"], a["error"]["code"]) for a in answers] == [(1, LOST_CODE), ("1", LOST_CODE)]
    assert b"no longer installed" in done.stderr


def _orphan_output(fd: int) -> bytes:
    os.set_inheritable(fd, True)
    done = subprocess.run([sys.executable, "-I", "-S", "-c", handoff.orphan_script(), "/gone/python",
                           f"--resume-handoff={fd}"], pass_fds=[fd], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _recovery_output(fd: int) -> bytes:
    from lazyd.handoff.snapshot import snapshot
    from shim import recover
    from shim.options import Log, parse
    from shim.stdout import Stdout

    read_end, write_end = os.pipe()
    try:
        log = Log(parse(["--", "true"], {}))
        recover.answer(snapshot(fd), Stdout(log, write_end), log)
        os.close(write_end)
        return os.read(read_end, 1 << 20)
    finally:
        os.close(read_end)


@pytest.mark.parametrize("mark", ["whole", "torn", "none"])
def test_the_waiter_s_script_and_the_shim_s_recovery_end_a_line_only_for_the_torn_byte_and_agree(
        fd: int, mark: str) -> None:
    buf = Mapping(fd)
    try:
        ledger = Ledger(Region(buf))
        ledger.client_line(call(1))
        if mark == "whole":
            ledger.whole(True)  # killed around a write of whole lines: the client's last line is whole
        elif mark == "torn":
            ledger.torn(True)
    finally:
        buf.close()
    orphan, recovered = _orphan_output(fd), _recovery_output(fd)
    assert orphan == recovered
    error = b'{"jsonrpc":"2.0","id":1' + handoff.ERROR_TAIL + b"\n"
    assert recovered == (b"\n" + error if mark == "torn" else error)


OFFER = """
import os, sys
from shim import handoff
from shim.options import Log, parse
log = Log(parse(["--verbose", "--", "true"], {}))
got = handoff.offer(None, log)
print("offered" if got is not None else "not offered", file=sys.stderr)
"""


def _offer_in_child(env: dict[str, str], prelude: str = "") -> str:
    """What a shim whose stdio are pipes says when it makes its offer, with `prelude` run first."""
    done = subprocess.run([sys.executable, "-c", prelude + OFFER], env={**os.environ, **env},
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stderr.decode()


def test_stdio_pipes_are_offered_where_dash_and_a_sealed_memfd_are_there() -> None:
    assert "\noffered" in "\n" + _offer_in_child({})


def test_without_dash_the_session_is_relayed_over_frames_with_one_log_line() -> None:
    said = _offer_in_child({handoff.WAITER_ENV: "none"})
    assert said.count("no hand-off") == 1 and "no dash" in said and said.endswith("not offered\n")


@pytest.mark.parametrize("missing", ["os.memfd_create", "os.MFD_ALLOW_SEALING", "fcntl.F_ADD_SEALS"])
def test_without_a_sealed_memfd_the_session_is_relayed_over_frames_with_one_log_line(missing: str) -> None:
    module, name = missing.split(".")
    said = _offer_in_child({}, f"import {module}\ndel {module}.{name}\n")
    assert said.count("no hand-off") == 1 and "shared region" in said and said.endswith("not offered\n")


def test_each_waiter_takes_its_own_bounded_pause_before_it_runs_the_shim_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # After a daemon crash every waiter wakes at once; one that cannot take a resume slot sleeps
    # a random part of RESUME_JITTER_S (its first argument to the script) before it execs Python. The pause is
    # printed to milliseconds, so a draw of 0.9996 reads 1.000: the bound is inclusive.
    import socket

    from shim.options import Log, parse

    execs: list[list[str]] = []

    def fake_exec(path: str, argv: list[str]) -> None:
        execs.append(argv)
        raise OSError("not here")  # so that wait() goes on to its own wait, which the closed peer ends

    def no_pause(fd: int, argv: list[str], env: object) -> None:
        raise OSError("not here")  # the pause (shim/pause.py) runs the same shell command: dash's is read

    monkeypatch.setattr(os, "execv", fake_exec)
    monkeypatch.setattr(os, "execve", no_pause)
    monkeypatch.setattr(handoff, "WAIT_FD", 250)  # clear of the test process's own descriptors
    log = Log(parse(["--", "true"], {}))
    for _ in range(8):
        ours, peer = socket.socketpair()
        peer.close()

        class Conn:
            sock = ours
            hello = None

        region = os.open("/dev/null", os.O_RDONLY)
        handoff.wait(Conn(), region, ["--", "true"], log)  # type: ignore[arg-type]
        os.close(region)
        os.close(250)
    pauses = [float(argv[4]) for argv in execs[:: len(handoff.SHELLS)]]
    assert all(0 <= p <= handoff.RESUME_JITTER_S for p in pauses) and len(set(pauses)) > 1, pauses
    assert all("sleep \"$1\"" in argv[2] for argv in execs)


# --- resume slots (shim/slots.py): after a daemon crash, at most one recovery per slot at once ---

PROBE = """
import fcntl, os, sys, time
began = time.monotonic()
slot = os.environ.get("LAZYD_RESUME_SLOT")
held = False
if slot is not None:
    other = os.open(os.readlink(f"/proc/self/fd/{slot}"), os.O_RDONLY)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        held = True  # its lock file is locked, by the description this process inherited
time.sleep(0.3)
with open(sys.argv[1], "a") as out:
    out.write(f"{began} {time.monotonic()} {slot} {held}\\n")
"""


def _waiting_shell(flock: str, slot: str, probe: list[str], stderr: int | None = None) -> subprocess.Popen[bytes]:
    """A waiting shell exactly as a handed-off shim execs it, whose daemon is already gone (its
    socket, fd 9, reads EOF at once) and whose shim is `probe`."""
    dash = next(shell for shell in handoff.SHELLS if os.access(shell, os.X_OK))
    return subprocess.Popen([dash, "-c", f'exec {handoff.WAIT_FD}</dev/null; exec "$@"', "wrap",
                             dash, "-c", handoff.WAIT_SCRIPT, "lazyd-shim", "0", flock, slot, "unused", "unused", "", "", *probe],
                            stdin=subprocess.DEVNULL, stderr=stderr)


def _needs_dash_and_flock() -> str:
    flock = slots.flock_path()
    if not any(os.access(shell, os.X_OK) for shell in handoff.SHELLS) or not flock:
        print("skipping: no dash or no flock(1) here")
        pytest.skip("no dash or no flock(1)")
    return flock


def test_waiting_shells_start_their_shims_at_most_one_per_slot_at_once_each_holding_its_slot(tmp_path: Path) -> None:
    flock = _needs_dash_and_flock()
    record = tmp_path / "record"
    shells = [_waiting_shell(flock, str(tmp_path / f"resume.{n % 2}"), [sys.executable, "-c", PROBE, str(record)])
              for n in range(6)]
    for shell in shells:
        assert shell.wait(timeout=60) == 0
    runs = [line.split() for line in record.read_text().splitlines()]
    assert len(runs) == 6
    assert all(slot == str(slots.SLOT_FD) and held == "True" for _, _, slot, held in runs), runs
    events = sorted([(float(began), 1) for began, _, _, _ in runs] + [(float(ended), -1) for _, ended, _, _ in runs])
    running = most = 0
    for _, change in events:
        running += change
        most = max(most, running)
    assert most <= 2, f"{most} shims ran at once over 2 slots"


def test_a_waiting_shell_without_flock_resumes_without_a_slot(tmp_path: Path) -> None:
    _needs_dash_and_flock()
    record = tmp_path / "record"
    shell = _waiting_shell("", str(tmp_path / "resume.0"), [sys.executable, "-c", PROBE, str(record)])
    assert shell.wait(timeout=60) == 0
    [(_, _, slot, held)] = [line.split() for line in record.read_text().splitlines()]
    assert (slot, held) == ("None", "False")
    assert not (tmp_path / "resume.0").exists()


def test_a_waiting_shell_whose_slot_directory_is_gone_resumes_without_a_slot(tmp_path: Path) -> None:
    flock = _needs_dash_and_flock()
    record = tmp_path / "record"
    shell = _waiting_shell(flock, str(tmp_path / "gone" / "resume.0"), [sys.executable, "-c", PROBE, str(record)],
                           stderr=subprocess.PIPE)
    _, said = shell.communicate(timeout=60)
    assert shell.returncode == 0
    [(_, _, slot, _)] = [line.split() for line in record.read_text().splitlines()]
    assert slot == "None"
    assert said == b"", "nothing on the client's stderr"


def test_sigterm_ends_a_shell_queued_for_a_slot_at_once_with_status_0_and_no_flock_left_behind(tmp_path: Path) -> None:
    import fcntl
    import signal
    import time

    flock = _needs_dash_and_flock()
    slot = tmp_path / "resume.0"
    holder = os.open(slot, os.O_WRONLY | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another session's recovery holds the only slot
    try:
        shell = _waiting_shell(flock, str(slot), [sys.executable, "-c", PROBE, str(tmp_path / "record")])
        deadline = time.monotonic() + 30
        while not (queued := [pid for pid in _children(shell.pid) if _runs(pid, flock)]):
            assert time.monotonic() < deadline, "the shell never queued for the slot"
            time.sleep(0.02)
        shell.send_signal(signal.SIGTERM)
        assert shell.wait(timeout=5) == 0
        deadline = time.monotonic() + 5
        while any(os.path.exists(f"/proc/{pid}") and _state(pid) != "Z" for pid in queued):
            assert time.monotonic() < deadline, "the shell's flock(1) outlived it"
            time.sleep(0.02)
        assert not (tmp_path / "record").exists(), "no shim ran"
    finally:
        os.close(holder)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(child) for child in f.read().split()]
    except OSError:
        return []


def _runs(pid: int, program: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0] == program.encode()
    except OSError:
        return False


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_the_shim_takes_its_slot_out_of_the_environment_and_frees_it_at_its_next_exec(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    fd = os.open(tmp_path / "resume.0", os.O_WRONLY | os.O_CREAT, 0o600)
    os.set_inheritable(fd, True)
    monkeypatch.setenv(slots.SLOT_ENV, str(fd))
    try:
        assert slots.taken() == fd
        assert slots.SLOT_ENV not in os.environ and slots.SLOT_ENV.encode() not in os.environb
        assert not os.get_inheritable(fd)
    finally:
        slots.release(fd)
    with pytest.raises(OSError):
        os.fstat(fd)
    assert slots.taken() is None


def test_sessions_are_spread_over_two_slots_per_cpu_beside_the_daemon_socket() -> None:
    paths = {slots.slot_path("/run/user/1/lazyd/lazyd.sock", pid) for pid in range(1000, 1100)}
    assert paths == {f"/run/user/1/lazyd/resume.{n}" for n in range(slots.count())}
    assert slots.count() == 2 * (os.cpu_count() or 1)


def test_a_shim_that_waits_in_python_frees_its_slot_before_it_waits(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    import socket

    from shim.options import Log, parse

    monkeypatch.setenv(handoff.WAITER_ENV, "python")
    slot = os.open(tmp_path / "resume.0", os.O_WRONLY | os.O_CREAT, 0o600)
    ours, peer = socket.socketpair()
    peer.close()  # the daemon lets go at once

    class Conn:
        sock = ours
        hello = None

    region = os.open("/dev/null", os.O_RDONLY)
    try:
        handoff.wait(Conn(), region, ["--", "true"], Log(parse(["--", "true"], {})), "/x/lazyd.sock", slot)  # type: ignore[arg-type]
    finally:
        os.close(region)
    with pytest.raises(OSError):
        os.fstat(slot)
