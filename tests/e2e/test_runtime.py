"""Runtime dir, instance lock and socket security (RELIABILITY.md cases 17, 18, 24, 26-31).

Testing policy: everything here touches the real kernel. Directories, sockets and lock files
live under ``tmp_path``; "another process" is a real subprocess; "another uid" is a real chown
(root only, skipped otherwise). Nothing waits on wall-clock time: cross-process steps are
synchronised through pipes, and every wait has a bounded timeout so a bug fails instead of hanging.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lazyd.host import sockpath
from lazyd.daemon.runtime_dir import (
    release_instance_lock,
    acquire_instance_lock,
    take_activated_socket,
    bind_unix_socket,
    peer_credentials,
    socket_identity,
)
from lazyd.daemon.systemd_env import scrubbed_environ
from lazyd.errors import AlreadyRunning, SetupError
from lazyd.host.paths import Paths, resolve_paths
from lazyd.host.privatefiles import ensure_private_dir

pytestmark = pytest.mark.e2e

# Upper bound for any subprocess step; reached only when something is broken.
SUBPROCESS_TIMEOUT_S = 30
# uid of "nobody" on Debian-like systems: a real uid that is not ours.
OTHER_UID = 65534
# A full backlog is reached after backlog+1 connections on Linux; this only bounds a broken loop.
MAX_FILL_CONNECTS = 10_000
REPO_ROOT = Path(__file__).resolve().parents[2]
UID = os.getuid()
EUID = os.geteuid()
RUN_USER = f"/run/user/{EUID}"


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def run_python(code: str, *args: str, pass_fds: tuple[int, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        cwd=REPO_ROOT,
        pass_fds=pass_fds,
    )


def requires_root() -> None:
    if os.getuid() != 0:
        print("skipping: chown to another uid needs root")
        pytest.skip("chown to another uid needs root")


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


# ---------------------------------------------------------------- paths


# Every variable lazyd's paths depend on: resolve_paths reads the process environment (as platformdirs
# does), so each case below sets exactly its own and unsets the rest.
PATH_VARS = ("HOME", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "TMPDIR", "TEMP", "TMP",
             "LAZYD_SOCKET")


Resolve = Callable[..., Paths]


@pytest.fixture
def resolve(monkeypatch: pytest.MonkeyPatch) -> Resolve:
    """resolve_paths run under an environment holding exactly `env` of PATH_VARS."""
    def run(env: dict[str, str], socket_override: str | None = None) -> Paths:
        for name in PATH_VARS:
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return resolve_paths(socket_override)
    return run


def skip_if_run_user_exists() -> None:
    if os.path.lexists(RUN_USER):
        pytest.skip(f"{RUN_USER} exists on this machine, so the temp-dir fallback is not taken")


def test_a_private_xdg_runtime_dir_holds_the_lazyd_subdir_with_socket_and_lock(
    tmp_path: Path, resolve: Resolve) -> None:
    os.chmod(tmp_path, 0o700)
    paths = resolve({"XDG_RUNTIME_DIR": str(tmp_path), "HOME": "/home/u"})
    assert paths.runtime_dir == tmp_path / "lazyd"
    assert paths.socket == tmp_path / "lazyd" / "lazyd.sock"
    assert paths.lock == tmp_path / "lazyd" / "lazyd.lock"


def test_a_missing_xdg_runtime_dir_under_trusted_parents_is_still_chosen(tmp_path: Path, resolve: Resolve) -> None:
    paths = resolve({"XDG_RUNTIME_DIR": str(tmp_path / "later"), "HOME": "/home/u"})
    assert paths.socket == tmp_path / "later" / "lazyd" / "lazyd.sock"


@pytest.mark.parametrize("mode", [0o755, 0o711, 0o770])
def test_an_xdg_runtime_dir_that_is_not_private_is_passed_over_for_the_fallback(
    tmp_path: Path, mode: int, resolve: Resolve) -> None:
    skip_if_run_user_exists()
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    os.chmod(xdg, mode)
    paths = resolve({"XDG_RUNTIME_DIR": str(xdg), "TMPDIR": str(tmp_path), "HOME": "/home/u"})
    assert paths.runtime_dir == tmp_path / f"runtime-{EUID}" / "lazyd"


def test_an_xdg_runtime_dir_owned_by_another_uid_is_passed_over(tmp_path: Path, resolve: Resolve) -> None:
    requires_root()
    skip_if_run_user_exists()
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    os.chown(xdg, OTHER_UID, OTHER_UID)
    paths = resolve({"XDG_RUNTIME_DIR": str(xdg), "TMPDIR": str(tmp_path), "HOME": "/home/u"})
    assert paths.runtime_dir == tmp_path / f"runtime-{EUID}" / "lazyd"


def test_a_relative_xdg_runtime_dir_is_ignored(tmp_path: Path, resolve: Resolve) -> None:
    skip_if_run_user_exists()
    paths = resolve({"XDG_RUNTIME_DIR": "run", "TMPDIR": str(tmp_path), "HOME": "/home/u"})
    assert paths.runtime_dir == tmp_path / f"runtime-{EUID}" / "lazyd"


def test_without_xdg_runtime_dir_the_temp_fallback_is_runtime_uid_in_tmpdir(tmp_path: Path, resolve: Resolve) -> None:
    skip_if_run_user_exists()
    paths = resolve({"TMPDIR": str(tmp_path), "HOME": "/home/u"})
    assert paths.socket == tmp_path / f"runtime-{EUID}" / "lazyd" / "lazyd.sock"


def test_a_tmpdir_that_does_not_exist_is_skipped_for_the_next_candidate(tmp_path: Path, resolve: Resolve) -> None:
    skip_if_run_user_exists()
    paths = resolve({"TMPDIR": str(tmp_path / "gone"), "TEMP": str(tmp_path), "HOME": "/home/u"})
    assert paths.runtime_dir == tmp_path / f"runtime-{EUID}" / "lazyd"


def test_the_temp_fallback_uses_slash_tmp_when_no_tmpdir_is_set(resolve: Resolve) -> None:
    skip_if_run_user_exists()
    paths = resolve({"HOME": "/home/u"})
    assert paths.runtime_dir == Path(f"/tmp/runtime-{EUID}/lazyd")


def test_lazyd_socket_overrides_the_socket_and_moves_the_lock_next_to_it(tmp_path: Path, resolve: Resolve) -> None:
    sock = tmp_path / "alt" / "x.sock"
    paths = resolve({"LAZYD_SOCKET": str(sock), "XDG_RUNTIME_DIR": str(tmp_path), "HOME": "/h"})
    assert paths.socket == sock
    assert paths.runtime_dir == tmp_path / "alt"
    assert paths.lock == tmp_path / "alt" / "x.sock.lock"


def test_an_explicit_socket_override_beats_lazyd_socket(tmp_path: Path, resolve: Resolve) -> None:
    paths = resolve({"LAZYD_SOCKET": "/elsewhere/a.sock", "HOME": "/h"}, str(tmp_path / "b.sock"))
    assert paths.socket == tmp_path / "b.sock"


def test_xdg_base_dirs_are_honoured_for_config_cache_state_and_logs(tmp_path: Path, resolve: Resolve) -> None:
    os.chmod(tmp_path, 0o700)
    env = {
        "HOME": "/home/u",
        "XDG_CONFIG_HOME": "/cfg",
        "XDG_CACHE_HOME": "/cache",
        "XDG_STATE_HOME": "/state",
        "XDG_RUNTIME_DIR": str(tmp_path),
    }
    assert resolve(env) == Paths(
        runtime_dir=tmp_path / "lazyd",
        socket=tmp_path / "lazyd" / "lazyd.sock",
        lock=tmp_path / "lazyd" / "lazyd.lock",
        config_file=Path("/cfg/lazyd/config.toml"),
        cache_dir=Path("/cache/lazyd"),
        state_dir=Path("/state/lazyd"),
        logs_dir=Path("/state/lazyd/logs"),
    )


def test_unset_or_relative_xdg_base_dirs_fall_back_to_home(resolve: Resolve) -> None:
    env = {"HOME": "/home/u", "XDG_CONFIG_HOME": "relative/cfg", "XDG_CACHE_HOME": "", "LAZYD_SOCKET": "/s"}
    paths = resolve(env)
    assert paths.config_file == Path("/home/u/.config/lazyd/config.toml")
    assert paths.cache_dir == Path("/home/u/.cache/lazyd")
    assert paths.state_dir == Path("/home/u/.local/state/lazyd")


def test_a_missing_or_relative_home_falls_back_to_the_password_database(resolve: Resolve) -> None:
    import pwd

    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    for env in ({"LAZYD_SOCKET": "/s"}, {"LAZYD_SOCKET": "/s", "HOME": "relative"}):
        assert resolve(env).config_file == home / ".config" / "lazyd" / "config.toml"


def _private(tmp_path: Path, name: str, mode: int = 0o700) -> str:
    path = tmp_path / name
    path.mkdir()
    os.chmod(path, mode)
    return str(path)


# Each builds an environment (and the directories it names) under tmp_path.
SOCKET_RULE_CASES: dict[str, Callable[[Path], dict[str, str]]] = {
    "private xdg": lambda tmp: {"XDG_RUNTIME_DIR": _private(tmp, "xdg")},
    "missing xdg": lambda tmp: {"XDG_RUNTIME_DIR": str(tmp / "missing")},
    "open xdg": lambda tmp: {"XDG_RUNTIME_DIR": _private(tmp, "xdg", 0o755), "TMPDIR": str(tmp)},
    "relative xdg": lambda tmp: {"XDG_RUNTIME_DIR": "xdg", "TMPDIR": str(tmp)},
    "empty xdg": lambda tmp: {"XDG_RUNTIME_DIR": "", "TMPDIR": str(tmp)},
    "lazyd socket": lambda tmp: {"LAZYD_SOCKET": str(tmp / "c.sock"), "XDG_RUNTIME_DIR": str(tmp)},
    "tmpdir": lambda tmp: {"TMPDIR": str(tmp)},
    "missing tmpdir": lambda tmp: {"TMPDIR": str(tmp / "gone"), "TMP": str(tmp)},
    "nothing set": lambda tmp: {},
}


@pytest.mark.parametrize("case", SOCKET_RULE_CASES)
def test_the_daemon_socket_path_matches_the_shims_default_socket_path(
    tmp_path: Path, case: str, resolve: Resolve) -> None:
    env = SOCKET_RULE_CASES[case](tmp_path)
    expected = Path(os.fspath(sockpath.default_socket_path(env)))
    assert resolve({**env, "HOME": "/home/u"}).socket == expected


# ---------------------------------------------------------------- runtime dir


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077, 0o277])
def test_a_missing_runtime_dir_and_its_parents_are_created_0700_whatever_the_umask(
    tmp_path: Path, umask: int
) -> None:
    target = tmp_path / "a" / "b" / "lazyd"
    old = os.umask(umask)
    try:
        ensure_private_dir(target)
    finally:
        os.umask(old)
    for directory in (target, target.parent, target.parent.parent):
        assert stat.S_ISDIR(os.lstat(directory).st_mode)
        assert mode_of(directory) == 0o700


def test_an_existing_private_runtime_dir_is_accepted_as_it_is(tmp_path: Path) -> None:
    target = tmp_path / "lazyd"
    target.mkdir(mode=0o700)
    os.chmod(target, 0o500)  # unusual but private: not ours to "fix"
    ensure_private_dir(target)
    assert mode_of(target) == 0o500


def test_a_runtime_dir_that_is_a_symlink_is_refused_and_not_followed(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "lazyd"
    link.symlink_to(real)
    with pytest.raises(SetupError, match="symlink") as caught:
        ensure_private_dir(link)
    assert str(link) in str(caught.value)
    assert list(real.iterdir()) == []


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o701, 0o710, 0o702])
def test_a_runtime_dir_with_group_or_other_bits_is_refused_and_its_mode_left_untouched(
    tmp_path: Path, mode: int
) -> None:
    target = tmp_path / "lazyd"
    target.mkdir()
    os.chmod(target, mode)
    with pytest.raises(SetupError, match="group/other") as caught:
        ensure_private_dir(target)
    assert "\n" not in str(caught.value)
    assert mode_of(target) == mode


def test_a_runtime_dir_owned_by_another_uid_is_refused(tmp_path: Path) -> None:
    requires_root()
    target = tmp_path / "lazyd"
    target.mkdir(mode=0o700)
    os.chown(target, OTHER_UID, OTHER_UID)
    with pytest.raises(SetupError) as caught:
        ensure_private_dir(target)
    assert str(caught.value) == f"refusing runtime dir {target}: owned by uid {OTHER_UID}, not {UID}"
    assert os.lstat(target).st_uid == OTHER_UID
    assert mode_of(target) == 0o700


def test_a_runtime_path_that_is_a_regular_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "lazyd"
    target.write_text("not a dir")
    with pytest.raises(SetupError, match="not a directory"):
        ensure_private_dir(target)


def fallback_runtime_dir(tmp_path: Path) -> Path:
    # What resolve_paths gives with XDG_RUNTIME_DIR unset, /run/user/<uid> missing, TMPDIR=tmp_path.
    return tmp_path / f"runtime-{UID}" / "lazyd"


def test_the_tmp_fallback_chain_is_created_private_when_nothing_exists(tmp_path: Path, umask_022: None) -> None:
    target = fallback_runtime_dir(tmp_path)
    ensure_private_dir(target)
    assert mode_of(target.parent) == 0o700
    assert mode_of(target) == 0o700


def test_a_squatted_tmp_fallback_owned_by_another_uid_is_refused(tmp_path: Path) -> None:
    requires_root()
    target = fallback_runtime_dir(tmp_path)
    target.parent.mkdir(mode=0o700)
    os.chown(target.parent, OTHER_UID, OTHER_UID)
    with pytest.raises(SetupError) as caught:
        ensure_private_dir(target)
    assert str(caught.value) == f"refusing runtime dir {target.parent}: owned by uid {OTHER_UID}, not {UID}"
    assert not target.exists()


def test_a_tmp_fallback_planted_as_a_symlink_is_refused_even_to_a_private_dir(tmp_path: Path) -> None:
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o700)
    target = fallback_runtime_dir(tmp_path)
    target.parent.symlink_to(planted)
    with pytest.raises(SetupError, match="symlink") as caught:
        ensure_private_dir(target)
    assert str(target.parent) in str(caught.value)
    assert list(planted.iterdir()) == []


def test_a_world_readable_tmp_fallback_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    target = fallback_runtime_dir(tmp_path)
    target.parent.mkdir()
    os.chmod(target.parent, 0o755)
    with pytest.raises(SetupError, match="group/other"):
        ensure_private_dir(target)
    assert mode_of(target.parent) == 0o755
    assert not target.exists()


def test_the_squatting_check_applies_to_the_path_resolve_paths_gives(tmp_path: Path, resolve: Resolve) -> None:
    skip_if_run_user_exists()
    paths = resolve({"TMPDIR": str(tmp_path), "HOME": str(tmp_path)})
    paths.runtime_dir.parent.mkdir()
    os.chmod(paths.runtime_dir.parent, 0o777)
    with pytest.raises(SetupError):
        ensure_private_dir(paths.runtime_dir)


# ---------------------------------------------------------------- instance lock

HOLD_LOCK = """
import sys
from pathlib import Path
from lazyd.daemon.runtime_dir import acquire_instance_lock
from lazyd.errors import AlreadyRunning
try:
    acquire_instance_lock(Path(sys.argv[1]))
