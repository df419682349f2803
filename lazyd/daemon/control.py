"""Control operations on the daemon socket (lazyctl): the daemon side.

Each op takes a map of arguments and returns `(ok, data, error)`; `error` is one readable line.
Ops that name a server accept its readable name (a named server's name, or the command basename +
short hash an unnamed registration gets).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import trio

from lazyd.daemon.registry import Registry
from lazyd.daemon.supervisor import ServerRuntime

log = logging.getLogger("lazyd.control")

Result = tuple[bool, Any, str | None]


class Control:
    def __init__(self, registry: Registry, stop_daemon: trio.Event) -> None:
        self.registry = registry
        self.stop_daemon = stop_daemon

    async def __call__(self, op: str, args: dict[str, Any]) -> Result:
        handler = getattr(self, f"op_{op.replace('-', '_')}", None)
        if handler is None:
            return False, None, f"unknown control operation {op!r}"
        result: Result = await handler(args)
        return result

    def _runtime(self, args: dict[str, Any]) -> ServerRuntime | str:
        name = args.get("name")
        if not isinstance(name, str):
            return "a server name is required"
        runtime = self.registry.find(name)
        if runtime is None:
            known = ", ".join(sorted(r.name for r in self.registry.runtimes.values())) or "none"
            return f"no server named {name!r} (known: {known})"
        return runtime

    async def op_ping(self, args: dict[str, Any]) -> Result:
        return True, {"pid": os.getpid()}, None

    async def op_status(self, args: dict[str, Any]) -> Result:
        names = args.get("names") or []
        rows = [r.status() for r in self.registry.runtimes.values()]
        if names:
            unknown = [n for n in names if n not in {row["name"] for row in rows}]
            if unknown:
                return False, None, f"no server named {unknown[0]!r}"
            rows = [row for row in rows if row["name"] in names]
        return True, {"daemon_pid": os.getpid(), "servers": sorted(rows, key=lambda r: str(r["name"]))}, None

    async def op_wake(self, args: dict[str, Any]) -> Result:
        runtime = self._runtime(args)
        if isinstance(runtime, str):
            return False, None, runtime
        runtime.wake()
        with trio.move_on_after(runtime.config.policy.start_timeout_s + 5):
            await runtime.ready_event.wait()
        status = runtime.status()
        if status["state"] == "running":
            return True, status, None
        return False, status, f"{runtime.name} did not start: {runtime.last_exit or status['state']}"

    async def op_sleep(self, args: dict[str, Any]) -> Result:
        runtime = self._runtime(args)
        if isinstance(runtime, str):
            return False, None, runtime
        runtime.sleep()
        return True, runtime.status(), None

    async def op_logs(self, args: dict[str, Any]) -> Result:
        runtime = self._runtime(args)
        if isinstance(runtime, str):
            return False, None, runtime
        return True, {"path": str(runtime.config.spec.log_path)}, None

    async def op_stop(self, args: dict[str, Any]) -> Result:
        log.info("stop requested by lazyctl")
        self.stop_daemon.set()
        return True, {"pid": os.getpid()}, None
