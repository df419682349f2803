"""lazyd under a real `systemd --user`: the units as installed, activation, reload, crash, watchdog, stop.

Each test runs its own user manager (tests/e2e/systemd_manager.py: a private mount namespace and
cgroup, the test's HOME and runtime dir), installs the units with `lazyctl systemd install`,
enables them with `systemctl --user enable lazyd` and starts the socket. What systemd does is read
from systemd itself (`systemctl show`, the cgroup files, the manager's log); what the client sees
is read from real shims. Where no user manager can run, every test skips with the reason.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from lazyd.daemon import crash_loop
from tests.conftest import FIXTURE_SERVER, MARKER_VAR, UserEnv, shim_command, shim_session, wait_until
from tests.benchmarks.scale_support import HandedOff
from tests.e2e.faults_support import region_in_flight
from tests.e2e.systemd_manager import UserManager
from tests.e2e.upgrade_support import lazyctl, shim_log, status

pytestmark = pytest.mark.e2e

STEP_S = 30.0  # bound on any one step; reached only when something is broken
FIXTURE = [sys.executable, str(FIXTURE_SERVER)]
LOST_CONNECTION = -32603  # the error a request lost with its daemon is answered with (lazyd/handoff/recovery.py)


@pytest.fixture
def manager(user_env: UserEnv) -> Iterator[UserManager]:
    """A user manager with lazyd's units installed and enabled, and the socket listening."""
    m = UserManager.start(user_env.root, user_env.env)
    try:
        installed = lazyctl(user_env, "systemd", "install")
        assert installed.returncode == 0, installed.stderr
        m.systemctl("daemon-reload")
        m.systemctl("enable", "lazyd")
        m.systemctl("start", "lazyd.socket")
        yield m
    finally:
        m.stop()


def pid_text(result: Any) -> int:
    return int(getattr(result.content[0], "text", "0"))


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def starts(m: UserManager) -> int:
    """How many times the manager started lazyd.service so far (its log's "Starting" lines)."""
    return sum(1 for line in m.log().splitlines() if "Starting lazyd.service" in line)


def logged_env(user: UserEnv) -> dict[str, str]:
    return {"LAZYD_LOG_FILE": str(user.root / "shim.log")}


# ---- install, activation, the cgroup, STATUS= --------------------------------------------------


def test_installed_and_enabled_units_start_lazyd_on_the_first_shim_with_the_server_in_its_cgroup(
        user_env: UserEnv, manager: UserManager) -> None:
    assert manager.prop("lazyd.socket", "UnitFileState") == "enabled"
    assert manager.prop("lazyd.socket", "ActiveState") == "active"
    # Nothing runs until a client connects: no daemon, no server.
    time.sleep(0.3)  # an absence: a window in which a unit that started early would have started
    assert manager.prop("lazyd.service", "ActiveState") == "inactive"
    assert manager.main_pid() == 0 and user_env.daemon_pids() == []
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async with shim_session(user_env, FIXTURE) as client:
            with anyio.fail_after(STEP_S):
                outcome["server"] = pid_text(await client.call_tool("pid", {}))
            await anyio.to_thread.run_sync(lambda: wait_until(
                lambda: "1 running" in manager.prop("lazyd.service", "StatusText"), STEP_S, "STATUS= with the counts"))
            outcome["show"] = manager.show("lazyd.service", "MainPID", "StatusText", "ActiveState", "Type")
            outcome["cgroup"] = manager.cgroup_pids("lazyd.service")
            outcome["ppid"] = int(Path(f"/proc/{outcome['server']}/stat").read_text().rsplit(") ", 1)[1].split()[1])

    anyio.run(scenario)
    show = outcome["show"]
    main_pid = int(show["MainPID"])
    assert show["ActiveState"] == "active" and main_pid > 0
    assert "lazyd" in Path(f"/proc/{main_pid}/cmdline").read_text()
    # The server runs in lazyd.service's cgroup, a child of the main process.
    assert {main_pid, outcome["server"]} <= outcome["cgroup"], outcome
    assert outcome["ppid"] == main_pid
    assert show["StatusText"].startswith("1 servers: 1 running"), show


ONE_SESSION_STORED = 7
# One server and one hand-off session in the store: the server's three pipes, lazyd's secrets, the
# session's socket and its client's two pipes (lazyd/daemon/handoff/stored_sessions.py).


