"""Tests of one real server process: spawn, lines, the stop ladder, groups, and the stderr log.

Testing policy: every test runs real processes (mostly tests/servers/fixture_server.py) and
checks the outcome through the kernel: /proc/<pid>/stat for sessions and groups, /proc/<pid>/fd
for inherited descriptors, /proc/*/environ for a per-test marker to find every process a test
started, VmHWM for memory. Nothing is mocked. Conditions are polled with a deadline, never slept
for; ladder graces are passed small, and durations are never asserted.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import signal
import stat
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path
from contextlib import asynccontextmanager
from typing import AsyncIterator, Callable

import pytest
import trio
import trio.testing

from lazyd.host import procfs
from lazyd.daemon.process import stderr_log as logring
from lazyd.daemon.process.stderr_log import LogRing
from lazyd.daemon.process.command import ExitInfo, SpawnSpec
from lazyd.daemon.process.child import STDIN_EOF_GRACE_S, TERM_GRACE_S, ChildProcess, spawn
from lazyd.daemon.process.stdout_reader import StdoutReader
from lazyd.errors import LineTooLong, SpawnError

pytestmark = pytest.mark.e2e

FIXTURE = str(Path(__file__).resolve().parent.parent / "servers" / "fixture_server.py")
DEADLINE_S = 10.0
"""Bound on every poll: far above what a loaded CI machine needs, still fails a hung test."""

SHORT_GRACE_S = 0.2
"""Ladder grace for tests of the ladder's later steps: keeps them fast."""

LONG_GRACE_S = 30.0
"""Ladder grace for a step that must not be reached: a failure shows as a signal, not a pass."""


# -- helpers ---------------------------------------------------------------------------------


@asynccontextmanager
async def open_child(
    spec: SpawnSpec, eof_grace_s: float = STDIN_EOF_GRACE_S, term_grace_s: float = TERM_GRACE_S
) -> AsyncIterator[ChildProcess]:
    """`spawn` for the duration of the block; on exit, the stop ladder."""
    async with trio.open_nursery() as nursery:
        child = await spawn(spec, nursery)
        try:
            yield child
        finally:
            await child.stop(eof_grace_s, term_grace_s)


def marker_pids(marker: str) -> set[int]:
    """Every live process whose environment carries FIXTURE_MARKER=marker (zombies have none)."""
    needle = f"FIXTURE_MARKER={marker}".encode()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.add(int(entry))
        except OSError:
            continue  # gone meanwhile, or not ours
    return found


async def eventually(predicate: Callable[[], bool], what: str) -> None:
    """Poll the kernel-backed `predicate` until it holds, failing after DEADLINE_S."""
    with trio.move_on_after(DEADLINE_S):
        while not predicate():
            await trio.sleep(0.01)
        return
    raise AssertionError(f"not true within {DEADLINE_S}s: {what}")


