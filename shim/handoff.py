"""Handing the client's stdin and stdout to the daemon, and waiting while it serves them.

After the hello the daemon can read and write the client's pipes itself (docs/protocol.md,
"Hand-off"): one hop instead of two. The shim then only has to be there: the client watches its
process, it holds its own copies of the pipes (so they stay open if the daemon goes), and it must
take over when the daemon is lost. So it waits in something small:

- `offer` prepares what goes with the hello: for a pipe, a description of its own opened through
  /proc/self/fd with O_NONBLOCK (the daemon needs non-blocking reads, and setting O_NONBLOCK on the
  shim's own description would change the shim's copy too); a socket (Node clients give socketpairs)
  as it is, the daemon then using MSG_DONTWAIT; and the shared region (lazyd/handoff/region.py).
  A terminal, a file or /dev/null is not offered: the frame path serves those.
- `wait` replaces this process (same pid, same descriptors) with the pause (shim/pause.py, 16 KiB
  resident), which blocks on the daemon socket and, once it ends, execs the shell (dash, 1.7 MiB;
  Python would be 10), whose `read` then finds the same end at once; where the pause cannot run,
  the shell waits from the start. A line from the daemon means "the client left, exit 0"; EOF
  means the daemon is gone or let the session go, and the shell execs this shim again with
  `--resume-handoff=FD` to recover (shim/recover.py). Where no shell can be run, the shim waits
  itself.
"""

from __future__ import annotations

import os
import stat
import sys

from lazyd.handoff.recovery import ERROR_TAIL as ERROR_TAIL  # the lost-connection error after an id

from . import connect, slots
from .slots import SLOT_ENV, SLOT_FD
from .slots import WAIT_S as SLOT_WAIT_S

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from .options import Log

WAIT_FD = 9
# The daemon socket's descriptor in the waiting shell: dash's redirections take one digit only.

SHELLS = ("/bin/dash", "/usr/bin/dash")
# dash, whatever /bin/sh is: 1.7 MiB resident. Without it the session is not handed off (bash
# would wait in 3 MiB, Python in 10: the frame path is then the better deal).

RESUME_JITTER_S = 1.0
# After the daemon is gone, a waiter that cannot take a resume slot (shim/slots.py) waits a random
# part of this before it runs Python again: a daemon crash wakes every waiter at the same instant.

WAIT_SCRIPT = (f"trap 'kill $! 2>/dev/null; exit 0' TERM HUP; trap 'kill $! 2>/dev/null; exit 130' INT; "
               f"read -r _ <&{WAIT_FD} && exit 0; exec {WAIT_FD}<&-; "
               f'if [ -n "$2" ] && [ -d "${{3%/*}}" ] && command exec {SLOT_FD}>>"$3"; then '
               f'if "$2" -w {SLOT_WAIT_S} {SLOT_FD} & wait $!; then export {SLOT_ENV}={SLOT_FD}; '
               f"else exec {SLOT_FD}>&-; fi; "
               'else sleep "$1" 2>/dev/null & wait $!; fi; '
               '[ -x "$8" ] || exec python3 -I -S -c "$4" "$@"; '
               '[ -z "$7" ] || exec "$8" -I -S -c "$5" "$0" "$@"; shift 7; exec "$@"')
# The shim's own signal rules (main.py): SIGTERM and SIGHUP end it quietly with 0, SIGINT with
# 130, also while it queues or sleeps (a trapped signal ends `wait`; the trap ends what it waited
# for). Its arguments: the pause, flock(1)'s path ("" where there is none), the slot's lock file,
# ORPHAN_SCRIPT, the quick resumer's script (shim/quick.py), the daemon's socket, the adopting
# hello's memfd ("" where there is none), then the shim's command line to exec. A slot is taken on
# SLOT_FD before Python starts and named to the shim in its environment (shim/slots.py); the queue
# for the slots spreads the resumes, so the pause is only for a shell without one (no flock, no
# directory). A slot whose wait ran out is done without. The shim's interpreter then runs the quick
# resumer, which has the daemon adopt the session and execs this shell again, or execs the full
# shim (shim/recover.py); with no adopting hello, the full shim at once. A shim that is no longer
# there (its environment deleted) cannot be exec'd: the system's python3 then runs ORPHAN_SCRIPT,
# which answers what was in flight itself, and the session ends.

