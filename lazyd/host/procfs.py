"""The one reader of /proc: process status fields, environments, command lines, cgroups.

Every read is of a process that may exit meanwhile: one that is gone or unreadable is None (or
left out of a listing), never an exception, except `start_time_ticks`, for a child the caller
knows is alive. /proc/<pid>/stat's command name may hold spaces and parentheses: fields are counted
from after its last ")", so no name can shift them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

PROC = "/proc"
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")  # /proc/<pid>/stat counts resident memory in pages
# proc(5) field numbers (1-based, as the manual counts them) of /proc/<pid>/stat.
_STATE, _PPID, _PGRP, _SESSION, _UTIME, _STIME, _STARTTIME, _RSS = 3, 4, 5, 6, 14, 15, 22, 24
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # the unit of /proc/<pid>/stat's times
_FIRST_AFTER_COMM = 3  # fields after the command name start with field 3


@dataclass(frozen=True)
class Stat:
    """The fields of /proc/<pid>/stat that lazyd reads."""

    state: str  # "R", "S", "Z" ...: a zombie ("Z") has exited and waits to be reaped
    ppid: int
    pgrp: int
    session: int
    start_ticks: int  # start time in clock ticks since boot: with the pid, it names one process
    rss_pages: int
    # User and system time in clock ticks: it moves between two reads, so it is not compared.
    cpu_ticks: int = field(default=0, compare=False)


def _field(fields: list[bytes], number: int) -> bytes:
    return fields[number - _FIRST_AFTER_COMM]


def parse_stat(data: bytes) -> Stat | None:
    """The text of /proc/<pid>/stat; None when it is not in the expected shape."""
    head, sep, rest = data.rpartition(b")")
    fields = rest.split()
    if not sep or b"(" not in head or len(fields) < _RSS - _FIRST_AFTER_COMM + 1:
        return None
    try:
        return Stat(state=_field(fields, _STATE).decode("ascii", "replace"), ppid=int(_field(fields, _PPID)),
                    pgrp=int(_field(fields, _PGRP)), session=int(_field(fields, _SESSION)),
                    start_ticks=int(_field(fields, _STARTTIME)), rss_pages=int(_field(fields, _RSS)),
                    cpu_ticks=int(_field(fields, _UTIME)) + int(_field(fields, _STIME)))
    except ValueError:
        return None


_READ_BYTES = 65536  # per read; an environment can be longer, so a read goes on until EOF


def _read(pid: int, name: str) -> bytes | None:
    # os.open and os.read rather than open(): no buffered file object for a read that is one
    # syscall, on paths that read many (a session start, the orphan sweep; docs/benchmarks.md).
    try:
        fd = os.open(f"{PROC}/{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # exited while we looked, or not ours to read
    try:
        chunks = []
        while chunk := os.read(fd, _READ_BYTES):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)



def read_stat(pid: int) -> Stat | None:
    data = _read(pid, "stat")
    return parse_stat(data) if data is not None else None


def start_time_ticks(pid: int) -> int:
    """The start time of a live child `pid`; raises OSError if it cannot be read."""
    stat = read_stat(pid)
    if stat is None:
        raise ProcessLookupError(f"no readable /proc/{pid}/stat")
    return stat.start_ticks


def busy_threads(pid: int) -> int:
    """How many threads of `pid` are running or waiting for the disk ("R" or "D") now: 0 when it
    sleeps (waits for input, a timer, a lock) or is gone."""
    try:
        tids = os.listdir(f"{PROC}/{pid}/task")
    except OSError:
        return 0
    busy = 0
    for tid in tids:
        stat = _read(pid, f"task/{tid}/stat")
        parsed = parse_stat(stat) if stat is not None else None
        if parsed is not None and parsed.state in ("R", "D"):
            busy += 1
    return busy


def pids() -> Iterator[int]:
    """Every pid /proc lists now (some may be gone by the time they are read)."""
    for entry in os.listdir(PROC):
        if entry.isdigit():
            yield int(entry)


def stats() -> dict[int, Stat]:
    """pid -> Stat of every process, read in one pass."""
    table: dict[int, Stat] = {}
    for pid in pids():
        stat = read_stat(pid)
        if stat is not None:
            table[pid] = stat
    return table


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in process group `pgid`, in pid order."""
    return sorted(pid for pid, stat in stats().items() if stat.pgrp == pgid and stat.state != "Z")


def read_environ(pid: int) -> list[bytes] | None:
    """The environment `pid` started with, as NAME=VALUE items."""
    data = _read(pid, "environ")
    return [item for item in data.split(b"\0") if item] if data is not None else None


def read_cmdline(pid: int) -> list[bytes] | None:
    """The argv of `pid` (empty for a kernel thread or a zombie)."""
    data = _read(pid, "cmdline")
    if data is None:
        return None
    words = data.split(b"\0")
    if words[-1] == b"":
        words.pop()  # each word ends with a NUL, the last one too
    return words


def read_cgroup(pid: int) -> str | None:
    data = _read(pid, "cgroup")
    return data.decode("utf-8", "replace") if data is not None else None


def read_comm(pid: int) -> str | None:
    """The process's command name (at most 15 bytes, as the kernel keeps it), or None."""
    data = _read(pid, "comm")
    return data.rstrip(b"\n").decode("utf-8", "replace") if data is not None else None


def read_pss(pid: int) -> int | None:
    """The proportional set size of `pid` in bytes (smaps_rollup's `Pss:`), or None: shared pages
    split among their processes, so PSS adds up where RSS counts a shared page once per process.
    The kernel walks the mappings to answer: callers read it only when they need it."""
    data = _read(pid, "smaps_rollup")
    if data is None:
        return None
    for line in data.splitlines():
        if line.startswith(b"Pss:"):
            fields = line.split()
            try:
                return int(fields[1]) * 1024  # in kB, as every size in that file
            except (IndexError, ValueError):
                return None
    return None  # a kernel thread, or a zombie: no mappings
