"""The config file as an attack surface, and control requests that name nothing (case 35).

Testing policy: a real daemon and real `lazyctl` subprocesses. The config runs commands, so a file
another user could have written is refused at start (exit 2, one line on stderr, nothing bound)
and on reload (the old config stays in force). Ownership by another uid is made with chown, which
needs root: without it that case skips with the reason printed. "Spawns nothing" is read from
/proc: the daemon's child list, and every process carrying this test's marker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURE_SERVER, UserEnv, processes_with_marker
from tests.e2e.raw_daemon_support import STEP_S, Conn, daemon_log, launch_daemon, wait_for_log

pytestmark = pytest.mark.e2e

OTHER_UID = 65534


def server_table(name: str) -> str:
    return f'[servers.{name}]\ncommand = "{sys.executable}"\nargs = ["{FIXTURE_SERVER}"]\n'


def write_config(user: UserEnv, text: str, mode: int = 0o600) -> Path:
    path = user.config_file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def give_to_another_uid(path: Path) -> None:
    if os.geteuid() != 0:
        print("skipping: giving a file to another uid needs root")
        pytest.skip("giving a file to another uid needs root")
    os.chown(path, OTHER_UID, OTHER_UID)


def start(user: UserEnv) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lazyd.daemon"], env=user.env, capture_output=True, text=True,
                          timeout=STEP_S, stdin=subprocess.DEVNULL)


def lazyctl(user: UserEnv, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lazyd.ctl.main", *args], env=user.env, capture_output=True,
                          text=True, timeout=STEP_S)


def server_names(user: UserEnv) -> list[str]:
    conn = Conn(user.socket)
    conn.open_ctl()
    reply = conn.ctl("status")
    conn.close()
    return [row["name"] for row in reply["data"]["servers"]]


def children_of(pid: int) -> set[int]:
    found: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found.update(int(child) for child in f.read().split())
    return found


def refused_at_start(done: subprocess.CompletedProcess[str], user: UserEnv, words: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.startswith("lazyd: ") and done.stderr.count("\n") == 1, done.stderr
    assert words in done.stderr and "Traceback" not in done.stderr
    assert not user.socket.exists()  # refused before anything was bound


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_a_config_writable_by_group_or_others_is_refused_at_start_with_one_line_and_exit_2(
    user_env: UserEnv, mode: int
) -> None:
    path = write_config(user_env, server_table("alpha"), mode)
    refused_at_start(start(user_env), user_env, f"{path}: is writable by group or others (mode {mode:04o})")


def test_a_config_owned_by_another_uid_is_refused_at_start_with_one_line_and_exit_2(user_env: UserEnv) -> None:
    path = write_config(user_env, server_table("alpha"))
    give_to_another_uid(path)
    refused_at_start(start(user_env), user_env, f"{path}: is owned by uid {OTHER_UID}, not by you")


def test_a_config_that_became_unsafe_is_refused_on_reload_and_the_old_one_stays_in_force(user_env: UserEnv) -> None:
    path = write_config(user_env, server_table("alpha"))
    proc = launch_daemon(user_env)
    try:
        write_config(user_env, server_table("alpha") + server_table("beta"), 0o666)
        done = lazyctl(user_env, "reload")
        assert done.returncode == 1 and "is writable by group or others" in done.stderr, done
        assert done.stderr.count("\n") == 1 and "the old config stays in force" in done.stderr
        assert server_names(user_env) == ["alpha"]
        # The same rule on SIGHUP, which has nobody to answer: it is logged.
        proc.send_signal(signal.SIGHUP)
        wait_for_log(user_env, "reload refused, keeping the old config")
        assert server_names(user_env) == ["alpha"]
        path.chmod(0o600)
        give_to_another_uid(path)
        done = lazyctl(user_env, "reload")
        assert done.returncode == 1 and f"is owned by uid {OTHER_UID}" in done.stderr, done
        assert server_names(user_env) == ["alpha"]
        os.chown(path, os.geteuid(), os.getegid())
        done = lazyctl(user_env, "reload")
        assert done.returncode == 0 and "added beta" in done.stdout, done
        assert server_names(user_env) == ["alpha", "beta"]
        assert "Traceback" not in daemon_log(user_env)
    finally:
        proc.terminate()
        proc.wait(timeout=STEP_S)


def test_waking_an_unknown_name_is_an_error_and_spawns_nothing(user_env: UserEnv) -> None:
    write_config(user_env, server_table("alpha"))
    proc = launch_daemon(user_env)
    try:
        for name in ("ghost", "../alpha", "alpha ", ""):
            done = lazyctl(user_env, "wake", name) if name else lazyctl(user_env, "wake", "--", "")
            assert done.returncode in (1, 2) and done.stderr.count("\n") == 1, (name, done)
            assert "Traceback" not in done.stderr
        done = lazyctl(user_env, "wake", "ghost")
        assert done.returncode == 1 and "no server named 'ghost' (known: alpha)" in done.stderr, done
        assert children_of(proc.pid) == set()
        assert processes_with_marker(user_env.marker) == [proc.pid]
        assert server_names(user_env) == ["alpha"]  # nothing was registered for the unknown names
    finally:
        proc.terminate()
        proc.wait(timeout=STEP_S)
