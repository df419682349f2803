"""Named servers and config reload end to end (issue 4 item 1): `lazyd-shim --server NAME`, an
unknown name, SIGHUP and `lazyctl reload` restarting only what changed, and every bad config
refused, at start (exit 2, one line) and on reload (the old config stays, the refusal is logged).

Testing policy: a real daemon in an isolated user environment with a real config.toml; clients
are the official SDK through `lazyd-shim --server NAME`; "restarted" and "left alone" are read
from pids in /proc and the `status` control op, "cache dropped" from the cache files on disk.
Every wait is a poll with a bounded deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.conftest import UserEnv, shim_command, start_daemon
from tests.e2e.upgrade_support import lazyctl
from tests.e2e.supervision_support import (
    DEADLINE_S,
    alive,
    await_for,
    control,
    daemon_log,
    named_session,
    server_table,
    status_rows,
    tool_text,
    wait_for,
    wait_for_row,
    wait_for_value,
    write_config,
)

pytestmark = pytest.mark.e2e


def _reloads(user: UserEnv) -> int:
    """How many reloads the daemon finished (applied or refused), from its log."""
    text = daemon_log(user)
    return text.count("config reloaded:") + text.count("reload refused, keeping the old config")


def _sighup_reload(user: UserEnv, pid: int) -> None:
    before = _reloads(user)
    os.kill(pid, signal.SIGHUP)
    wait_for(lambda: _reloads(user) > before, "the daemon to process SIGHUP")


def _all_running(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]] | None:
    return rows if all(row["state"] == "running" for row in rows.values()) else None


def _wake(user: UserEnv, name: str) -> int:
    pid = control(user, "wake", name=name)["pid"]
    assert isinstance(pid, int) and alive(pid)
    return pid


# ---- attaching by name --------------------------------------------------------------------------


async def test_a_shim_given_server_name_attaches_to_the_named_server_with_its_env_and_cwd(user_env: UserEnv) -> None:
    work = Path(user_env.env["HOME"]) / "work"
    work.mkdir()
    user_env.env["LZTEST_GREETING"] = "hello from the daemon's environment"
    write_config(user_env, server_table("tools", env={"GREETING": "${LZTEST_GREETING}"}, cwd="~/work"))
    start_daemon(user_env)
    with trio.fail_after(DEADLINE_S):
        async with named_session(user_env, "tools") as one, named_session(user_env, "tools") as two:
            pid = int(tool_text(await one.call_tool("pid", {})))
            assert int(tool_text(await two.call_tool("pid", {}))) == pid  # one shared process
            greeting = tool_text(await one.call_tool("env", {"name": "GREETING"}))
            assert greeting == "hello from the daemon's environment"
            assert os.readlink(f"/proc/{pid}/cwd") == str(work)
            rows = status_rows(user_env)
            assert list(rows) == ["tools"]  # no second registration was made for the sessions
            assert (rows["tools"]["pid"], rows["tools"]["clients"]) == (pid, 2)


def test_an_unknown_server_name_is_refused_naming_the_known_ones_and_the_shim_cannot_fail_open(
    user_env: UserEnv,
) -> None:
    write_config(user_env, server_table("alpha") + server_table("beta"))
    start_daemon(user_env)
    done = subprocess.run([shim_command(), "--server", "ghost"], env=user_env.env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=DEADLINE_S)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert "no server named 'ghost' in the config (known: alpha, beta)" in done.stderr
    assert "--server ghost cannot run without the daemon" in done.stderr
    assert "refused a session" in daemon_log(user_env)
    assert sorted(status_rows(user_env)) == ["alpha", "beta"]  # nothing was registered for it


# ---- reload -------------------------------------------------------------------------------------


async def test_sighup_restarts_only_the_server_whose_definition_changed_drops_its_cache_and_its_client_follows(
    user_env: UserEnv,
) -> None:
    write_config(user_env, server_table("alpha", env={"FLAVOUR": "1"}) + server_table("beta", env={"FLAVOUR": "1"}))
    daemon = start_daemon(user_env)
    with trio.fail_after(DEADLINE_S * 2):
        alpha = await trio.to_thread.run_sync(_wake, user_env, "alpha")
        async with named_session(user_env, "beta") as session:
            beta = int(tool_text(await session.call_tool("pid", {})))
            rows = status_rows(user_env)
            alpha_cache, beta_cache = Path(rows["alpha"]["cache_path"]), Path(rows["beta"]["cache_path"])
            await await_for(lambda: alpha_cache.exists() and beta_cache.exists(), "both caches to be written")
            write_config(user_env, server_table("alpha", env={"FLAVOUR": "1"}) + server_table("beta", env={"FLAVOUR": "2"}))
            await trio.to_thread.run_sync(_sighup_reload, user_env, daemon.proc.pid)
            assert "config reloaded: changed ['beta'], unchanged ['alpha']" in daemon_log(user_env)
            assert not alive(beta) and alive(alpha)
            assert not beta_cache.exists() and alpha_cache.exists()
            rows = status_rows(user_env)
            assert (rows["alpha"]["state"], rows["alpha"]["pid"]) == ("running", alpha)
            # The session's shim was let go and reattached: its next call meets the new definition.
            assert tool_text(await session.call_tool("env", {"name": "FLAVOUR"})) == "2"
            assert int(tool_text(await session.call_tool("pid", {}))) != beta
    assert alive(alpha)


def test_an_upgrade_meets_the_new_config_stopping_the_named_servers_it_changed_or_removed_and_keeping_the_rest(
    user_env: UserEnv,
) -> None:
    """The successor takes every server over, then meets the config it read as a reload would."""
    write_config(user_env, server_table("alpha", env={"FLAVOUR": "1"}) + server_table("beta", env={"FLAVOUR": "1"})
                 + server_table("gamma"))
    daemon = start_daemon(user_env)
    pids = {name: _wake(user_env, name) for name in ("alpha", "beta", "gamma")}
    caches = {name: Path(row["cache_path"]) for name, row in status_rows(user_env).items()}
    wait_for(lambda: all(cache.exists() for cache in caches.values()), "the three caches to be written")
    write_config(user_env, server_table("alpha", env={"FLAVOUR": "1"}) + server_table("beta", env={"FLAVOUR": "2"}))
    done = lazyctl(user_env, "upgrade")
    assert done.returncode == 0, (done.stdout, done.stderr)
    stopped = "inherited servers beta, gamma: their definition changed or went from the config; stopped"
    assert stopped in daemon_log(user_env)
    assert not alive(pids["beta"]) and not alive(pids["gamma"])
    rows = status_rows(user_env)
    assert sorted(rows) == ["alpha", "beta"] and daemon.proc.poll() is None
    assert (rows["alpha"]["pid"], rows["alpha"]["upgrades"]) == (pids["alpha"], 1)
    assert rows["beta"]["pid"] != pids["beta"]
    assert caches["alpha"].exists() and not caches["beta"].exists() and not caches["gamma"].exists()
    daemon.stop()


def test_lazyctl_reload_restarts_an_eager_server_whose_policy_alone_changed_and_reports_it(
    user_env: UserEnv,
) -> None:
    write_config(user_env, server_table("early", start="eager") + server_table("steady", start="eager"))
    start_daemon(user_env)
    rows = wait_for_value(lambda: _all_running(status_rows(user_env)), "both eager servers to run")
    early, steady = rows["early"]["pid"], rows["steady"]["pid"]
    write_config(user_env, server_table("early", start="eager", linger="30m") + server_table("steady", start="eager"))
    done = subprocess.run([sys.executable, "-m", "lazyd.ctl.main", "reload", "--json"], env=user_env.env,
                          capture_output=True, text=True, timeout=DEADLINE_S)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"added": [], "changed": ["early"], "removed": [], "unchanged": ["steady"]}
    assert not alive(early) and alive(steady)
    # Its successor is eager too: it is started again at once, under the new policy.
    row = wait_for_row(user_env, "early", lambda r: r["state"] == "running", "early to run again")
    assert row["pid"] != early and row["policy"]["linger_s"] == 1800
    assert status_rows(user_env)["steady"]["pid"] == steady


@pytest.mark.parametrize("problem", ["unknown key", "group-writable"])
def test_a_bad_config_on_reload_keeps_the_old_one_running_and_the_refusal_is_logged(
    user_env: UserEnv, problem: str,
) -> None:
    write_config(user_env, server_table("alpha"))
    daemon = start_daemon(user_env)
    alpha = _wake(user_env, "alpha")
    if problem == "unknown key":
        write_config(user_env, server_table("alpha", lingr="5s") + server_table("beta"))
        expected = "servers.alpha.lingr: unknown key; did you mean 'linger'?"
    else:
        write_config(user_env, server_table("alpha") + server_table("beta"))
        os.chmod(user_env.config_file, 0o620)
        expected = "is writable by group or others (mode 0620)"
    _sighup_reload(user_env, daemon.proc.pid)
    refusal = next(line for line in daemon_log(user_env).splitlines() if "reload refused" in line)
    assert str(user_env.config_file) in refusal and expected in refusal
    assert alive(alpha) and list(status_rows(user_env)) == ["alpha"]
    assert status_rows(user_env)["alpha"]["pid"] == alpha


# ---- a bad config at start ------------------------------------------------------------------------


BAD_CONFIGS = {
    "not TOML": ("[servers.alpha\n", 0o600, "line 1"),
    "unknown key": ('[servers.alpha]\ncommand = "x"\nlingr = "5s"\n', 0o600, "servers.alpha.lingr: unknown key"),
    "bad duration": ('[servers.alpha]\ncommand = "x"\nlinger = "10x"\n', 0o600, "servers.alpha.linger: '10x'"),
    "missing command": ("[servers.alpha]\nargs = []\n", 0o600, "servers.alpha.command: is missing"),
    "unset variable": ('[servers.alpha]\ncommand = "x"\nenv = { T = "${LZTEST_UNSET_VAR}" }\n', 0o600,
                       "${LZTEST_UNSET_VAR} is not set in lazyd's environment"),
    "group-writable": ("", 0o620, "is writable by group or others (mode 0620)"),
    "world-writable": ("", 0o602, "is writable by group or others (mode 0602)"),
    "owned by another user": ("", 0o600, "is owned by uid 65534, not by you"),
    "a symbolic link": ("", 0o600, "is a symbolic link"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_a_bad_config_at_start_makes_the_daemon_exit_2_with_one_line_naming_the_file_and_problem(
    user_env: UserEnv, tmp_path: Path, case: str,
) -> None:
    text, mode, expected = BAD_CONFIGS[case]
    write_config(user_env, text)
    os.chmod(user_env.config_file, mode)
    if case == "owned by another user":
        if os.geteuid() != 0:
            pytest.skip("giving a file to another uid needs root")
        os.chown(user_env.config_file, 65534, 65534)
    if case == "a symbolic link":
        real = tmp_path / "real.toml"
        real.write_text(server_table("alpha"))
        real.chmod(0o600)
        user_env.config_file.unlink()
        user_env.config_file.symlink_to(real)
    done = subprocess.run([sys.executable, "-m", "lazyd.daemon"], env=user_env.env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=DEADLINE_S)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"lazyd: {user_env.config_file}") and done.stderr.count("\n") == 1, done.stderr
    assert expected in done.stderr
    assert not user_env.socket.exists() and user_env.daemon_pids() == []
