"""The daemon's own faults: killed with -9, SIGTERM, started twice, its socket or runtime dir taken
away, its clients' process groups killed, a shim of another wire version.

Testing policy: real daemons, shims and fixture servers in an isolated user environment; a server
and its grandchildren carry a marker of their own in their environment, and "nothing is left" is
a scan of /proc for it. Every wait is a poll with a bounded deadline; no test asserts on elapsed
time (the one ordering check compares timestamps the daemon wrote, never a duration).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from lazyd.protocol import wire
from lazyd.daemon import orphans
from lazyd.daemon.runtime_dir import socket_identity
from lazyd.protocol.frames import ForeignHello, Refusal
from tests.conftest import Daemon, UserEnv, start_daemon
from tests.e2e.shim_paths import HANDOFF_PATHS, ShimPath, shim_path, waits_handed_off  # noqa: F401 (shim_path is a fixture)
from tests.e2e.faults_support import (
    DEADLINE_S,
    FIXTURE,
    INIT_PARAMS,
    SERVER_MARKER_VAR,
    RawShim,
    alive,
    kill_seam,
    call,
    lazyctl,
    server_side_processes,
    server_status,
    session_members,
    text_of,
    tool_call,
    wait_for,
    write_named_config,
    SEAMS_PATH,
)

pytestmark = pytest.mark.e2e

OLD_CHILDREN_GONE_S = 10.0  # the promise: nothing of the old daemon's servers after 10 s
OWNERSHIP_EXIT_S = 60.0  # the promise: a daemon that lost its socket exits within a minute
FAST_OWNERSHIP_CHECK = ("--ownership-check-interval", "0.1")


def _lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


# ---- kill -9 ----------------------------------------------------------------------------------


def test_a_daemon_killed_with_sigkill_costs_only_the_calls_in_flight(user_env: UserEnv, tmp_path: Path,
                                                                     shim_path: ShimPath) -> None:
    marker = uuid.uuid4().hex
    methods = tmp_path / "methods.log"
    env = {SERVER_MARKER_VAR: marker, "FIXTURE_GRANDCHILDREN": "2", "FIXTURE_LOG": str(methods)}
    shims: list[RawShim] = []
    try:
        # One after the other: a session that arrives while the first has sent nothing gets a
        # process of its own on a cold cache (not known to be shareable until a start says so).
        for _ in range(3):
            shim = shim_path.started(user_env, env=env)
            shims.append(shim)
            shim.initialize()
            shim_path.check(shim)
            shim.send(tool_call(1, "pid"))
        server_pids = {int(text_of(shim.read())) for shim in shims}
        assert len(server_pids) == 1, "the three sessions share one server"
        (old_daemon,) = user_env.daemon_pids()
        old_children = session_members(server_pids.pop())
        assert len(old_children) == 3, "the server and its two grandchildren run"
        # Two requests in flight per shim, an int id and a string id that look alike.
        for shim in shims:
            shim.send(tool_call(10, "sleep", {"seconds": 60}), tool_call("10", "sleep", {"seconds": 60}))
        wait_for(lambda: _lines_of(methods).count("tools/call") == 3 + 6, "the six sleeps to reach the server")

        os.kill(old_daemon, signal.SIGKILL)

        for shim in shims:
            errors = [shim.read(), shim.read()]
            assert sorted((type(e["id"]).__name__, e["id"]) for e in errors) == [("int", 10), ("str", "10")]
            for error in errors:
                assert error["error"]["code"] == -32603
                assert "connection to the daemon was lost" in error["error"]["message"]
        # The next call works through a new daemon, with no second handshake on the client's stdout:
        # the first line after the errors is the call's own answer.
        for i, shim in enumerate(shims):
            shim.send(tool_call(11, "echo", {"text": f"after {i}"}))
        for i, shim in enumerate(shims):
            assert shim.read() == {"jsonrpc": "2.0", "id": 11,
                                   "result": {"content": [{"type": "text", "text": f"after {i}"}]}}
            shim.fence("fence")
        (new_daemon,) = user_env.daemon_pids()
        assert new_daemon != old_daemon
        # The old server saw stdin EOF and exited; its grandchildren (one ignores SIGTERM) were killed
        # by the new daemon's orphan sweep. Nothing of the old group is left.
        wait_for(lambda: not any(alive(pid) for pid in old_children), "the old daemon's servers to be gone",
                 OLD_CHILDREN_GONE_S)
        new_server = int(text_of(call(shims[0], 12, "pid")))
        assert new_server not in old_children
        assert server_side_processes(marker) == session_members(new_server)
    finally:
        for shim in shims:
            shim.close()


@pytest.mark.parametrize("point", ["read", "relayed"])
@pytest.mark.parametrize("path", HANDOFF_PATHS, ids=[p.name for p in HANDOFF_PATHS])
def test_a_request_the_daemon_read_but_had_not_recorded_when_killed_is_still_answered(
        user_env: UserEnv, path: ShimPath, point: str) -> None:
    # On the hand-off path the daemon reads the client's stdin itself: a kill -9 right after a
    # read ("read": nothing of it relayed; "relayed": sent to the server, its id not yet recorded)
    # must not lose the request. The shim finds the read's bytes in the region and answers it.
    daemon = start_daemon(user_env, env=kill_seam(f"{point}:kill-me-now"))
    shim = path.started(user_env)
    try:
        shim.initialize()
        path.check(shim)
        assert call(shim, 2, "pid")["result"]
        shim.send(tool_call(7, "echo", {"text": "kill-me-now"}))
        error = shim.read()
        assert error["id"] == 7 and error["error"]["code"] == -32603, error
        assert "connection to the daemon was lost" in error["error"]["message"]
        assert daemon.proc.wait(DEADLINE_S) == -signal.SIGKILL
        # Answered once: the next line the client reads is its next call's answer, from a new daemon.
        shim.send(tool_call(8, "echo", {"text": "after"}))
        assert shim.read() == {"jsonrpc": "2.0", "id": 8, "result": {"content": [{"type": "text", "text": "after"}]}}
        shim.fence("fence")
        path.check(shim)
    finally:
        shim.close()


@pytest.mark.parametrize("path", HANDOFF_PATHS, ids=[p.name for p in HANDOFF_PATHS])
def test_a_daemon_killed_in_the_middle_of_writing_an_answer_leaves_it_cut_on_a_line_of_its_own(
        user_env: UserEnv, path: ShimPath) -> None:
    # An answer larger than the client's pipe goes out in parts; a kill -9 right after a part
    # went must still leave the client lines it can split: the cut answer ends with a newline of
    # the shim's, and its request gets the lost-connection error on a line of its own, once.
    daemon = start_daemon(user_env, env=kill_seam("answer:cut-me-here"))
    shim = path.started(user_env)
    try:
        shim.initialize()
        path.check(shim)
        big = "cut-me-here" + "x" * (4 << 20)
        shim.send(tool_call(5, "echo", {"text": big}))
        assert daemon.proc.wait(DEADLINE_S) == -signal.SIGKILL
        cut = shim.read_line()
        assert cut.startswith(b'{"jsonrpc":"2.0","id":5,') or b'"id":5' in cut[:200], cut[:200]
        assert len(cut) < len(big), "the answer was cut"
        error = shim.read()  # a line of its own that parses: not glued to the cut answer
        assert error["id"] == 5 and error["error"]["code"] == -32603, error
        shim.send(tool_call(6, "echo", {"text": "after"}))
        assert shim.read() == {"jsonrpc": "2.0", "id": 6, "result": {"content": [{"type": "text", "text": "after"}]}}
        shim.fence("fence")  # and nothing else: id 5 was answered once
    finally:
        shim.close()


@pytest.mark.parametrize("path", HANDOFF_PATHS, ids=[p.name for p in HANDOFF_PATHS])
def test_a_daemon_killed_writing_a_large_answer_to_a_slow_client_leaves_at_most_that_line_cut_and_answers_it(
        user_env: UserEnv, path: ShimPath) -> None:
    # An answer behind an earlier one the client reads slowly goes in as the client's stdout takes
    # it. A kill -9 right after the first write that carried it leaves the client that answer cut
    # (or whole, followed by an empty line: the torn byte was not yet cleared) on a line of its
    # own, and the lost-connection error after it: every other line parses, the request is
    # answered, twice at worst.
    size = 600 * 1024  # with the first, more than a widened pipe or a raised send buffer holds
    daemon = start_daemon(user_env, env=kill_seam("written:kill-after-me"))
    shim = path.started(user_env)
    try:
        shim.initialize()
        path.check(shim)
        shim.send(tool_call(4, "echo", {"text": "first " + "f" * size}))
        shim.send(tool_call(5, "echo", {"text": "kill-after-me" + "x" * size}))
        assert shim.proc.stdout is not None
        fd, received = shim.proc.stdout.fileno(), b""
        give_up = time.monotonic() + DEADLINE_S
        while b'"id":5,"error"' not in received.rpartition(b"\n")[0] and time.monotonic() < give_up:
            if select.select([fd], [], [], 0.2)[0]:
                received += os.read(fd, 4096)  # slowly: a page every few milliseconds
            time.sleep(0.002)
        assert daemon.proc.wait(DEADLINE_S) == -signal.SIGKILL
        lines = received.split(b"\n")
        assert lines[-1] == b"", "the client reads up to the end of a line"
        messages, cut = [], []
        for line in lines[:-1]:
            try:
                messages.append(json.loads(line))
            except ValueError:
                cut.append(line)
        assert len(cut) <= 1 and all(not line or b"kill-after-me" in line for line in cut), [c[:80] for c in cut]
        assert [m["id"] for m in messages if "result" in m] in ([4, 5], [4]), [str(m)[:80] for m in messages]
        errors = [m for m in messages if "error" in m]
        assert [(m["id"], m["error"]["code"]) for m in errors] == [(5, -32603)], errors
        shim.send(tool_call(6, "echo", {"text": "after"}))
        assert shim.read() == {"jsonrpc": "2.0", "id": 6, "result": {"content": [{"type": "text", "text": "after"}]}}
        shim.fence("fence")
    finally:
        shim.close()


def _region_of(pid: int) -> str:
    """The /proc path of a handed-off shim's region (its memfd), as any process of the user finds it."""
    for name in os.listdir(f"/proc/{pid}/fd"):
        if os.readlink(f"/proc/{pid}/fd/{name}").startswith("/memfd:lazyd-handoff"):
            return f"/proc/{pid}/fd/{name}"
    raise AssertionError(f"shim {pid} holds no region")