def stored_fds(m: UserManager) -> int:
    return int(m.prop("lazyd.service", "NFileDescriptorStore") or 0)


def waiting_shell(user: UserEnv) -> tuple[int, str]:
    """The test's one hand-off session's waiter (its environment carries the test's marker, so no
    other test's is taken for it) and the socket it waits on (its descriptor 9): a waiter whose
    shim took its session back waits on a new socket, one that never saw the crash on the same."""
    marker = f"{MARKER_VAR}={user.marker}".encode()
    for pid in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if (cmd[0].startswith(b"lazyd-shim: waiting (")
                    and marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")):
                return int(pid), os.readlink(f"/proc/{pid}/fd/9")
        except OSError:
            continue
    raise AssertionError("no waiting shell")


async def store_holds(m: UserManager, at_least: int) -> None:
    """Until lazyd.service's fd store holds `at_least` descriptors."""
    await anyio.to_thread.run_sync(lambda: wait_until(lambda: stored_fds(m) >= at_least, STEP_S, "the fd store"))


def wait_for_main_pid_other_than(m: UserManager, old: int) -> int:
    wait_until(lambda: m.main_pid() not in (0, old) and m.prop("lazyd.service", "ActiveState") == "active",
               STEP_S, "a new main process")
    return m.main_pid()


# ---- a crash, the watchdog: the servers are kept ------------------------------------------------


def test_kill_9_of_the_main_process_restarts_lazyd_which_takes_the_running_server_over(
        user_env: UserEnv, manager: UserManager) -> None:
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async with shim_session(user_env, FIXTURE, env=logged_env(user_env)) as client:
            with anyio.fail_after(STEP_S):
                server = outcome["server"] = pid_text(await client.call_tool("pid", {}))
            # The server's three pipes, lazyd's secrets and the session's socket are in the store
            # before the crash.
            await store_holds(manager, ONE_SESSION_STORED)
            old = outcome["old"] = manager.main_pid()
            outcome["waiter_before"] = waiting_shell(user_env)
            os.kill(old, signal.SIGKILL)
            outcome["new"] = await anyio.to_thread.run_sync(wait_for_main_pid_other_than, manager, old)
            outcome["alive"] = alive(server)
            with anyio.fail_after(STEP_S):  # the same session answers again, from the same process
                outcome["again"] = pid_text(await client.call_tool("pid", {}))
            outcome["status"] = await anyio.to_thread.run_sync(status, user_env)
            outcome["waiter_after"] = waiting_shell(user_env)
        # The session ended: its names left the store, the server's and the secrets' stay.
        await anyio.to_thread.run_sync(lambda: wait_until(lambda: stored_fds(manager) == ONE_SESSION_STORED - 3, STEP_S,
                                                          "the session's names to go"))

    anyio.run(scenario)
    server = outcome["server"]
    assert outcome["alive"] and outcome["again"] == server, (outcome, manager.log()[-2000:])
    assert f"Killing process {server}" not in manager.log()
    assert server in manager.cgroup_pids("lazyd.service")
    last = outcome["status"]["daemon"]["last_upgrade"]
    assert (last["crash"], last["inherited"], last["lost"]) == (True, True, []), last
    assert len(last["servers"]) == 1
    assert last["sessions"] == {"kept": 1, "taken_back": 1, "let_go": 0}, last
    assert outcome["status"]["daemon"]["fdstore"]["held"] == ONE_SESSION_STORED, outcome["status"]["daemon"]
    row = next(r for r in outcome["status"]["servers"] if r["pid"] == server)
    assert row["state"] == "running"
    # The session was kept in the store across the crash (lazyd/daemon/handoff/stored_sessions.py): its
    # waiting shell never saw its socket end, ran nothing, and the restarted daemon took the
    # session back in place.
    daemon_log = (user_env.state_dir / "lazyd.log").read_text()
    assert "kept by systemd across the crash" in daemon_log, daemon_log
    assert outcome["waiter_before"] == outcome["waiter_after"], outcome
    assert "taking it back" not in shim_log(user_env), shim_log(user_env)


def test_a_call_in_flight_at_a_kill_9_is_answered_with_an_error_by_the_restarted_daemon_and_the_session_goes_on(
        user_env: UserEnv, manager: UserManager) -> None:
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async with shim_session(user_env, FIXTURE, env=logged_env(user_env)) as client:
            with anyio.fail_after(STEP_S):
                outcome["server"] = pid_text(await client.call_tool("pid", {}))
            await store_holds(manager, ONE_SESSION_STORED)
            shell, outcome["socket_before"] = waiting_shell(user_env)

            async def long_call() -> None:
                try:
                    await client.call_tool("sleep", {"seconds": 60})
                    outcome["long"] = "answered"
                except MCPError as exc:
                    outcome["long"] = exc.error.code

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(long_call)
                await anyio.to_thread.run_sync(lambda: wait_until(
                    lambda: len((region_in_flight(shell) or (False, []))[1]) == 1, STEP_S, "the call in the region"))
                old = manager.main_pid()
                os.kill(old, signal.SIGKILL)
                await anyio.to_thread.run_sync(wait_for_main_pid_other_than, manager, old)
            with anyio.fail_after(STEP_S):
                outcome["again"] = pid_text(await client.call_tool("pid", {}))
            outcome["socket_after"] = waiting_shell(user_env)[1]

    anyio.run(scenario)
    assert outcome["long"] == LOST_CONNECTION, outcome
    assert outcome["again"] == outcome["server"], outcome
    assert outcome["socket_before"] == outcome["socket_after"], outcome
    daemon_log = (user_env.state_dir / "lazyd.log").read_text()
    assert "(kept by systemd across the crash); 1 in-flight request(s) answered with an error" in daemon_log, daemon_log


RAW_SESSIONS = 400  # 3 stored descriptors each: 1,200, past the default soft limit of 1024
NO_SUCH_PID = 10_000_000  # above any pid_max: names no process


def test_a_store_past_the_default_soft_limit_comes_back_and_each_session_is_taken_back_or_let_go(
        user_env: UserEnv, manager: UserManager) -> None:
    # Sessions made by this test (tests/benchmarks/scale_support.py), each naming a shim pid that
    # is not its socket's peer, beside one real shim's: all are stored; after the kill -9 systemd
    # must be able to pass the whole store (a soft limit of 1024 failed every restart with
    # 202/FDS), the real session is taken back in place, and each raw one let go (its socket ends).
    outcome: dict[str, Any] = {}
    raw: list[HandedOff] = []

    async def scenario() -> None:
        async with shim_session(user_env, FIXTURE, env=logged_env(user_env)) as client:
            with anyio.fail_after(STEP_S):
                outcome["server"] = pid_text(await client.call_tool("pid", {}))
            raw.extend(HandedOff(user_env.socket, user_env.env, FIXTURE, pid=NO_SUCH_PID + n) for n in range(RAW_SESSIONS))
            await store_holds(manager, ONE_SESSION_STORED + 3 * RAW_SESSIONS)
            outcome["stored"] = stored_fds(manager)
            old = manager.main_pid()
            os.kill(old, signal.SIGKILL)
            await anyio.to_thread.run_sync(wait_for_main_pid_other_than, manager, old)
            with anyio.fail_after(STEP_S):
                outcome["again"] = pid_text(await client.call_tool("pid", {}))
            outcome["human"] = await anyio.to_thread.run_sync(lazyctl, user_env, "status")

    try:
        anyio.run(scenario)
        ended = 0
        for session in raw:
            session.sock.settimeout(STEP_S)
            ended += session.sock.recv(1) == b""
    finally:
        for session in raw:
            session.close()
    assert outcome["again"] == outcome["server"], (outcome, manager.log()[-2000:])
    assert "Failed at step FDS" not in manager.log()
    assert ended == RAW_SESSIONS
    daemon_log = (user_env.state_dir / "lazyd.log").read_text()
    assert "kept by systemd across the crash" in daemon_log
    assert daemon_log.count("not taking back the session systemd kept (its socket's peer is pid") == RAW_SESSIONS
    assert (f"and 1 of the {RAW_SESSIONS + 1} hand-off sessions it kept ({RAW_SESSIONS} let go to their shims)"
            in outcome["human"].stdout), outcome["human"].stdout


def test_a_daemon_that_keeps_failing_to_start_after_a_crash_lets_the_kept_sessions_go_to_their_shims(
        user_env: UserEnv, manager: UserManager, tmp_path: Path) -> None:
    # After the crash every start fails at import (a module the daemon needs is broken, as when
    # a dependency left its venv): the session must not wait for ever in the store.
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "trio.py").write_text("raise ImportError('trio is broken for this test')\n")
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async with shim_session(user_env, FIXTURE, env=logged_env(user_env)) as client:
            with anyio.fail_after(STEP_S):
                await client.call_tool("pid", {})
            await store_holds(manager, ONE_SESSION_STORED)
            shell, before = waiting_shell(user_env)
            manager.drop_in("lazyd.service", f"[Service]\nEnvironment=PYTHONPATH={broken}\n")
            manager.systemctl("daemon-reload")
            os.kill(manager.main_pid(), signal.SIGKILL)
            # The shell sees its socket end (the fourth start let the session go) and resumes.
            await anyio.to_thread.run_sync(lambda: wait_until(
                lambda: not _waits_on(shell, before), STEP_S, "the shell to see its socket end"))
            outcome["starts"] = starts(manager)

    anyio.run(scenario)
    assert outcome["starts"] >= 1 + crash_loop.MAX_STARTS + 1, manager.log()[-3000:]
    assert not (user_env.socket.parent / crash_loop.COUNT_FILE).exists()


