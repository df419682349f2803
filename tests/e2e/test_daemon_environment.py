"""The daemon's environment is its own: the allowlist of lazyd/host/daemonenv.py, whoever started it.

A real shim autostarts the real daemon with a secret in its environment (what a client passes one
registration); the secret must then be found in no process but that registration's own server:
not in `/proc/<daemon>/environ`, not in a named server's, not in another registration's. A
daemon started from a terminal keeps of its environment only the allowlist, its own variables
and what its config expands, and a named server gets the allowlist under its own `env`.

One daemon per user whatever the client passes: in a private mount namespace a test directory
stands in for `/run/user/<uid>`; a shim given what Auggie gives a server (no XDG_RUNTIME_DIR)
reaches the daemon a terminal started there, and the daemon such a shim starts is the one a
terminal's `lazyctl status` finds (the daemons' records under HOME, the other way to find one,
are turned off). Everything is read from /proc; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from mcp import ClientSession

from lazyd.host import daemonenv
from tests.conftest import FIXTURE_SERVER, UserEnv, shim_command, shim_session, start_daemon, wait_until
from tests.e2e.supervision_support import DEADLINE_S, daemon_log, named_session, server_table, tool_text, write_config

pytestmark = pytest.mark.e2e

SERVER = [sys.executable, str(FIXTURE_SERVER)]
SECRET = "LZTEST_API_TOKEN"
SECRET_VALUE = "sk-this-registration-only-7f3a"


def environ_of(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        items = [item.decode(errors="replace") for item in f.read().split(b"\0") if item]
    return dict(item.split("=", 1) for item in items if "=" in item)


def the_daemon(user: UserEnv) -> int:
    wait_until(lambda: len(user.daemon_pids()) == 1, DEADLINE_S, "one daemon")
    (pid,) = user.daemon_pids()
    return pid


async def server_pid(session: ClientSession) -> int:
    return int(tool_text(await session.call_tool("pid", {})))


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
                assert SECRET_VALUE not in "\0".join(f"{k}={v}" for k, v in environ_of(pid).items()), pid
    # The daemon holds the allowlist (and the runtime dir it listens in), nothing a client added.
    assert {name for name in daemon_env if not daemonenv.is_base(name)} == set(), daemon_env
    assert daemon_env["XDG_RUNTIME_DIR"] == user_env.env["XDG_RUNTIME_DIR"]


async def test_a_named_server_and_its_wake_predicate_get_the_allowlist_under_its_own_env_whatever_the_terminal_had(
    user_env: UserEnv,
) -> None:
    # Started from a terminal: the daemon's starter had a secret and a greeting. The config
    # expands the greeting into the server's `env`; the secret it never names.
    predicate_env = user_env.root / "predicate.env"
    wake = {"command": ["/bin/sh", "-c", f"env > {predicate_env}.part && mv {predicate_env}.part {predicate_env}; exit 1"],
            "interval": "100ms"}
    write_config(user_env, server_table("named", env={"GREETING": "${LZTEST_GREETING}"}, wake=wake))
    start_daemon(user_env, env={SECRET: SECRET_VALUE, "LZTEST_GREETING": "hello", "NODE_OPTIONS": "--require=/x.js"})
    # Its wake predicate runs while it sleeps, with what the server will get.
    wait_until(predicate_env.exists, DEADLINE_S, "the wake predicate to run")
    predicate = dict(line.split("=", 1) for line in predicate_env.read_text().splitlines() if "=" in line)
    assert predicate["GREETING"] == "hello" and SECRET not in predicate and "NODE_OPTIONS" not in predicate
    assert {name for name in predicate if not daemonenv.is_base(name)} <= {"GREETING", "PWD", "SHLVL", "_"}, predicate
    with trio.fail_after(DEADLINE_S):
        async with named_session(user_env, "named") as named:
            pid = await server_pid(named)
            assert tool_text(await named.call_tool("env", {"name": "GREETING"})) == "hello"
    env = environ_of(pid)
    assert SECRET not in env and "NODE_OPTIONS" not in env and "LZTEST_GREETING" not in env
    # The log names what was dropped, never a value.
    log = daemon_log(user_env)
    (dropped,) = [line for line in log.splitlines() if "not in the daemon's allowlist dropped" in line]
    assert {SECRET, "NODE_OPTIONS"} <= set(dropped.split()) and "LZTEST_GREETING" not in dropped
    assert SECRET_VALUE not in log
    assert env["HOME"] == user_env.env["HOME"] and env["PATH"] == user_env.env["PATH"]
    assert {name for name in env if not daemonenv.is_base(name)} == {"GREETING"}, env


def test_what_a_config_expands_is_kept_so_that_a_reload_and_an_upgrades_successor_find_it(user_env: UserEnv) -> None:
    write_config(user_env, server_table("named", env={"GREETING": "${LZTEST_GREETING}"}))
    daemon = start_daemon(user_env, env={SECRET: SECRET_VALUE, "LZTEST_GREETING": "hello"})
    for words in (["reload"], ["upgrade"]):
        done = subprocess.run([sys.executable, "-m", "lazyd.ctl.main", *words], env=user_env.env,
                              capture_output=True, text=True, timeout=DEADLINE_S * 2)
        assert done.returncode == 0, done.stderr
    # The successor is the same pid, exec'd with the daemon's own environment: the greeting the
    # config expands and the allowlist, not the secret its first start had.
    successor = environ_of(daemon.proc.pid)
    assert successor.get("LZTEST_GREETING") == "hello" and SECRET not in successor
    assert {name for name in successor if not daemonenv.is_base(name)} <= {"LZTEST_GREETING", "LAZYD_INHERITED_NOFILE",
                                                                           "LAZYD_UPGRADE"}


def test_a_config_cannot_take_a_variable_from_the_client_whose_shim_starts_the_daemon(user_env: UserEnv) -> None:
    # `${VAR}` reads the daemon's environment: a token one client passes its registration is not
    # in it, so the config that names it is refused, with the reason, rather than handing that
    # client's token to every session of the named server.
    write_config(user_env, server_table("named", env={"TOKEN": f"${{{SECRET}}}"}))
    done = subprocess.run([shim_command(), *SERVER], env={**user_env.env, SECRET: SECRET_VALUE},
                          input=json.dumps(INITIALIZE).encode() + b"\n", capture_output=True, timeout=DEADLINE_S)
    assert done.returncode == 2, done.stderr
    assert f"${{{SECRET}}} is not set in lazyd's environment" in done.stderr.decode()
    assert user_env.daemon_pids() == []


# ---- one daemon per user, whatever runtime dir the client passes --------------------------------


class LoginRuntimeDir:
    """A mount namespace in which a test directory stands in for /run/user (the user's
    `/run/user/<uid>` in it: ours, 0700, as systemd-logind makes it); commands run in it through
    nsenter. The host's /run/user is untouched; files are visible from outside in `self.dir`."""

    def __init__(self, user: UserEnv) -> None:
        if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("nsenter")):
            pytest.skip("a private mount namespace needs root, unshare and nsenter (CI runs as root)")
        self.root = user.root / "run-user"
        self.root.mkdir(mode=0o755)
        self.dir = self.root / str(os.geteuid())
        self.dir.mkdir(mode=0o700)
        self.path = f"/run/user/{os.geteuid()}"
        self.holder = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c",
             f'mount --bind "$1" /run/user && echo ready && exec sleep 600', "holder", str(self.root)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        assert self.holder.stdout is not None
        if self.holder.stdout.readline() != b"ready\n":
            self.close()
            pytest.skip(f"cannot bind a directory over /run/user: {self.holder.stderr.read().decode() if self.holder.stderr else ''}")

    def argv(self, *command: str) -> list[str]:
        return ["nsenter", "-t", str(self.holder.pid), "-m", "--", *command]

    def close(self) -> None:
        self.holder.kill()
        self.holder.wait()