def test_a_peer_resizing_a_sessions_region_while_it_streams_calls_costs_the_daemon_nothing(
        user_env: UserEnv) -> None:
    # The region is mapped by the daemon: were it shrunk under the mapping, the daemon's next
    # touch of it would be a SIGBUS, taking every session and server with it. Sealed, it cannot be.
    path = HANDOFF_PATHS[0]
    daemon = start_daemon(user_env)
    victim, other = path.started(user_env), path.started(user_env)
    try:
        for shim in (victim, other):
            shim.initialize()
            path.check(shim)
        # The daemon maps the regions with the stdlib's mmap, which keeps a descriptor of each
        # before Python 3.13 (its `trackfd`): at most one per session beside the socket and pipes.
        held = [os.readlink(f"/proc/{daemon.proc.pid}/fd/{n}") for n in os.listdir(f"/proc/{daemon.proc.pid}/fd")]
        assert len([link for link in held if "lazyd-handoff" in link]) <= (0 if sys.version_info >= (3, 13) else 2), held
        peer = os.open(_region_of(victim.pid), os.O_RDWR)
        attempts, refused = [0], [0]
        stop = threading.Event()

        def resize() -> None:  # shrink and regrow it, over and over, while the calls stream
            while not stop.is_set():
                for size in (0, 4096, 8 << 20, 64 << 20, 1 << 30):
                    attempts[0] += 1
                    try:
                        os.ftruncate(peer, size)
                    except PermissionError:
                        refused[0] += 1

        resizer = threading.Thread(target=resize)
        resizer.start()
        try:
            for n in range(300):
                victim.send(tool_call(n, "echo", {"text": f"streamed {n} " + "y" * 20_000}))
                assert text_of(victim.read()).startswith(f"streamed {n} "), n
        finally:
            stop.set()
            resizer.join()
            os.close(peer)
        assert daemon.proc.poll() is None, "the daemon died"
        assert refused[0] == attempts[0] > 0, "a resize went through"
        assert text_of(call(other, 1, "pid")) and text_of(call(victim, 1000, "pid"))
    finally:
        victim.close()
        other.close()


