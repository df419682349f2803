"""`lazyctl upgrade` and SIGUSR2: the daemon execs itself in place and keeps servers and sessions.

Real peers: the official SDK's ClientSession through lazyd-shim, server-everything (its
`trigger-long-running-operation` sends progress while it runs), lazyctl. What "kept" means is
read from the outside: the daemon's pid and each server's pid are the same before and after, no
new process appeared, the shims never lost their connection (their log says so when they do:
"daemon lost", "reconnected"), the call in flight got every progress step and its answer.

The fallback is driven by a test seam the suite puts in the old daemon (LAZYD_TEST_UPGRADE_FAULT,
tests/e2e/seams/sitecustomize.py): it writes a version the new one does not read, as a downgrade
to an older lazyd would, a corrupt state, or leaves a server's descriptor out of the exec.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from tests.e2e.faults_support import call, region_in_flight, seam_env, text_of, tool_call
from tests.e2e.shim_paths import PATHS, ShimPath
from tests.conftest import FIXTURE_SERVER, UserEnv, everything_command, processes_with_marker, shim_session, start_daemon, wait_until
from tests.e2e.upgrade_support import lazyctl, shim_log, status

pytestmark = pytest.mark.e2e

CALL_TIMEOUT_S = 60.0
LONG_S = 4  # the long operation's duration; the upgrade happens while it runs
STEPS = 8


def logged_shim(user: UserEnv, handoff: bool | None = None) -> Any:
    """A session whose shim writes its diagnostics (connects, losses, reconnects) to shim.log, on
    the path `handoff` says (None: the default)."""
    env = None if handoff is None else {"LAZYD_HANDOFF": "1" if handoff else "0"}
    return shim_session(user, everything_command(), env=env, shim_args=("--log-file", str(user.root / "shim.log")))


async def long_call(session: ClientSession, seen: list[float]) -> str:
    async def note(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    with anyio.fail_after(CALL_TIMEOUT_S):
        result = await session.call_tool("trigger-long-running-operation", {"duration": LONG_S, "steps": STEPS},
                                         progress_callback=note)
    text = getattr(result.content[0], "text", None)
    assert isinstance(text, str)
    return text


async def echo(session: ClientSession, message: str) -> str:
    with anyio.fail_after(CALL_TIMEOUT_S):
        result = await session.call_tool("echo", {"message": message})
    text = getattr(result.content[0], "text", None)
    assert isinstance(text, str)
    return text


def _in_flight(user: UserEnv) -> int | None:
    """How many requests the test's one hand-off session has in its region's table, with no
    answer being written (None: no region found, or a write under way)."""
    for pid in processes_with_marker(user.marker):
        try:
            seen = region_in_flight(pid)
        except OSError:
            continue  # gone while we looked
        if seen is not None:
            torn, ids = seen
            return None if torn else len(ids)
    return None


async def wait_for_progress(progress: list[float], count: int) -> None:
    with anyio.fail_after(CALL_TIMEOUT_S):
        while len(progress) < count:
            await anyio.sleep(0.02)


async def upgrade_during_a_long_call(user: UserEnv, session: ClientSession, outcome: dict[str, Any], *words: str) -> None:
    """Run `lazyctl upgrade *words` once the long operation on `session` is under way; the call's
    answer lands in outcome["long"], or its error in outcome["long_error"]; lazyctl's run in
    outcome["upgrade"]."""
    progress: list[float] = []
    async with anyio.create_task_group() as group:
        async def run_long() -> None:
            try:
                outcome["long"] = await long_call(session, progress)
            except MCPError as exc:
                outcome["long_error"] = exc
        group.start_soon(run_long)
        await wait_for_progress(progress, 1)
        outcome["upgrade"] = await anyio.to_thread.run_sync(lambda: lazyctl(user, "upgrade", *words))


@pytest.mark.parametrize("handoff", [False, True], ids=["frames", "hand-off"])
def test_an_upgrade_keeps_servers_sessions_and_a_call_in_flight_with_its_progress(user_env: UserEnv,
                                                                                  handoff: bool) -> None:
    # On both paths: a shim relaying frames, and a shim that handed the client's pipes to the daemon
    # (then the daemon's copies of those pipes and the shared region go across the exec as well).
    daemon = start_daemon(user_env)
    everything = everything_command()
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async with logged_shim(user_env, handoff) as first, logged_shim(user_env, handoff) as second:
            assert await echo(first, "one") == "Echo: one" and await echo(second, "two") == "Echo: two"
            servers = user_env.server_pids(everything[1])
            assert len(servers) == 1, servers  # both sessions share one process
            before = set(processes_with_marker(user_env.marker))
            progress: list[float] = []
            async with anyio.create_task_group() as group:
                async def run_long() -> None:
                    outcome["long"] = await long_call(first, progress)
                group.start_soon(run_long)
                await wait_for_progress(progress, 2)  # the operation is under way
                done = await anyio.to_thread.run_sync(lambda: lazyctl(user_env, "upgrade", "--json"))
                outcome["upgrade"] = done
                outcome["echo_during"] = await echo(second, "during")
            outcome["progress"] = progress
            outcome["after"] = (await echo(first, "after one"), await echo(second, "after two"))
            outcome["servers"] = (servers, user_env.server_pids(everything[1]))
            outcome["processes"] = (before, set(processes_with_marker(user_env.marker)))
            outcome["status"] = status(user_env)
            outcome["human"] = lazyctl(user_env, "status").stdout

    anyio.run(scenario)
    done = outcome["upgrade"]
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["pid"] == daemon.proc.pid and daemon.proc.poll() is None  # exec'd in place
    assert report["sessions"] == 2 and len(report["servers"]) == 1
    assert outcome["long"].startswith(f"Long running operation completed. Duration: {LONG_S} seconds")
    assert outcome["progress"] == [float(i) for i in range(1, STEPS + 1)]  # every step, none twice
    assert outcome["echo_during"] == "Echo: during"
    assert outcome["after"] == ("Echo: after one", "Echo: after two")
    before_servers, after_servers = outcome["servers"]
    assert before_servers == after_servers
    before, after = outcome["processes"]
    assert after == before  # no process came or went: nothing orphaned, nothing restarted
    log = shim_log(user_env)
    assert log.count(f"with daemon pid {daemon.proc.pid}") == 2, log  # the log is written: the next line means something
    assert "daemon lost" not in log and "reconnected" not in log and "taking it back" not in log, log
    assert log.count("handed off; waiting in") == (2 if handoff else 0), log
    row = next(r for r in outcome["status"]["servers"] if r["pid"] == before_servers[0])
    assert row["upgrades"] == 1 and row["state"] == "running"
    assert outcome["status"]["daemon"]["upgrades"] == 1
    assert outcome["status"]["daemon"]["last_upgrade"]["inherited"] is True
    assert outcome["human"].splitlines()[0].endswith("across 1 upgrade(s)")
    assert f" {before_servers[0]} " in outcome["human"] and " (1 upgrade) " in outcome["human"]
    # The next stop still stops the adopted server by the ladder: it is the daemon's child.
    assert daemon.stop() == 0
    assert user_env.server_pids(everything[1]) == []


FAULTS = {
    # as written by a lazyd newer than the one exec'd
    "version": (seam_env(upgrade_fault="version=99"), "newer lazyd (state version 99"),
    "corrupt": (seam_env(upgrade_fault="corrupt"), "corrupt: its checksum does not match"),
    "fd": (seam_env(upgrade_fault="fd"), "was not inherited"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_an_upgrade_to_a_daemon_that_cannot_adopt_stops_the_servers_and_the_shims_reconnect(
    user_env: UserEnv, fault: str
) -> None:
    seam, reason = FAULTS[fault]
    daemon = start_daemon(user_env, env=seam)  # the seam is the first daemon's: its successor has none
    everything = everything_command()
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async with logged_shim(user_env) as first, logged_shim(user_env) as second:
            assert await echo(first, "one") == "Echo: one" and await echo(second, "two") == "Echo: two"
            servers = user_env.server_pids(everything[1])
            await upgrade_during_a_long_call(user_env, first, outcome)
            # The shims reconnected to the new daemon, which starts the server afresh.
            outcome["after"] = (await echo(first, "after one"), await echo(second, "after two"))
            outcome["servers"] = (servers, user_env.server_pids(everything[1]))
            outcome["status"] = status(user_env)

    anyio.run(scenario)
    done = outcome["upgrade"]
    assert done.returncode == 1 and "could not take the servers over" in done.stderr, (done.stdout, done.stderr)
    assert reason in done.stderr
    assert daemon.proc.poll() is None
    assert "long" not in outcome, outcome  # answered with an error under its own id, not left hanging
    assert "lazyd" in str(outcome["long_error"])
    assert outcome["after"] == ("Echo: after one", "Echo: after two")
    before, after = outcome["servers"]
    assert len(before) == 1 and len(after) == 1 and before != after
    assert not os.path.exists(f"/proc/{before[0]}")  # stopped and reaped, not left a zombie
    log = shim_log(user_env)
    daemon_log = (user_env.state_dir / "lazyd.log").read_text()
    # Each shim lost its daemon (a frame shim says "daemon lost", a hand-off one takes the session
    # back; under systemd the next daemon adopts it from the fd store).
    adopted = daemon_log.count("reclaimed from shim pid")
    assert log.count("daemon lost") + log.count("taking it back") + adopted == 2, (log, daemon_log)
    assert log.count("reconnected") + adopted == 2, log
    assert ("answered 1 in-flight request(s) with an error" in log
            or "1 in-flight request(s) answered with an error" in daemon_log), (log, daemon_log)
    last = outcome["status"]["daemon"]["last_upgrade"]
    assert last["inherited"] is False and reason in last["reason"]
    assert "cannot take its servers over" in daemon_log


def test_sigusr2_upgrades_and_the_notify_socket_hears_reloading_then_ready_from_the_same_pid(
    user_env: UserEnv, notify_socket: tuple[socket.socket, str]
) -> None:
    notify, path = notify_socket
    notify.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    user_env.env["NOTIFY_SOCKET"] = path
    daemon = start_daemon(user_env)
    heard: list[tuple[str, int]] = []

    def until(word: str) -> None:
        while True:
            data, ancillary, _, _ = notify.recvmsg(4096, socket.CMSG_SPACE(12))
            pid = next(int.from_bytes(d[:4], sys.byteorder) for level, kind, d in ancillary
                       if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS)
            heard.append((data.decode(), pid))
            if word in data.decode().splitlines():
                return

    until("READY=1")
    wake = lazyctl(user_env, "status")  # a control connection before, to be sure the first daemon serves
    assert wake.returncode == 0, wake.stderr
    os.kill(daemon.proc.pid, signal.SIGUSR2)
    until("RELOADING=1")
    reloading = heard[-1]
    until("READY=1")
    ready = heard[-1]
    assert reloading[1] == ready[1] == daemon.proc.pid  # MAINPID unchanged: exec kept the pid
    assert any(line.startswith("MONOTONIC_USEC=") for line in reloading[0].splitlines())
    wait_until(lambda: status(user_env).get("daemon", {}).get("upgrades") == 1, 20, "the upgrade to be counted")
    assert daemon.stop() == 0


def test_an_upgrade_while_a_sampling_request_waits_for_the_client_delivers_its_answer_to_the_server(
    user_env: UserEnv,
) -> None:
    from mcp import types

    daemon = start_daemon(user_env)
    everything = everything_command()
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        asked = anyio.Event()
        answer = anyio.Event()

        async def sampling(context: Any, params: Any) -> Any:
            asked.set()
            await answer.wait()  # the server's request is pending at the client across the upgrade
            return types.CreateMessageResult(role="assistant", model="test",
                                             content=types.TextContent(type="text", text="answer after the upgrade"))

        async with shim_session(user_env, everything, sampling_callback=sampling,
                                shim_args=("--log-file", str(user_env.root / "shim.log"))) as session:
            servers = user_env.server_pids(everything[1])
            async with anyio.create_task_group() as group:
                async def call() -> None:
                    with anyio.fail_after(CALL_TIMEOUT_S):
                        result = await session.call_tool("trigger-sampling-request", {"prompt": "hi", "maxTokens": 5})
                    outcome["sampled"] = getattr(result.content[0], "text", "")
                group.start_soon(call)
                with anyio.fail_after(CALL_TIMEOUT_S):
                    await asked.wait()
                outcome["upgrade"] = await anyio.to_thread.run_sync(lambda: lazyctl(user_env, "upgrade"))
                answer.set()
            outcome["servers"] = (servers, user_env.server_pids(everything[1]))

    anyio.run(scenario)
    assert outcome["upgrade"].returncode == 0, outcome["upgrade"].stderr
    assert "answer after the upgrade" in outcome["sampled"]
    before, after = outcome["servers"]
    assert len(before) == 1 and before == after
    log = shim_log(user_env)
    assert f"with daemon pid {daemon.proc.pid}" in log and "daemon lost" not in log, log


def test_an_upgrade_while_a_server_is_starting_lets_the_start_finish_under_the_new_daemon(user_env: UserEnv) -> None:
    daemon = start_daemon(user_env)
    fixture = [sys.executable, str(FIXTURE_SERVER)]
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async def session() -> None:
            async with shim_session(user_env, fixture, env={"FIXTURE_START_DELAY_S": "2"},
                                    shim_args=("--log-file", str(user_env.root / "shim.log"))) as client:
                with anyio.fail_after(CALL_TIMEOUT_S):
                    result = await client.call_tool("pid", {})
                outcome["pid"] = int(getattr(result.content[0], "text", "0"))

        async with anyio.create_task_group() as group:
            group.start_soon(session)
            with anyio.fail_after(CALL_TIMEOUT_S):
                while not user_env.server_pids(str(FIXTURE_SERVER)):
                    await anyio.sleep(0.02)
            starting = user_env.server_pids(str(FIXTURE_SERVER))
            outcome["states"] = await anyio.to_thread.run_sync(lambda: user_env.lifecycle_states("fixture_server"))
            outcome["upgrade"] = await anyio.to_thread.run_sync(lambda: lazyctl(user_env, "upgrade"))
            outcome["starting"] = starting

    anyio.run(scenario)
    assert set(outcome["states"].values()) == {"starting"}, outcome["states"]  # the upgrade came mid-start
    assert outcome["upgrade"].returncode == 0, outcome["upgrade"].stderr
    assert outcome["starting"] == [outcome["pid"]]  # the process that was starting is the one that answered
    log = shim_log(user_env)
    assert f"with daemon pid {daemon.proc.pid}" in log and "daemon lost" not in log, log


def test_what_a_hand_off_session_had_in_flight_before_an_upgrade_is_still_answered_if_the_successor_is_killed(
    user_env: UserEnv,
) -> None:
    # The successor continues the session's region: the call in flight across the exec is in its
    # record, so a kill -9 of the new daemon still has the shim answer it (with the lost-connection
    # error), and the session goes on with a third daemon.
    start_daemon(user_env)
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async with logged_shim(user_env, True) as session:
            assert await echo(session, "one") == "Echo: one"
            progress: list[float] = []
            async with anyio.create_task_group() as group:
                async def run_long() -> None:
                    try:
                        outcome["long"] = await long_call(session, progress)
                    except MCPError as exc:
                        outcome["long_error"] = exc
                group.start_soon(run_long)
                await wait_for_progress(progress, 1)  # the call is under way: its first step came back
                outcome["upgrade"] = await anyio.to_thread.run_sync(lambda: lazyctl(user_env, "upgrade", "--json"))
                # A call through the successor first: its record of the session is then its own.
                assert await echo(session, "between") == "Echo: between"
                # Once that answer is out of the table too: a kill between the answer's write
                # and its record would answer it again (documented), and this test counts one.
                with anyio.fail_after(CALL_TIMEOUT_S):
                    while _in_flight(user_env) != 1:
                        await anyio.sleep(0.02)
                (pid,) = user_env.daemon_pids()
                os.kill(pid, signal.SIGKILL)
            outcome["after"] = await echo(session, "after")

    anyio.run(scenario)
    done = outcome["upgrade"]
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sessions"] == 1  # carried whole
    assert "long" not in outcome, outcome
    assert "connection to the daemon was lost" in str(outcome["long_error"])
    assert outcome["after"] == "Echo: after"
    log = shim_log(user_env)
    daemon_log = (user_env.state_dir / "lazyd.log").read_text()
    # Taken back by the shim itself (no daemon up yet), or adopted by the next daemon.
    assert ("answered 1 in-flight request(s) with an error" in log
            or "1 in-flight request(s) answered with an error" in daemon_log), (log, daemon_log)
    assert "reconnected; handed off again" in log or "reclaimed from shim pid" in daemon_log, log


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_a_call_in_flight_across_an_upgrade_is_answered_on_each_path_pipes_and_socketpairs_alike(
        user_env: UserEnv, path: ShimPath, tmp_path: Path) -> None:
    # A raw client of the fixture server on each way a shim serves (frames, hand-off over pipes,
    # hand-off over the socketpairs Node clients give): the call sent before the upgrade is
    # answered by the same server after it, and the session goes on, still on its path.
    daemon = start_daemon(user_env)
    methods = tmp_path / "methods.log"
    shim = path.started(user_env, env={"FIXTURE_LOG": str(methods)})
    try:
        shim.initialize()
        path.check(shim)
        server = text_of(call(shim, 2, "pid"))
        shim.send(tool_call(5, "sleep", {"seconds": 1.5}))
        wait_until(lambda: methods.read_text().splitlines().count("tools/call") == 2, 10, "the sleep to reach the server")
        done = lazyctl(user_env, "upgrade", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["sessions"] == 1 and daemon.proc.poll() is None
        answer = shim.read()
        assert answer["id"] == 5 and "result" in answer, answer
        assert text_of(call(shim, 6, "pid")) == server  # the same process, adopted
        path.check(shim)
    finally:
        shim.close()


def test_an_upgrade_is_refused_while_the_config_cannot_be_loaded_and_the_daemon_keeps_its_servers(
        user_env: UserEnv) -> None:
    daemon = start_daemon(user_env)
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async with shim_session(user_env, [sys.executable, str(FIXTURE_SERVER)]) as client:
            before = int(getattr((await client.call_tool("pid", {})).content[0], "text", "0"))
            user_env.config_file.parent.mkdir(parents=True, exist_ok=True)
            user_env.config_file.write_text("[servers.x]\ncommand = 1\n")
            outcome["upgrade"] = await anyio.to_thread.run_sync(lazyctl, user_env, "upgrade")
            after = int(getattr((await client.call_tool("pid", {})).content[0], "text", "0"))
            outcome["pids"] = (before, after)

    anyio.run(scenario)
    done = outcome["upgrade"]
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and "upgrade refused" in done.stderr
    assert str(user_env.config_file) in done.stderr and "servers.x.command" in done.stderr
    before, after = outcome["pids"]
    assert before == after and daemon.proc.poll() is None  # the same daemon and server, the session on
    daemon.stop()


def test_an_upgrade_keeps_a_session_aware_server_and_its_process(user_env: UserEnv) -> None:
    # Every share setting the config and the shim accept must survive the hand-over: the
    # successor reads the setting back, and a session-aware server is one more process to keep.
    daemon = start_daemon(user_env)
    outcome: dict[str, Any] = {}

    async def scenario() -> None:
        async with shim_session(user_env, [sys.executable, str(FIXTURE_SERVER)],
                                shim_args=("--share", "session-aware", "--log-file", str(user_env.root / "shim.log"))) as client:
            outcome["before"] = int(getattr((await client.call_tool("pid", {})).content[0], "text", "0"))
            outcome["upgrade"] = await anyio.to_thread.run_sync(lazyctl, user_env, "upgrade")
            outcome["after"] = int(getattr((await client.call_tool("pid", {})).content[0], "text", "0"))

    anyio.run(scenario)
    done = outcome["upgrade"]
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert outcome["before"] == outcome["after"] and daemon.proc.poll() is None
    row = next(s for s in status(user_env)["servers"] if s["name"].startswith("fixture_server"))
    assert row["share_setting"] == "session-aware" and row["upgrades"] == 1, row
    log = shim_log(user_env)
    assert f"with daemon pid {daemon.proc.pid}" in log and "daemon lost" not in log, log
