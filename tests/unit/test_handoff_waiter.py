"""The waiting end of a hand-off (shim/handoff.py, shim/waiting.sh): what it offers, the
program it waits in, and how that program takes its session back.

Testing policy: the waiting program run by the real dash (or /bin/sh) from its installed file,
with a real socket on descriptor 9, real flock(1) and real signals; the offer is made on the real
descriptors of a child process; `wait`'s exec is caught only to read the command line it builds.
"""

from __future__ import annotations

import contextlib

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lazyd.daemon.handoff.ledger import Ledger
from lazyd.handoff import region as hs
from lazyd.handoff.region import Region, map_region
from shim import handoff, slots
from shim.options import Log, parse
from lazyd.handoff.recovery import ERROR_TAIL, LOST_CODE, LOST_MESSAGE, error_line


@pytest.mark.parametrize("request_id", [7, -1, 2**70, "7", 'é "quoted" \\'])
def test_the_lost_connection_error_is_a_json_rpc_error_under_the_request_s_own_id(request_id: int | str) -> None:
    # Both recoveries (the frame relay's, the hand-off's) write it from the id's JSON text.
    error = json.loads(error_line(json.dumps(request_id).encode()))
    assert error == {"jsonrpc": "2.0", "id": request_id, "error": {"code": LOST_CODE, "message": LOST_MESSAGE}}


def _recovery_output(fd: int) -> bytes:
    from shim import recover
    from shim.stdout import Stdout

    read_end, write_end = os.pipe()
    try:
        log = Log(parse(["--", "true"], {}))
        recover.answer(hs.read_region(fd), Stdout(log, write_end), log)
        os.close(write_end)
        return os.read(read_end, 1 << 20)
    finally:
        os.close(read_end)


@pytest.mark.parametrize("mark", ["torn", "none"])
def test_the_shim_s_recovery_ends_a_line_only_for_the_torn_byte(mark: str) -> None:
    fd = hs.create_region()
    try:
        buf = map_region(fd)
        try:
            ledger = Ledger(Region(buf))
            ledger.client_line(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}}).encode())
            if mark == "torn":
                ledger.region.torn = True
        finally:
            buf.close()
        recovered = _recovery_output(fd)
    finally:
        os.close(fd)
    error = b'{"jsonrpc":"2.0","id":1' + ERROR_TAIL + b"\n"
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


def test_stdio_pipes_are_offered_where_a_shell_and_a_sealed_memfd_are_there() -> None:
    assert "\noffered" in "\n" + _offer_in_child({})


def test_without_a_shell_the_session_is_relayed_over_frames_with_one_log_line() -> None:
    said = _offer_in_child({}, "from shim import handoff\nhandoff.SHELLS = ('/nonexistent/dash',)\n")
    assert said.count("no hand-off") == 1 and "no shell" in said and said.endswith("not offered\n")


def test_without_its_waiting_program_installed_the_session_is_relayed_over_frames_with_one_log_line() -> None:
    said = _offer_in_child({}, "from shim import handoff\nhandoff.WAITING_PROGRAM = '/nonexistent/waiting.sh'\n")
    assert said.count("no hand-off") == 1 and "not installed" in said and said.endswith("not offered\n")


@pytest.mark.parametrize("missing", ["os.memfd_create", "os.MFD_ALLOW_SEALING", "fcntl.F_ADD_SEALS"])
def test_without_a_sealed_memfd_the_session_is_relayed_over_frames_with_one_log_line(missing: str) -> None:
    module, name = missing.split(".")
    said = _offer_in_child({}, f"import {module}\ndel {module}.{name}\n")
    assert said.count("no hand-off") == 1 and "shared region" in said and said.endswith("not offered\n")


class _Conn:
    """What `wait` reads of a welcomed connection: its socket, its welcome's name, its hello."""

    def __init__(self, sock: socket.socket, name: str) -> None:
        self.sock = sock
        self.hello_frame = b""

        class Welcome:
            pass

        self.welcome = Welcome()
        self.welcome.name = name  # type: ignore[attr-defined]


