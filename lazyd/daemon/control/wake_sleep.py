"""An operator's wake and sleep of one server, waited on until its state settles.

`lazyctl wake`/`sleep` and the hub's `wake_server`/`sleep_server` both come here. The waits are
events (`ServerRuntime.wait_changed`), not polls. A wake returns once the server is no longer
starting or stopping, bounded by its start_timeout plus WAKE_MARGIN_S so the lifecycle's own
timeout answers first, its steps on the op's progress line; a sleep returns once the exit is
recorded, bounded by SLEEP_WAIT_S.
"""

from __future__ import annotations

import trio

from lazyd.core.relay.handshake_defaults import wake_params
from lazyd.core.relay.jsonrpc import JsonObj
from lazyd.daemon.control import progress
from lazyd.daemon.runtime.supervisor import ServerRuntime

WAKE_MARGIN_S = 5.0  # beyond start_timeout: the lifecycle's own timeout must answer first
SLEEP_WAIT_S = 10.0  # the stop ladder is 2 s + 2 s plus a 1 s stderr drain; this bounds the rest
_CHANGING = ("starting", "stopping")


def state_of(runtime: ServerRuntime) -> str:
    return str(runtime.life.status_fields()["state"])


def wake(runtime: ServerRuntime, client: JsonObj | None = None) -> None:
    """Wake `runtime`. A server never initialized is woken with `client`'s params, else lazyd's
    own: without params to replay the start could never complete."""
    params = wake_params(runtime.core.snapshot.last_params, client)
    if params is not None:
        runtime.core.snapshot.last_params = params
    runtime.wake()


async def wake_and_wait(runtime: ServerRuntime, client: JsonObj | None = None) -> str | None:
    """`wake` and wait until it settles: None once running, else why it did not start."""
    wake(runtime, client)
    with trio.move_on_after(runtime.config.policy.start_timeout_s + WAKE_MARGIN_S):
        while (state := state_of(runtime)) in _CHANGING:
            proc = runtime.proc
            progress.report("stopping the previous process" if state == "stopping"
                            else f"handshake and listings (pid {proc.pid})" if proc is not None
                            else "starting the server")
            await runtime.wait_changed()
    state = state_of(runtime)
    if state == "running":
        return None
    reason = runtime.life.status_fields()["last_error"] or runtime.last_exit or f"still {state}"
    return f"{runtime.name} did not start: {reason}"


async def sleep_and_wait(runtime: ServerRuntime) -> None:
    """Put `runtime` to sleep; returns once its process (if any) exited and the exit is recorded."""
    proc = runtime.proc
    runtime.sleep()
    if proc is None:
        return
    with trio.move_on_after(SLEEP_WAIT_S):
        while runtime.proc is proc:
            await runtime.wait_changed()
