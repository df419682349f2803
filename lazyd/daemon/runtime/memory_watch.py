"""The memory watch: samples the trees of servers with a `memory_max`, and the machine's memory
pressure, every `SAMPLE_INTERVAL_S`; the decisions are the core's (lazyd/core/memory.py,
lazyd/core/pressure.py), carried out by the runtimes.

A sample is what an idle daemon spends, so: servers without a limit or a process are not looked
at; /proc is read once for the limited trees' RSS, and only a tree over its limit has its PSS read
(smaps_rollup walks the mappings), PSS being never above RSS; the pressure is one PSI file or two.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from lazyd.core.lifecycle.states import State
from lazyd.core.memory import SAMPLE_INTERVAL_S
from lazyd.core.pressure import Began, Candidate, Ended, PressureRelief, Sleep, parse_psi
from lazyd.daemon.process.tree import tree_members, tree_pss, tree_rss
from lazyd.host import procfs

if TYPE_CHECKING:
    from lazyd.daemon.runtime.supervisor import ServerRuntime
    from lazyd.daemon.sessions.registry import Registry

log = logging.getLogger("lazyd.memory")

SYSTEM_PSI = "/proc/pressure/memory"
_CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")  # cgroup v2 alone, or beside v1 (hybrid)


def default_pressure_files(cgroup_text: str | None, roots: tuple[str, ...] = _CGROUP_ROOTS) -> tuple[str, ...]:
    """/proc/pressure/memory, and the memory.pressure of the daemon's own cgroup v2 and of the
    user's slice above it (`user-UID.slice`), where such files exist."""
    files = [SYSTEM_PSI]
    path = next((line[3:] for line in (cgroup_text or "").splitlines() if line.startswith("0::")), "")
    if path.strip("/"):
        parts = path.strip("/").split("/")
        wanted = ["/".join(parts)]
        user = next((i for i, part in enumerate(parts) if part.startswith("user-") and part.endswith(".slice")), None)
        if user is not None and user + 1 < len(parts):
            wanted.append("/".join(parts[:user + 1]))
        for relative in wanted:
            for root in roots:
                candidate = f"{root}/{relative}/memory.pressure"
                if os.path.exists(candidate):
                    files.append(candidate)
                    break
    return tuple(files)


class MemoryWatch:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.relief = PressureRelief(registry.config.pressure)
        self._default_files: tuple[str, ...] | None = None

    async def run(self) -> None:
        while True:
            await trio.sleep(SAMPLE_INTERVAL_S)
            try:
                self.sample()
            except Exception:
                # It runs in the daemon's own nursery: a bug here must cost a sample, not the daemon.
                log.exception("memory watch: a sample failed")

    def pressure_files(self) -> tuple[str, ...]:
        files = self.registry.config.pressure.files
        if files:
            return files
        if self._default_files is None:
            try:
                cgroup = Path("/proc/self/cgroup").read_text(encoding="utf-8", errors="replace")
            except OSError:
                cgroup = None
            self._default_files = default_pressure_files(cgroup)
        return self._default_files

    def read_pressure(self) -> float | None:
        """The highest `some avg10` of the pressure files; None when none can be read."""
        figures = []
        for path in self.pressure_files():
            try:
                with open(path, encoding="ascii", errors="replace") as file:
                    pct = parse_psi(file.read(4096))
            except OSError:
                continue
            if pct is not None:
                figures.append(pct)
        return max(figures, default=None)

    def sample(self) -> None:
        runtimes = list(self.registry.runtimes.values())
        limited = [r for r in runtimes if r.memory is not None and r.proc is not None]
        if limited:
            table = procfs.stats()
            for runtime in limited:
                proc, limit = runtime.proc, runtime.memory
                if proc is None or limit is None:
                    continue
                members = tree_members(proc.pid, table)
                size = tree_rss(members, table)
                if size > limit.limit:
                    size = tree_pss(members, table)
                runtime.memory_sample(proc.pid, size)
        settings = self.registry.config.pressure
        if self.relief.settings != settings:
            self.relief.settings = settings  # a reload changed [pressure]
        if settings.enabled:
            self._relieve(runtimes)

    def _relieve(self, runtimes: list[ServerRuntime]) -> None:
        pct = self.read_pressure()
        by_name = {r.name: r for r in runtimes}
        candidates = [Candidate(r.name, r.life.state is State.RUNNING and r.proc is not None,
                                r.core.inflight_count() > 0, r.config.policy.keep_alive, r.life.last_activity)
                      for r in runtimes]
        for action in self.relief.sample(trio.current_time(), pct, candidates):
            if isinstance(action, Began):
                log.warning("memory pressure: some avg10 %.1f%% reached %g%%: putting idle servers to sleep, "
                            "least recently used first", action.pct, self.relief.settings.start_pct)
            elif isinstance(action, Ended):
                log.info("memory pressure over: some avg10 %.1f%% is under %g%%", action.pct,
                         self.relief.settings.stop_pct)
            elif isinstance(action, Sleep):
                runtime = by_name.get(action.name)
                if runtime is not None:
                    runtime.pressure_sleep(action.reason)

    def status(self) -> dict[str, object]:
        """What `lazyctl status --json` shows of it: `pressure`."""
        settings = self.relief.settings
        return {"enabled": settings.enabled, "some_avg10": self.relief.last_pct,
                "under_pressure": self.relief.under_pressure, "start_pct": settings.start_pct,
                "stop_pct": settings.stop_pct, "files": list(self.pressure_files()),
                "interval_s": SAMPLE_INTERVAL_S}
