"""Who may reach the daemon, and how it treats a socket handed over by systemd (cases 24 and 29).

Testing policy: the test process plays systemd's socket unit itself. It binds and listens on the
socket, then starts the daemon through a two-line launcher that puts the socket on fd 3 and sets
`LISTEN_FDS`/`LISTEN_PID` to the daemon's own pid, exactly what systemd does before exec. Holding
the listening socket in the test keeps its backlog alive while no daemon runs, as systemd does
across a crash-restart. Another uid is played by `setpriv --reuid 65534`, which needs root; without
setpriv or root those tests skip with the reason printed. Every wait polls a socket, /proc or the
daemon log with a bounded deadline.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lazyd.protocol import wire
from lazyd.protocol.frames import Ctl
from tests.conftest import FIXTURE_SERVER, UserEnv, wait_until
from tests.e2e.raw_daemon_support import STEP_S, Conn, daemon_log, hello, launch_daemon, ping, wait_for_log

pytestmark = pytest.mark.e2e

OTHER_UID = 65534  # "nobody": exists on every Linux system and owns nothing of ours
# systemd's part between fork and exec: the socket on fd 3, and the variables naming our own pid
# (or, for the mismatch test, someone else's).
LAUNCHER = (
    "import os, sys\n"
    "fd = int(sys.argv[1])\n"
    "if fd != 3: os.dup2(fd, 3)\n"
    "os.environ['LISTEN_FDS'] = '1'\n"
    "os.environ['LISTEN_PID'] = sys.argv[2] if sys.argv[2] != 'self' else str(os.getpid())\n"
    "os.execv(sys.argv[3], sys.argv[3:])\n"
)
# What the other uid runs: connect, send a complete control hello and a ping, report what came back.
PEER_SCRIPT = r"""
import json, os, socket, sys
result = {"pid": os.getpid(), "uid": os.getuid(), "received": "", "error": None}
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(20)
try:
    sock.connect(sys.argv[1])
    sock.sendall(bytes.fromhex(sys.argv[2]))
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    result["received"] = data.hex()
except OSError as exc:
    result["error"] = type(exc).__name__
