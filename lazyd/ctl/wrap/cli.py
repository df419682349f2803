"""The ``lazyctl wrap | unwrap | reapply | wrap-status`` subcommands: options, help, output.

Status is a subcommand of its own (not ``wrap --status``), so a command that writes files never
shares its options with one that only reads. Output never holds a value from a config (command,
args and env may hold secrets): only server names, field names, actions and reasons.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from lazyd.core.sharing.client_profiles import PROFILES
from lazyd.ctl.client import EXIT_FAILED, EXIT_OK
from lazyd.ctl.commands import Output
from lazyd.ctl.format import table
from lazyd.ctl.registration import initialize_params
from lazyd.ctl.wrap import check, clients, engine, shimargs
from lazyd.errors import UsageError

_CLIENT_HELP = "; ".join(f"{c.name}: {c.title}, {c.default_file_text}" for c in clients.CLIENTS.values())

# Subcommand: (op, help, description).
_SUBCOMMANDS: dict[str, tuple[engine.Op, str, str]] = {
    "wrap": ("wrap", "run a client's MCP registrations through lazyd-shim, edited in place",
             "Make stdio MCP registrations of a client run through lazyd-shim, in place: `command` "
             "becomes the shim and the original command goes first in `args`; the name, env, cwd and every "
             "other setting stay, so tool names and permission rules are unchanged. HTTP/SSE registrations "
             "and ones already wrapped are skipped and reported, never nested. The file is backed up "
             "(0600, in lazyd's state dir) and replaced atomically; only edited values change."),
    "unwrap": ("unwrap", "restore registrations that wrap changed",
               "Restore wrapped registrations: command and args come back from the wrapped args (so "
               "later edits to them are kept); managed env values are restored only where they still hold "
               "the value lazyd set. Registrations recorded but gone from the file are forgotten."),
    "reapply": ("reapply", "wrap again registrations a client's setup rewrote",
                "Wrap again the registrations lazyd manages after a client's own setup rewrote them "
                "to run directly, adopting their new command and args. Idempotent: wrapped ones stay as they "
                "are (apart from --env and --shim changes)."),
    "wrap-status": ("status", "show which registrations are wrapped, managed, recoverable",
                    "Per registration: wrapped (runs through lazyd-shim), managed (lazyd has a "
                    "record of wrapping it), recoverable (unwrap --recover could restore it without a record)."),
}


def add_subcommands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Add wrap, unwrap, reapply and wrap-status with lazyctl's `add` (each runs ``run``)."""
    for name, (op, short, description) in _SUBCOMMANDS.items():
        p = add(name, run, short, description)
        p.epilog = (f"Clients and their default files: {_CLIENT_HELP}. "
                    "Exit status: 0 ok, 1 failed or refused (nothing written), 2 bad usage.")
        p.set_defaults(wrap_op=op)
        p.add_argument("--client", required=True, choices=tuple(clients.CLIENTS), help="whose config file")
        p.add_argument("--file", metavar="F", help="the config file (default: the client's, see below)")
        which = p.add_mutually_exclusive_group(required=False)
        which.add_argument("--server", action="append", default=[], metavar="NAME",
                           help="a registration by name (repeatable)")
        which.add_argument("--all", action="store_true",
                           help="every registration in the file" + (" (the default)" if op == "status" else ""))
        scope = p.add_mutually_exclusive_group(required=False)
        scope.add_argument("--project", metavar="PATH",
                           help="Claude Code: only ~/.claude.json's projects.PATH registrations")
        scope.add_argument("--user-scope", action="store_true",
                           help="Claude Code: only ~/.claude.json's top-level (user) registrations")
        p.add_argument("--shim", metavar="PATH", help="the lazyd-shim to run (default: the installed one); "
                       "with wrap or reapply on wrapped registrations, switches them to PATH")
        if op != "status":
            p.add_argument("--dry-run", action="store_true",
                           help="validate and show which fields would change (names only, never values)")
        if op in ("wrap", "reapply"):
            p.add_argument("--env", action="append", default=[], metavar="LAZYD_X=VALUE",
                           help="a managed shim setting in the registration's env (repeatable): "
                           + ", ".join(shimargs.known_settings()))
            p.add_argument("--check", action="store_true",
                           help="then warm lazyd's cache for each wrapped server (starts each once, calls no "
                           "tool) as the client would start it: with its handshake (learned from its "
                           "sessions, else captured from its release) and the environment it gives a server")
            p.add_argument("--initialize-json", metavar="JSON|@FILE",
                           help="with --check: the client's initialize params (inline, or a file with the "
                           "params, an initialize request or a captured session), instead of the "
                           "client's learned or built-in handshake")
        if op == "unwrap":
            p.add_argument("--recover", action="store_true",
                           help="restore wrapped registrations lazyd has no record of (env is left as is)")