@pytest.fixture
def login_runtime(user_env: UserEnv) -> Iterator[LoginRuntimeDir]:
    # A shim that finds no daemon at its own path looks for one recorded under HOME
    # (lazyd/host/sockpath.py): a file in the records' place turns that off, so that only the runtime
    # dir can lead the shim to the terminal's daemon.
    state = Path(user_env.env["HOME"]) / ".local" / "state" / "lazyd"
    state.mkdir(parents=True)
    (state / "daemons").write_text("no discovery in this test\n")
    ns = LoginRuntimeDir(user_env)
    yield ns
    ns.close()


def terminal_env(user: UserEnv, ns: LoginRuntimeDir) -> dict[str, str]:
    return {**user.env, "XDG_RUNTIME_DIR": ns.path}


def client_env(user: UserEnv) -> dict[str, str]:
    """What Auggie gives a server: HOME, PATH, SHELL, TERM, and the test's marker."""
    return {"HOME": user.env["HOME"], "PATH": user.env["PATH"], "SHELL": "/bin/sh", "TERM": "dumb",
            "XDG_CONFIG_HOME": user.env["XDG_CONFIG_HOME"], "XDG_STATE_HOME": user.env["XDG_STATE_HOME"],
            "XDG_CACHE_HOME": user.env["XDG_CACHE_HOME"], "LZTEST_MARKER_ID": user.marker}


