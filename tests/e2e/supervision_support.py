"""Helpers for end-to-end tests of a daemon supervising configured servers: writing config.toml,
the control socket, status rows, the daemon log, waiting for a condition with a deadline.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import trio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import TextContent

from lazyd.ctl.client import Connection
from tests.conftest import FIXTURE_SERVER, UserEnv, shim_command


T = TypeVar("T")
SERVER = [sys.executable, str(FIXTURE_SERVER)]
DEADLINE_S = 30.0  # bound on one wait; reached only when something is broken
# A crash loop runs 0.5 + 1 + 2 + 4 + 8 s (+20 % jitter) before it parks; this bounds that wait.
PARK_DEADLINE_S = 60.0
STARTED_NOTE = "[lazyd] started pid "


def write_config(user: UserEnv, text: str) -> None:
    user.config_file.parent.mkdir(parents=True, exist_ok=True)
    user.config_file.write_text(text)
    os.chmod(user.config_file, 0o600)


def server_table(name: str, *, command: list[str] = SERVER, env: dict[str, str] | None = None,
                 **policy: Any) -> str:
    """A `[servers.NAME]` table; policy values are written as TOML (JSON is TOML for these)."""
    lines = [f"[servers.{name}]", f"command = {json.dumps(command[0])}",
             f"args = {json.dumps(command[1:])}",
             "env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in (env or {}).items()) + " }"]
    for key, value in policy.items():
        if isinstance(value, dict):
            inner = ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items())
            lines.append(f"{key} = {{ {inner} }}")
        else:
            lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n\n"


def control(user: UserEnv, op: str, **args: Any) -> Any:
    """One control op, in this process (what lazyctl sends); raises CtlError on failure."""
    with Connection(str(user.socket)) as conn:
        return conn.call(op, args, timeout_s=DEADLINE_S)


def status_rows(user: UserEnv) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in control(user, "status")["servers"]}


def wait_for(probe: Callable[[], bool], what: str, timeout_s: float = DEADLINE_S) -> None:
    """Poll `probe` until it returns True."""
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def wait_for_value(probe: Callable[[], T | None], what: str, timeout_s: float = DEADLINE_S) -> T:
    """Poll `probe` until it returns something other than None; return that."""
    found: list[T] = []

    def got() -> bool:
        value = probe()
        if value is not None:
            found.append(value)
        return bool(found)

    wait_for(got, what, timeout_s)
    return found[0]


def wait_for_row(user: UserEnv, name: str, condition: Callable[[dict[str, Any]], bool], what: str,
                 timeout_s: float = DEADLINE_S) -> dict[str, Any]:
    """Poll `status` until the row of `name` meets `condition`; return that row."""
    return wait_for_value(lambda: row if condition(row := status_rows(user)[name]) else None, what, timeout_s)


async def await_for(probe: Callable[[], bool], what: str, timeout_s: float = DEADLINE_S) -> None:
    """`wait_for` from a trio test: the blocking probes run in a thread."""
    await trio.to_thread.run_sync(wait_for, probe, what, timeout_s)


def recorded_pids(path: Path, count: int) -> list[int] | None:
    """The pids a test script appended to `path`, once there are `count` of them."""
    pids = [int(p) for p in path.read_text().split()] if path.exists() else []
    return pids if len(pids) >= count else None


def alive(pid: int) -> bool:
    """Running, not a zombie (a killed process whose parent has not reaped it yet is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def server_log(user: UserEnv, name: str) -> Path:
    return user.state_dir / "logs" / f"{name}.log"


def log_lines(user: UserEnv, name: str, note: str) -> list[str]:
    path = server_log(user, name)
    if not path.exists():
        return []
    return [line for line in path.read_text(errors="replace").splitlines() if note in line]


def spawn_times(user: UserEnv, name: str) -> list[datetime]:
    """When the daemon started each process of `name`, from the UTC stamps in the server's log."""
    return [datetime.strptime(line.split(" ", 1)[0], "%Y-%m-%dT%H:%M:%S.%fZ")
            for line in log_lines(user, name, STARTED_NOTE)]


def daemon_log(user: UserEnv) -> str:
    path = user.state_dir / "lazyd.log"
    return path.read_text(errors="replace") if path.exists() else ""


def tool_text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


@asynccontextmanager
async def named_session(user: UserEnv, name: str) -> AsyncIterator[ClientSession]:
    """An initialized SDK session through `lazyd-shim --server NAME`."""
    params = StdioServerParameters(command=shim_command(), args=["--server", name], env=user.env)
    with open(user.root / "shim.stderr", "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session
