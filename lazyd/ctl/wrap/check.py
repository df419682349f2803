"""``--check``: warm the daemon's cache for each registration just wrapped.

Each registration is described as its shim will describe it: the server's argv (the wrapped args
after the shim's options), its working directory (its ``cwd``, else its Claude project, else ours)
and lazyctl's environment with the registration's ``env`` on top, so a check from a terminal lands
on the identity of a client's session. The check client is `lazyctl check`'s
(lazyd.ctl.registration); a failed check is an outcome line, not an exception, since the wrap
itself is already written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lazyd.ctl import registration
from lazyd.ctl.progress import StatusLine
from lazyd.ctl.wrap import shimargs
from lazyd.ctl.wrap.model import RegState
from lazyd.errors import CtlError, DaemonNotRunning

CHECKED_ACTIONS = frozenset({"wrapped", "reapplied", "updated", "unchanged"})


@dataclass(frozen=True)
class CheckOutcome:
    server: str
    project: str | None
    ok: bool
    message: str  # the daemon's one-line error, or a short summary of what was cached


def check_args(state: RegState, cwd: str, environ: Mapping[str, str],
               initialize: Mapping[str, Any] | None = None, client: str | None = None,
               passed_env: tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
    """The ``check`` op's args for a wrapped registration; ValueError if its args name no command.
    lazyctl's environment and the registration's ``env`` (and Codex's ``env_vars``, ``passed_env``)
    go separately: the daemon rebuilds from them the environment ``client`` gives a server."""
    args = state.args or ()
    argv = list(args[shimargs.command_index(args):])
    request = registration.command_registration(argv, cwd, environ)
    declared = {k: v for k, v in (state.env or {}).items() if isinstance(v, str)}
    # The bound its shim will use: its own --start-timeout, else LAZYD_START_TIMEOUT in its env.
    start_timeout = shimargs.daemon_option(args, {**environ, **declared}, "start_timeout")
    # The op takes None for an option not given.
    return {**request, "declared_env": declared, "passed_env": list(passed_env), "client": client,
            "initialize": initialize, "start_timeout": start_timeout}


def run_check(args: Mapping[str, Any], explicit_socket: str | None, progress: StatusLine) -> tuple[bool, str]:
    """One ``check`` (the daemon started first if none runs, as a shim would); (ok, one-line message)."""
    try:
        data = registration.request_check(args, explicit_socket, progress)
    except DaemonNotRunning as exc:
        return False, (f"{exc.message}; start it (systemctl --user start lazyd.socket, or run lazyd) "
                       "and retry with reapply --check")  # fmt: skip
    except CtlError as exc:
        return False, exc.message
    return True, _summary(data)


def _summary(data: object) -> str:
    if not isinstance(data, dict):
        return "cached"
    listings = data.get("listings")
    parts = []
    if isinstance(listings, dict):
        for kind, info in sorted(listings.items()):
            if isinstance(info, dict) and "count" in info:
                parts.append(f"{info['count']} {kind}")
    version = data.get("protocol_version")
    name = data.get("name")
    head = f"cached as {name}" if isinstance(name, str) else "cached"
    head += f" (protocol {version})" if isinstance(version, str) else ""
    return head + (": " + ", ".join(parts) if parts else "")