def session_pid(ns: LoginRuntimeDir, user: UserEnv) -> int:
    """One session through a shim run as that client runs it (no XDG_RUNTIME_DIR): the server's pid."""
    with open(user.root / "shim.stderr", "ab") as errlog:
        shim = subprocess.Popen(ns.argv(shim_command(), *SERVER), env=client_env(user), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=errlog, cwd=user.root)
    assert shim.stdin is not None and shim.stdout is not None
    lines = [INITIALIZE, {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "pid", "arguments": {}}}]
    shim.stdin.write(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    shim.stdin.flush()
    answers = [json.loads(shim.stdout.readline()) for _ in range(2)]
    shim.stdin.close()
    shim.wait(timeout=DEADLINE_S)
    return int(answers[1]["result"]["content"][0]["text"])


INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "auggie", "version": "0.36"}}}


def test_a_shim_without_xdg_runtime_dir_reaches_the_daemon_a_terminal_started(
    user_env: UserEnv, login_runtime: LoginRuntimeDir
) -> None:
    with open(user_env.root / "daemon.stderr", "ab") as log:
        terminal = subprocess.Popen(login_runtime.argv(sys.executable, "-m", "lazyd.daemon"),
                                    env=terminal_env(user_env, login_runtime), stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=log, start_new_session=True)
    try:
        wait_until(lambda: (login_runtime.dir / "lazyd" / "lazyd.sock").exists(), DEADLINE_S, "the terminal's daemon")
        session_pid(login_runtime, user_env)
        assert user_env.daemon_pids() == [terminal.pid]
    finally:
        terminal.terminate()
        terminal.wait(timeout=DEADLINE_S)


def test_a_daemon_a_shim_without_xdg_runtime_dir_starts_is_the_one_a_terminals_lazyctl_finds(
    user_env: UserEnv, login_runtime: LoginRuntimeDir
) -> None:
    session_pid(login_runtime, user_env)
    daemon = the_daemon(user_env)
    status = subprocess.run(login_runtime.argv(sys.executable, "-m", "lazyd.ctl.main", "status", "--json"),
                            env=terminal_env(user_env, login_runtime), capture_output=True, text=True,
                            timeout=DEADLINE_S)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["daemon_pid"] == daemon
    assert (login_runtime.dir / "lazyd" / "lazyd.sock").is_socket()
    # The daemon and its named servers see the session's runtime dir, as a terminal's programs do.
    assert environ_of(daemon)["XDG_RUNTIME_DIR"] == login_runtime.path