def test_a_waiter_whose_shim_is_no_longer_installed_ends_the_session_with_one_line(
        user_env: UserEnv, tmp_path: Path) -> None:
    # The waiter execs the shim's interpreter again once the daemon is gone; when that is no
    # longer there (its environment deleted), it says so and exits: the client sees its server's
    # stdout end instead of waiting on a process that can do nothing.
    import site

    interpreter = tmp_path / "python"
    interpreter.symlink_to(sys.executable)
    script = tmp_path / "lazyd-shim"
    script.write_text(f"import site, sys\nsite.addsitedir({site.getsitepackages()[0]!r})\n"
                      "from lazyd_shim.main import main\nsys.exit(main())\n")
    daemon = start_daemon(user_env)
    proc = subprocess.Popen([str(interpreter), str(script), "--", *FIXTURE], env={**user_env.env, "LAZYD_HANDOFF": "1"},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                     "params": INIT_PARAMS}).encode() + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 0
        wait_for(lambda: waits_handed_off(proc.pid), "the shim to wait")
        interpreter.unlink()  # the shim's installation is gone
        daemon.proc.kill()
        assert proc.stdout.read() == b""
        assert proc.wait(DEADLINE_S) == 1
        assert proc.stderr is not None
        assert proc.stderr.read().decode().endswith(f"lazyd-shim: {interpreter} is no longer installed; the session ends\n")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _kill_9_with_a_call_in_flight(user_env: UserEnv, shim: RawShim, daemon: Daemon) -> None:
    """Kill the daemon while `shim`'s session has a call in flight: the call gets -32603, and the
    next call works through a new daemon."""
    shim.send(tool_call(2, "sleep", {"seconds": 30}))
    wait_for(lambda: server_status(user_env)[0]["inflight"] == 1, "the call to reach the server")
    daemon.proc.kill()
    error = shim.read()
    assert error["id"] == 2 and error["error"]["code"] == -32603, error
    assert text_of(call(shim, 3, "pid")), "the next call works through a new daemon"


