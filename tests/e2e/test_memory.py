"""Memory end to end: whole-tree PSS in status, `memory_max` with a leaking server, and sleeping idle
servers under memory pressure, with a real daemon, real shims and the fixture server.

Testing policy: the decisions (when a tree stays over its limit, when it parks, which server
sleeps under pressure) are proven exactly by tests/unit/test_memory_limit.py and
tests/unit/test_pressure.py; here the question is whether the daemon measures real processes and
carries the decisions out. Memory is read from /proc by the test itself to check the daemon's
figures. The pressure is fed through `[pressure] files` (a documented setting) pointing at a file
the test writes in PSI's format, since a test cannot make the machine short of memory on demand;
tests/e2e/test_memory_pressure_real.py does that where the machine lets a test limit a cgroup.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import trio
from mcp.shared.exceptions import MCPError

from tests.conftest import UserEnv, shim_session, start_daemon
from tests.e2e.lazyctl_support import lazyctl
from tests.e2e.supervision_support import (
    SERVER,
    control,
    daemon_log,
    named_session,
    server_table,
    status_rows,
    tool_text,
    wait_for,
    wait_for_row,
    write_config,
)

pytestmark = pytest.mark.e2e
MiB = 1024 * 1024
LIMIT_MIB = 120  # the fixture server alone is ~10 MiB PSS; grow(150) puts it well over


def pss(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no Pss in /proc/{pid}/smaps_rollup")


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def descendants(root: int) -> list[int]:
    """`root` and every process below it, from /proc's parent links (the test's own walk)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    parents[int(entry)] = int(f.read().rsplit(b")", 1)[1].split()[1])
            except OSError:
                continue
    tree, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, ppid in parents.items() if ppid in frontier]
        tree += frontier
    return tree


async def test_an_npx_style_launcher_tree_counts_the_pss_of_launcher_and_server(user_env: UserEnv) -> None:
    # A launcher that stays the parent of the real server, as npx and uvx do.
    launcher = ["/bin/sh", "-c", f'"{sys.executable}" "{SERVER[1]}"; exit $?']
    write_config(user_env, server_table("launched", command=launcher))
    start_daemon(user_env)
    async with named_session(user_env, "launched") as session:
        server_pid = int(tool_text(await session.call_tool("pid", {})))
        row = status_rows(user_env)["launched"]
        tree = descendants(row["pid"])
        assert server_pid in tree and row["pid"] != server_pid and row["processes"] == len(tree) == 2
        by_proc = sum(pss(p) for p in tree)
        assert abs(row["memory_bytes"] - by_proc) <= 0.1 * by_proc, (row["memory_bytes"], by_proc)
        # RSS counts the pages the two share once each: the figure must not be that.
        assert sum(rss(p) for p in tree) > row["memory_bytes"] * 1.1
        data = control(user_env, "status")
        own = data["lazyd"]
        assert own["sessions"] == 1 and own["daemon_bytes"] >= pss(data["daemon_pid"]) * 0.5
        assert own["memory_bytes"] == own["daemon_bytes"] + own["sessions_bytes"] > own["daemon_bytes"]


async def call_error(session: object, name: str, args: dict[str, object]) -> str:
    try:
        await session.call_tool(name, args)  # type: ignore[attr-defined]
    except MCPError as exc:
        return exc.error.message
    raise AssertionError(f"{name} was answered; an error was expected")


async def leak_until_restarted(session: object, in_flight: list[str]) -> None:
    """Grow the server over its limit, then hold a call in flight until the restart answers it."""
    await session.call_tool("grow", {"mib": 150})  # type: ignore[attr-defined]
    with trio.fail_after(30):
        in_flight.append(await call_error(session, "sleep", {"seconds": 120}))


async def test_a_leaking_server_is_restarted_over_memory_max_then_parked(user_env: UserEnv) -> None:
    write_config(user_env, server_table("leaky", memory_max=f"{LIMIT_MIB}MiB"))
    start_daemon(user_env)
    async with named_session(user_env, "leaky") as session:
        first = int(tool_text(await session.call_tool("pid", {})))
        errors: list[str] = []
        await leak_until_restarted(session, errors)
        assert "memory_max 120 MiB" in errors[0] and "restarted:" in errors[0], errors[0]
        assert errors[0].startswith("lazyd: server leaky stopped before answering: restarted: ")
        second = int(tool_text(await session.call_tool("pid", {})))
        assert second != first
        row = status_rows(user_env)["leaky"]
        assert row["last_error"].startswith("restarted: ") and row["last_error"].endswith("over memory_max 120 MiB")
        assert row["memory_max"] == LIMIT_MIB * MiB
        await leak_until_restarted(session, errors)
        assert int(tool_text(await session.call_tool("pid", {}))) not in (first, second)
        await leak_until_restarted(session, errors)  # the third breach within 10m parks it
        row = wait_for_row(user_env, "leaky", lambda r: r["state"] == "failed", "the server to be parked")
        assert row["last_error"].startswith("parked: 3 times over memory_max 120 MiB within 10m (last ")
        assert errors[2].startswith("lazyd: server leaky stopped before answering: parked: 3 times")
    assert "[leaky] restarted: " in daemon_log(user_env) and "[leaky] parked: 3 times" in daemon_log(user_env)


