"""A server's process tree as the kernel sees it: which processes belong to it, and their memory.

/proc is read once per status (`procfs.stats`), then gathered per server (`tree_members`). A tree's
memory is its processes' PSS (`tree_pss`): launchers and the server they run share their binaries'
pages, which RSS would count once per process. PSS walks each process's mappings, so the memory
watch screens with RSS first (`tree_rss`): PSS is never above it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from lazyd.host import procfs
from lazyd.host.procfs import Stat

ProcTable = dict[int, Stat]  # pid -> its /proc/<pid>/stat fields


def tree_members(root: int, table: Mapping[int, Stat], *, group_and_session: bool = True) -> set[int]:
    """`root`, its descendants and (unless told otherwise) every process of its group and session;
    empty when `root` is not in `table`. Group and session catch grandchildren whose parent died; a
    process that does not lead its session (a client's shim) is measured without them."""
    if root not in table:
        return set()
    children: dict[int, list[int]] = {}
    for pid, stat in table.items():
        children.setdefault(stat.ppid, []).append(pid)
    seen: set[int] = set()
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid not in seen:
            seen.add(pid)
            stack.extend(children.get(pid, []))
    if group_and_session:
        seen |= {pid for pid, stat in table.items() if stat.pgrp == root or stat.session == root}
    return {pid for pid in seen if pid == root or table[pid].state != "Z"}


def tree_rss(members: Iterable[int], table: Mapping[int, Stat]) -> int:
    """The resident bytes of `members` as /proc/<pid>/stat counts them: cheap, and never below PSS."""
    return sum(table[pid].rss_pages for pid in members if pid in table) * procfs.PAGE_BYTES


def tree_cpu_ticks(members: Iterable[int], table: Mapping[int, Stat]) -> int:
    """The CPU time `members` used so far, in clock ticks (procfs.CLOCK_TICKS a second)."""
    return sum(table[pid].cpu_ticks for pid in members if pid in table)


def tree_pss(members: Iterable[int], table: Mapping[int, Stat] | None = None) -> int:
    """The PSS of `members` in bytes; a process whose smaps_rollup cannot be read (gone, or not
    ours) counts its resident size from `table` instead, or nothing."""
    total = 0
    for pid in members:
        pss = procfs.read_pss(pid)
        if pss is None and table is not None and pid in table:
            pss = table[pid].rss_pages * procfs.PAGE_BYTES
        total += pss or 0
    return total