def proc_stat(pid: int) -> list[str]:
    """Fields 3.. of /proc/<pid>/stat (index 0 is the state, 2 the pgrp, 3 the session)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    return data[data.rindex(b")") + 2 :].decode().split()


def peak_rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/self/status")


def reset_peak_rss() -> None:
    # proc(5): writing 5 to clear_refs resets the peak RSS to the current RSS.
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


@pytest.fixture
def marker() -> str:
    return uuid.uuid4().hex


def fixture_spec(tmp_path: Path, marker: str, **env: str) -> SpawnSpec:
    full_env = dict(os.environ, FIXTURE_MARKER=marker, **env)
    return SpawnSpec(
        argv=(sys.executable, FIXTURE),
        cwd=str(tmp_path),
        env=full_env,
        log_path=tmp_path / "logs" / "fixture.log",
    )


def python_spec(tmp_path: Path, code: str, **kwargs: int) -> SpawnSpec:
    return SpawnSpec(
        argv=(sys.executable, "-c", code),
        cwd=str(tmp_path),
        env=dict(os.environ),
        log_path=tmp_path / "logs" / "python.log",
        **kwargs,
    )


async def request(child: ChildProcess, rid: int, method: str, params: object = None) -> dict[str, object]:
    message: dict[str, object] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    await child.send_line(json.dumps(message).encode())
    while True:
        line = await child.receive_line()
        assert line is not None, f"stdout ended before the answer to {method}"
        answer = json.loads(line)
        if answer.get("id") == rid:
            return answer  # type: ignore[no-any-return]


@pytest.fixture
async def nursery() -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as n:
        yield n


# -- spawning --------------------------------------------------------------------------------


async def test_a_spawned_fixture_server_answers_lines_on_its_stdio(tmp_path: Path, marker: str) -> None:
    async with open_child(fixture_spec(tmp_path, marker)) as child:
        init = await request(
            child, 1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}}
        )
        assert init["result"]["protocolVersion"] == "2025-06-18"  # type: ignore[index]
        echo = await request(child, 2, "tools/call", {"name": "echo", "arguments": {"text": "hé"}})
        assert echo["result"] == {"content": [{"type": "text", "text": "hé"}]}
        pid_answer = await request(child, 3, "tools/call", {"name": "pid"})
        assert pid_answer["result"]["content"][0]["text"] == str(child.pid)  # type: ignore[index]
        assert child.start_time_ticks == procfs.start_time_ticks(child.pid)
        assert child.start_time_ticks == int(proc_stat(child.pid)[19])


async def test_a_command_that_does_not_exist_is_a_spawn_error_and_starts_nothing(
    tmp_path: Path, marker: str, nursery: trio.Nursery
) -> None:
    spec = SpawnSpec(
        argv=("lazyd-no-such-command-" + marker,),
        cwd=str(tmp_path),
        env={"PATH": str(tmp_path), "FIXTURE_MARKER": marker},
        log_path=tmp_path / "x.log",
    )
    with pytest.raises(SpawnError) as caught:
        await spawn(spec, nursery)
    assert caught.value.errno == errno.ENOENT
    assert caught.value.message == (
        f"cannot execute 'lazyd-no-such-command-{marker}': No such file or directory"
    )
    assert str(caught.value) == caught.value.message
    assert marker_pids(marker) == set()


async def test_a_file_that_is_not_executable_is_a_spawn_error_with_eacces(
    tmp_path: Path, marker: str, nursery: trio.Nursery
) -> None:
    script = tmp_path / "server.sh"
    script.write_text("#!/bin/sh\nexec sleep 1000\n")
    script.chmod(0o644)
    for argv0, env_path in (("server.sh", str(tmp_path)), (str(script), "/usr/bin")):
        spec = SpawnSpec(
            argv=(argv0,),
            cwd=str(tmp_path),
            env={"PATH": env_path, "FIXTURE_MARKER": marker},
            log_path=tmp_path / "x.log",
        )
        with pytest.raises(SpawnError) as caught:
            await spawn(spec, nursery)
        assert caught.value.errno == errno.EACCES
        assert caught.value.message == f"cannot execute '{argv0}': Permission denied"
    assert marker_pids(marker) == set()


async def test_an_executable_in_no_known_format_is_a_spawn_error_with_enoexec(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x00\x01\x02 not a program\n")
    garbage.chmod(0o755)
    spec = SpawnSpec(argv=("./garbage",), cwd=str(tmp_path), env={}, log_path=tmp_path / "g.log")
    with pytest.raises(SpawnError) as caught:
        await spawn(spec, nursery)
    assert caught.value.errno == errno.ENOEXEC
    assert caught.value.message == "cannot execute './garbage': Exec format error"


async def test_a_missing_working_directory_is_a_spawn_error(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    spec = SpawnSpec(
        argv=(sys.executable,), cwd=str(tmp_path / "gone"), env={}, log_path=tmp_path / "g.log"
    )
    with pytest.raises(SpawnError) as caught:
        await spawn(spec, nursery)
    assert caught.value.errno == errno.ENOENT
    assert "working directory" in caught.value.message


async def test_the_command_is_found_on_the_spec_path_not_the_daemon_path(
    tmp_path: Path, marker: str
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "my-server"
    tool.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write('found\\n')\n")
    tool.chmod(0o755)
    spec = SpawnSpec(
        argv=("my-server",),
        cwd=str(tmp_path),
        env={"PATH": f"/nonexistent:{bin_dir}"},
        log_path=tmp_path / "t.log",
    )
    async with open_child(spec) as child:
        assert await child.receive_line() == b"found"
        info = await child.wait_exit()
    assert info.returncode == 0


async def test_the_child_leads_its_own_session_and_process_group(
    tmp_path: Path, marker: str
) -> None:
    async with open_child(fixture_spec(tmp_path, marker)) as child:
        fields = proc_stat(child.pid)
        pgrp, session = int(fields[2]), int(fields[3])
        assert pgrp == session == child.pid == child.pgid
        assert pgrp != os.getpgrp()
        assert session != os.getsid(0)


async def test_the_child_gets_no_systemd_variables_even_when_the_daemon_has_them(
    tmp_path: Path, marker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    scrubbed = {
        "NOTIFY_SOCKET": "/run/systemd/notify",
        "WATCHDOG_USEC": "1000000",
        "WATCHDOG_PID": str(os.getpid()),
        "LISTEN_FDS": "1",
        "LISTEN_PID": str(os.getpid()),
        "LISTEN_FDNAMES": "lazyd.sock",
    }
    for name, value in scrubbed.items():
        monkeypatch.setenv(name, value)
    spec = fixture_spec(tmp_path, marker, KEPT_VARIABLE="kept")
    assert set(scrubbed) <= set(spec.env)
    async with open_child(spec) as child:
        # Right after the spawn the new image's environment may not be set up yet (it reads
        # empty for that moment): read it once it is there.
        names: set[str] = set()
        with trio.fail_after(10):
            while not names:
                with open(f"/proc/{child.pid}/environ", "rb") as f:
                    names = {item.split(b"=", 1)[0].decode() for item in f.read().split(b"\0") if item}
                if not names:
                    await trio.sleep(0.01)
        assert names & set(scrubbed) == set()
        assert {"KEPT_VARIABLE", "FIXTURE_MARKER", "PATH"} <= names


async def test_the_child_inherits_no_descriptor_beyond_stdio(tmp_path: Path, marker: str) -> None:
    leak = tmp_path / "leak"
    fd = os.open(leak, os.O_WRONLY | os.O_CREAT, 0o600)
    os.set_inheritable(fd, True)
    try:
        async with open_child(fixture_spec(tmp_path, marker)) as child:
            # An answered ping proves the child's interpreter has finished starting up.
            assert (await request(child, 1, "ping"))["result"] == {}
            fd_dir = f"/proc/{child.pid}/fd"
            targets = {int(n): os.readlink(f"{fd_dir}/{n}") for n in os.listdir(fd_dir)}
            assert str(leak) not in targets.values()
            assert set(targets) == {0, 1, 2}
    finally:
        os.close(fd)


# -- the stop ladder -------------------------------------------------------------------------


async def test_a_child_that_exits_on_stdin_eof_is_never_signalled(
    tmp_path: Path, marker: str, nursery: trio.Nursery
) -> None:
    child = await spawn(fixture_spec(tmp_path, marker), nursery)
    assert (await request(child, 1, "ping"))["result"] == {}
    info = await child.stop(eof_grace_s=LONG_GRACE_S, term_grace_s=LONG_GRACE_S)
    assert info == ExitInfo(returncode=0, signal=None, stderr_tail=info.stderr_tail)
    assert info.describe() == "exited with status 0"
    assert "SIGTERM" not in (tmp_path / "logs" / "fixture.log").read_text()


async def test_a_child_that_ignores_eof_gets_sigterm(
    tmp_path: Path, marker: str, nursery: trio.Nursery
) -> None:
    child = await spawn(fixture_spec(tmp_path, marker, FIXTURE_IGNORE_EOF="1"), nursery)
    assert (await request(child, 1, "ping"))["result"] == {}
    info = await child.stop(eof_grace_s=SHORT_GRACE_S, term_grace_s=LONG_GRACE_S)
    assert (info.returncode, info.signal) == (None, signal.SIGTERM)
    assert info.describe() == "killed by SIGTERM"


async def test_a_child_that_ignores_eof_and_sigterm_gets_sigkill(
    tmp_path: Path, marker: str, nursery: trio.Nursery
) -> None:
    spec = fixture_spec(tmp_path, marker, FIXTURE_IGNORE_EOF="1", FIXTURE_IGNORE_TERM="1")
    child = await spawn(spec, nursery)
    # The answer comes after the SIGTERM handler was set: the ladder can't race the startup.
    assert (await request(child, 1, "ping"))["result"] == {}
    info = await child.stop(eof_grace_s=SHORT_GRACE_S, term_grace_s=SHORT_GRACE_S)
    assert (info.returncode, info.signal) == (None, signal.SIGKILL)
    log = (tmp_path / "logs" / "fixture.log").read_text()
    assert "after stdin EOF: SIGTERM" in log and "after SIGTERM: SIGKILL" in log


async def test_stop_leaves_no_grandchild_even_one_that_ignores_sigterm(
    tmp_path: Path, marker: str, nursery: trio.Nursery
) -> None:
    spec = fixture_spec(tmp_path, marker, FIXTURE_GRANDCHILDREN="2", FIXTURE_IGNORE_EOF="1")
    child = await spawn(spec, nursery)
    await eventually(lambda: len(marker_pids(marker)) == 3, "the child and 2 grandchildren run")
    info = await child.stop(eof_grace_s=SHORT_GRACE_S, term_grace_s=LONG_GRACE_S)
    assert info.signal == signal.SIGTERM
    await eventually(lambda: marker_pids(marker) == set(), "no process carries the marker")


async def test_grandchildren_are_killed_when_the_leader_exits_by_itself(
    tmp_path: Path, marker: str, nursery: trio.Nursery
) -> None:
    child = await spawn(fixture_spec(tmp_path, marker, FIXTURE_GRANDCHILDREN="2"), nursery)
    await eventually(lambda: len(marker_pids(marker)) == 3, "the child and 2 grandchildren run")
    await child.send_line(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"crash","arguments":{"code":7}}}'
    )
    info = await child.wait_exit()
    assert info.returncode == 7
    assert info.stderr_tail[-1] == "fixture: crashing with status 7"
    await eventually(lambda: marker_pids(marker) == set(), "no process carries the marker")


async def test_kill_group_kills_the_child_at_once(
    tmp_path: Path, marker: str, nursery: trio.Nursery
) -> None:
    child = await spawn(fixture_spec(tmp_path, marker, FIXTURE_IGNORE_TERM="1"), nursery)
    child.kill_group()
    info = await child.wait_exit()
    assert (info.returncode, info.signal) == (None, signal.SIGKILL)
    assert info.describe() == "killed by SIGKILL"


async def test_many_tasks_waiting_for_the_exit_all_get_the_same_report(
    tmp_path: Path, marker: str, nursery: trio.Nursery
) -> None:
    child = await spawn(fixture_spec(tmp_path, marker, FIXTURE_CRASH_ON_START="3"), nursery)
    results: list[ExitInfo] = []

    async def waiter() -> None:
        results.append(await child.wait_exit())

    async with trio.open_nursery() as waiters:
        for _ in range(5):
            waiters.start_soon(waiter)
    assert len(results) == 5 and all(r is results[0] for r in results)
    assert await child.wait_exit() is results[0]
    assert await child.stop() is results[0]
    assert results[0].returncode == 3
    assert results[0].describe() == (
        "exited with status 3; stderr: fixture: crashing on start with status 3"
    )


async def test_sending_to_a_child_that_has_exited_raises_a_resource_error(
    tmp_path: Path, marker: str, nursery: trio.Nursery
) -> None:
    child = await spawn(fixture_spec(tmp_path, marker, FIXTURE_CRASH_ON_START="1"), nursery)
    await child.wait_exit()
    with pytest.raises((trio.BrokenResourceError, trio.ClosedResourceError)):
        await child.send_line(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')


async def test_a_line_with_a_newline_inside_is_refused(
    tmp_path: Path, marker: str
) -> None:
    async with open_child(fixture_spec(tmp_path, marker)) as child:
        with pytest.raises(ValueError):
            await child.send_line(b'{"a":\n1}')


async def test_cancelling_the_caller_does_not_interrupt_the_ladder(
    tmp_path: Path, marker: str, nursery: trio.Nursery
) -> None:
    spec = fixture_spec(tmp_path, marker, FIXTURE_IGNORE_EOF="1", FIXTURE_IGNORE_TERM="1")
    child = await spawn(spec, nursery)
    assert (await request(child, 1, "ping"))["result"] == {}
    with trio.CancelScope() as scope:
        scope.cancel()
        await child.stop(eof_grace_s=SHORT_GRACE_S, term_grace_s=SHORT_GRACE_S)
    with trio.fail_after(5):  # the ladder ran to its end: the exit is known already
        assert (await child.wait_exit()).signal == signal.SIGKILL
    await eventually(lambda: marker_pids(marker) == set(), "no process carries the marker")


# -- stdout lines ----------------------------------------------------------------------------


async def test_blank_lines_are_skipped_and_a_trailing_partial_line_is_kept(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.buffer.write(b'one\\n\\n  \\ntwo\\r\\nthree')"
    async with open_child(python_spec(tmp_path, code)) as child:
        assert [line async for line in child.lines()] == [b"one", b"two\r", b"three"]
        assert await child.receive_line() is None


async def test_a_complete_line_over_the_limit_raises_line_too_long(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.buffer.write(b'ok\\n' + b'y' * 101 + b'\\nnext\\n')"
    async with open_child(python_spec(tmp_path, code, max_line_bytes=100)) as child:
        assert await child.receive_line() == b"ok"
        with pytest.raises(LineTooLong):
            await child.receive_line()
        with pytest.raises(LineTooLong):
            await child.receive_line()


async def test_a_line_of_exactly_the_limit_is_accepted(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.buffer.write(b'z' * 100 + b'\\n' + b'w' * 100)"
    async with open_child(python_spec(tmp_path, code, max_line_bytes=100)) as child:
        assert [line async for line in child.lines()] == [b"z" * 100, b"w" * 100]


async def test_a_stdout_that_is_always_full_still_lets_other_tasks_run() -> None:
    # 16 reads' worth waits in the pipe before the first read: none of those reads comes up
    # short, so only the checkpoint between them lets another task in.
    read_end, write_end = os.pipe()
    os.write(write_end, b"f" * (16 * 4096))
    os.close(write_end)
    reader = StdoutReader(trio.lowlevel.FdStream(read_end), 4096)
    turns = 0
    seen: list[int] = []

    async def other_task() -> None:
        nonlocal turns
        while True:
            turns += 1
            await trio.sleep(0)  # a checkpoint: the scheduling under test

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other_task)
        await trio.sleep(0)  # a checkpoint: let the other task begin
        start = turns
        while await reader.read_into(lambda _buffer, count: seen.append(turns - start)):
            pass
        nursery.cancel_scope.cancel()
    assert len(seen) == 16
    assert seen[8] > 0, f"no other task ran while 9 full reads were taken: {seen}"


async def test_after_a_short_read_the_next_read_costs_one_task_step() -> None:
    # What the reader saves on the hot path: after a line that did not fill a read, the next
    # read waits for readiness at once (one step: the wake-up), where trio's receive_some, or a
    # reader that tries first, checkpoints and fails a read with EAGAIN before it waits.
    read_end, write_end = os.pipe()
    reader = StdoutReader(trio.lowlevel.FdStream(read_end), 4096)
    got: list[bytes] = []
    me = trio.lowlevel.current_task()
    steps = 0

    class CountSteps(trio.abc.Instrument):
        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            nonlocal steps
            steps += task is me

    def sink(buffer: bytes | mmap.mmap, count: int) -> None:
        got.append(bytes(buffer[:count]))

    async def write_later() -> None:
        await trio.testing.wait_all_tasks_blocked()  # the reader waits for readiness
        os.write(write_end, b"two\n")

    os.write(write_end, b"one\n")
    assert await reader.read_into(sink)
    instrument = CountSteps()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(write_later)
        trio.lowlevel.add_instrument(instrument)
        try:
            assert await reader.read_into(sink)
        finally:
            trio.lowlevel.remove_instrument(instrument)
    assert got == [b"one\n", b"two\n"]
    assert steps == 1, f"{steps} task steps for a read after a short one"
    os.close(write_end)
    assert not await reader.read_into(sink)


async def test_a_64_mib_line_without_newline_raises_before_memory_follows_it(
    tmp_path: Path,
) -> None:
    limit = 16 * 1024 * 1024
    code = "import sys; sys.stdout.buffer.write(b'x' * (64 << 20)); sys.stdout.flush()"
    spec = python_spec(tmp_path, code, max_line_bytes=limit)
    async with open_child(spec, eof_grace_s=SHORT_GRACE_S, term_grace_s=SHORT_GRACE_S) as child:
        reset_peak_rss()
        before_kib = peak_rss_kib()
        with pytest.raises(LineTooLong):
            await child.receive_line()
        growth_bytes = (peak_rss_kib() - before_kib) * 1024
    assert growth_bytes < 2 * limit


# -- stderr ----------------------------------------------------------------------------------


async def test_a_200_mb_stderr_flood_never_blocks_the_child_and_the_log_stays_bounded(
    tmp_path: Path, marker: str
) -> None:
    spec = fixture_spec(tmp_path, marker, FIXTURE_STDERR_FLOOD_MB="200")
    reset_peak_rss()
    before_kib = peak_rss_kib()
    async with open_child(spec) as child:
        # The fixture floods before it reads stdin: an answer proves the flood went through.
        assert (await request(child, 1, "ping"))["result"] == {}
        info = await child.stop()
    growth_bytes = (peak_rss_kib() - before_kib) * 1024
    assert info.returncode == 0
    assert info.stderr_tail[-1] == "fixture: stderr flood done"
    assert len(info.stderr_tail) == logring.TAIL_LINES
    log = spec.log_path
    rotated = log.with_name(log.name + ".1")
    assert rotated.exists()
    assert log.stat().st_size <= 1024 * 1024  # docs/lazyctl.md: rotated at 1 MiB
    assert rotated.stat().st_size <= 1024 * 1024
    assert b"fixture: stderr flood done" in log.read_bytes() + rotated.read_bytes()
    assert growth_bytes < 32 * 1024 * 1024


def test_exit_info_describes_status_signal_and_the_stderr_tail() -> None:
    assert ExitInfo(1, None, ()).describe() == "exited with status 1"
    assert ExitInfo(None, 9, ()).describe() == "killed by SIGKILL"
    assert ExitInfo(None, None, ()).describe() == "exit status unknown"
    assert ExitInfo.from_returncode(-15, ()) == ExitInfo(None, 15, ())
    assert ExitInfo.from_returncode(2, ()) == ExitInfo(2, None, ())
    tail = ("a", "", "Traceback", "  boom", "Error: x")
    assert ExitInfo(1, None, tail).describe() == "exited with status 1; stderr: Traceback | boom | Error: x"


# -- the log ring ----------------------------------------------------------------------------


def fixed_now() -> datetime:
    return datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)


def test_the_log_is_created_private_with_utc_timestamps_on_each_line(tmp_path: Path) -> None:
    path = tmp_path / "state" / "logs" / "srv.log"
    ring = LogRing(path, now=fixed_now)
    ring.feed(b"hello\nwor")
    ring.feed(b"ld\n")
    ring.finish()
    ring.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_bytes() == (
        b"2026-01-02T03:04:05.678Z hello\n2026-01-02T03:04:05.678Z world\n"
    )
    assert ring.tail() == ("hello", "world")


def test_rotation_keeps_disk_use_under_twice_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "srv.log"
    ring = LogRing(path, max_bytes=4096, max_line_bytes=512, tail_lines=3)
    for i in range(2000):
        ring.feed(b"line %d\n" % i)
        assert path.stat().st_size <= 4096
    ring.close()
    rotated = tmp_path / "srv.log.1"
    assert rotated.stat().st_size <= 4096
    assert path.read_bytes().endswith(b" line 1999\n")
    assert ring.tail() == ("line 1997", "line 1998", "line 1999")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["srv.log", "srv.log.1"]


def test_megabytes_without_a_newline_are_cut_at_the_line_bound(tmp_path: Path) -> None:
    ring = LogRing(tmp_path / "srv.log", max_bytes=16 * 1024 * 1024, max_line_bytes=1000)
    for _ in range(100):
        ring.feed(b"q" * 65536)
        assert len(ring._partial) <= 1000
    ring.finish()
    ring.close()
    lines = (tmp_path / "srv.log").read_bytes().splitlines()
    assert sum(len(line.split(b" ", 1)[1]) for line in lines) == 100 * 65536
    assert max(len(line.split(b" ", 1)[1]) for line in lines) == 1000
    assert ring.tail()[-1] == "q" * logring.TAIL_LINE_CHARS


def test_undecodable_stderr_is_kept_with_replacement_characters(tmp_path: Path) -> None:
    ring = LogRing(tmp_path / "srv.log")
    ring.feed(b"bad \xff byte\n")
    assert ring.tail() == ("bad \ufffd byte",)
    ring.close()


def test_a_log_that_cannot_be_opened_still_keeps_the_tail(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    ring = LogRing(blocker / "srv.log")
    assert isinstance(ring.error, OSError)
    ring.feed(b"still here\n")
    assert ring.tail() == ("still here",)


def test_a_symlink_planted_at_the_log_path_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "srv.log").symlink_to(victim)
    ring = LogRing(tmp_path / "srv.log")
    ring.feed(b"x\n")
    assert ring.error is not None and ring.error.errno == errno.ELOOP
    assert victim.read_text() == "precious"


async def test_no_server_starts_while_a_predecessors_leftovers_are_swept(tmp_path: Path) -> None:
    from lazyd.core.cache import Snapshot
    from lazyd.core.lifecycle import machine as lc
    from lazyd.daemon.gate import Gate
    from lazyd.daemon.heap_trim import HeapTrimmer
    from lazyd.daemon.process.read_buffer import ReadBuffer
    from lazyd.core.policy import ToolPolicy
    from lazyd.daemon.runtime.cache_store import CacheStore
    from lazyd.daemon.runtime.config import DaemonParts, RuntimeConfig
    from lazyd.daemon.runtime.supervisor import ServerRuntime

    parts = DaemonParts(CacheStore(tmp_path / "cache"), HeapTrimmer(), Gate(), Gate(), ReadBuffer(), lambda: None,
                        ToolPolicy)
    config = RuntimeConfig("eager", "ab12", python_spec(tmp_path, "import sys; sys.stdin.read()"),
                           lc.LifecyclePolicy(eager=True), None, "refuse", False)
    parts.starting.close()  # the orphan sweep runs (lazyd/daemon/orphans.py)
    runtime = ServerRuntime(config, Snapshot(), parts)
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        await trio.sleep(0.3)
        assert runtime.proc is None  # an eager start, still waiting at the gate: no process was made
        parts.starting.open()
        with trio.fail_after(10):
            while runtime.proc is None:
                await trio.sleep(0.01)
        assert procfs.read_stat(runtime.proc.pid) is not None
        await runtime.close()