class _Recovering(Exception):
    """The exec of the recovery command, caught."""


def _exec_refused(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every exec `wait` tries: a shell's refused, the recovery's caught as _Recovering."""
    execs: list[list[str]] = []

    def fake_exec(path: str, argv: list[str]) -> None:
        execs.append([path, *argv])
        raise _Recovering() if path == sys.executable else OSError("not here")

    monkeypatch.setattr(os, "execv", fake_exec)
    # Clear of the test process's own descriptors, which `wait` would otherwise replace.
    monkeypatch.setattr(handoff, "WAIT_FD", 250)
    monkeypatch.setattr(handoff, "HELLO_FD", 251)
    return execs


def _wait(conn: _Conn, args: list[str]) -> None:
    """`wait` with a stand-in region; the daemon (`conn`'s peer) is gone, so it goes on to recover."""
    region = os.open("/dev/null", os.O_RDONLY)
    try:
        with pytest.raises(_Recovering):
            handoff.wait(conn, region, args, Log(parse(["--", "true"], {})),  # type: ignore[arg-type]
                         "/run/user/1/lazyd/lazyd.sock")
    finally:
        os.close(region)


def _waiter_argv(monkeypatch: pytest.MonkeyPatch, name: str, args: list[str]) -> list[str]:
    """The command line `wait` execs the waiting program with (the exec refused, so that it goes
    on to wait itself, which the closed peer ends at once)."""
    execs = _exec_refused(monkeypatch)
    # The shim's own command line, as its installed script runs it (not this test runner's, which
    # may itself be `python -c ...` under a parallel runner's worker).
    shim = "/home/u/.local/share/lazyd/venv/bin/lazyd-shim"
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, shim, *args])
    monkeypatch.setattr(sys, "argv", [shim, *args])
    ours, peer = socket.socketpair()
    peer.close()
    _wait(_Conn(ours, name), args)
    assert len(execs) > 1, "no shell was tried"
    return execs[0]


def test_the_waiter_s_command_line_says_what_it_is_and_names_its_installed_program(
        monkeypatch: pytest.MonkeyPatch) -> None:
    server = ["npx", "-y", "@modelcontextprotocol/server-everything", "stdio"]
    path, *argv = _waiter_argv(monkeypatch, "everything\n", ["--", *server])
    assert path in handoff.SHELLS
    assert argv[0] == "lazyd-shim: waiting (everything?)"
    assert argv[1] == handoff.WAITING_PROGRAM and os.path.isfile(argv[1])
    assert argv[2] in ("", *slots.FLOCKS) and argv[3].startswith("/run/user/1/lazyd/resume.")
    assert argv[-len(server):] == server
    ours = argv[: -len(server)]
    assert len("\0".join(ours).encode()) <= 512, ours
    assert "-c" not in ours and not any("\n" in arg or "import " in arg for arg in ours), ours
    assert any(arg.startswith(slots.RESUME_FLAG) for arg in ours)


def test_a_long_server_name_is_cut_in_the_waiter_s_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = _waiter_argv(monkeypatch, "x" * 1000, ["--", "true"])
    assert argv[1] == f"lazyd-shim: waiting ({'x' * handoff.MAX_NAME})"


def _dash() -> str:
    found = handoff.shell()
    if found is None:
        print("skipping: no shell here")
        pytest.skip("no shell")
    return found


def _waiter(socket_end: int | None, flock: str, slot: str, command: list[str],
            stderr: int | None = None) -> subprocess.Popen[bytes]:
    """The waiting program as a handed-off shim runs it: its daemon socket on descriptor 9 (with
    None, /dev/null: a daemon already gone), `command` its recovery."""
    dash = _dash()

    def socket_at_9() -> None:
        os.dup2(os.open(os.devnull, os.O_RDONLY) if socket_end is None else socket_end, handoff.WAIT_FD)
        # As a client starts its servers (libuv's spawn does this): default dispositions, nothing
        # blocked. A test process may have these signals ignored or blocked, and exec keeps both.
        signals = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
        for signum in signals:
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)

    return subprocess.Popen([dash, handoff.WAITING_PROGRAM, flock, slot, *command], stdin=subprocess.DEVNULL,
                            stderr=stderr, preexec_fn=socket_at_9, close_fds=False)