def test_a_shim_that_cannot_exec_a_shell_waits_itself_and_takes_its_session_back_when_the_daemon_is_killed(
        user_env: UserEnv, tmp_path: Path) -> None:
    # A shell that is there but cannot be exec'd (the test seam names one: a file that is no
    # program): the shim waits itself.
    broken = tmp_path / "dash"
    broken.write_bytes(b"\x7fELF not a program")
    broken.chmod(0o755)
    daemon = start_daemon(user_env)
    env = {"LAZYD_TEST_SHELLS": str(broken), "PYTHONPATH": str(SEAMS_PATH), "LAZYD_VERBOSE": "1"}
    shim = HANDOFF_PATHS[0].started(user_env, env=env)
    try:
        shim.initialize()
        assert call(shim, 1, "pid")["result"]
        _kill_9_with_a_call_in_flight(user_env, shim, daemon)
        assert "waiting in this process" in shim.stderr()
    finally:
        shim.close()


def test_a_waiter_takes_its_session_back_when_the_daemon_is_killed_and_waits_as_it_did(user_env: UserEnv) -> None:
    # No daemon is up after the kill: the shim's recovery autostarts one, hands off again and
    # execs the same waiting program.
    daemon = start_daemon(user_env)
    shim = HANDOFF_PATHS[0].started(user_env, env={"LAZYD_VERBOSE": "1"})
    try:
        shim.initialize()
        assert call(shim, 1, "pid")["result"]
        wait_for(lambda: waits_handed_off(shim.proc.pid), "the shim to wait")
        with open(f"/proc/{shim.proc.pid}/cmdline", "rb") as f:
            before = f.read().split(b"\0")[:2]
        _kill_9_with_a_call_in_flight(user_env, shim, daemon)
        assert "waiting in /" in shim.stderr()
        wait_for(lambda: waits_handed_off(shim.proc.pid), "the shim to wait again")
        with open(f"/proc/{shim.proc.pid}/cmdline", "rb") as f:
            assert f.read().split(b"\0")[:2] == before
        # One adopting hello for systemd's store, the new one: the old one closed by the recovery.
        fd_dir = f"/proc/{shim.proc.pid}/fd"
        hellos = [n for n in os.listdir(fd_dir) if os.readlink(f"{fd_dir}/{n}").startswith("/memfd:lazyd-hello")]
        assert len(hellos) == 1, hellos
    finally:
        shim.close()