except AlreadyRunning as error:
    print(error, flush=True)
    sys.exit(3)
print("locked", flush=True)
if len(sys.argv) > 2:
    sys.stdin.read()
"""


def test_a_second_daemon_process_cannot_take_a_held_instance_lock(tmp_path: Path) -> None:
    lock = tmp_path / "lazyd.lock"
    fd = acquire_instance_lock(lock)
    try:
        second = run_python(HOLD_LOCK, str(lock))
    finally:
        os.close(fd)
    assert second.returncode == 3, second.stderr
    assert f"pid {os.getpid()}" in second.stdout
    assert "Traceback" not in second.stderr


def test_the_instance_lock_is_free_again_once_its_holder_closes_it(tmp_path: Path) -> None:
    lock = tmp_path / "lazyd.lock"
    os.close(acquire_instance_lock(lock))
    after = run_python(HOLD_LOCK, str(lock))
    assert after.returncode == 0, after.stdout + after.stderr
    assert after.stdout.strip() == "locked"


def test_a_released_instance_lock_leaves_no_file_and_a_lock_on_a_removed_file_is_taken_again(tmp_path: Path) -> None:
    lock = tmp_path / "lazyd.lock"
    release_instance_lock(lock, acquire_instance_lock(lock))
    assert not lock.exists()  # a stopped daemon leaves nothing in the runtime dir
    # A daemon that opened the file just before its holder removed it must not lock that
    # removed file: it would then run beside a third daemon that locked a new one.
    stale = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    os.unlink(lock)
    real = os.open
    opened: list[int] = []

    def open_stale_first(path: object, flags: int, mode: int = 0o777) -> int:
        if path == lock and not opened:
            opened.append(stale)
            return stale  # what the racing open saw: the file its holder removed next
        return real(path, flags, mode)  # type: ignore[arg-type]

    os.open = open_stale_first  # type: ignore[assignment]
    try:
        fd = acquire_instance_lock(lock)
    finally:
        os.open = real
    try:
        assert os.fstat(fd).st_ino == os.stat(lock).st_ino  # the lock is on the file the path names
    finally:
        release_instance_lock(lock, fd)
    assert not lock.exists()


def test_a_holder_killed_with_sigkill_releases_the_instance_lock(tmp_path: Path) -> None:
    lock = tmp_path / "lazyd.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(lock), "hold"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(AlreadyRunning, match=f"pid {holder.pid}"):
            acquire_instance_lock(lock)
        holder.send_signal(signal.SIGKILL)
        assert holder.wait(timeout=SUBPROCESS_TIMEOUT_S) == -signal.SIGKILL
    finally:
        holder.kill()
        holder.wait(timeout=SUBPROCESS_TIMEOUT_S)
        for stream in (holder.stdin, holder.stdout):
            if stream is not None:
                stream.close()
    os.close(acquire_instance_lock(lock))


def test_the_lock_file_is_0600_and_records_the_holder_pid(tmp_path: Path) -> None:
    lock = tmp_path / "lazyd.lock"
    old = os.umask(0)
    try:
        fd = acquire_instance_lock(lock)
    finally:
        os.umask(old)
    try:
        assert mode_of(lock) == 0o600
        assert lock.read_text() == f"{os.getpid()}\n"
        assert not os.get_inheritable(fd)
    finally:
        os.close(fd)


def test_an_existing_lock_file_of_ours_with_a_wide_mode_is_narrowed_to_0600(tmp_path: Path) -> None:
    lock = tmp_path / "lazyd.lock"
    lock.write_text("999999\n")
    os.chmod(lock, 0o644)
    os.close(acquire_instance_lock(lock))
    assert mode_of(lock) == 0o600


def test_a_lock_path_that_is_a_symlink_is_refused_and_its_target_never_created(tmp_path: Path) -> None:
    lock = tmp_path / "lazyd.lock"
    target = tmp_path / "victim"
    lock.symlink_to(target)
    with pytest.raises(SetupError, match="symlink"):
        acquire_instance_lock(lock)
    assert not target.exists()


# ---------------------------------------------------------------- binding


# A separate process, not a thread: a thread shares the GIL with the binder and is almost never
# running in the microseconds between bind() and a chmod(), so it would miss a wide mode.
MODE_WATCHER = """
import os, stat, sys
path, stop = sys.argv[1], sys.argv[2]
modes, seen, spins = set(), 0, 0
print("ready", flush=True)
while True:
    spins += 1
    done = spins % 256 == 0 and os.path.lexists(stop)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        continue
    modes.add(stat.S_IMODE(info.st_mode))
    seen += 1
    if done:
        break
