"""A daemon that cannot start says why, and the state files it reads at start are judged first.

Testing policy: real daemons started as a user would (by hand, and autostarted by a real shim),
real files put in place of the ones lazyd writes. Each state file the daemon reads at start (the
identity key, `state.json`, a named server's cache file) is tried as corrupt, empty, owned by
another uid and unreadable. "Unreadable" needs a reader the mode bits bind: the tests run as root
on the CI machine, so there the daemon runs with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped
from its bounding set (setpriv), which makes mode 000 refuse it exactly as it refuses a user.
Every wait is a poll with a bounded deadline; nothing here measures time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from lazyd.errors import CtlError
from tests.conftest import FIXTURE_SERVER, UserEnv, shim_command, shim_session, start_daemon, wait_until
from tests.e2e.supervision_support import control, daemon_log, server_table, status_rows, write_config

pytestmark = pytest.mark.e2e

STEP_S = 30.0  # bound on one daemon start or command; reached only when something is broken
OTHER_UID = 65534  # "nobody"
SERVER = [sys.executable, str(FIXTURE_SERVER)]
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "t", "version": "1"}}}) + "\n"


def daemon_argv(spoil: str = "") -> list[str]:
    """The daemon's command; for "unreadable", run so that file modes bind it even as root (see
    the module docstring). Only then: a root without DAC override cannot read a file of another
    uid either, which would hide the wrong-owner check behind a permission error."""
    argv = [sys.executable, "-m", "lazyd.daemon"]
    if os.geteuid() != 0 or spoil != "unreadable":
        return argv
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to test unreadable files as root"
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search", *argv]


def run_daemon(user: UserEnv, spoil: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(daemon_argv(spoil), env=user.env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=STEP_S)


def spawn_daemon(user: UserEnv, spoil: str) -> subprocess.Popen[str]:
    """A daemon that is expected to start; waits for its socket."""
    daemon = subprocess.Popen(daemon_argv(spoil), env=user.env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    def answers() -> bool:
        # A ping is answered once the named servers are loaded and signals are handled; the socket
        # file alone exists a moment before it listens.
        assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
        try:
            return bool(control(user, "ping")["pid"] == daemon.pid)
        except CtlError:
            return False

    wait_until(answers, STEP_S, "the daemon to answer a ping")
    return daemon


def stop(daemon: subprocess.Popen[str]) -> str:
    """SIGTERM, expect exit 0; returns what it wrote to stderr."""
    daemon.terminate()
    assert daemon.wait(STEP_S) == 0
    return daemon.stderr.read() if daemon.stderr else ""


def lazyctl(user: UserEnv, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lazyd.ctl.main", *args], env=user.env,
                          capture_output=True, text=True, timeout=STEP_S)


def shim_once(user: UserEnv, *args: str) -> subprocess.CompletedProcess[str]:
    """A shim as a client runs it, sent one initialize, its stdin then closed."""
    return subprocess.run([shim_command(), *args], env=user.env, input=INITIALIZE, capture_output=True,
                          text=True, timeout=STEP_S)


# Ways to spoil a file lazyd wrote; each returns what the one line must name besides the path.
def corrupt(path: Path) -> str:
    path.write_bytes(b"\x00not what lazyd wrote\xff" if path.name == "identity.key" else b'{"format": 9, ')
    path.chmod(0o600)
    return ""


def empty(path: Path) -> str:
    path.write_bytes(b"")
    path.chmod(0o600)
    return ""


def wrong_owner(path: Path) -> str:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another uid needs root")
    os.chown(path, OTHER_UID, OTHER_UID)
    return f"owned by uid {OTHER_UID}"


def unreadable(path: Path) -> str:
    path.chmod(0o000)
    return "Permission denied"


SPOILERS: dict[str, Callable[[Path], str]] = {
    "corrupt": corrupt, "empty": empty, "wrong-owner": wrong_owner, "unreadable": unreadable,
}


def started_once(user: UserEnv) -> None:
    """Start a daemon and stop it, so the state dir holds the files a daemon writes."""
    daemon = start_daemon(user)
    wait_until(lambda: pings(user), STEP_S, "the daemon to answer a ping")  # its signal handlers are in place
    assert daemon.stop() == 0


def pings(user: UserEnv) -> bool:
    try:
        control(user, "ping")
        return True
    except CtlError:
        return False


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# ---- the identity key: a daemon must not start with a key it cannot trust ------------------------


@pytest.mark.parametrize("spoil", sorted(SPOILERS))
def test_a_spoiled_identity_key_stops_the_daemon_with_one_line_naming_it_and_exit_2(
    user_env: UserEnv, spoil: str,
) -> None:
    started_once(user_env)
    key = user_env.state_dir / "identity.key"
    detail = SPOILERS[spoil](key)
    result = run_daemon(user_env, spoil)
    line = one_line(result)
    assert result.returncode == 2, result.stderr
    assert line.startswith(f"lazyd: {key}: ") and detail in line, line
    assert "remove it" in line or "chmod 600" in line  # the fix is in the line
    assert "Traceback" not in result.stderr
    assert not user_env.socket.exists()
    assert f"start-up failed: {key}: " in daemon_log(user_env)


def test_a_shim_that_autostarts_a_daemon_with_a_corrupt_key_exits_2_with_its_line_and_leaves_no_socket(
    user_env: UserEnv,
) -> None:
    started_once(user_env)
    key = user_env.state_dir / "identity.key"
    corrupt(key)
    result = shim_once(user_env, "--", *SERVER)
    assert result.returncode == 2, result.stderr
    assert one_line(result) == (f"lazyd-shim: lazyd cannot start: {key}: is not a lazyd identity key (22 bytes, "
                                "expected 32); remove it and lazyd makes a new one (cached handshakes and "
                                "listings are then fetched again)")
    assert result.stdout == ""  # the server was not run directly either
    assert not user_env.socket.exists()
    status = lazyctl(user_env, "status")
    assert status.returncode == 3
    assert f"its last start failed: {key}: is not a lazyd identity key" in status.stderr
    # Fixed as the line says: the next shim starts a daemon, which clears the record.
    key.unlink()
    assert shim_once(user_env, "--", *SERVER).returncode == 0
    assert lazyctl(user_env, "status").returncode == 0
    assert not Path(f"{user_env.socket}.error").exists()


# ---- state.json and the cache: ignored with one warning and rebuilt ------------------------------


@pytest.mark.parametrize("spoil", sorted(SPOILERS))
def test_a_spoiled_state_json_is_ignored_with_one_warning_and_replaced(user_env: UserEnv, spoil: str) -> None:
    started_once(user_env)
    state = user_env.state_dir / "state.json"
    assert state.exists()
    detail = SPOILERS[spoil](state)
    daemon = spawn_daemon(user_env, spoil)
    try:
        wait_until(lambda: "ignoring a state file" in daemon_log(user_env), STEP_S, "the warning")
        warnings = [line for line in daemon_log(user_env).splitlines() if str(state) in line]
        assert len(warnings) == 1 and detail in warnings[0], warnings
        assert "not swept" in warnings[0]
        assert control(user_env, "ping")["pid"] == daemon.pid
        # The daemon recorded its (no) children over the spoiled file, as its sweep (which runs
        # beside serving) ended: a file of ours again.
        def ours() -> bool:
            try:
                return state.stat().st_uid == os.geteuid() and json.loads(state.read_text())["daemon_pid"] == daemon.pid
            except (OSError, ValueError, KeyError, TypeError):
                return False

        wait_until(ours, STEP_S, "the record written over the spoiled file")
    finally:
        stderr = stop(daemon)
    assert "Traceback" not in stderr


@pytest.mark.parametrize("spoil", sorted(SPOILERS))
async def test_a_spoiled_cache_file_is_ignored_with_one_warning_and_rebuilt_by_the_next_start(
    user_env: UserEnv, spoil: str,
) -> None:
    write_config(user_env, server_table("fixture"))
    first = start_daemon(user_env)
    cache = Path(control(user_env, "check", name="fixture")["cache_path"])
    assert first.stop() == 0
    detail = SPOILERS[spoil](cache)
    daemon = spawn_daemon(user_env, spoil)
    try:
        warnings = [line for line in daemon_log(user_env).splitlines() if f"ignoring a cache file: {cache}" in line]
        assert len(warnings) == 1 and detail in warnings[0] and "rebuilt" in warnings[0], warnings
        assert status_rows(user_env)["fixture"]["cache_age_s"] is None  # nothing of it was used
        with trio.fail_after(STEP_S):
            async with shim_session(user_env, [], shim_args=("--server", "fixture")) as session:
                assert len((await session.list_tools()).tools) == 10
        await trio.to_thread.run_sync(
            wait_until, lambda: cache.stat().st_uid == os.geteuid() and b'"format"' in cache.read_bytes(),
            STEP_S, "the cache to be rebuilt")
    finally:
        stderr = stop(daemon)
    assert "Traceback" not in stderr


# ---- a bad config with a daemon a shim started -------------------------------------------------


def test_a_bad_config_with_an_autostarted_daemon_puts_the_config_line_in_the_shims_stderr_and_status(
    user_env: UserEnv,
) -> None:
    write_config(user_env, server_table("fixture") + 'lingr = "1s"\n')
    result = shim_once(user_env, "--", *SERVER)
    line = (f"{user_env.config_file}: servers.fixture.lingr: unknown key; did you mean 'linger'? "
            "allowed here: command, args, env, cwd")
    assert result.returncode == 2, result.stderr
    assert one_line(result).startswith(f"lazyd-shim: lazyd cannot start: {line}")
    assert result.stdout == ""
    assert f"ERROR lazyd: start-up failed: {line}" in daemon_log(user_env)
    status = lazyctl(user_env, "status")
    assert status.returncode == 3 and f"its last start failed: {line}" in status.stderr
    data = json.loads(lazyctl(user_env, "status", "--json").stdout)
    assert data["data"]["last_start_failure"]["status"] == 2
    assert data["data"]["last_start_failure"]["error"].startswith(line)


def test_lazyd_with_a_config_file_that_does_not_exist_refuses_to_start(user_env: UserEnv) -> None:
    missing = user_env.root / "missing.toml"
    result = subprocess.run([sys.executable, "-m", "lazyd.daemon", "--config", str(missing)], env=user_env.env,
                            capture_output=True, text=True, timeout=STEP_S)
    assert result.returncode == 2
    assert one_line(result) == f"lazyd: {missing}: no such file (--config names a file that must exist)"
    assert not user_env.socket.exists()


# ---- a shim option the daemon refuses ------------------------------------------------------------


def test_a_shim_option_the_daemon_refuses_exits_2_with_one_line_and_runs_nothing(user_env: UserEnv) -> None:
    start_daemon(user_env)
    marker = user_env.root / "server-ran"
    server = ["/bin/sh", "-c", f'touch "{marker}"; exec "$0" "$@"', *SERVER]
    result = shim_once(user_env, "--wake-interval", "5s", "--", *server)
    assert result.returncode == 2, result.stderr
    assert one_line(result) == "lazyd-shim: option --wake-interval: needs --wake-command (or a wake predicate in config.toml)"
    assert result.stdout == "" and not marker.exists()
    assert status_rows(user_env) == {}  # nothing was registered either