def test_a_hand_off_session_no_daemon_comes_back_for_runs_its_server_itself_with_the_handshake_replayed(
        user_env: UserEnv, tmp_path: Path) -> None:
    # The daemon is killed with a call in flight and none can start again (its config is broken):
    # the recovering shim answers the call, then runs the server as its child, replays the
    # client's handshake and drops its answer, and the client's next call is the next line.
    methods = tmp_path / "methods.log"
    daemon = start_daemon(user_env)
    shim = HANDOFF_PATHS[0].started(user_env, env={"FIXTURE_LOG": str(methods)})
    try:
        shim.initialize()
        HANDOFF_PATHS[0].check(shim)
        shim.send(tool_call(1, "sleep", {"seconds": 60}))
        wait_for(lambda: "tools/call" in _lines_of(methods), "the sleep to reach the server")
        user_env.config_file.parent.mkdir(parents=True, exist_ok=True)
        user_env.config_file.write_text("[servers\n")
        daemon.proc.kill()
        error = shim.read()
        assert error["id"] == 1 and error["error"]["code"] == -32603, error
        server = int(text_of(call(shim, 2, "pid")))
        with open(f"/proc/{server}/stat") as f:
            assert int(f.read().rsplit(")", 1)[1].split()[1]) == shim.pid, "the shim's own child"
        assert _lines_of(methods)[-3:] == ["initialize", "notifications/initialized", "tools/call"]
        assert "running the server directly" in shim.stderr()
        assert shim.close_stdin_and_wait() == 0
        wait_for(lambda: not alive(server), "the server run directly to exit at the client's EOF")
    finally:
        shim.close()


# ---- SIGTERM, a second daemon ---------------------------------------------------------------------


def _ladder_times(log: Path) -> tuple[str, str]:
    """When the daemon sent SIGTERM and SIGKILL to a server, from the timestamps in its log."""
    text = log.read_text()
    term = next(line for line in text.splitlines() if "after stdin EOF: SIGTERM" in line)
    kill = next(line for line in text.splitlines() if "after SIGTERM: SIGKILL" in line)
    return term.split()[0], kill.split()[0]


def test_sigterm_stops_every_server_in_parallel_by_the_ladder_removes_the_socket_and_exits_0(
    user_env: UserEnv,
) -> None:
    marker = uuid.uuid4().hex
    stubborn = {"FIXTURE_IGNORE_EOF": "1", "FIXTURE_IGNORE_TERM": "1", "FIXTURE_GRANDCHILDREN": "1",
                SERVER_MARKER_VAR: marker}
    names = ["one", "two", "three"]
    write_named_config(user_env, {name: {"command": FIXTURE[0], "args": FIXTURE[1:], "env": stubborn}
                                  for name in names})
    daemon = start_daemon(user_env)
    for name in names:
        woken = lazyctl(user_env, "wake", name)
        assert woken.returncode == 0, woken.stderr
    assert len(server_side_processes(marker)) == 6
    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(DEADLINE_S) == 0
    assert server_side_processes(marker) == []
    assert not user_env.socket.exists()
    # In parallel: every server got its SIGTERM before any got its SIGKILL (one after the other,
    # the second server's ladder would only begin after the first one's SIGKILL).
    times = [_ladder_times(user_env.state_dir / "logs" / f"{name}.log") for name in names]
    assert max(term for term, _ in times) < min(kill for _, kill in times), times
    assert json.loads((user_env.state_dir / orphans.STATE_FILE).read_text())["children"] == []


