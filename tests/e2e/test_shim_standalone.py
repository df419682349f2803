"""The shim as a real process, against no daemon, a fake daemon, and a killed daemon.

Testing policy: every shim, daemon and server here is a real process talking over real pipes and
Unix sockets. The fake daemon is a small script built on lazyd.protocol.wire (the real daemon is written
elsewhere); the suite's seam LAZYD_TEST_DAEMON_ARGV (tests/e2e/seams/sitecustomize.py, on the
shim's PYTHONPATH) puts it in the real daemon's place, so that autostart runs for real. What the fake daemon and the echo server saw is recorded in JSON-lines files that
the tests poll with a bounded deadline; processes are counted and inspected through /proc. No
test asserts on elapsed time.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.faults_support import seam_env

# The installed `lazyd_shim` is this source package; importing `shim` lets mypy see its types.
from lazyd.protocol.linepeek import error_line, id_key, inspect_line, too_long_request

pytestmark = pytest.mark.e2e

DEADLINE_S = 15.0  # generous bound for any one awaited event; tests normally take milliseconds

FAKE_DAEMON = r"""
import fcntl, json, os, socket, sys, threading
from lazyd.host import sockpath
from lazyd.protocol import wire
from lazyd.protocol.frames import Line, Refusal, Welcome

args = sys.argv[1:]
path = args[args.index("--socket") + 1] if "--socket" in args else sockpath.default_socket_path(os.environ)
record_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "records")  # autostarted: no env of ours

def record(kind, obj):
    with open(os.path.join(record_dir, kind), "a") as f:
        f.write(json.dumps(obj) + "\n")

record("attempts", {"pid": os.getpid()})
# Like the real daemon: one instance per socket, a second copy exits 0 saying so.
lock_fd = os.open(path + ".fake-lock", os.O_RDWR | os.O_CREAT, 0o600)
try:
    fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    print("already running", file=sys.stderr)
    print("exit 0", file=sys.stderr)  # its status, as the real daemon tells the shim that started it
    sys.exit(0)
record("starts", {"pid": os.getpid(), "sid": os.getsid(0)})
try:
    os.unlink(path)
except FileNotFoundError:
    pass
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen(128)
os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # as the real daemon once it listens: the shim reads stderr to its end
sessions = iter(range(1, 1 << 30))

def serve(conn, session):
    reader = wire.BlockingFrameReader(conn)
    hello = reader.read()
    record("hellos", {"pid": hello.pid, "argv": hello.argv, "opts": hello.opts,
                      "server": hello.server, "cwd": hello.cwd,
                      "resume": [r.decode() for r in hello.resume],
                      "marker": hello.env.get("FAKE_MARKER")})
    if os.environ.get("FAKE_DAEMON_REFUSE"):
        conn.sendall(wire.encode(Refusal("options", "bad linger", 1)))
        conn.close()
        return
    conn.sendall(wire.encode(Welcome(session, "fake", os.getpid())))
    while True:
        try:
            frame = reader.read()
        except OSError:
            frame = None
        if frame is None:
            record("closed", {"pid": hello.pid})
            return
        line = frame.d
        record("lines", {"pid": hello.pid, "line": line.decode()})
        message = json.loads(line)
        if "id" in message and "method" in message and message["method"] != "hang":
            result = {"method": message["method"], "daemon_pid": os.getpid()}
            response = {"jsonrpc": "2.0", "id": message["id"], "result": result}
            conn.sendall(wire.encode(Line(json.dumps(response).encode(), message["id"])))

while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn, next(sessions)), daemon=True).start()
"""

ECHO_SERVER = r"""
import json, os, sys
log = os.environ.get("ECHO_LOG")
for raw in sys.stdin.buffer:
    line = raw.rstrip(b"\n")
    if log:
        with open(log, "a") as f:
            f.write(line.decode() + "\n")
    message = json.loads(line)
    if "id" in message and "method" in message:
        result = {"direct": True, "method": message["method"], "pid": os.getpid()}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
        sys.stdout.flush()