def test_a_line_from_the_daemon_ends_the_waiter_with_0_and_runs_nothing(tmp_path: Path) -> None:
    ours, theirs = socket.socketpair()
    record = tmp_path / "record"
    waiter = _waiter(theirs.fileno(), "", "", [sys.executable, "-c", f"open({str(record)!r}, 'w')"])
    theirs.close()
    try:
        time.sleep(0.2)
        assert waiter.poll() is None, "the waiter waits"
        ours.sendall(b"\n")
        assert waiter.wait(timeout=30) == 0
        assert not record.exists(), "no recovery ran"
    finally:
        ours.close()


def test_eof_from_the_daemon_runs_the_recovery_command_in_the_waiter_s_place(tmp_path: Path) -> None:
    ours, theirs = socket.socketpair()
    record = tmp_path / "record"
    waiter = _waiter(theirs.fileno(), "", "", [sys.executable, "-c", f"import os; open({str(record)!r}, 'w').write(str(os.getpid()))"])
    theirs.close()
    ours.close()  # the daemon is gone
    assert waiter.wait(timeout=30) == 0
    assert record.read_text() == str(waiter.pid), "the recovery runs in the waiter's process"


def _traps(pid: int, signum: int) -> bool:
    """Whether process `pid` is the shell running the waiting program, with a handler for `signum`."""
    try:
        if not os.readlink(f"/proc/{pid}/exe").endswith(("dash", "sh")):
            return False
        with open(f"/proc/{pid}/status") as status:
            caught = next(line for line in status if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(int(caught.split()[1], 16) >> (signum - 1) & 1)


def _asleep(pid: int) -> bool:
    """Whether process `pid` is blocked (state S: the waiting program sleeps only in its read)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0] == "S"


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 0), (signal.SIGHUP, 0), (signal.SIGINT, 130)])
def test_a_signal_ends_a_waiting_waiter_as_it_ends_the_shim(signum: int, status: int) -> None:
    ours, theirs = socket.socketpair()
    waiter = _waiter(theirs.fileno(), "", "", ["/bin/false"])
    theirs.close()
    try:
        # Not before the shell has its trap: sent earlier (a loaded machine may take a while to
        # exec dash) it would reach the forked test process or dash's default action.
        deadline = time.monotonic() + 30
        while not (_traps(waiter.pid, signum) and _asleep(waiter.pid)):  # trapped, then blocked in its read
            assert time.monotonic() < deadline, "the waiter never waited with its trap set"
            time.sleep(0.01)
        waiter.send_signal(signum)
        assert waiter.wait(timeout=10) == status
    finally:
        ours.close()


def test_a_waiter_whose_shim_is_no_longer_installed_says_so_in_one_line_and_exits_1(tmp_path: Path) -> None:
    gone = str(tmp_path / "python")
    waiter = _waiter(None, "", "", [gone, "--resume-handoff=5", "--", "true"], stderr=subprocess.PIPE)
    _, said = waiter.communicate(timeout=30)
    assert waiter.returncode == 1
    assert said.decode() == f"lazyd-shim: {gone} is no longer installed; the session ends\n"


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
    """A waiter whose daemon is already gone (descriptor 9 reads EOF at once) and whose shim is `probe`."""
    return _waiter(None, flock, slot, probe, stderr)


def _needs_dash_and_flock() -> str:
    flock = slots.flock_path()
    if handoff.shell() is None or not flock:
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


def test_a_shim_with_no_shell_to_exec_waits_itself_then_runs_the_recovery_the_waiting_program_would(
        monkeypatch: pytest.MonkeyPatch) -> None:
    execs = _exec_refused(monkeypatch)
    monkeypatch.setattr(handoff, "SHELLS", ())
    ours, peer = socket.socketpair()
    peer.close()  # the daemon lets go at once
    _wait(_Conn(ours, "x"), ["--", "true"])
    (recovery,) = execs
    assert recovery[:2] == [sys.executable, sys.executable] and recovery[-2:] == ["--", "true"]
    assert recovery[-3].startswith(slots.RESUME_FLAG)
    with pytest.raises(OSError):
        os.fstat(250)  # the daemon's socket is not the recovery's


def test_a_log_file_where_the_waiter_s_hello_goes_is_moved_and_still_written(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _exec_refused(monkeypatch)
    monkeypatch.setattr(handoff, "SHELLS", ())
    path = tmp_path / "shim.log"
    log = Log(parse(["--log-file", str(path), "--", "true"], {}))
    (place,) = [int(fd) for fd in os.listdir("/proc/self/fd") if os.path.realpath(f"/proc/self/fd/{fd}") == str(path)]
    monkeypatch.setattr(handoff, "HELLO_FD", place)  # the log file sits where the hello goes
    ours, peer = socket.socketpair()
    peer.close()
    region = os.open("/dev/null", os.O_RDONLY)
    try:
        with pytest.raises(_Recovering):
            handoff.wait(_Conn(ours, "x"), region, ["--", "true"], log,  # type: ignore[arg-type]
                         "/run/user/1/lazyd/lazyd.sock")
    finally:
        os.close(region)
        os.close(place)
    assert "no shell to wait in, waiting in this process" in path.read_text()


def test_a_hello_memfd_made_where_the_waiter_keeps_it_stays_there(monkeypatch: pytest.MonkeyPatch) -> None:
    _exec_refused(monkeypatch)
    monkeypatch.setattr(handoff, "SHELLS", ())
    ours, peer = socket.socketpair()
    peer.close()
    conn = _Conn(ours, "x")
    conn.hello_frame = b"the hello as sent"
    region = os.open("/dev/null", os.O_RDONLY)
    lowest = os.dup(0)  # where memfd_create will put the hello: the lowest free descriptor
    os.close(lowest)
    monkeypatch.setattr(handoff, "HELLO_FD", lowest)
    try:
        with pytest.raises(_Recovering):
            handoff.wait(conn, region, ["--", "true"], Log(parse(["--", "true"], {})),  # type: ignore[arg-type]
                         "/run/user/1/lazyd/lazyd.sock")
        assert os.readlink(f"/proc/self/fd/{lowest}").startswith("/memfd:lazyd-hello")
        assert os.pread(lowest, 100, 0) == b"the hello as sent"
    finally:
        os.close(region)
        with contextlib.suppress(OSError):
            os.close(lowest)
        with contextlib.suppress(OSError):
            os.close(250)


def test_a_shim_waiting_itself_exits_0_when_the_daemon_says_the_client_left(monkeypatch: pytest.MonkeyPatch) -> None:
    execs = _exec_refused(monkeypatch)
    monkeypatch.setattr(handoff, "SHELLS", ())
    exits: list[int] = []

    def fake_exit(status: int) -> None:
        exits.append(status)
        raise _Recovering()

    monkeypatch.setattr(os, "_exit", fake_exit)
    ours, peer = socket.socketpair()
    peer.sendall(b"\n")
    try:
        _wait(_Conn(ours, "x"), ["--", "true"])
        assert exits == [0] and execs == []
    finally:
        with contextlib.suppress(OSError):
            os.close(250)
        peer.close()


def test_a_recovery_frees_its_resume_slot_after_its_first_try_to_reconnect(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Paused(Exception):
        pass

    def pause(wait_s: float) -> None:
        raise Paused()

    monkeypatch.setattr(time, "sleep", pause)  # the wait before a second try
    slot = os.open(tmp_path / "resume.0", os.O_WRONLY | os.O_CREAT, 0o600)
    opts = parse(["--socket", str(tmp_path / "no-daemon.sock"), "--no-autostart", "--", "true"], {})
    with pytest.raises(Paused):
        handoff.reconnect(opts, [], Log(opts), None, slot)
    with pytest.raises(OSError):
        os.fstat(slot)