ORPHAN_SCRIPT = r"""
import os, sys
fd, out = int(next(a for a in sys.argv if a.startswith("--resume-handoff="))[17:]), []
if os.pread(fd, 4, 0) == MAGIC:
    if os.pread(fd, 1, TORN) != b"\0": out.append(b"\n")
    table = os.pread(fd, TABLE_BYTES, TABLE_OFFSET)
    for at in range(0, len(table), ENTRY):
        if table[at]: out.append(b'{"jsonrpc":"2.0","id":' + table[at + 1 : at + 1 + table[at]] + TAIL + b"\n")
os.write(1, b"".join(out))
sys.stderr.write("lazyd-shim: the shim is no longer installed; the session ends\n")
"""
# Reads the layout's header, torn byte and table (lazyd/handoff/region.py; `orphan_script` fills
# in its constants). Like shim/recover.py it ends a line only for the torn byte: the whole byte
# beside it (a write of whole lines or none) needs no newline, so it is not read.

RESUME_FLAG = "--resume-handoff="  # as shim/main.py reads it
WAITER_ENV = "LAZYD_TEST_WAITER"
# Undocumented test seam, read when a session starts: "python" makes the shim wait itself (as
# where dash cannot be exec'd), "none" plays a system without dash, "dash" one where the pause
# (shim/pause.py) cannot run, so that the shell waits itself.



class Offer:
    """The descriptors a hello carries: the client's stdin and stdout as the daemon will use them,
    and the region. `close_passed` drops this process's extra copies once they are sent."""

    def __init__(self, fds: list[int], own: list[int], region: int) -> None:
        self.fds = fds
        self._own = own  # descriptors opened only to be passed
        self.region = region

    def close_passed(self) -> None:
        for fd in self._own:
            os.close(fd)
        self._own = []


def _passable(fd: int, flags: int) -> tuple[int, bool] | None:
    """The descriptor to pass for `fd` and whether it was opened for that; None if it cannot be."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return None
    if stat.S_ISSOCK(mode):
        return fd, False
    if not stat.S_ISFIFO(mode):
        return None  # a terminal, a file, /dev/null: nothing a daemon should hold
    try:
        return os.open(f"/proc/self/fd/{fd}", flags | os.O_NONBLOCK | os.O_CLOEXEC), True
    except OSError:
        return None  # no /proc to reopen it through, or the reader of our stdout is gone


def orphan_script() -> str:
    """ORPHAN_SCRIPT with the layout's constants in it."""
    from lazyd.handoff import region as hs

    values = {"MAGIC": repr(hs.MAGIC), "TORN": str(hs.TORN_OFFSET), "TABLE_BYTES": str(hs.TABLE_ENTRIES * hs.ENTRY_BYTES),
              "TABLE_OFFSET": str(hs.TABLE_OFFSET), "ENTRY": str(hs.ENTRY_BYTES), "TAIL": repr(ERROR_TAIL)}
    script = ORPHAN_SCRIPT
    for name, value in values.items():
        script = script.replace(name, value)
    return script


def waiter() -> str | None:
    """The shell a handed-off shim waits in; None where there is none (or the test seam says so)."""
    if os.environ.get(WAITER_ENV) == "python":
        return "python"
    if os.environ.get(WAITER_ENV) == "none":
        return None
    return next((shell for shell in SHELLS if os.access(shell, os.X_OK)), None)


def offer(region: int | None, log: Log) -> Offer | None:
    """What to pass with the hello, or None when the client's stdio cannot be handed off."""
    if waiter() is None:
        log(f"no hand-off: no dash to wait in ({' or '.join(SHELLS)}); relaying")
        return None
    ends: list[tuple[int, bool]] = []
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY)):
        found = _passable(fd, flags)
        if found is None:
            _close_own(ends)
            log(f"no hand-off: fd {fd} is neither a socket nor a pipe it can reopen through /proc/self/fd")
            return None
        ends.append(found)
    if region is None:
        from lazyd.handoff.region import create_region

        try:
            region = create_region()
        except OSError as exc:  # no memfd, no sealing (not Linux, an old kernel): frames
            _close_own(ends)
            log(f"no hand-off: cannot create the shared region: {exc.strerror or exc}")
            return None
    return Offer([ends[0][0], ends[1][0], region], [opened for opened, own in ends if own], region)


