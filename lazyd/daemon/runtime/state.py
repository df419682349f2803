"""One server runtime written for a successor daemon, and rebuilt by it (lazyd/daemon/runtime/supervisor.py).

What a runtime is: its configuration, its relay core and lifecycle (their own state: lazyd/core/),
the tool-policy gate's held calls, its process (pid, group, start time, the three pipe
descriptors, what was read of its stdout and not yet relayed), and small facts for status and
the exit report. Its configuration is split by the rule of lazyd/daemon/upgrade/state.py: what
could be a secret (command, arguments, working directory, environment, the wake predicate's
command) goes to the secrets, the rest to the state.

Rebuilt, the runtime starts with `adopt` instead of `boot()`: the process is taken over
(lazyd/daemon/upgrade/adopted.py) and read and written as if just spawned; a stop ladder that was under
way begins again; a wake predicate that was running is killed and counted as timed out (its
result would have come to the predecessor); a process that is gone by now is an exit like any
other: whatever waited on it is answered, and the lifecycle decides what follows.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from lazyd import procfs
from lazyd.config.load import WakePredicate
from lazyd.core.lifecycle import machine as lc
from lazyd.core import state_codec as sc
from lazyd.core.lifecycle.persist import lifecycle_from_state, lifecycle_state
from lazyd.core.cache import Snapshot
from lazyd.core.relay.core import RelayCore
from lazyd.daemon.upgrade.adopted import adopt_child, stdout_leftover
from lazyd.daemon.runtime.cache_store import CacheStore
from lazyd.daemon.process.command import SpawnSpec
from lazyd.daemon.runtime.policy_gate import RuntimeGate
from lazyd.daemon.runtime.config import RuntimeConfig
from lazyd.daemon.runtime.supervisor import ServerRuntime
from lazyd.errors import AdoptionError, LifecycleError

__all__ = ["runtime_state", "runtime_secrets", "restore_runtime", "state_fds", "gone"]

log = logging.getLogger("lazyd.adopt")

_POLICY_FIELDS = ("start_timeout_s", "linger_s", "check_linger_s", "idle_timeout_s", "keep_alive", "eager", "wake_interval_s",
                  "wake_timeout_s")


def _fd(stream: object) -> int | None:
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, trio.ClosedResourceError, OSError):
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


def runtime_state(runtime: ServerRuntime, now: float) -> dict[str, Any]:
    """Everything of `runtime` but its secrets, at monotonic `now` (see the module docstring)."""
    config, proc = runtime.config, runtime.proc
    state: dict[str, Any] = {
        "name": runtime.name,
        "config": {"name": config.name, "digest": config.digest, "sampling_policy": config.sampling_policy,
                   "share": config.share, "era": config.era, "log_path": str(config.spec.log_path),
                   "max_line_bytes": config.spec.max_line_bytes,
                   "policy": {name: getattr(config.policy, name) for name in _POLICY_FIELDS}},
        "core": runtime.core.to_state(),
        "life": lifecycle_state(runtime.life, now),
        "gate": runtime.gate.core.to_state() if isinstance(runtime.gate, RuntimeGate) else None,
        "sessions": sorted(runtime.sessions),
        "last_exit": runtime.last_exit, "started_wall": runtime.started_wall, "spawned_wall": runtime.spawned_wall,
        "kill_reason": runtime._kill_reason, "stop_requested": runtime._stop_requested,
        "predicate_child": list(runtime.predicate_child) if runtime.predicate_child is not None else None,
        "upgrades": runtime.upgrades,
        "proc": None,
    }
    if proc is not None:
        stdout, stderr = _fd(proc._stdout), _fd(proc._stderr)
        if stdout is not None and stderr is not None:
            state["proc"] = {"pid": proc.pid, "pgid": proc.pgid, "start_ticks": proc.start_time_ticks,
                             "stdin": _fd(proc._stdin), "stdout": stdout, "stderr": stderr,
                             "pending": sc.raw_text(stdout_leftover(proc))}
    return state


def state_fds(state: Mapping[str, Any]) -> list[int]:
    """The descriptors a runtime's state names (its process's pipes), which the successor inherits."""
    proc = state.get("proc")
    if not isinstance(proc, dict):
        return []
    return [fd for fd in (proc.get("stdin"), proc.get("stdout"), proc.get("stderr")) if isinstance(fd, int)]


def runtime_secrets(runtime: ServerRuntime) -> dict[str, Any]:
    spec, wake = runtime.config.spec, runtime.config.wake
    return {"argv": list(spec.argv), "cwd": spec.cwd, "env": dict(spec.env),
            "wake": None if wake is None else {"argv": list(wake.argv), "interval_s": wake.interval_s,
                                               "timeout_s": wake.timeout_s}}


def _config(state: Mapping[str, Any], secrets: Mapping[str, Any]) -> RuntimeConfig:
    c = sc.obj(state.get("config"), "runtime.config")
    p = sc.obj(c.get("policy"), "runtime.config.policy")
    try:
        policy = lc.LifecyclePolicy(
            start_timeout_s=sc.number(p.get("start_timeout_s"), "policy.start_timeout_s"),
            linger_s=sc.number(p.get("linger_s"), "policy.linger_s"),
            # A predecessor without a check linger wrote none: the default's.
            check_linger_s=sc.number(p.get("check_linger_s", lc.LifecyclePolicy.check_linger_s), "policy.check_linger_s"),
            idle_timeout_s=sc.opt_number(p.get("idle_timeout_s"), "policy.idle_timeout_s"),
            keep_alive=sc.flag(p.get("keep_alive"), "policy.keep_alive"), eager=sc.flag(p.get("eager"), "policy.eager"),
            wake_interval_s=sc.opt_number(p.get("wake_interval_s"), "policy.wake_interval_s"),
            wake_timeout_s=sc.number(p.get("wake_timeout_s"), "policy.wake_timeout_s"))
    except LifecycleError as exc:
        raise ValueError(f"runtime.config.policy: {exc}") from None
    env = sc.obj(secrets.get("env"), "secrets.env")
    spec = SpawnSpec(tuple(sc.text(a, "secrets.argv") for a in sc.items(secrets.get("argv"), "secrets.argv")),
                     sc.text(secrets.get("cwd"), "secrets.cwd"), {str(k): sc.text(v, "secrets.env") for k, v in env.items()},
                     Path(sc.text(c.get("log_path"), "runtime.config.log_path")),
                     sc.integer(c.get("max_line_bytes"), "runtime.config.max_line_bytes"))
    wake = None
    if secrets.get("wake") is not None:
        w = sc.obj(secrets.get("wake"), "secrets.wake")
        wake = WakePredicate(tuple(sc.text(a, "wake.argv") for a in sc.items(w.get("argv"), "wake.argv")),
                             sc.number(w.get("interval_s"), "wake.interval_s"), sc.number(w.get("timeout_s"), "wake.timeout_s"))
    sampling, share, era = c.get("sampling_policy"), c.get("share"), c.get("era")
    if sampling not in ("refuse", "most-recent") or share not in (True, False, "auto") or era not in ("auto", "handshake", "stateless"):
        raise ValueError("runtime.config: an unknown sampling policy, share or era setting")
    return RuntimeConfig(sc.text(c.get("name"), "runtime.config.name"), sc.text(c.get("digest"), "runtime.config.digest"),
                         spec, policy, wake, sampling, share, era)


def restore_runtime(state: Mapping[str, Any], secrets: Mapping[str, Any], snapshot: Snapshot, store: CacheStore,
                    *, written_at: float, child: bool, save_lock: trio.Lock | None = None,
                    on_children_changed: Any = lambda: None) -> ServerRuntime:
    """The runtime that wrote `state`, not started yet: `run` it and it takes its process over.
    `written_at` is the wall-clock time of the write; `child` whether its process is our child.
    Raises ValueError for a state this code did not write."""
    config = _config(state, secrets)
    name = sc.text(state.get("name"), "runtime.name")
    runtime = ServerRuntime(config, snapshot, store, on_children_changed,
                            label=name if name != config.name else None, save_lock=save_lock)
    runtime.core = RelayCore.from_state(state.get("core"), config.name, snapshot, config.sampling_policy, era=config.era)
    # The write's moment on this daemon's clock: a linger with a minute left keeps its minute,
    # less what the hand-over took.
    moment = trio.current_time() - max(0.0, time.time() - written_at)
    runtime.life = lifecycle_from_state(state.get("life"), config.policy, random.Random(), moment)
    runtime.last_exit = sc.opt_text(state.get("last_exit"), "runtime.last_exit")
    runtime.started_wall = sc.opt_number(state.get("started_wall"), "runtime.started_wall")
    runtime.spawned_wall = sc.opt_number(state.get("spawned_wall"), "runtime.spawned_wall")
    runtime._kill_reason = sc.opt_text(state.get("kill_reason"), "runtime.kill_reason")
    runtime._stop_requested = sc.flag(state.get("stop_requested"), "runtime.stop_requested")
    runtime.upgrades = sc.integer(state.get("upgrades"), "runtime.upgrades")
    gate_state = state.get("gate")
    proc = state.get("proc")
    predicate = state.get("predicate_child")
    if proc is not None:
        p = sc.obj(proc, "runtime.proc")
        fds = (sc.opt_integer(p.get("stdin"), "proc.stdin"), sc.integer(p.get("stdout"), "proc.stdout"),
               sc.integer(p.get("stderr"), "proc.stderr"))
        pid, ticks = sc.integer(p.get("pid"), "proc.pid"), sc.integer(p.get("start_ticks"), "proc.start_ticks")
        pending = sc.raw_bytes(p.get("pending"), "proc.pending")
    else:
        fds, pid, ticks, pending = (None, -1, -1), 0, 0, b""
    predicate_child = None
    if predicate is not None:
        pred = sc.items(predicate, "runtime.predicate_child")
        predicate_child = (sc.integer(pred[0], "predicate pid"), sc.integer(pred[1], "predicate ticks"))

    def adopt() -> None:
        assert runtime._nursery is not None
        if isinstance(runtime.gate, RuntimeGate) and gate_state is not None:
            runtime.gate.core.restore(gate_state)
        if proc is not None:
            note = f"pid {pid} taken over by lazyd {os.getpid()} ({'upgrade' if child else 'restart after a crash'})"
            try:
                adopted = adopt_child(pid, ticks, fds, config.spec, runtime._nursery, child=child, stdout=pending,
                                      note=note)
            except AdoptionError as exc:
                log.warning("[%s] cannot take its process over: %s", runtime.name, exc)
                gone(runtime, f"its process was lost in the hand-over ({exc})")
            else:
                runtime.upgrades += 1
                runtime.adopt_process(adopted)
                log.info("[%s] took over pid %d (%s)", runtime.name, pid, runtime.life.state)
        elif runtime.life.state in lc.PROCESS_STATES:
            gone(runtime, "its process did not come back after the daemon's restart")
        if predicate_child is not None:
            _kill_predicate(runtime, *predicate_child)
        runtime.on_children_changed()

    runtime.adopt = adopt
    return runtime


def gone(runtime: ServerRuntime, description: str) -> None:
    """The runtime's process cannot be had: an exit, as the runtime would see one."""
    runtime.proc = None
    runtime.last_exit = description
    runtime._relay(runtime.core.exited(description, now=time.time()))
    if runtime.life.state in lc.PROCESS_STATES:
        runtime._life(runtime.life.exited(trio.current_time(), description, requested=False))
    runtime._load()


def _kill_predicate(runtime: ServerRuntime, pid: int, ticks: int) -> None:
    """A wake predicate the predecessor ran: its answer went with it. Kill its group (it is our
    child, or gone), reap it, and tell the lifecycle it timed out so the schedule goes on."""
    try:
        if procfs.start_time_ticks(pid) == ticks:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    except (OSError, ChildProcessError):
        pass
    runtime._life(runtime.life.predicate_done(trio.current_time(), None))