print(seen, *sorted(modes), flush=True)
"""
# Each round the watcher has a fair chance to land in the bind-to-chmod window of a broken bind;
# many rounds make missing it for every one of them vanishingly unlikely.
BIND_ROUNDS = 200


def watch_modes(path: Path, bind_once: Callable[[Path], socket.socket]) -> set[int]:
    """Modes seen by a watcher lstat()ing ``path`` while it is bound BIND_ROUNDS times."""
    stop = path.with_name("stop")
    watcher = subprocess.Popen(
        [sys.executable, "-c", MODE_WATCHER, str(path), str(stop)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert watcher.stdout is not None
        assert watcher.stdout.readline() == "ready\n"
        for _ in range(BIND_ROUNDS - 1):
            bind_once(path).close()
            os.unlink(path)
        last = bind_once(path)  # stays until the watcher has seen it at least once
        stop.touch()
        seen, *modes = (int(word) for word in watcher.stdout.readline().split())
        assert watcher.wait(timeout=SUBPROCESS_TIMEOUT_S) == 0
        last.close()
    finally:
        watcher.kill()
        watcher.wait(timeout=SUBPROCESS_TIMEOUT_S)
        if watcher.stdout is not None:
            watcher.stdout.close()
    assert seen > 0
    return set(modes)


def plain_bind(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    return sock


def test_the_socket_is_0600_from_birth(tmp_path: Path, umask_022: None) -> None:
    assert watch_modes(tmp_path / "lazyd.sock", bind_unix_socket) == {0o600}
    assert os.umask(0o022) == 0o022  # bind restored the umask it borrowed


def test_the_mode_watcher_notices_a_socket_bound_without_the_umask(tmp_path: Path, umask_022: None) -> None:
    # Proves the test above can fail: a plain bind under umask 022 yields a 0755 socket.
    assert 0o755 in watch_modes(tmp_path / "plain.sock", plain_bind)


def test_a_bound_socket_listens_non_blocking_and_close_on_exec(tmp_path: Path) -> None:
    path = tmp_path / "lazyd.sock"
    with bind_unix_socket(path) as sock:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
        assert not sock.getblocking()
        assert not sock.get_inheritable()
        assert socket_identity(path) == (os.lstat(path).st_dev, os.lstat(path).st_ino)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(path))


def test_a_stale_socket_left_by_a_dead_daemon_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "lazyd.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.listen()
    dead.close()  # like kill -9: the file stays, nobody listens
    # A second name pins the old inode, so its number cannot be reused by the replacement.
    os.link(path, tmp_path / "old.sock")
    old_identity = socket_identity(tmp_path / "old.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        with pytest.raises(ConnectionRefusedError):
            probe.connect(str(path))
    with bind_unix_socket(path) as sock:
        assert socket_identity(path) not in (None, old_identity)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(path))
        sock.setblocking(True)
        sock.settimeout(SUBPROCESS_TIMEOUT_S)
        conn, _ = sock.accept()
        conn.close()


def test_a_live_socket_is_never_unlinked_and_keeps_accepting(tmp_path: Path) -> None:
    path = tmp_path / "lazyd.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as live:
        live.bind(str(path))
        live.listen()
        identity = socket_identity(path)
        with pytest.raises(AlreadyRunning):
            bind_unix_socket(path)
        assert socket_identity(path) == identity
        live.settimeout(SUBPROCESS_TIMEOUT_S)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(path))
            client.sendall(b"still here")
            # The probe's own connection is queued first; the fresh client's comes right after.
            received = []
            for _ in range(2):
                conn, _ = live.accept()
                with conn:
                    conn.settimeout(SUBPROCESS_TIMEOUT_S)
                    received.append(conn.recv(64))
            assert b"still here" in received


def test_a_live_socket_with_a_full_backlog_is_never_treated_as_stale(tmp_path: Path) -> None:
    path = tmp_path / "lazyd.sock"
    clients: list[socket.socket] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as busy:
        busy.bind(str(path))
        busy.listen(0)
        identity = socket_identity(path)
        try:
            for _ in range(MAX_FILL_CONNECTS):
                client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                client.setblocking(False)
                clients.append(client)
                try:
                    client.connect(str(path))
                except BlockingIOError:
                    break
            else:
                pytest.fail("the backlog never filled up")
            with pytest.raises(AlreadyRunning, match="backlog"):
                bind_unix_socket(path)
            assert socket_identity(path) == identity
        finally:
            for client in clients:
                client.close()


def sized_path(tmp_path: Path, total_bytes: int) -> Path:
    name_len = total_bytes - len(os.fsencode(tmp_path)) - 1
    assert name_len > 0, f"tmp_path {tmp_path} is too long for this test"
    return tmp_path / ("s" * name_len)


def test_a_socket_path_of_108_bytes_is_refused_with_a_hint(tmp_path: Path) -> None:
    path = sized_path(tmp_path, 108)
    with pytest.raises(SetupError) as caught:
        bind_unix_socket(path)
    assert "LAZYD_SOCKET" in str(caught.value) and str(path) in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_socket_path_of_107_bytes_still_binds(tmp_path: Path) -> None:
    path = sized_path(tmp_path, 107)
    with bind_unix_socket(path):
        assert stat.S_ISSOCK(os.lstat(path).st_mode)


def test_a_non_socket_at_the_socket_path_is_refused_and_left_intact(tmp_path: Path) -> None:
    path = tmp_path / "lazyd.sock"
    path.write_text("precious")
    with pytest.raises(SetupError, match="not a socket"):
        bind_unix_socket(path)
    assert path.read_text() == "precious"


def test_a_symlink_at_the_socket_path_is_refused_and_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "target.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(target))
    path = tmp_path / "lazyd.sock"
    path.symlink_to(target)
    with pytest.raises(SetupError, match="not a socket"):
        bind_unix_socket(path)
    assert path.is_symlink() and stat.S_ISSOCK(os.lstat(target).st_mode)


def test_a_relative_socket_path_is_refused() -> None:
    with pytest.raises(SetupError, match="absolute"):
        bind_unix_socket(Path("relative.sock"))


def test_our_bound_socket_is_never_in_the_abstract_namespace(tmp_path: Path) -> None:
    path = tmp_path / "lazyd.sock"
    with bind_unix_socket(path) as sock:
        our_inodes = _socket_inodes_of_self()
        table = _proc_net_unix()
        assert table.get(str(os.fstat(sock.fileno()).st_ino)) == str(path)
        abstract = {inode: name for inode, name in table.items() if inode in our_inodes and name.startswith("@")}
        assert abstract == {}


def _socket_inodes_of_self() -> set[str]:
    inodes: set[str] = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:
            continue  # the fd of the listdir itself is gone by now
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _proc_net_unix() -> dict[str, str]:
    table: dict[str, str] = {}
    with open("/proc/net/unix", encoding="utf-8", errors="replace") as listing:
        next(listing)  # header
        for line in listing:
            fields = line.split()
            if len(fields) >= 8:
                table[fields[6]] = fields[7]
    return table


# ---------------------------------------------------------------- socket activation

ACTIVATED = """
import os, socket, sys
from lazyd.daemon.runtime_dir import take_activated_socket
from lazyd.errors import SetupError
os.dup2(int(sys.argv[1]), 3)
os.close(int(sys.argv[1]))
env = {"LISTEN_FDS": "1", "LISTEN_PID": str(os.getpid()), "LISTEN_FDNAMES": "lazyd.socket"}
try:
    sock = take_activated_socket(env, os.getpid())