def _waits_on(pid: int, sock: str) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/fd/9") == sock
    except OSError:
        return False


def test_after_a_crash_that_took_the_servers_with_it_status_says_none_was_taken_over(
        user_env: UserEnv, manager: UserManager) -> None:
    # KillMode=mixed (a drop-in) SIGKILLs the cgroup when the main process dies: the server dies,
    # systemd drops its pipes from the store, and the restarted daemon must not claim it.
    manager.drop_in("lazyd.service", "[Service]\nKillMode=mixed\n")
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async with shim_session(user_env, FIXTURE) as client:
            with anyio.fail_after(STEP_S):
                outcome["server"] = pid_text(await client.call_tool("pid", {}))
            await store_holds(manager, ONE_SESSION_STORED)
            old = manager.main_pid()
            os.kill(old, signal.SIGKILL)
            await anyio.to_thread.run_sync(wait_for_main_pid_other_than, manager, old)
            outcome["status"] = await anyio.to_thread.run_sync(status, user_env)
            outcome["human"] = await anyio.to_thread.run_sync(lazyctl, user_env, "status")

    anyio.run(scenario)
    assert not alive(outcome["server"])
    last = outcome["status"]["daemon"]["last_upgrade"]
    assert (last["crash"], last["inherited"], last["servers"], len(last["lost"])) == (True, False, [], 1), last
    assert "took over 0 servers" in outcome["human"].stdout and "did not come back" in outcome["human"].stdout