"""

INITIALIZE = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}'
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


def request(request_id: int | str, method: str = "tools/list") -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method}).encode()


def wait_for(condition: Callable[[], Any], what: str) -> Any:
    """Poll ``condition`` (files, /proc) until it is truthy; fail after DEADLINE_S."""
    give_up = time.monotonic() + DEADLINE_S
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > give_up:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def records(directory: Path, kind: str) -> list[dict[str, Any]]:
    path = directory / kind
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def proc_stat(pid: int) -> list[str]:
    """Fields of /proc/<pid>/stat after the command name: [state, ppid, pgrp, session, ...]."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text.rsplit(")", 1)[1].split()


def live_processes_running(script: Path) -> list[int]:
    """Pids of non-zombie processes whose command line mentions ``script``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = proc_stat(int(entry.name))[0]
        except (OSError, IndexError):
            continue
        if str(script).encode() in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


def pid_alive(pid: int) -> bool:
    try:
        return proc_stat(pid)[0] != "Z"
    except OSError:
        return False


class Shim:
    """A lazyd-shim process with line-oriented helpers on its stdio."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lazyd_shim.main", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self._buffer = b""

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def read_line(self) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        give_up = time.monotonic() + DEADLINE_S
        while b"\n" not in self._buffer:
            remaining = give_up - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise AssertionError(f"no line from the shim; stderr so far: {self.stderr_now()!r}")
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise AssertionError(f"shim stdout closed; stderr: {self.stderr_now()!r}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def read_json(self) -> dict[str, Any]:
        message = json.loads(self.read_line())
        assert isinstance(message, dict)
        return message

    def stderr_now(self) -> bytes:
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        out = b""
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk
        return out

    def close_stdin_and_wait(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(DEADLINE_S)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


class World:
    """One test's scripts, socket, record files and environment, and what to clean up."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.records = tmp_path / "records"
        self.records.mkdir()
        self.run_dir = tmp_path / "run"  # created by the shim (0700) when it autostarts
        self.socket = self.run_dir / "lazyd.sock"
        self.daemon_script = tmp_path / "fake_daemon.py"
        self.daemon_script.write_text(FAKE_DAEMON)
        self.server_script = tmp_path / "echo_server.py"
        self.server_script.write_text(ECHO_SERVER)
        self.echo_log = tmp_path / "echo.log"
        self.shims: list[Shim] = []
        self.daemons: list[subprocess.Popen[bytes]] = []
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYD_")}
        env.update(
            LAZYD_SOCKET=str(self.socket),
            ECHO_LOG=str(self.echo_log),
        )
        env.update(seam_env(daemon_argv=json.dumps([sys.executable, str(self.daemon_script)])))
        env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], *(p for p in sys.path if p)])
        self.env = env

    @property
    def server_command(self) -> list[str]:
        return [sys.executable, str(self.server_script)]

    def shim(self, *options: str, env: dict[str, str] | None = None) -> Shim:
        shim = Shim([*options, *self.server_command], {**self.env, **(env or {})})
        self.shims.append(shim)
        return shim

    def start_daemon_by_hand(self) -> subprocess.Popen[bytes]:
        self.run_dir.mkdir(mode=0o700, exist_ok=True)
        proc = subprocess.Popen(
            [sys.executable, str(self.daemon_script), "--socket", str(self.socket)], env=self.env
        )
        self.daemons.append(proc)
        wait_for(lambda: records(self.records, "starts"), "the fake daemon to start")
        wait_for(self.socket.exists, "the fake daemon's socket")
        return proc

    def daemon_pids(self) -> list[int]:
        return [r["pid"] for r in records(self.records, "starts")]

    def cleanup(self) -> None:
        for shim in self.shims:
            shim.kill()
        for pid in self.daemon_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in self.daemons:
            proc.wait()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    try:
        yield w
    finally:
        w.cleanup()


# --- no daemon --------------------------------------------------------------------------------


def test_without_a_daemon_and_with_no_autostart_the_shim_becomes_the_server_and_says_so(world: World) -> None:
    shim = world.shim("--no-autostart")
    shim.send(request(1))
    response = shim.read_json()
    assert response["id"] == 1 and response["result"]["direct"] is True
    # exec, not a child: the server answers from the shim's own pid
    assert response["result"]["pid"] == shim.proc.pid
    assert shim.close_stdin_and_wait() == 0
    stderr = shim.proc.stderr.read().decode() if shim.proc.stderr else ""
    lines = stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("lazyd-shim: daemon unavailable (") and lines[0].endswith(
        "; running the server directly"
    )
    assert str(world.socket) in lines[0]
    assert not world.run_dir.exists()  # nothing was created without autostart


def test_a_hello_refused_for_its_options_exits_2_with_the_daemons_reason_and_runs_nothing(world: World) -> None:
    # A refused option is the user's mistake, like any other bad option: running the server
    # directly would hide it (fail-open is for an unreachable daemon only).
    world.env["FAKE_DAEMON_REFUSE"] = "1"
    world.start_daemon_by_hand()
    shim = world.shim()
    assert shim.proc.wait(DEADLINE_S) == 2
    stderr = shim.proc.stderr.read().decode() if shim.proc.stderr else ""
    assert stderr.splitlines() == ["lazyd-shim: bad linger"]
    assert not world.echo_log.exists()  # the server was never run


def test_with_server_name_and_no_daemon_the_shim_exits_1_with_a_clear_line(world: World) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "lazyd_shim.main", "--no-autostart", "--server", "github"],
        env=world.env,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=DEADLINE_S,
    )
    assert proc.returncode == 1
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1 and "--server github cannot run without the daemon" in lines[0]


# --- autostart ----------------------------------------------------------------------------------


def test_autostart_runs_the_daemon_in_its_own_session_and_relays_lines_both_ways(world: World) -> None:
    shim = world.shim("--linger", "10m", env={"LAZYD_SHARE": "no", "FAKE_MARKER": "m1"})
    odd_spacing = b'{"jsonrpc": "2.0",  "id": "a b", "method":"tools/call" }'
    shim.send(INITIALIZE)
    shim.send(odd_spacing)
    first, second = shim.read_json(), shim.read_json()
    assert (first["id"], second["id"]) == (0, "a b")
    daemon_pid = second["result"]["daemon_pid"]
    assert world.daemon_pids() == [daemon_pid]
    # Its own session (and group): a client's killpg of the shim's group cannot reach it.
    daemon_session = int(proc_stat(daemon_pid)[3])
    assert daemon_session == daemon_pid
    assert daemon_session != int(proc_stat(shim.proc.pid)[3])
    # What reached the daemon: the lines byte for byte, and a hello describing the session.
    seen = [r["line"].encode() for r in records(world.records, "lines")]
    assert seen == [INITIALIZE, odd_spacing]
    (hello,) = records(world.records, "hellos")
    assert hello["argv"] == world.server_command
    assert hello["opts"] == {"linger": "10m", "share": "no"}
    assert hello["server"] is None and hello["resume"] == [] and hello["marker"] == "m1"
    assert hello["cwd"] == os.getcwd()
    assert os.stat(world.run_dir).st_mode & 0o777 == 0o700


def test_twenty_shims_racing_to_autostart_end_with_exactly_one_daemon(world: World) -> None:
    shims = [world.shim() for _ in range(20)]
    for i, shim in enumerate(shims):
        shim.send(request(i, "ping"))
    answers = [shim.read_json() for shim in shims]
    assert [a["id"] for a in answers] == list(range(20))
    assert len({a["result"]["daemon_pid"] for a in answers}) == 1
    # The spawn lock let exactly one shim start a daemon (the fake daemon's own lock would only
    # hide a second start), and exactly one daemon process exists.
    assert len(records(world.records, "attempts")) == 1
    assert len(world.daemon_pids()) == 1
    assert live_processes_running(world.daemon_script) == world.daemon_pids()


def test_stdin_eof_with_nothing_in_flight_makes_the_shim_exit_0_at_once(world: World) -> None:
    shim = world.shim()
    shim.send(request(1))
    assert shim.read_json()["id"] == 1
    assert shim.close_stdin_and_wait() == 0
    wait_for(lambda: records(world.records, "closed"), "the daemon to see the session close")
    assert shim.proc.stdout is not None and shim.proc.stdout.read() == b""


def test_after_stdin_eof_the_shim_waits_for_its_answers_until_the_client_closes_its_stdout(world: World) -> None:
    shim = world.shim()
    shim.send(request(1))
    assert shim.read_json()["id"] == 1
    shim.send(request(2, "hang"))  # never answered
    wait_for(lambda: len(records(world.records, "lines")) == 2, "the daemon to receive the request")
    assert shim.proc.stdin is not None and shim.proc.stdout is not None
    shim.proc.stdin.close()
    time.sleep(0.5)  # time enough for a shim that does not wait to be gone
    assert shim.proc.poll() is None and not records(world.records, "closed"), "it left with a request unanswered"
    shim.proc.stdout.close()  # the client is gone: nobody reads an answer any more
    assert shim.proc.wait(DEADLINE_S) == 0
    wait_for(lambda: records(world.records, "closed"), "the daemon to see the session close")


def test_sigterm_makes_the_shim_exit_quietly(world: World) -> None:
    shim = world.shim()
    shim.send(request(1))
    assert shim.read_json()["id"] == 1
    shim.proc.send_signal(signal.SIGTERM)
    assert shim.proc.wait(DEADLINE_S) == 0
    assert shim.proc.stderr is not None and shim.proc.stderr.read() == b""


def test_a_request_line_over_the_limit_gets_invalid_request_with_its_id_and_the_session_goes_on(
    world: World,
) -> None:
    shim = world.shim()
    huge = b'{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"blob":"' + b"x" * (16 << 20) + b'"}}'
    shim.send(huge)
    error = shim.read_json()
    assert error["id"] == "big" and error["error"]["code"] == -32600
    shim.send(request(2))
    assert shim.read_json()["id"] == 2
    assert [json.loads(r["line"])["id"] for r in records(world.records, "lines")] == [2]


# --- losing the daemon ----------------------------------------------------------------------------


def test_a_daemon_killed_mid_request_yields_errors_under_the_original_ids_and_a_resumed_session(
    world: World,
) -> None:
    shim = world.shim()
    shim.send(INITIALIZE)
    assert shim.read_json()["id"] == 0
    shim.send(INITIALIZED)
    shim.send(request(1, "hang"))
    shim.send(request("1", "hang"))
    wait_for(lambda: len(records(world.records, "lines")) == 4, "the daemon to receive both requests")
    (first_daemon,) = world.daemon_pids()
    os.kill(first_daemon, signal.SIGKILL)

    errors = [shim.read_json(), shim.read_json()]
    assert sorted((type(e["id"]).__name__, e["id"]) for e in errors) == [("int", 1), ("str", "1")]
    for e in errors:
        assert e["error"]["code"] == -32603
        assert "connection to the daemon was lost" in e["error"]["message"]

    # The shim autostarted a new daemon and resumed the session without a new handshake.
    shim.send(request(5))
    answer = shim.read_json()
    assert answer["id"] == 5
    assert answer["result"]["daemon_pid"] != first_daemon
    hellos = records(world.records, "hellos")
    assert len(hellos) == 2
    assert hellos[1]["resume"] == [INITIALIZE.decode(), INITIALIZED.decode()]
    assert not pid_alive(first_daemon)


def test_when_no_daemon_comes_back_the_shim_runs_the_server_and_replays_the_handshake(world: World) -> None:
    daemon = world.start_daemon_by_hand()
    # Autostart is allowed but the daemon command fails at once: recovery must give up quickly.
    failing = json.dumps([sys.executable, "-c", "import sys; print('exit 3', file=sys.stderr); raise SystemExit(3)"])
    shim = world.shim(env={"LAZYD_TEST_DAEMON_ARGV": failing})
    shim.send(INITIALIZE)
    assert shim.read_json()["id"] == 0
    shim.send(INITIALIZED)
    shim.send(request(2, "hang"))
    wait_for(lambda: len(records(world.records, "lines")) == 3, "the daemon to receive the request")
    daemon.kill()

    lost = shim.read_json()
    assert lost["id"] == 2 and lost["error"]["code"] == -32603
    shim.send(request(3))
    answer = shim.read_json()
    # The first thing on stdout after the error is the answer to 3: the replayed initialize's
    # answer was dropped, not shown to a client that had its answer long ago.
    assert answer["id"] == 3 and answer["result"]["direct"] is True
    assert answer["result"]["pid"] != shim.proc.pid
    assert world.echo_log.read_bytes().splitlines() == [INITIALIZE, INITIALIZED, request(3)]
    assert shim.close_stdin_and_wait() == 0
    stderr = shim.proc.stderr.read().decode() if shim.proc.stderr else ""
    assert "daemon unavailable (the daemon exited with status 3); running the server directly" in stderr
    wait_for(lambda: not pid_alive(answer["result"]["pid"]), "the directly run server to exit")


@pytest.mark.parametrize(("flags", "said"), [(["--hub"], "--hub"), (["--server", "docs"], "--server docs")])
def test_a_session_without_a_command_that_no_daemon_came_back_for_says_why_and_exits_1(
        flags: list[str], said: str) -> None:
    # What the relay does once reconnecting failed, in a real process: nothing to run directly.
    code = ("import sys\nfrom lazyd_shim.options import Log, parse\nfrom lazyd_shim.relay import Relay\n"
            f"opts = parse({flags!r}, {{}})\nsys.exit(Relay(opts, None, Log(opts)).run('no daemon'))\n")
    done = subprocess.run([sys.executable, "-c", code], stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode() == f"lazyd-shim: daemon unavailable (no daemon); {said} cannot run without it\n"


# --- imports ------------------------------------------------------------------------------------


def test_the_shim_imports_neither_trio_nor_platformdirs_nor_tomlkit() -> None:
    code = (
        "import sys, lazyd_shim.main, lazyd_shim.relay, lazyd_shim.connect, lazyd_shim.fallback\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('trio', 'platformdirs', 'tomlkit'))\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=DEADLINE_S)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_a_warm_start_imports_none_of_the_modules_that_cost_milliseconds(tmp_path: Path) -> None:
    # What the hand-off start loads (main, connect, handoff and what its adopting hello needs), in an interpreter without `site`
    # (an editable install's finder would bring some of these in first and hide them): the packages
    # linked into a directory of their own, msgpack from where it is installed. Each of these cost
    # the shim's start 0.2 ms or more when it crept in (docs/benchmarks.md, the warm start); the
    # paths that need one (the relay, the fallback) import it there. msgpack (with datetime and
    # collections, ~2 ms) is among them: the hello and the welcome go through lazyd/protocol/smallpack.py.
    import msgpack

    repo = Path(__file__).resolve().parents[2]
    (tmp_path / "lazyd").symlink_to(repo / "lazyd")
    (tmp_path / "lazyd_shim").symlink_to(repo / "shim")
    code = (
        "import sys\n"
        "import lazyd_shim.main, lazyd_shim.connect, lazyd_shim.handoff, lazyd.protocol.smallpack, lazyd.handoff.region\n"
        "costly = ('typing', 'enum', 're', 'types', 'dataclasses', 'json', 'subprocess', 'signal', 'threading',\n"
        "          'inspect', 'functools', 'selectors', 'socket', 'logging', 'pathlib', 'msgpack', 'datetime',\n"
        "          'collections', 'lazyd.protocol.wire')\n"
        "print(sorted(m for m in costly if m in sys.modules))\n"
    )
    path = os.pathsep.join([str(tmp_path), str(Path(msgpack.__file__).parents[1])])
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=DEADLINE_S,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": path})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_a_shim_that_relays_itself_collects_cycles_again() -> None:
    # The lazyd-shim script starts with the collector off for its imports; the relay lives as long
    # as the session, and must not pile up cycles (the thread and its frames make some).
    code = (
        "import gc; gc.disable()\n"
        "from lazyd_shim.options import Log, parse\n"
        "from lazyd_shim.relay import Relay\n"
        "opts = parse(['--', 'true'], {})\n"
        "Relay(opts, None, Log(opts))\n"
        "print(gc.isenabled())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=DEADLINE_S, cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


# --- what the shim reads from a client line (pure helpers, no process) ------------------------------


def test_request_ids_keep_their_json_type_and_invalid_ids_are_not_tracked() -> None:
    assert id_key(1) != id_key("1")
    assert id_key(True) is None and id_key(1.0) is None and id_key(None) is None
    info = inspect_line(b'{"jsonrpc":"2.0","id":"1","method":"tools/call"}')
    assert info.requests == [((True, "1"), "1")]
    assert inspect_line(b'{"jsonrpc":"2.0","id":null,"method":"x"}').requests == []
    assert inspect_line(b'{"jsonrpc":"2.0","id":1,"result":{}}').requests == []  # a response


def test_the_handshake_lines_and_cancellations_are_recognised_and_a_batch_holds_no_request() -> None:
    assert inspect_line(INITIALIZE).kind == "initialize"
    assert inspect_line(INITIALIZED).kind == "initialized"
    batch = inspect_line(b'[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","id":"b","method":"b"}]')
    assert batch.requests == []  # the relay refuses a batch whole: nothing is answered under these ids
    cancel = inspect_line(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"7"}}')
    assert cancel.cancelled == [(True, "7")]
    assert inspect_line(b"not json {").requests == [] and inspect_line(b"\xff\xfe").kind is None


def test_the_id_of_a_cut_off_line_is_found_only_at_the_top_level() -> None:
    assert too_long_request(b'{"params":{"id":5,"method":"no"},"method":"m","id":7,"x":"...') == 7
    assert too_long_request(b'{"jsonrpc":"2.0","id":"a\\"b","method":"x","params":{"blob":"') == 'a"b'
    assert too_long_request(b'{"method":"m","id":12') is None  # the number may go on past the cut
    assert too_long_request(b'{"id":1.5,"method":"m"') is None
    # Of repeated keys the last counts, as for a parser, whatever its spelling or its value.
    assert too_long_request(b'{"id":1,"method":"m","id":2,"params":{"id":3') == 2
    assert too_long_request(b'{"id":1,"method":"m","\\u0069d":2,"x":"') == 2
    assert too_long_request(b'{"id":1,"method":"m","id":null,"x":"') is None
    assert too_long_request(b'[{"id":1,"method":"m"}]') is None
    assert too_long_request(b'{"id":1,"method":"m","x":"\xc3') == 1  # cut inside a character


def test_error_lines_echo_the_original_id_with_its_type() -> None:
    assert json.loads(error_line("1", -32603, "lost")) == {
        "jsonrpc": "2.0",
        "id": "1",
        "error": {"code": -32603, "message": "lost"},
    }
    assert json.loads(error_line(1, -32603, "lost"))["id"] == 1