except SetupError as error:
    print("SetupError", error, flush=True)
    sys.exit(4)
assert sock is not None
print(sock.fileno(), sock.family.name, sock.type.name, sock.getblocking(), sock.get_inheritable(), flush=True)
sock.settimeout(30)
conn, _ = sock.accept()
conn.sendall(b"adopted")
conn.close()
"""


def test_an_activated_socket_on_fd_3_is_adopted_without_binding_or_unlinking(tmp_path: Path) -> None:
    path = tmp_path / "activated.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen()
        identity = socket_identity(path)
        child = subprocess.Popen(
            [sys.executable, "-c", ACTIVATED, str(listener.fileno())],
            pass_fds=(listener.fileno(),),
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline().split() == ["3", "AF_UNIX", "SOCK_STREAM", "False", "False"]
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.settimeout(SUBPROCESS_TIMEOUT_S)
                client.connect(str(path))
                assert client.recv(64) == b"adopted"
            assert child.wait(timeout=SUBPROCESS_TIMEOUT_S) == 0
        finally:
            child.kill()
            child.wait(timeout=SUBPROCESS_TIMEOUT_S)
            if child.stdout is not None:
                child.stdout.close()
    assert socket_identity(path) == identity


def test_an_activated_fd_that_is_not_a_listening_unix_socket_is_refused(tmp_path: Path) -> None:
    left, right = socket.socketpair()
    read_end, write_end = os.pipe()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for fd, reason in ((left.fileno(), "not listening"), (read_end, "not a socket"), (udp.fileno(), "AF_INET")):
            child = run_python(ACTIVATED, str(fd), pass_fds=(fd,))
            assert child.returncode == 4, child.stdout + child.stderr
            assert child.stdout.startswith("SetupError") and reason in child.stdout
    finally:
        for closable in (left, right, udp):
            closable.close()
        os.close(read_end)
        os.close(write_end)


def test_a_listen_pid_that_is_not_ours_is_ignored() -> None:
    env = {"LISTEN_FDS": "1", "LISTEN_PID": str(os.getpid() + 1)}
    assert take_activated_socket(env, os.getpid()) is None


def test_without_activation_variables_there_is_nothing_to_adopt() -> None:
    assert take_activated_socket({}, os.getpid()) is None
    assert take_activated_socket({"LISTEN_FDS": "0", "LISTEN_PID": str(os.getpid())}, os.getpid()) is None


def test_garbled_activation_variables_are_a_setup_error() -> None:
    with pytest.raises(SetupError, match="LISTEN_PID"):
        take_activated_socket({"LISTEN_FDS": "one", "LISTEN_PID": str(os.getpid())}, os.getpid())


# ---------------------------------------------------------------- peers, identity, environment


def test_peer_credentials_on_a_socketpair_are_our_own() -> None:
    left, right = socket.socketpair()
    with left, right:
        assert peer_credentials(left) == (os.getpid(), os.getuid(), os.getgid())


def test_peer_credentials_name_the_connecting_process(tmp_path: Path) -> None:
    path = tmp_path / "lazyd.sock"
    connect = "import socket, sys, os; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.recv(1)"
    with bind_unix_socket(path) as sock:
        sock.setblocking(True)
        sock.settimeout(SUBPROCESS_TIMEOUT_S)
        child = subprocess.Popen([sys.executable, "-c", connect, str(path)])
        try:
            conn, _ = sock.accept()
            with conn:
                assert peer_credentials(conn) == (child.pid, os.getuid(), os.getgid())
        finally:
            child.kill()
            child.wait(timeout=SUBPROCESS_TIMEOUT_S)


def test_socket_identity_changes_when_another_socket_is_renamed_over_ours(tmp_path: Path) -> None:
    path = tmp_path / "lazyd.sock"
    with bind_unix_socket(path):
        ours = socket_identity(path)
        with bind_unix_socket(tmp_path / "intruder.sock"):
            os.rename(tmp_path / "intruder.sock", path)
            assert socket_identity(path) not in (None, ours)
        os.unlink(path)
        assert socket_identity(path) is None


def test_socket_identity_of_a_non_socket_is_none(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    assert socket_identity(tmp_path / "file") is None
    assert socket_identity(tmp_path / "file" / "below") is None


def test_scrubbed_environ_drops_the_systemd_variables_and_keeps_the_rest() -> None:
    env = {
        "NOTIFY_SOCKET": "/run/systemd/notify",
        "WATCHDOG_USEC": "30000000",
        "WATCHDOG_PID": "1",
        "LISTEN_FDS": "1",
        "LISTEN_PID": "1",
        "LISTEN_FDNAMES": "lazyd.socket",
        "PATH": "/usr/bin",
        "LISTEN_FDS_X": "kept",
    }
    assert scrubbed_environ(env) == {"PATH": "/usr/bin", "LISTEN_FDS_X": "kept"}
    assert "NOTIFY_SOCKET" in env