def test_a_stuck_event_loop_is_restarted_by_the_watchdog_and_the_new_daemon_keeps_the_server(
        user_env: UserEnv, manager: UserManager) -> None:
    # 3 s: short for the test; pings come every 1.5 s, and a loaded start-up takes under that.
    manager.drop_in("lazyd.service", "[Service]\nWatchdogSec=3s\nTimeoutAbortSec=1s\n")
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async with shim_session(user_env, FIXTURE, env=logged_env(user_env)) as client:
            with anyio.fail_after(STEP_S):
                outcome["server"] = pid_text(await client.call_tool("pid", {}))
            await store_holds(manager, ONE_SESSION_STORED)
            old = manager.main_pid()
            os.kill(old, signal.SIGSTOP)  # the loop stops: no WATCHDOG=1 any more
            outcome["new"] = await anyio.to_thread.run_sync(wait_for_main_pid_other_than, manager, old)
            with anyio.fail_after(STEP_S):
                outcome["again"] = pid_text(await client.call_tool("pid", {}))

    anyio.run(scenario)
    log = manager.log()
    assert "Watchdog timeout" in log, log[-2000:]
    assert outcome["again"] == outcome["server"], (outcome, log[-2000:])
    assert manager.prop("lazyd.service", "NRestarts") == "1"


# ---- reload and restart ----------------------------------------------------------------------


