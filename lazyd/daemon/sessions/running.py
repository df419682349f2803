"""What a server's process tree runs, looked up in /proc once it has answered, and remembered.

The known-servers table (lazyd/core/sharing/known_servers.py) names servers by package, and a
command line often does not (a wrapper that execs node, a bin link, `npx`, `uvx`, `docker run`). So
once a registration's process answered `initialize` (any wrapper has exec'd by then), the daemon
reads the command lines of that process and its descendants (lazyd/host/procfs.py), resolves
paths and reads the `package.json` a node script lies in (`tree_runs`). The names are kept by
cache digest in `<state dir>/runs.json`, so the next daemon decides before any start; every new
process is looked at again.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
from collections.abc import Iterable
from pathlib import Path

from lazyd.host import procfs
from lazyd.core.lifecycle.machine import State
from lazyd.core.sharing.known_servers import names_a_server, tree_runs, what_runs
from lazyd.daemon.runtime.supervisor import ServerRuntime
from lazyd.daemon import state_files
from lazyd.host.privatefiles import read_string_lists

log = logging.getLogger("lazyd.registry")

FILE_NAME = "runs.json"
MAX_ENTRIES = 512
MAX_NAMES = 16
MAX_FILE_BYTES = 256 * 1024
MAX_PROCESSES = 64  # of one tree: a server's launcher, its server, their helpers
MAX_PACKAGE_DEPTH = 8  # directories above a script searched for its package.json
MAX_PACKAGE_JSON_BYTES = 1024 * 1024
_NODE_SCRIPTS = (".js", ".mjs", ".cjs")


def look(root: int) -> list[str]:
    """The names of what the tree of `root` runs (root first, then its descendants)."""
    table = procfs.stats()
    children: dict[int, list[int]] = {}
    for pid, stat in sorted(table.items()):
        children.setdefault(stat.ppid, []).append(pid)
    order: list[int] = []
    queue = [root]
    while queue and len(order) < MAX_PROCESSES:
        pid = queue.pop(0)
        if pid in order:
            continue
        order.append(pid)
        queue.extend(children.get(pid, []))
    argvs: list[list[str]] = []
    resolved: list[list[str]] = []
    packages: list[str | None] = []
    for pid in order:
        words = procfs.read_cmdline(pid)
        if not words:
            continue
        argv = [w.decode("utf-8", "surrogateescape") for w in words]
        paths = _resolved_paths(pid, argv)
        argvs.append(argv)
        resolved.append(paths)
        packages.append(next((name for name in map(package_name, paths[1:]) if name), None))  # node scripts only
    return tree_runs(argvs, resolved, packages)


def _resolved_paths(pid: int, argv: list[str]) -> list[str]:
    """The real paths of the executable and of the arguments that name files (a script, a bin
    link), relative ones against the process's working directory."""
    try:
        cwd = os.readlink(f"{procfs.PROC}/{pid}/cwd")
    except OSError:
        cwd = "/"
    try:
        exe = os.path.realpath(f"{procfs.PROC}/{pid}/exe")
    except OSError:
        exe = ""
    paths = [exe]
    for arg in argv[:4]:  # the command and the script it runs come first
        if arg.startswith("-") or "/" not in arg and not arg.endswith((".js", ".mjs", ".cjs", ".py")):
            continue
        path = os.path.realpath(posixpath.join(cwd, arg))
        if os.path.isfile(path):
            paths.append(path)
    return paths


def package_name(path: str) -> str | None:
    """The `name` of the nearest package.json above a node script (a package's own name, also
    outside node_modules/), or None (for anything else too: a Python script's directory may hold
    some project's package.json)."""
    if not path.endswith(_NODE_SCRIPTS):
        return None
    directory = posixpath.dirname(path)
    for _ in range(MAX_PACKAGE_DEPTH):
        candidate = posixpath.join(directory, "package.json")
        try:
            with open(candidate, "rb") as f:
                data = json.loads(f.read(MAX_PACKAGE_JSON_BYTES))
        except (OSError, ValueError):
            data = None
        if isinstance(data, dict) and isinstance(data.get("name"), str) and data["name"]:
            return str(data["name"])
        parent = posixpath.dirname(directory)
        if parent == directory or posixpath.basename(directory) == "node_modules":
            return None
        directory = parent
    return None


class RunsRecord:
    """Names of what each registration's processes ran, by cache digest (the module docstring)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE_NAME
        self.table: dict[str, list[str]] = self._load()
        self.looked_at: dict[str, int] = {}  # cache digest -> the pid last looked at, this daemon

    def current(self, digest: str, runtimes: Iterable[ServerRuntime]) -> list[str] | None:
        """What the registration cached under `digest` runs: looked at in a process of it (among
        `runtimes`) that has answered its initialize, else as recorded, else None (never looked at)."""
        for runtime in runtimes:
            pid = runtime.life.pid
            if runtime.config.digest != digest or pid is None:
                continue
            instance = runtime.core.instance
            if runtime.life.state is State.RUNNING or (instance is not None and bool(instance.result)):
                return self.look(digest, pid)
        return self.names(digest)

    def name_of(self, runtime: ServerRuntime) -> str | None:
        """The name of what `runtime`'s registration runs, as the known-servers table would list
        it: from its process tree when one was looked at, else from its command line; None when
        no name says which server it is (`index`, `node`: an entry for it would cover others)."""
        names = self.names(runtime.config.digest) or what_runs(runtime.config.spec.argv)
        return next((name for name in names if names_a_server(name)), None)

    def names(self, digest: str) -> list[str] | None:
        """What the registration's tree ran, None when no process of it was looked at yet."""
        return self.table.get(digest)

    def look(self, digest: str, pid: int) -> list[str]:
        """Look at the tree of `pid`, once per process; record and return the names."""
        if self.looked_at.get(digest) == pid and digest in self.table:
            return self.table[digest]
        self.looked_at[digest] = pid
        names = look(pid)[:MAX_NAMES]
        if self.table.get(digest) != names:
            self.table.pop(digest, None)
            self.table[digest] = names
            while len(self.table) > MAX_ENTRIES:
                del self.table[next(iter(self.table))]
            self._save()
            log.info("what the process %d runs: %s", pid, ", ".join(names) or "nothing named")
        return names

    def record(self, digest: str, names: list[str]) -> None:
        """Record names looked up elsewhere (a `check`'s own process)."""
        if self.table.get(digest) != names[:MAX_NAMES]:
            self.table.pop(digest, None)
            self.table[digest] = names[:MAX_NAMES]
            self._save()

    def _load(self) -> dict[str, list[str]]:
        return read_string_lists(self.path, MAX_FILE_BYTES, MAX_ENTRIES, MAX_NAMES)

    def _save(self) -> None:
        state_files.save(self.path, self.table, durable=False)
