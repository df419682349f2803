"""A server's process tree as the kernel sees it: which processes belong to it, and their memory.

Read from /proc in one pass (`proc_table`, lazyd/procfs.py), then summed per server
(`process_tree_usage`), so a status of many servers reads /proc once.
"""

from __future__ import annotations

from collections.abc import Mapping

from lazyd import procfs
from lazyd.procfs import Stat

ProcTable = dict[int, Stat]  # pid -> its /proc/<pid>/stat fields


def proc_table() -> ProcTable:
    """pid -> Stat for every live process."""
    return procfs.stats()


def process_tree_usage(root: int, table: Mapping[int, Stat]) -> tuple[int, int]:
    """(processes, resident bytes) of `root`, its descendants and its process group and session.

    Descendants catch children that made their own group; group and session catch grandchildren
    whose parent died (they are reparented, but still killed with the group).
    """
    if root not in table:
        return 0, 0
    children: dict[int, list[int]] = {}
    for pid, stat in table.items():
        children.setdefault(stat.ppid, []).append(pid)
    members = {pid for pid, stat in table.items() if stat.pgrp == root or stat.session == root}
    seen: set[int] = set()
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid not in seen:
            seen.add(pid)
            stack.extend(children.get(pid, []))
    members |= seen
    return len(members), sum(table[pid].rss_pages for pid in members) * procfs.PAGE_BYTES