def test_requests_sent_while_the_daemon_stops_are_held_by_the_shim_and_served_by_the_next_daemon(
    user_env: UserEnv, shim_path: ShimPath,
) -> None:
    # A server that ignores EOF and SIGTERM keeps the old daemon stopping for its whole ladder.
    stubborn = {"FIXTURE_IGNORE_EOF": "1", "FIXTURE_IGNORE_TERM": "1"}
    daemon = start_daemon(user_env)
    shim = shim_path.started(user_env, env=stubborn)
    try:
        shim.initialize()
        shim_path.check(shim)
        shim.send(tool_call(1, "pid"))
        old_server = int(text_of(shim.read()))
        shim.send(tool_call(2, "sleep", {"seconds": 60}))
        wait_for(lambda: server_status(user_env)[0]["inflight"] == 1, "the sleep to be in flight")
        daemon.proc.send_signal(signal.SIGTERM)
        # The in-flight call is answered by the shim as soon as the daemon drops the session...
        lost = shim.read()
        assert lost["id"] == 2 and "connection to the daemon was lost" in lost["error"]["message"]
        assert alive(daemon.proc.pid) and alive(old_server), "the old daemon is still stopping its server"
        # ...and calls made meanwhile wait in the shim for the next daemon instead of failing.
        shim.send(*(tool_call(i, "echo", {"text": f"held {i}"}) for i in range(3, 6)))
        assert daemon.proc.wait(DEADLINE_S) == 0
        # The fixture answers each request on its own thread: compare as a set, by id.
        held = {reply["id"]: text_of(reply) for reply in (shim.read() for _ in range(3))}
        assert held == {i: f"held {i}" for i in range(3, 6)}
        shim.fence("fence")
        assert not alive(old_server)
        assert user_env.daemon_pids() != [] and daemon.proc.pid not in user_env.daemon_pids()
        # Spare the teardown the new server's 4 s ladder: it ignores EOF and SIGTERM too.
        os.killpg(int(text_of(call(shim, 6, "pid"))), signal.SIGKILL)
    finally:
        shim.close()


def test_a_second_lazyd_exits_0_without_touching_the_live_socket(user_env: UserEnv) -> None:
    daemon = start_daemon(user_env)
    before = socket_identity(user_env.socket)
    second = subprocess.run([sys.executable, "-m", "lazyd.daemon"], env=user_env.env, capture_output=True,
                            text=True, timeout=DEADLINE_S)
    assert second.returncode == 0
    assert "already running" in second.stderr
    assert socket_identity(user_env.socket) == before
    assert daemon.proc.poll() is None
    assert lazyctl(user_env, "status").returncode == 0  # the live socket still accepts connections
    assert user_env.daemon_pids() == [daemon.proc.pid]


# ---- the ownership watch ---------------------------------------------------------------------------


def _take_socket_away(user: UserEnv, how: str) -> socket.socket | None:
    if how == "unlinked":
        os.unlink(user.socket)
        return None
    if how == "replaced":
        # Bound beside it, then renamed over it: the name now leads to someone else's socket.
        newcomer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        staging = user.socket.with_name("newcomer.sock")
        newcomer.bind(str(staging))
        newcomer.listen(8)
        os.rename(staging, user.socket)
        return newcomer
    shutil.rmtree(user.socket.parent)  # a logout: logind removes the whole runtime dir
    return None