def run(args: argparse.Namespace, out: Output) -> int:
    """Execute a parsed wrap/unwrap/reapply/wrap-status and print the outcome; UsageError and
    WrapError are lazyctl's to report."""
    op: engine.Op = args.wrap_op
    request = engine.Request(
        op=op, client=args.client, file=args.file, servers=tuple(args.server), all=bool(args.all),
        project=args.project, user_scope=bool(args.user_scope), dry_run=bool(getattr(args, "dry_run", False)),
        env=shimargs.parse_env_pairs(getattr(args, "env", None) or []), shim=args.shim,
        recover=bool(getattr(args, "recover", False)),
    )  # fmt: skip
    initialize_json = getattr(args, "initialize_json", None)
    if initialize_json is not None and not getattr(args, "check", False):
        raise UsageError("--initialize-json applies to --check")
    initialize = None if initialize_json is None else initialize_params(initialize_json)
    report = engine.execute(request, os.environ, Path(os.getcwd()))
    checks: list[check.CheckOutcome] = []
    if getattr(args, "check", False) and not report.dry_run and not report.refused:
        # A client lazyd has no profile for (Crush) is checked with the daemon's default handshake.
        client = args.client if args.client in PROFILES else None
        checks = check.run_checks(report.results, args.socket, os.environ, initialize, client, out.json)
    data: dict[str, Any] = report.to_json()
    if checks:
        data["checks"] = [asdict(c) for c in checks]
    out.result(data, lambda: _text(report, checks))
    if report.refused:
        if not out.json:
            print(f"lazyctl {args.subcommand}: refused ({len(report.refused)} registration(s)); nothing was written",
                  file=sys.stderr)
        return EXIT_FAILED
    return EXIT_FAILED if any(not c.ok for c in checks) else EXIT_OK


def _label(server: str, project: str | None) -> str:
    return server if project is None else f"{server} [{project}]"


def _text(report: engine.Report, checks: list[check.CheckOutcome]) -> str:
    lines = [f"{report.file} ({clients.CLIENTS[report.client].title})"]
    if report.op == "status":
        return "\n".join([*lines, _status_text(report)])
    width = max([len(_label(r.key.server, r.key.project)) for r in report.results] + [6])
    for r in report.results:
        detail = ", ".join(r.changed) if r.changed else r.reason
        if r.changed and r.reason:
            detail += f" ({r.reason})"
        verb = f"would be {r.action}" if report.dry_run and r.changed else r.action
        lines.append(f"  {verb:<20} {_label(r.key.server, r.key.project):<{width}}  {detail}".rstrip())
    if not report.results:
        lines.append("  no registrations")
    if report.dry_run:
        lines.append("dry run: nothing was written")
    elif report.written:
        lines.append(f"written; the original is backed up at {report.backup}")
    elif not report.refused:
        lines.append("nothing to change")
    lines += [f"  check {_label(c.server, c.project)}: {'ok, ' if c.ok else 'FAILED: '}{c.message}" for c in checks]
    return "\n".join(lines)


def _status_text(report: engine.Report) -> str:
    rows = [[_label(s.server, s.project), s.transport, _yes(s.wrapped), _yes(s.managed), _yes(s.recoverable), s.note]
            for s in report.statuses]  # fmt: skip
    if not rows:
        return "  no registrations"
    header = ("SERVER", "TRANSPORT", "WRAPPED", "MANAGED", "RECOVERABLE", "NOTE")
    return "\n".join("  " + line for line in table(header, rows).splitlines())


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
