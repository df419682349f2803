"""lazyctl's commands about registrations: `check` (warm the cache) and `explain` (identity).

A registration is named by a server name (as `lazyctl status` shows it) or by a command after `--`,
registered exactly as `lazyd-shim -- COMMAND` run here would be. The daemon does the work (ops
`check` and `identity`): it holds the per-user secret, the per-session variables and the caches.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Mapping
from typing import Any

from lazyd.config.durations import format_duration, parse_duration
from lazyd.ctl import format as fmt
from lazyd.ctl.client import EXIT_OK, connect, connect_starting
from lazyd.ctl.commands import Output
from lazyd.ctl.progress import StatusLine
from lazyd.errors import UsageError

MAX_INITIALIZE_FILE_BYTES = 1024 * 1024  # a captured initialize is a few KiB; a session log may be more


def command_registration(argv: list[str], cwd: str | None,
                         environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A registration by command as the daemon's ops take it; `environ` defaults to ours."""
    directory = os.path.abspath(cwd) if cwd else os.getcwd()
    return {"argv": argv, "cwd": directory, "env": dict(os.environ if environ is None else environ)}


# The one check client: `lazyctl check` and `lazyctl wrap --check` (lazyd.ctl.wrap.check).


def cmd_check(args: argparse.Namespace, out: Output) -> int:
    names = [n for n in (args.server, args.name) if n]
    if len(names) + (args.command is not None) != 1:
        raise UsageError("check needs exactly one of NAME, --server NAME or -- COMMAND ARGS...")
    request: dict[str, Any] = {"name": names[0]} if names else command_registration(args.command, args.cwd)
    # The op takes None for an option not given.
    request.update(client=args.client, start_timeout=start_timeout_option(args.start_timeout, os.environ),
                   initialize=None if args.initialize_json is None else initialize_params(args.initialize_json))
    # The daemon is started if none runs, as a shim would: a check is often a new user's first command.
    what = f"checking {names[0] if names else os.path.basename(args.command[0])}"
    line = StatusLine(what, json_mode=out.json)
    report = request_check(request, args.socket, line)
    out.result(report, lambda: check_text(report))
    return EXIT_OK


def start_timeout_option(flag: str | None, environ: Mapping[str, str]) -> str | None:
    """`--start-timeout`, else LAZYD_START_TIMEOUT, as the shim reads them; None if neither is set,
    UsageError for a value that is not a duration longer than 0."""
    value, name = (flag, "--start-timeout") if flag is not None else (environ.get("LAZYD_START_TIMEOUT"), "LAZYD_START_TIMEOUT")
    if value is None or (flag is None and not value.strip()):
        return None
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise UsageError(f"{name}: {exc}") from None
    if seconds <= 0:
        raise UsageError(f"{name}: must be longer than 0")
    return value.strip()


def request_check(request: Mapping[str, Any], explicit_socket: str | None, progress: StatusLine | None) -> Any:
    """The daemon's `check` report (the daemon started if none runs), or CtlError. No reply
    timeout: the daemon bounds a check by the server's start_timeout."""
    try:
        with connect_starting(explicit_socket, progress) as conn:
            return conn.call("check", dict(request), timeout_s=None, progress=progress)
    finally:
        if progress is not None:
            progress.clear()  # before anyone prints the outcome


def initialize_params(value: str) -> dict[str, Any]:
    """`--initialize-json`: inline JSON, or `@file` holding the params, an initialize request or a
    captured session (its first initialize). UsageError otherwise. The cache is kept per protocol
    version and capabilities: a check warms a client's cache only with that client's params."""
    if value.startswith("@"):
        path = value[1:]
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_INITIALIZE_FILE_BYTES + 1)
        except OSError as exc:
            raise UsageError(f"--initialize-json: cannot read {path}: {exc.strerror}") from None
        if len(raw) > MAX_INITIALIZE_FILE_BYTES:
            raise UsageError(f"--initialize-json: {path} is larger than {MAX_INITIALIZE_FILE_BYTES} bytes")
        text, source = raw.decode("utf-8", "replace"), path
    else:
        text, source = value, "the argument"
    try:
        candidates = [json.loads(text)]
    except ValueError:
        candidates = []
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                candidates.append(json.loads(line))
    for obj in candidates:
        if not isinstance(obj, dict) or obj.get("method", "initialize") != "initialize":
            continue  # not an object, or another message of a captured session
        params = obj.get("params") if "method" in obj else obj
        if isinstance(params, dict) and isinstance(params.get("protocolVersion"), str):
            return params
    raise UsageError(f"--initialize-json: {source} holds no initialize params (an object with a string protocolVersion)")


