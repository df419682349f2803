"""Tests of shim/pause.py: the code is its source's assembly, and the pause, run from a memfd as the
shim runs it, waits as dash's `read` did: a line exits 0, the socket's end execs the shell, the
shim's signal rules hold, in a few KiB.

Testing policy: real processes, a real socketpair as the daemon's socket at descriptor 9, the
pause exec'd from its memfd by a real interpreter (the shim's way); the "shell" is a probe that
says what it was given and what it then reads.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shim import pause

HERE = os.uname().machine == pause.MACHINE
needs_x86_64 = pytest.mark.skipif(not HERE, reason=f"the pause runs on {pause.MACHINE} only")

# The shim's way: a memfd, exec'd by descriptor, descriptor 9 the daemon's socket.
RUNNER = (
    "import os, sys\n"
    "from shim import pause\n"
    "fd = pause.memfd(pause.image())\n"
    "os.dup2(int(sys.argv[1]), 9)\n"
    "os.execve(fd, ['lazyd-wait', *sys.argv[2:]], os.environ)\n"
)
PROBE = "import os, sys; print('went on', sys.argv[1:], os.read(9, 100), flush=True)"


def run_pause(*command: str) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """The pause, waiting on the near end of a new socketpair; returns it and the far (daemon's) end."""
    daemon, shim = socket.socketpair()
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(shim.fileno()), *command], pass_fds=[shim.fileno()],
                            stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parents[2])
    shim.close()
    deadline = time.monotonic() + 10
    while _comm(proc.pid) != "lazyd-wait":
        assert proc.poll() is None and time.monotonic() < deadline, "the pause did not start"
        time.sleep(0.01)
    return proc, daemon


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_the_code_is_what_gnu_as_makes_of_the_source(tmp_path: Path) -> None:
    tools = [shutil.which("as"), shutil.which("objcopy")]
    if None in tools or not HERE:
        print("skipping: no GNU as and objcopy for x86-64 here")
        pytest.skip("no GNU as and objcopy for x86-64")
    (tmp_path / "pause.s").write_text(pause.SOURCE)
    subprocess.run(["as", "--64", "-o", tmp_path / "pause.o", tmp_path / "pause.s"], check=True)
    subprocess.run(["objcopy", "-O", "binary", "-j", ".text", tmp_path / "pause.o", tmp_path / "code"], check=True)
    assert (tmp_path / "code").read_bytes() == pause.CODE
    relocations = subprocess.run(["objdump", "-r", tmp_path / "pause.o"], capture_output=True, text=True).stdout
    assert "R_X86_64" not in relocations  # position-independent: the image needs no loader


def test_the_image_is_an_elf_executable_that_loads_the_code_at_its_entry_point() -> None:
    image = pause.image()
    assert image[:4] == b"\x7fELF" and image.endswith(pause.CODE)
    entry = int.from_bytes(image[24:32], "little")
    assert entry == pause.BASE + len(image) - len(pause.CODE)


@needs_x86_64
def test_a_line_from_the_daemon_ends_the_pause_with_0_and_runs_nothing() -> None:
    proc, daemon = run_pause(sys.executable, "-c", PROBE)
    with daemon:
        daemon.sendall(b"anything up to a newline\n")
        assert proc.wait(10) == 0
    assert proc.stdout is not None and proc.stdout.read() == b""


@needs_x86_64
def test_the_end_of_the_socket_runs_the_shell_with_its_arguments_on_the_same_descriptors() -> None:
    # A line cut short (no newline) is not the cue: dash's `read` returned false on it too.
    proc, daemon = run_pause(sys.executable, "-c", PROBE, "a b", "--resume-handoff=5")
    daemon.sendall(b"half a line")
    daemon.close()
    assert proc.wait(10) == 0
    assert proc.stdout is not None
    assert proc.stdout.read() == b"went on ['a b', '--resume-handoff=5'] b''\n"  # the shell's read: the end at once


@needs_x86_64
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 0), (signal.SIGHUP, 0), (signal.SIGINT, 130)])
def test_the_shims_signal_rules_hold_while_it_pauses(signum: int, status: int) -> None:
    proc, daemon = run_pause(sys.executable, "-c", PROBE)
    with daemon:
        proc.send_signal(signum)
        assert proc.wait(10) == status


@needs_x86_64
def test_a_shell_that_cannot_be_run_ends_the_pause_with_127() -> None:
    proc, daemon = run_pause("/nonexistent/dash")
    daemon.close()
    assert proc.wait(10) == 127


@needs_x86_64
def test_the_pause_holds_a_few_kib_where_dash_holds_more_than_a_mebibyte() -> None:
    proc, daemon = run_pause(sys.executable, "-c", PROBE)
    with daemon:
        status = Path(f"/proc/{proc.pid}/status").read_text()
        rss_kib = int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])
        assert rss_kib <= 64, status
        daemon.sendall(b"\n")
        assert proc.wait(10) == 0


def test_it_runs_only_on_the_machine_its_code_is_for(monkeypatch: pytest.MonkeyPatch) -> None:
    assert pause.runs_here() == HERE
    monkeypatch.setattr(pause, "MACHINE", "riscv128")
    assert not pause.runs_here()


@needs_x86_64
def test_on_a_kernel_that_knows_no_mfd_exec_the_memfd_is_made_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    made = os.memfd_create
    asked: list[int] = []

    def before_6_3(name: str, flags: int = os.MFD_CLOEXEC) -> int:
        asked.append(flags)
        if flags & pause.MFD_EXEC:
            raise OSError(errno.EINVAL, "Invalid argument")
        return made(name, flags)

    monkeypatch.setattr(os, "memfd_create", before_6_3)
    fd = pause.memfd(pause.image())
    assert fd is not None and asked == [os.MFD_CLOEXEC | pause.MFD_EXEC, os.MFD_CLOEXEC]
    os.close(fd)


@needs_x86_64
def test_where_no_executable_memfd_may_be_made_there_is_no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    def noexec_2(name: str, flags: int = os.MFD_CLOEXEC) -> int:
        raise OSError(errno.EACCES, "Permission denied")  # vm.memfd_noexec=2 refuses MFD_EXEC

    monkeypatch.setattr(os, "memfd_create", noexec_2)
    assert pause.memfd(pause.image()) is None