def test_reload_with_a_call_in_flight_keeps_the_main_pid_and_the_server_and_the_call_completes(
        user_env: UserEnv, manager: UserManager) -> None:
    outcome: dict[str, Any] = {}
    received = user_env.root / "fixture.log"  # the server writes the method of each message it reads

    async def scenario() -> None:
        async with shim_session(user_env, FIXTURE, env={"FIXTURE_LOG": str(received)}) as client:
            with anyio.fail_after(STEP_S):
                outcome["server"] = pid_text(await client.call_tool("pid", {}))
            main = outcome["main"] = manager.main_pid()
            await store_holds(manager, ONE_SESSION_STORED)

            async def slow_call() -> None:
                with anyio.fail_after(STEP_S):
                    result = await client.call_tool("sleep", {"seconds": 1.5})
                outcome["slow"] = getattr(result.content[0], "text", "")

            async with anyio.create_task_group() as tg:
                tg.start_soon(slow_call)
                await anyio.to_thread.run_sync(lambda: wait_until(  # the call is with the server now
                    lambda: received.read_text().count("tools/call") == 2, STEP_S, "the server to get the call"))
                outcome["reload"] = await anyio.to_thread.run_sync(
                    lambda: manager.systemctl("reload", "lazyd", check=False))
            outcome["after"] = manager.main_pid()
            with anyio.fail_after(STEP_S):
                outcome["again"] = pid_text(await client.call_tool("pid", {}))
            outcome["status"] = await anyio.to_thread.run_sync(status, user_env)
            outcome["main_was"] = main

    anyio.run(scenario)
    assert outcome["reload"].returncode == 0, outcome["reload"].stderr + manager.log()[-2000:]
    assert outcome["after"] == outcome["main"]
    assert outcome["again"] == outcome["server"]
    assert outcome["slow"], outcome  # answered (a call lost to the reload would have raised)
    last = outcome["status"]["daemon"]["last_upgrade"]
    assert last["inherited"] is True and last["from_pid"] == outcome["main"]
    assert manager.prop("lazyd.service", "ActiveState") == "active"
    # The successor counts what its predecessor stored (the session's socket and ends included)
    # against the store's budget.
    assert outcome["status"]["daemon"]["fdstore"]["held"] == ONE_SESSION_STORED, outcome["status"]["daemon"]


def test_restart_stops_the_old_server_and_the_session_goes_on_with_a_new_daemon(
        user_env: UserEnv, manager: UserManager) -> None:
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async with shim_session(user_env, FIXTURE, env=logged_env(user_env)) as client:
            with anyio.fail_after(STEP_S):
                outcome["server"] = pid_text(await client.call_tool("pid", {}))
            old = manager.main_pid()
            await anyio.to_thread.run_sync(lambda: manager.systemctl("restart", "lazyd"))
            outcome["new"] = manager.main_pid()
            outcome["old_alive"] = alive(outcome["server"])
            with anyio.fail_after(STEP_S):
                outcome["again"] = pid_text(await client.call_tool("pid", {}))
            outcome["old"] = old

    anyio.run(scenario)
    assert outcome["new"] not in (0, outcome["old"])
    assert not outcome["old_alive"]  # a restart costs the servers: the old daemon stopped them
    assert outcome["again"] != outcome["server"] and alive(outcome["again"])
    assert f"Killing process {outcome['server']}" not in manager.log()  # lazyd stopped it, not systemd


# ---- a bad config ----------------------------------------------------------------------------


def run_shim(user: UserEnv) -> tuple[subprocess.CompletedProcess[str], float]:
    """A shim whose client sends nothing: it connects and says hello at once, as shims do."""
    began = time.monotonic()
    done = subprocess.run([shim_command(), "--", *FIXTURE], env=user.env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=8)
    return done, time.monotonic() - began


