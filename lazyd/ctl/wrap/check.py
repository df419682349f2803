"""``--check``: warm the daemon's cache for each registration just wrapped.

Each registration is described as its shim will describe it: the server's argv (the wrapped args
after the shim's options), its working directory (its ``cwd``, else its Claude project, else ours)
and lazyctl's environment with the registration's ``env`` on top, so a check from a terminal lands
on the identity of a client's session. The check client is `lazyctl check`'s
(lazyd.ctl.registration); a failed check is an outcome line, not an exception, since the wrap
itself is already written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lazyd.ctl import registration
from lazyd.ctl.progress import StatusLine
from lazyd.ctl.wrap import shimargs
from lazyd.ctl.wrap.engine import Result
from lazyd.errors import CtlError, DaemonNotRunning

CHECKED_ACTIONS = frozenset({"wrapped", "reapplied", "updated", "unchanged"})


@dataclass(frozen=True)
class CheckOutcome:
    server: str
    project: str | None
    ok: bool
    message: str  # the daemon's one-line error, or a short summary of what was cached


def run_checks(results: Sequence[Result], explicit_socket: str | None, environ: Mapping[str, str],
               initialize: Mapping[str, Any] | None, client: str | None, as_json: bool) -> list[CheckOutcome]:
    """One ``check`` per registration the run left wrapped (the daemon started first if none runs,
    as a shim would), each an outcome."""
    todo = [r for r in results if r.action in CHECKED_ACTIONS and r.state is not None]
    line = StatusLine("checking", json_mode=as_json)
    outcomes = []
    for number, result in enumerate(todo, start=1):
        line.restart(f"checking {result.key.label()} ({number} of {len(todo)})")
        try:
            data = registration.request_check(check_args(result, environ, initialize, client), explicit_socket, line)
        except ValueError as exc:
            ok, message = False, str(exc)
        except DaemonNotRunning as exc:
            ok, message = False, (f"{exc.message}; start it (systemctl --user start lazyd.socket, or run lazyd) "
                                  "and retry with reapply --check")  # fmt: skip
        except CtlError as exc:
            ok, message = False, exc.message
        else:
            ok, message = True, _summary(data)
        outcomes.append(CheckOutcome(result.key.server, result.key.project, ok, message))
    line.clear()
    return outcomes


def check_args(result: Result, environ: Mapping[str, str], initialize: Mapping[str, Any] | None,
               client: str | None) -> dict[str, Any]:
    """The ``check`` op's args for a wrapped registration; ValueError if its args name no command.
    lazyctl's environment and the registration's ``env`` (and Codex's ``env_vars``, ``passed_env``)
    go separately: the daemon rebuilds from them the environment ``client`` gives a server."""
    assert result.state is not None
    args = result.state.args or ()
    argv = list(args[shimargs.command_index(args):])
    # A relative cwd setting is resolved as a client started here would resolve it.
    cwd = os.path.abspath(result.cwd) if result.cwd else os.getcwd()
    request = registration.command_registration(argv, cwd, environ)
    declared = {k: v for k, v in (result.state.env or {}).items() if isinstance(v, str)}
    # The bound its shim will use: its own --start-timeout, else LAZYD_START_TIMEOUT in its env.
    start_timeout = shimargs.daemon_option(args, {**environ, **declared}, "start_timeout")
    # The op takes None for an option not given.
    return {**request, "declared_env": declared, "passed_env": list(result.passed_env), "client": client,
            "initialize": initialize, "start_timeout": start_timeout}


def _summary(report: dict[str, Any]) -> str:
    """What a check cached, in one line, from its report (as `lazyctl check --json` prints it)."""
    counts = [f"{info['count']} {kind}" for kind, info in sorted(report["listings"].items()) if "count" in info]
    head = f"cached as {report['name']} (protocol {report['protocol_version']})"
    return head + (": " + ", ".join(counts) if counts else "")