def write_psi(path: Path, avg10: float) -> None:
    path.write_text(f"some avg10={avg10:.2f} avg60=0.00 avg300=0.00 total=1\n"
                    "full avg10=0.00 avg60=0.00 avg300=0.00 total=1\n")


async def test_memory_pressure_puts_the_idle_server_to_sleep_never_the_busy_one(user_env: UserEnv) -> None:
    psi = user_env.root / "pressure"
    write_psi(psi, 0.0)
    write_config(user_env, server_table("idle") + server_table("busy") + server_table("kept", keep_alive=True)
                 + f"[pressure]\nfiles = [{json.dumps(str(psi))}]\npause = \"1s\"\n")
    start_daemon(user_env)
    async with named_session(user_env, "idle") as idle, named_session(user_env, "busy") as busy:
        await idle.call_tool("pid", {})
        await busy.call_tool("pid", {})
        await trio.to_thread.run_sync(
            lambda: wait_for_row(user_env, "kept", lambda r: r["state"] == "running", "the keep_alive server to run"))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(busy.call_tool, "sleep", {"seconds": 15})
            await trio.to_thread.run_sync(
                lambda: wait_for_row(user_env, "busy", lambda r: r["inflight"] == 1, "the busy call to be in flight"))
            write_psi(psi, 42.0)
            row = await trio.to_thread.run_sync(
                lambda: wait_for_row(user_env, "idle", lambda r: r["state"] == "sleeping", "the idle server to sleep"))
            assert row["last_stop_reason"].startswith("memory pressure: some avg10 42.0% >= 10%")
            await trio.sleep(4)  # two more samples and pauses: nothing else may be put to sleep
            rows = status_rows(user_env)
            assert rows["busy"]["state"] == rows["kept"]["state"] == "running"
            status = control(user_env, "status")
            assert status["pressure"]["under_pressure"] and status["pressure"]["some_avg10"] == 42.0
            write_psi(psi, 1.0)
            await trio.to_thread.run_sync(
                lambda: wait_for(lambda: not control(user_env, "status")["pressure"]["under_pressure"],
                                 "the pressure to end"))
            nursery.cancel_scope.cancel()
    text = daemon_log(user_env)
    assert "memory pressure: some avg10 42.0% reached 10%" in text
    assert "[idle] stopping: memory pressure: some avg10 42.0%" in text and "memory pressure over" in text
    assert "[busy] stopping: memory pressure" not in text and "[kept] stopping: memory pressure" not in text


async def test_status_shows_tree_memory_limit_and_lazyd_own_cost(user_env: UserEnv) -> None:
    write_config(user_env, server_table("capped", memory_max="1GiB"))
    start_daemon(user_env)
    async with named_session(user_env, "capped") as session:
        await session.call_tool("pid", {})
        out = await trio.to_thread.run_sync(lazyctl, user_env, "status")
    lines = out.stdout.splitlines()
    assert "MEMORY" in lines[1] and "/1 GiB" in next(line for line in lines if line.startswith("capped ")), out.stdout
    summary = lines[-1]
    assert "; lazyd " in summary and "(daemon " in summary and "1 session " in summary, summary


async def test_an_unnamed_registration_takes_memory_max_from_the_shim_option(user_env: UserEnv) -> None:
    start_daemon(user_env)
    async with shim_session(user_env, SERVER, shim_args=("--memory-max", "256MiB")) as session:
        await session.call_tool("pid", {})
        rows = list(status_rows(user_env).values())
        assert [r["memory_max"] for r in rows] == [256 * MiB]


async def test_the_breaches_of_the_window_survive_a_daemon_upgrade(user_env: UserEnv) -> None:
    write_config(user_env, server_table("leaky", memory_max=f"{LIMIT_MIB}MiB"))
    start_daemon(user_env)
    async with named_session(user_env, "leaky") as session:
        errors: list[str] = []
        await leak_until_restarted(session, errors)
        await session.call_tool("pid", {})
        await leak_until_restarted(session, errors)
        await session.call_tool("pid", {})
        done = await trio.to_thread.run_sync(lazyctl, user_env, "upgrade")
        assert done.returncode == 0, done.stderr
        row = status_rows(user_env)["leaky"]
        assert row["memory_max"] == LIMIT_MIB * MiB and row["last_stop_reason"].startswith("restarted: ")
        await leak_until_restarted(session, errors)  # the third within 10m, the first two before the upgrade
    row = wait_for_row(user_env, "leaky", lambda r: r["state"] == "failed", "the server to be parked")
    assert row["last_error"].startswith("parked: 3 times over memory_max 120 MiB")
