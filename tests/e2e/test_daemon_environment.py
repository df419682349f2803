"""The daemon's environment is its own: the allowlist of lazyd/daemonenv.py, whoever started it.

A real shim autostarts the real daemon with a secret in its environment (what a client passes one
registration); the secret must then be found in no process but that registration's own server:
not in `/proc/<daemon>/environ`, not in a named server's, not in another registration's. A
daemon started from a terminal keeps of its environment only the allowlist, its own variables
and what its config expands, and a named server gets the allowlist under its own `env`.
Everything is read from /proc; every wait is bounded.
"""

from __future__ import annotations

import os
import sys

import pytest
import trio

from lazyd import daemonenv
from tests.conftest import FIXTURE_SERVER, UserEnv, shim_session, start_daemon, wait_until
from tests.e2e.supervision_support import DEADLINE_S, named_session, server_table, tool_text, write_config

pytestmark = pytest.mark.e2e

SERVER = [sys.executable, str(FIXTURE_SERVER)]
SECRET = "LZTEST_API_TOKEN"
SECRET_VALUE = "sk-this-registration-only-7f3a"


def environ_of(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        items = [item.decode(errors="replace") for item in f.read().split(b"\0") if item]
    return dict(item.split("=", 1) for item in items if "=" in item)


def the_daemon(user: UserEnv) -> int:
    wait_until(lambda: len(user.daemon_pids()) == 1, DEADLINE_S, f"one daemon {user.daemon_pids()} {user.root}")
    (pid,) = user.daemon_pids()
    return pid


async def server_pid(session: object) -> int:
    return int(tool_text(await session.call_tool("pid", {})))  # type: ignore[attr-defined]


async def test_a_secret_of_the_shim_that_starts_the_daemon_reaches_only_its_own_registrations_server(
    user_env: UserEnv,
) -> None:
    write_config(user_env, server_table("named"))
    with trio.fail_after(DEADLINE_S * 2):
        # No daemon runs: this shim starts it.
        async with shim_session(user_env, SERVER, env={SECRET: SECRET_VALUE}) as first:
            own = await server_pid(first)
            daemon = the_daemon(user_env)
            async with shim_session(user_env, [*SERVER, "--other-registration"]) as second:
                other = await server_pid(second)
            async with named_session(user_env, "named") as named:
                by_name = await server_pid(named)
            daemon_env = environ_of(daemon)
            assert len({own, other, by_name}) == 3
            # An unnamed registration's server runs with its own shim's environment, as direct.
            assert environ_of(own).get(SECRET) == SECRET_VALUE
            for pid in (daemon, other, by_name):
                assert SECRET_VALUE.encode() not in open(f"/proc/{pid}/environ", "rb").read(), pid
    # The daemon holds the allowlist (and the runtime dir it listens in), nothing a client added.
    assert {name for name in daemon_env if not daemonenv.is_base(name)} == set(), daemon_env
    assert daemon_env["XDG_RUNTIME_DIR"] == user_env.env["XDG_RUNTIME_DIR"]


async def test_a_named_server_gets_the_allowlist_under_its_own_env_whatever_the_terminal_had(
    user_env: UserEnv,
) -> None:
    # Started from a terminal: the daemon's starter had a secret and a greeting. The config
    # expands the greeting into the server's `env`; the secret it never names.
    write_config(user_env, server_table("named", env={"GREETING": "${LZTEST_GREETING}"}))
    start_daemon(user_env, env={SECRET: SECRET_VALUE, "LZTEST_GREETING": "hello", "NODE_OPTIONS": "--require=/x.js"})
    with trio.fail_after(DEADLINE_S):
        async with named_session(user_env, "named") as named:
            pid = await server_pid(named)
            assert tool_text(await named.call_tool("env", {"name": "GREETING"})) == "hello"
    env = environ_of(pid)
    assert SECRET not in env and "NODE_OPTIONS" not in env and "LZTEST_GREETING" not in env
    assert env["HOME"] == user_env.env["HOME"] and env["PATH"] == user_env.env["PATH"]
    assert {name for name in env if not daemonenv.is_base(name)} == {"GREETING"}, env
