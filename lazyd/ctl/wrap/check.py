"""``--check``: warm the daemon's cache for each registration just wrapped.

For every wrapped registration, lazyctl asks the daemon (control op ``check``, docs/protocol.md)
to start the server once, record its handshake and listings, and stop it, so the first client
session is answered from cache. The registration is described the way its shim will describe it:
the server's argv (the wrapped args after the shim's own options), its working directory (its
``cwd`` setting, else the Claude project it belongs to, else ours) and lazyctl's environment with
the registration's ``env`` on top (the daemon drops per-session and ``LAZYD_*`` variables from the
identity, so a check from a terminal finds the same server as a client's session).

The client itself (parsing ``--initialize-json``, the control connection) is `lazyctl check`'s,
lazyd.ctl.registration; its UsageError is wrap's too, and this module turns a failed check into an
outcome line rather than an exception, since the wrap itself is already written.
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

CHECK_REPLY_TIMEOUT_S = 600.0
# The daemon bounds each check by the server's start_timeout (60 s by default, configurable);
# this is only a backstop against a daemon that never answers.

CHECKED_ACTIONS = frozenset({"wrapped", "reapplied", "updated", "unchanged"})


@dataclass(frozen=True)
class CheckOutcome:
    server: str
    project: str | None
    ok: bool
    message: str  # the daemon's one-line error, or a short summary of what was cached

    def to_json(self) -> dict[str, object]:
        return {"server": self.server, "project": self.project, "ok": self.ok, "message": self.message}


def initialize_params(value: str) -> dict[str, Any]:
    """``--initialize-json``, parsed as `lazyctl check` parses it. Raises UsageError."""
    return registration.initialize_params(value)


def check_args(state: RegState, cwd: str, environ: Mapping[str, str],
               initialize: Mapping[str, Any] | None = None, client: str | None = None,
               passed_env: tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
    """The ``check`` op's args for a wrapped registration. Raises ValueError if its args name no command.

    lazyctl's environment and the registration's ``env`` go separately: the daemon rebuilds from
    them the environment ``client`` gives a server (Gemini CLI drops inherited tokens and CA
    bundles, not declared ones; Codex passes only its allow-list and the registration's
    ``env_vars``, ``passed_env`` here), so the check lands on the identity the client's sessions get."""
    args = state.args or ()
    argv = list(args[shimargs.command_index(args):])
    request = registration.command_registration(argv, cwd, environ)
    request["declared_env"] = {k: v for k, v in (state.env or {}).items() if isinstance(v, str)}
    if passed_env:
        request["passed_env"] = list(passed_env)
    if client is not None:
        request["client"] = client
    if initialize is not None:
        request["initialize"] = dict(initialize)
    # The bound its shim will use: its own --start-timeout, else LAZYD_START_TIMEOUT in its env.
    shim_env = {**environ, **request["declared_env"]}
    start_timeout = shimargs.daemon_option(args, shim_env, "start_timeout")
    if start_timeout is not None:
        request["start_timeout"] = start_timeout
    return request


def run_check(socket_path: str, args: Mapping[str, Any], explicit_socket: str | None = None,
              progress: StatusLine | None = None) -> tuple[bool, str]:
    """Send one ``check`` to the daemon at ``socket_path`` (started first, as a shim would start
    it, if none runs); return (ok, one-line message). `progress` shows its steps on a terminal."""
    try:
        data = registration.request_check(socket_path, args, timeout_s=CHECK_REPLY_TIMEOUT_S,
                                          explicit_socket=explicit_socket, progress=progress)
    except DaemonNotRunning as exc:
        return False, (f"{exc.message}; start it (systemctl --user start lazyd.socket, or run lazyd) "
                       "and retry with reapply --check")  # fmt: skip
    except CtlError as exc:
        return False, exc.message
    return True, _summary(data)


def _summary(data: object) -> str:
    # Counts and versions only: listings can be long and names of tools are not needed here.
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
