"""A server's process tree as the kernel sees it: which processes belong to it, and their memory.

Read from /proc/<pid>/stat in one pass (`proc_table`), then summed per server
(`process_tree_usage`), so a status of many servers reads /proc once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# pid -> (ppid, pgrp, session, rss pages)
ProcTable = dict[int, tuple[int, int, int, int]]

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")  # /proc/<pid>/stat counts resident memory in pages


def proc_table() -> ProcTable:
    """pid -> (ppid, pgrp, session, rss pages) for every live process, from /proc/<pid>/stat."""
    table: ProcTable = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue  # exited while we looked
        # proc(5): the command name may hold spaces and ")"; fields count from after its last ")".
        fields = data[data.rindex(b")") + 2:].split()
        table[int(entry)] = (int(fields[1]), int(fields[2]), int(fields[3]), int(fields[21]))
    return table


def process_tree_usage(root: int, table: Mapping[int, tuple[int, int, int, int]]) -> tuple[int, int]:
    """(processes, resident bytes) of `root`, its descendants and its process group and session.

    Descendants catch children that made their own group; group and session catch grandchildren
    whose parent died (they are reparented, but still killed with the group).
    """
    if root not in table:
        return 0, 0
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    members = {pid for pid, (_, pgrp, sid, _) in table.items() if pgrp == root or sid == root}
    seen: set[int] = set()
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid not in seen:
            seen.add(pid)
            stack.extend(children.get(pid, []))
    members |= seen
    return len(members), sum(table[pid][3] for pid in members) * PAGE_BYTES