def test_a_bad_config_makes_no_start_loop_and_every_shim_prints_the_reason_and_exits_2_until_fixed(
        user_env: UserEnv, manager: UserManager) -> None:
    user_env.config_file.parent.mkdir(parents=True)
    user_env.config_file.write_text('[servers.x]\ncommand = 1\n')
    done, took = run_shim(user_env)
    print(f"shim against a daemon with a bad config: exit {done.returncode} after {took:.2f} s")
    assert done.returncode == 2, (done, manager.log()[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(user_env.config_file) in lines[0] and "servers.x.command" in lines[0], lines
    main = manager.main_pid()
    time.sleep(1.0)  # a loop (3-4 starts a second) would have started lazyd several times by now
    assert starts(manager) == 1, manager.log()[-3000:]
    assert manager.main_pid() == main and manager.prop("lazyd.service", "ActiveState") == "active"
    assert "waiting for a valid config" in manager.prop("lazyd.service", "StatusText")
    second, _ = run_shim(user_env)
    assert second.returncode == 2 and second.stderr == done.stderr
    shown = lazyctl(user_env, "status")
    assert shown.returncode == 1 and "servers.x.command" in shown.stderr, shown
    # Fixed: the same daemon sees the file change (no client needed) and loads it, then serves.
    user_env.config_file.write_text('[servers.x]\ncommand = "true"\n')
    wait_until(lambda: manager.prop("lazyd.service", "StatusText").startswith("1 servers"), 10,
               "the daemon to load the fixed file")
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async with shim_session(user_env, FIXTURE) as client:
            with anyio.fail_after(STEP_S):
                outcome["server"] = pid_text(await client.call_tool("pid", {}))

    anyio.run(scenario)
    assert outcome["server"] > 0 and manager.main_pid() == main and starts(manager) == 1
    assert status(user_env)["daemon_pid"] == main


def test_a_daemon_that_keeps_failing_before_it_accepts_is_braked_by_the_socket_trigger_limit(
        user_env: UserEnv, manager: UserManager) -> None:
    # What still fails at start-up (here: a daemon that exits 2 after a Python start, as a file
    # only the user can fix does) re-triggers the socket at once, since the connection waits.
    manager.drop_in("lazyd.service", "[Service]\nExecStart=\n"
                    f"ExecStart={sys.executable} -c \"import time; time.sleep(0.2); raise SystemExit(2)\"\n")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # waits in the socket, as a shim's would
    probe.connect(str(user_env.socket))
    try:
        wait_until(lambda: manager.prop("lazyd.socket", "ActiveState") == "failed", 15, "the socket to hit its limit")
    finally:
        probe.close()
    assert manager.prop("lazyd.socket", "Result") == "trigger-limit-hit"
    assert starts(manager) <= 6, starts(manager)
    assert not user_env.socket.exists()  # shims now start a daemon themselves, and show its error


# ---- stop --------------------------------------------------------------------------------------


def test_stop_leaves_no_process_and_nothing_of_lazyd_in_the_runtime_dir(user_env: UserEnv, manager: UserManager) -> None:
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async with shim_session(user_env, FIXTURE) as client:
            with anyio.fail_after(STEP_S):
                outcome["server"] = pid_text(await client.call_tool("pid", {}))
        # The session ended: the server's pipes and the secrets are what the store holds.
        await store_holds(manager, ONE_SESSION_STORED - 3)

    anyio.run(scenario)
    standby = user_env.socket.with_name("lazyd.standby")
    assert standby.exists()
    manager.systemctl("stop", "lazyd.socket", "lazyd.service")
    assert not alive(outcome["server"])
    assert manager.cgroup_pids("lazyd.service") == set()
    runtime = user_env.socket.parent
    assert sorted(p.name for p in runtime.iterdir()) == [], "left in the runtime dir"
    assert f"Killing process {outcome['server']}" not in manager.log()  # lazyd stopped it itself


def test_stopping_a_hung_daemon_kills_what_it_leaves_even_a_server_that_ignores_eof_and_sigterm(
        user_env: UserEnv, manager: UserManager) -> None:
    manager.drop_in("lazyd.service", "[Service]\nTimeoutStopSec=1s\n")
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async with shim_session(user_env, FIXTURE, env={"FIXTURE_IGNORE_EOF": "1", "FIXTURE_IGNORE_TERM": "1"}) as client:
            with anyio.fail_after(STEP_S):
                outcome["server"] = pid_text(await client.call_tool("pid", {}))

    anyio.run(scenario)
    main = manager.main_pid()
    os.kill(main, signal.SIGSTOP)  # hung: SIGTERM does nothing, only SIGKILL ends it
    manager.systemctl("stop", "lazyd.socket", "lazyd.service")
    wait_until(lambda: not alive(outcome["server"]), 10, "the server to be killed")
    assert manager.cgroup_pids("lazyd.service") == set()
    assert not alive(main)