print(json.dumps(result))
"""


def write_config(user: UserEnv, text: str) -> None:
    user.config_file.parent.mkdir(parents=True, exist_ok=True)
    user.config_file.write_text(text)
    user.config_file.chmod(0o600)


def launcher(fd: int, listen_pid: str = "self") -> tuple[str, ...]:
    return (sys.executable, "-c", LAUNCHER, str(fd), listen_pid)


def as_other_uid(path: Path) -> dict[str, object]:
    """Run PEER_SCRIPT as uid 65534 against `path`; skip (with the reason printed) if impossible."""
    setpriv = shutil.which("setpriv")
    reason = None
    if setpriv is None:
        reason = "setpriv is not installed"
    elif os.geteuid() != 0:
        reason = "switching to another uid needs root"
    if reason is not None:
        print(f"skipping: {reason}")
        pytest.skip(reason)
    assert setpriv is not None
    payload = (wire.encode(hello("ctl")) + wire.encode(Ctl("ping", {}))).hex()
    done = subprocess.run([setpriv, f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups",
                           sys.executable, "-c", PEER_SCRIPT, str(path), payload],
                          capture_output=True, text=True, timeout=STEP_S, cwd="/", env={"PATH": "/usr/bin:/bin"})
    if done.returncode != 0:
        reason = f"uid {OTHER_UID} cannot run {sys.executable}: {done.stderr.strip()[-200:]}"
        print(f"skipping: {reason}")
        pytest.skip(reason)
    result: dict[str, object] = json.loads(done.stdout)
    assert result["uid"] == OTHER_UID
    return result


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A directory every uid can traverse: where a system-wide socket unit might put a socket."""
    path = Path(tempfile.mkdtemp(prefix="lzdpub", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def listening_socket(path: Path, mode: int = 0o600) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    os.chmod(path, mode)
    sock.listen(16)
    return sock


# ---- another uid (case 29) -------------------------------------------------------------------------


def test_another_uid_cannot_even_connect_to_a_daemon_in_its_private_runtime_dir(user_env: UserEnv) -> None:
    proc = launch_daemon(user_env)
    result = as_other_uid(user_env.socket)
    assert result["error"] == "PermissionError" and result["received"] == ""
    assert ping(user_env.socket) == proc.pid
    proc.terminate()
    assert proc.wait(timeout=STEP_S) == 0


def test_a_peer_of_another_uid_is_closed_before_any_frame_is_read_and_logged_with_its_pid(
    user_env: UserEnv, public_dir: Path
) -> None:
    # A socket unit with SocketMode=0666 in a public directory: only the peer check stands between
    # another user and the daemon.
    path = public_dir / "lazyd.sock"
    listener = listening_socket(path, 0o666)
    proc = launch_daemon(user_env, env={"LAZYD_SOCKET": str(path)}, prefix=launcher(listener.fileno()),
                         pass_fds=(listener.fileno(),), socket_path=path)
    try:
        before = daemon_log(user_env)
        result = as_other_uid(path)
        # Nothing came back (no welcome, no reply) and the daemon closed rather than timing out.
        assert result["received"] == "" and result["error"] in (None, "ConnectionResetError", "BrokenPipeError"), result
        wait_for_log(user_env, f"refused a connection from uid {OTHER_UID} (pid {result['pid']}): not our user")
        # Closed before reading: its perfectly valid hello was never even decoded.
        new = daemon_log(user_env)[len(before):]
        assert "hello" not in new and "bad frame" not in new, new
        assert ping(path) == proc.pid  # and our own user is still served
    finally:
        proc.terminate()
        proc.wait(timeout=STEP_S)
        listener.close()


@pytest.mark.parametrize("plant", ["a world-readable dir", "a symlink to a private dir"])
def test_a_daemon_refuses_to_start_in_a_runtime_dir_someone_prepared_and_changes_nothing(
    user_env: UserEnv, plant: str
) -> None:
    lazyd_dir = user_env.socket.parent
    if plant == "a world-readable dir":
        lazyd_dir.mkdir()
        lazyd_dir.chmod(0o755)
        words = "gives access to group/other"
    else:
        target = user_env.root / "elsewhere"
        target.mkdir(mode=0o700)
        lazyd_dir.symlink_to(target)
        words = "it is a symlink"
    done = subprocess.run([sys.executable, "-m", "lazyd.daemon"], env=user_env.env, capture_output=True, text=True,
                          timeout=STEP_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 1 and done.stderr.startswith("lazyd: refusing runtime dir"), done.stderr
    assert done.stderr.count("\n") == 1 and words in done.stderr
    if plant == "a world-readable dir":
        assert oct(lazyd_dir.stat().st_mode & 0o777) == oct(0o755)  # never repaired: not ours to change
        assert list(lazyd_dir.iterdir()) == []
    else:
        assert list((user_env.root / "elsewhere").iterdir()) == []  # nothing created through the link


# ---- socket activation (case 24) ----------------------------------------------------------------------


def test_activation_variables_meant_for_another_pid_are_ignored_and_never_reach_a_server(
    user_env: UserEnv, public_dir: Path
) -> None:
    write_config(user_env, f'[servers.fixture]\ncommand = "{sys.executable}"\nargs = ["{FIXTURE_SERVER}"]\n')
    passed = listening_socket(public_dir / "foreign.sock")
    proc = launch_daemon(user_env, prefix=launcher(passed.fileno(), listen_pid="1"), pass_fds=(passed.fileno(),))
    try:
        wait_for_log(user_env, f"ignoring socket activation variables (LISTEN_PID=1 is not our pid {proc.pid})")
        # The daemon bound its own socket (launch_daemon pinged it there) and never accepts on the
        # one it was handed: a connection made to that one waits, unaccepted, for us to take it.
        visitor = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        visitor.connect(str(public_dir / "foreign.sock"))
        ready, _, _ = select.select([passed], [], [], STEP_S)
        assert ready, "the connection never reached the passed socket's backlog"
        taken, _ = passed.accept()
        taken.close()
        visitor.close()
        conn = Conn(user_env.socket)
        conn.open_ctl()
        woken = conn.ctl("wake", name="fixture")
        assert woken["ok"], woken
        conn.close()
        with open(f"/proc/{woken['data']['pid']}/environ", "rb") as f:
            names = {item.split(b"=", 1)[0] for item in f.read().split(b"\0") if item}
        assert b"PATH" in names and not names & {b"LISTEN_FDS", b"LISTEN_PID", b"LISTEN_FDNAMES"}, names
    finally:
        proc.terminate()
        assert proc.wait(timeout=STEP_S) == 0, daemon_log(user_env)
        passed.close()


def test_a_client_that_connects_while_the_activated_daemon_is_down_is_served_by_the_next_one(
    user_env: UserEnv, public_dir: Path
) -> None:
    path = public_dir / "lazyd.sock"
    listener = listening_socket(path)
    env = {"LAZYD_SOCKET": str(path)}
    first = launch_daemon(user_env, env=env, prefix=launcher(listener.fileno()), pass_fds=(listener.fileno(),),
                          socket_path=path)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=STEP_S)
    # No daemon now. The socket unit still listens, so this client connects and its request
    # waits in the backlog.
    client = Conn(path)
    client.sock.sendall(wire.encode(hello("ctl")))
    client.sock.sendall(wire.encode(Ctl("ping", {})))
    second = launch_daemon(user_env, env=env, prefix=launcher(listener.fileno()), pass_fds=(listener.fileno(),),
                           socket_path=path)
    try:
        welcome = client.read()
        assert welcome["t"] == "welcome" and welcome["daemon_pid"] == second.pid
        assert client.read()["data"]["pid"] == second.pid
        client.close()
        # The activated socket belongs to the unit: neither daemon unlinked it.
        second.terminate()
        assert second.wait(timeout=STEP_S) == 0
        assert path.exists()
        wait_until(lambda: not user_env.daemon_pids(), STEP_S, "both daemons to be gone")
    finally:
        if second.poll() is None:
            second.kill()
            second.wait(timeout=STEP_S)
        listener.close()