def check_text(report: dict[str, Any]) -> str:
    info = report.get("server_info") or {}
    server = f"{info.get('name', '?')} {info.get('version', '')}".strip() if isinstance(info, dict) else "?"
    discover = report.get("discover", {})
    kinds = {"result": "answered (the server supports discovery)",
             "method-not-found": "method not found (a handshake-era server)",
             "no-answer": "no answer",
             "error": f"error {discover.get('code')}: {discover.get('message')}"}
    lines = [
        f"checked {report['name']} in {format_duration(float(report.get('duration_s') or 0))} (pid {report.get('pid')}, stopped)",
        f"  handshake          {report.get('handshake') or '-'}",
        f"  protocol           {report.get('protocol_version')} (asked {report.get('requested_version')}), server {server}",
        f"  discover           {kinds.get(str(discover.get('kind')), str(discover.get('kind')))}",
    ]
    for key, listing in sorted(report.get("listings", {}).items()):
        if "error" in listing:
            lines.append(f"  {key:<18} error: {listing['error']}")
        else:
            pages = listing["pages"]
            lines.append(f"  {key:<18} {listing['count']} in {pages} page{'s' if pages != 1 else ''}")
    lines.append(f"  cache              {report.get('cache_path')}")
    return "\n".join(lines)


def cmd_explain(args: argparse.Namespace, out: Output) -> int:
    regs: list[dict[str, Any]] = [{"name": n} for n in args.names]
    if args.command is not None:
        regs.append(command_registration(args.command, args.cwd))
    if not 1 <= len(regs) <= 2:
        raise UsageError("explain takes one or two registrations: NAME [NAME] or [NAME] -- COMMAND ARGS...")
    with connect(args.socket) as conn:
        data = conn.call("identity", {"registrations": regs})
    out.result(data, lambda: explain_text(data))
    return EXIT_OK


def explain_text(data: dict[str, Any]) -> str:
    regs = data["registrations"]
    lines: list[str] = []
    for reg in regs:
        lines.extend(_registration_lines(reg))
    if len(regs) == 2:
        reasons = [_reason(r, regs) for r in data["differences"]]
        apart = data.get("era_lanes")
        if apart:
            lines.append(f"same registration, two processes: one per protocol era ({' and '.join(map(str, apart['eras']))})")
            lines.append(f"  - {apart['reason']} (server: {apart['server']})")
            return "\n".join(lines)
        if not reasons:
            lines.append("same identity: they share one server process")
        else:
            lines.append("different identities, so they do not share a process:")
            lines.extend(f"  - {r}" for r in reasons)
        return "\n".join(lines)
    reg = regs[0]
    lanes = data.get("eras") or []
    if len(lanes) > 1:
        lines.append("its processes, one per protocol era:")
        lines.extend(f"  {lane['name']}: {lane['era']}-era clients ({lane['reason']})" for lane in lanes)
    if reg["ignored_env_names"] is None:
        return "\n".join(lines)  # a registered server by name: its identity is all there is
    if reg["registered_as"]:
        lines.append(f"a session started with this command here shares the process of {reg['registered_as']}")
    else:
        candidates = data.get("candidates") or []
        if not candidates:
            lines.append("no registered server runs this command yet: the first session registers it")
        for candidate in candidates:
            lines.append(f"does not share with {candidate['name']}:")
            lines.extend(f"  - {_reason(r, regs)}" for r in candidate["differences"])
    return "\n".join(lines)


# How a registration's sessions get processes, by its `sharing` (lazyd/core/sharing/modes.py).
_SHARING_WORDS = {
    "shared": "one process for all its sessions",
    "isolated": "one process per session",
    "session-aware": "one process for all its sessions, each request carrying its session's id",
    "undecided": "not decided yet: the first session's start tells, a second one waits for it",
}


def _registration_lines(reg: dict[str, Any]) -> list[str]:
    status = f"registered as {reg['registered_as']}" if reg["registered_as"] else "not registered"
    args = reg["args"]
    env = reg["env_names"]
    lines = [
        f"{reg['name']} ({status})",
        f"  command  {reg['command']} (+{args} argument{'s' if args != 1 else ''}, values hidden)",
        f"  cwd      {reg['cwd']}",
        f"  env      {len(env)} variable{'s' if len(env) != 1 else ''} (values hidden): {', '.join(env) or '-'}",
    ]
    if reg["ignored_env_names"] is not None:
        ignored = reg["ignored_env_names"]
        lines.append(f"  ignored  {', '.join(ignored) or '-'} (per-session variables, not part of the identity)")
    for learned in reg.get("per_run_env") or []:
        lines.append(f"  per-run  {learned['name']}: learned from {learned['evidence']}; "
                     f"not part of the identity of {learned['client']}'s sessions")
    if reg["instance"]:
        lines.append(f"  instance {reg['instance']}")
    if "share_rule" in reg:
        how = _SHARING_WORDS.get(str(reg.get("sharing")), "one process for all its sessions" if reg["share"]
                                 else "one process per session")
        why = fmt.share_words(reg) if reg.get("share_opt_in") else reg["share_rule"]
        lines.append(f"  sharing  {how} ({why})")
    return lines


def _reason(reason: str, regs: list[dict[str, Any]]) -> str:
    # Two named servers are separate registrations by definition, not by a share = false.
    if reason == "share = false" and all(str(r.get("instance") or "").startswith("named:") for r in regs):
        return "they are different named servers"
    return reason