@pytest.mark.parametrize("how", ["unlinked", "replaced", "runtime dir removed"])
def test_a_daemon_that_no_longer_owns_its_socket_stops_its_servers_and_exits(user_env: UserEnv, how: str) -> None:
    marker = uuid.uuid4().hex
    write_named_config(user_env, {"kept": {"command": FIXTURE[0], "args": FIXTURE[1:],
                                           "env": {"FIXTURE_GRANDCHILDREN": "1", SERVER_MARKER_VAR: marker}}})
    daemon = start_daemon(user_env, *FAST_OWNERSHIP_CHECK)
    assert lazyctl(user_env, "wake", "kept").returncode == 0
    assert len(server_side_processes(marker)) == 2
    newcomer = _take_socket_away(user_env, how)
    try:
        newcomer_identity = socket_identity(user_env.socket)
        assert daemon.proc.wait(OWNERSHIP_EXIT_S) == 0
        assert server_side_processes(marker) == []
        # Whatever holds the name now was left alone.
        assert socket_identity(user_env.socket) == newcomer_identity
        if newcomer is not None:
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.connect(str(user_env.socket))
            probe.close()
    finally:
        if newcomer is not None:
            newcomer.close()
    log = (user_env.state_dir / "lazyd.log").read_text()
    assert "nobody can reach this daemon any more; stopping" in log


# ---- the client's process group ----------------------------------------------------------------------


def test_killing_a_clients_process_group_right_after_autostart_leaves_lazyd_and_other_sessions_running(
    user_env: UserEnv, shim_path: ShimPath,
) -> None:
    first = shim_path.started(user_env, new_session=True)  # the client's group, as the MCP SDK makes it
    other = shim_path.started(user_env)
    try:
        first.initialize()
        (daemon,) = user_env.daemon_pids()  # the first shim autostarted it just now
        other.initialize()
        shim_path.check(first)
        shim_path.check(other)
        other.send(tool_call(1, "sleep", {"seconds": 0.5}))
        # The SDK's way out: SIGTERM to the group, then SIGKILL (sent at once here, to hit a live group).
        os.killpg(first.pid, signal.SIGTERM)
        try:
            os.killpg(first.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        first.proc.wait(DEADLINE_S)
        assert text_of(other.read()) == "slept 0.5", "the other session's call in flight was answered"
        assert text_of(call(other, 2, "echo")) == ""
        assert user_env.daemon_pids() == [daemon]
        late = shim_path.started(user_env)
        try:
            late.initialize()
            shim_path.check(late)
            late.fence(1)
        finally:
            late.close()
        assert user_env.daemon_pids() == [daemon]
    finally:
        first.close()
        other.close()


# ---- version skew ------------------------------------------------------------------------------------


def test_a_hello_of_a_newer_wire_version_is_refused_with_a_restart_hint_and_the_shim_runs_the_server_itself(
    user_env: UserEnv,
) -> None:
    start_daemon(user_env)
    newer = wire.WIRE_VERSION + 1
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.settimeout(DEADLINE_S)
    raw.connect(str(user_env.socket))
    raw.sendall(wire.encode(ForeignHello(newer, {"role": "shim", "pid": os.getpid(), "argv": FIXTURE, "cwd": "/",
                                                 "env": {}, "opts": {}, "server": None, "resume": []})))
    reader = wire.BlockingFrameReader(raw)
    refused = reader.read()
    assert isinstance(refused, Refusal) and refused.code == "version"
    assert str(newer) in refused.message and str(wire.WIRE_VERSION) in refused.message
    assert "lazyctl stop" in refused.message
    assert reader.read() is None, "the daemon closes after refusing"
    raw.close()
    # A real shim of the next version: told why, it falls open and runs the server itself.
    code = ("import sys, lazyd.protocol.frames as f; f.Hello.v += 1\n"  # the hello this shim sends is of the next version
            "from lazyd_shim.main import main; sys.exit(main(sys.argv[1:]))\n")
    shim = subprocess.Popen([sys.executable, "-c", code, "--", *FIXTURE], env=user_env.env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert shim.stdin is not None and shim.stdout is not None and shim.stderr is not None
    shim.stdin.write(json.dumps(tool_call(1, "pid")).encode() + b"\n")
    shim.stdin.flush()
    answer = json.loads(shim.stdout.readline())
    # exec, not a child: the server answers from the shim's own pid.
    assert answer["id"] == 1 and text_of(answer) == str(shim.pid)
    shim.stdin.close()
    assert shim.wait(DEADLINE_S) == 0
    stderr = shim.stderr.read().decode()
    shim.stdout.close()
    shim.stderr.close()
    assert f"wire version {newer}" in stderr and "running the server directly" in stderr
