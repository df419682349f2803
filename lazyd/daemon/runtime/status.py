"""One server runtime's row of `lazyctl status`, as plain values (times are Unix seconds).

What the runtime itself knows: its lifecycle's state and counters, its process, its relay core's
clients, cache and eras, its policy. The control op adds what only the registry knows (sharing,
what tells it apart from its neighbours, the process tree's memory: lazyd/daemon/control/ops.py).
"""

from __future__ import annotations

import time

import trio

from lazyd.core.eras.choice import facts_of
from lazyd.daemon.runtime.supervisor import ServerRuntime


def runtime_status(runtime: ServerRuntime) -> dict[str, object]:
    """The status model of `runtime` (docs/lazyctl.md lists the fields)."""
    snap = runtime.life.status_fields()
    proc = runtime.proc
    core, config = runtime.core, runtime.config
    now_wall, now = time.time(), trio.current_time()
    running = proc is not None and snap["state"] == "running"
    updated = core.snapshot.updated_at or None
    restart_at = snap["next_restart_at"]
    return {
        "name": runtime.name,
        "state": snap["state"],
        "pid": proc.pid if proc is not None else None,
        "started_at": runtime.spawned_wall if proc is not None else None,
        "uptime_s": (now_wall - runtime.started_wall) if running and runtime.started_wall else None,
        "clients": core.client_count(),
        "inflight": core.inflight_count(),
        "restarts": snap["restarts"],
        "upgrades": runtime.upgrades,  # daemon upgrades its current process lived through
        "failures": snap["burst"],
        "next_restart_in_s": max(0.0, restart_at - now) if isinstance(restart_at, float) else None,
        "last_error": snap["last_error"],
        "cache_updated_at": updated,
        "cache_age_s": max(0.0, now_wall - updated) if updated else None,
        "listings": core.snapshot.listing_counts(),
        # The era its process serves clients in ("handshake", "stateless", "both"), else the
        # era of its lane (None: no client chose it yet); and what the server was found to speak.
        "era": core.process_era() or core.lane,
        "era_setting": config.era,
        "server_eras": str(facts_of(core.snapshot).kind),
        "listen_streams": core.listen_count(),
        "predicate": snap["predicate_state"],
        # Which linger the running process gets: "check_linger" while only listings came for its
        # start, else "linger" (None with no process), and how long that is.
        "linger_rule": snap["linger_rule"],
        "linger_applies_s": snap["linger_s"],
        "policy": _policy_status(runtime),
        "share": config.share,
        "command": list(config.spec.argv),
    }


def _policy_status(runtime: ServerRuntime) -> dict[str, object]:
    policy, wake = runtime.config.policy, runtime.config.wake
    return {"start": "eager" if policy.eager else "lazy", "keep_alive": policy.keep_alive,
            "linger_s": policy.linger_s, "check_linger_s": policy.check_linger_s, "idle_timeout_s": policy.idle_timeout_s,
            "start_timeout_s": policy.start_timeout_s,
            "wake": list(wake.argv) if wake is not None else None}