def _close_own(ends: list[tuple[int, bool]]) -> None:
    """Close the descriptors this shim opened for an offer it gives up (not the client's own)."""
    for opened, own in ends:
        if own:
            os.close(opened)


def recovery_argv(region: int, args: list[str]) -> list[str]:
    """This shim's own command line, to run it again as the recovery of a hand-off session."""
    # sys.orig_argv is [python, interpreter options, script | -c code | -m module, arguments...];
    # sys.argv[1:] are those arguments, so what comes before them runs this shim again.
    orig = list(sys.orig_argv)
    prefix = orig[: len(orig) - (len(sys.argv) - 1)]
    return [sys.executable, *prefix[1:], f"{RESUME_FLAG}{region}", *args]


def _above_fixed(fd: int) -> int:
    """`fd`, or a copy (close-on-exec) clear of the socket's and the slot's places in the shell."""
    if fd not in (WAIT_FD, SLOT_FD):
        return fd
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)


def _pause(fd: int | None, command: list[str], log: Log) -> None:
    """Wait in the pause (shim/pause.py) at descriptor `fd`, which runs `command`, the waiting
    shell, once the daemon's socket ends; returns where it cannot run."""
    if fd is None:
        return
    log(f"handed off; waiting in the pause ({command[0]} once the daemon's socket ends)")
    try:
        os.execve(fd, ["lazyd-wait", *command], os.environ)
    except OSError as exc:  # a memfd that may not be run (vm.memfd_noexec): the shell waits itself
        log(f"cannot run the pause: {exc.strerror or exc}")
    os.close(fd)


def wait(conn: connect.Connection, region: int, args: list[str], log: Log, socket_path: str | None = None,
         slot: int | None = None) -> None:
    """Wait while the daemon serves the client (see the module docstring). Ends the process, or
    execs the waiting shell; returns (with `conn` closed) only where this process itself waited
    and the daemon let go: the caller then takes the session back (shim/recover.py). The resume
    slots (shim/slots.py) are those beside `socket_path`; with None the shell resumes without one.
    `slot`, the one this shim holds (close-on-exec), is freed by the exec or before waiting here."""
    sock = conn.sock.fileno()
    region = _above_fixed(region)
    os.set_inheritable(region, True)
    if os.environ.get(WAITER_ENV) != "python":
        from . import pause, quick

        hello = quick.hello_memfd(conn.hello) if conn.hello is not None and socket_path is not None else None
        if hello is not None:
            hello = _above_fixed(hello)
            os.set_inheritable(hello, True)
        if sock != WAIT_FD:
            os.dup2(sock, WAIT_FD)  # inheritable
        else:
            os.set_inheritable(sock, True)
        # Not `random`: its import (hashlib, bisect, warnings) costs every session start ~2 ms.
        jitter = f"{int.from_bytes(os.urandom(2), 'big') / 0xFFFF * RESUME_JITTER_S:.3f}"
        flock = slots.flock_path() if socket_path is not None else ""
        lock_file = slots.slot_path(socket_path, os.getpid()) if socket_path is not None else ""
        orphan = orphan_script()
        argv = recovery_argv(region, args)
        if lock_file and not flock:
            log(f"no flock(1) ({' or '.join(slots.FLOCKS)}): after a daemon crash this session resumes without a slot")
        image = pause.image() if pause.runs_here() and os.environ.get(WAITER_ENV) != "dash" else b""
        for shell in SHELLS:
            command = [shell, "-c", WAIT_SCRIPT, "lazyd-shim", jitter, flock, lock_file, orphan,
                       quick.script(shell, WAIT_SCRIPT, WAIT_FD, image), socket_path or "",
                       "" if hello is None else str(hello), *argv]
            if image and os.access(shell, os.X_OK):
                _pause(pause.memfd(image), command, log)  # returns only where the pause cannot run
            log(f"handed off; waiting in {shell}")
            try:
                os.execv(shell, command)
            except OSError:
                continue
        os.set_inheritable(WAIT_FD, False)
        if hello is not None:
            os.close(hello)
        log("no shell to wait in; waiting in this process")
    else:
        log("handed off; waiting in this process")
    slots.release(slot)
    try:
        data = conn.sock.recv(1)
    except OSError:
        data = b""
    if data:
        log("the client left; exiting")
        os._exit(0)
    conn.sock.close()
