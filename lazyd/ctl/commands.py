"""lazyctl's operator commands: status, wake, sleep, restart, top, logs, stop, reload, upgrade.

Each takes the parsed arguments and an `Output` and returns the exit status; failures are raised
(`CtlError`, `DaemonNotRunning`) and reported once, by `lazyd.ctl.main`.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import time
from collections.abc import Callable
from typing import Any

from lazyd.config.durations import format_duration
from lazyd.ctl import format as fmt
from lazyd.ctl import logs
from lazyd.ctl.client import EXIT_OK, connect, other_daemons
from lazyd.ctl.progress import StatusLine
from lazyd.errors import CtlError, UsageError

STOP_WAIT_S = 30.0  # the daemon bounds its own shutdown at 15 s; past twice that it is stuck


class Output:
    """Human text by default; with `--json`, exactly one JSON document on stdout."""

    def __init__(self, json_mode: bool) -> None:
        self.json = json_mode

    def result(self, data: Any, human: Callable[[], str]) -> None:
        if self.json:
            print(json.dumps(data, indent=2, sort_keys=True))
        else:
            text = human()
            if text:
                print(text)

    def failure(self, message: str, data: Any = None) -> None:
        print(f"lazyctl: {message}", file=sys.stderr)
        if self.json:
            print(json.dumps({"error": message, "data": data}, indent=2, sort_keys=True))


def cmd_status(args: argparse.Namespace, out: Output) -> int:
    with connect(args.socket) as conn:
        data = conn.call("status", {"names": list(args.names)})
        path = conn.path
    rows = data["servers"]
    others = [(pid, sock) for pid, sock in other_daemons(path) if pid != data["daemon_pid"]]
    data["other_daemons"] = [{"pid": pid, "socket": sock} for pid, sock in others]

    def human() -> str:
        now = time.time()
        head = f"lazyd running (pid {data['daemon_pid']}, {path})"
        head += _lineage(data.get("daemon"), now) + _store_line(data.get("daemon"))
        for pid, sock in others:
            head += f"\nanother lazyd of yours runs (pid {pid}) on {sock}: lazyctl --socket {sock} status"
        head += fmt.walls(data.get("refused"), data.get("fallbacks"))
        head += fmt.pressure_line(data.get("pressure"))
        summary = fmt.summary_line(rows, data.get("lazyd"))
        if not rows:
            return f"{head}\nno servers registered yet\n{summary}"
        lines = [head, fmt.table(fmt.STATUS_COLUMNS, [fmt.status_row(r, now) for r in rows])]
        apart = fmt.distinctions(rows)
        if apart:
            lines.append(apart)
        # Sharing is the surprising case when it is off: say which rule turned it off.
        unshared = [fmt.unshared_line(r) for r in rows if r.get("share") is False and r.get("share_rule")]
        if unshared:
            lines += ["one process per session:", *unshared]
        return "\n".join([*lines, summary])  # the summary stays the last line

    out.result(data, human)
    return EXIT_OK


def cmd_sleep(args: argparse.Namespace, out: Output) -> int:
    with connect(args.socket) as conn:
        row = conn.call("sleep", {"name": args.name})
    out.result(row, lambda: f"{row['name']} {row['state']}")
    return EXIT_OK


def cmd_start(args: argparse.Namespace, out: Output, *, op: str, doing: str) -> int:
    """`wake` and `restart`: the op, then its server's row once it runs."""
    with connect(args.socket) as conn:
        # No reply timeout: the daemon answers within the stop ladder and the server's start_timeout.
        row = conn.call(op, {"name": args.name}, timeout_s=None,
                        progress=StatusLine(f"{doing} {args.name}", json_mode=out.json))
    out.result(row, lambda: f"{row['name']} running (pid {row['pid']})")
    return EXIT_OK


def cmd_top(args: argparse.Namespace, out: Output) -> int:
    if out.json or not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("needs a terminal (for a script: lazyctl status --json)")
    from lazyd.ctl.top import run_top  # curses: only for this command

    run_top(args.socket)
    return EXIT_OK


def cmd_logs(args: argparse.Namespace, out: Output) -> int:
    if not 0 <= args.lines <= logs.MAX_TAIL_LINES:
        raise UsageError(f"-n must be between 0 and {logs.MAX_TAIL_LINES}")
    with connect(args.socket) as conn:
        where = conn.call("logs", {"name": args.name})
    path = str(where["path"])
    lines = logs.tail_with_rotation(path, args.lines)
    if not args.follow:
        if not out.json and not lines and not os.path.exists(path):
            print(f"lazyctl: {where['name']} has no log yet ({path})", file=sys.stderr)
        out.result({"name": where["name"], "path": path, "lines": lines}, lambda: "\n".join(lines))
        return EXIT_OK
    def emit(line: str) -> None:
        print(json.dumps({"line": line}) if out.json else line, flush=True)

    for line in lines:
        emit(line)
    try:
        logs.follow(path, emit)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a follow ends, as with tail -f
    return EXIT_OK


def cmd_stop(args: argparse.Namespace, out: Output) -> int:
    with connect(args.socket) as conn:
        pid = conn.daemon_pid
        conn.call("stop")
    if not wait_gone(pid, STOP_WAIT_S):
        raise CtlError(f"lazyd (pid {pid}) is still running {format_duration(STOP_WAIT_S)} after the stop request")
    out.result({"pid": pid, "stopped": True}, lambda: f"lazyd (pid {pid}) stopped")
    return EXIT_OK


def cmd_reload(args: argparse.Namespace, out: Output) -> int:
    with connect(args.socket) as conn:
        report = conn.call("reload", timeout_s=None)

    def human() -> str:
        parts = [f"{kind} {', '.join(names)}" for kind, names in report.items() if names and kind != "unchanged"]
        return "config reloaded: " + ("; ".join(parts) if parts else "no changes")

    out.result(report, human)
    return EXIT_OK


STORE_NEARLY_FULL = 0.9  # of the fd store's budget: from here on status says so


def _store_line(daemon: Any) -> str:
    """A line when systemd's fd store is nearly full: past it, nothing more is kept across a crash."""
    store = daemon.get("fdstore") if isinstance(daemon, dict) else None
    if not isinstance(store, dict) or not store.get("budget"):
        return ""
    held, budget = int(store.get("held", 0)), int(store["budget"])
    if held < STORE_NEARLY_FULL * budget:
        return ""
    return (f"\nthe fd store holds {held} of the {budget} descriptors a restarted lazyd can be passed: "
            "servers and sessions past them are not kept across a crash")


def _lineage(daemon: Any, now: float) -> str:
    """For the status head: uptime across upgrades and the last one, or what a restart after a
    crash took over ("" before either)."""
    if not isinstance(daemon, dict):
        return ""
    last = daemon.get("last_upgrade")
    if isinstance(last, dict) and last.get("crash"):
        servers = last.get("servers")
        sessions = last.get("sessions")
        text = (f"\nrestarted after a crash: took over {len(servers) if isinstance(servers, list) else 0} "
                "servers from the fd store")
        if isinstance(sessions, dict) and sessions.get("kept"):
            text += (f", and {sessions.get('taken_back', 0)} of the {sessions['kept']} hand-off sessions it kept "
                     f"({sessions.get('let_go', 0)} let go to their shims)")
        return text + (f"; {last['reason']}" if last.get("reason") else "")
    if not daemon.get("upgrades"):
        return ""
    text = f"; up {format_duration(max(0.0, now - float(daemon['started_at'])))} across {daemon['upgrades']} upgrade(s)"
    if isinstance(last, dict) and not last.get("inherited"):
        text += f"\nthe last upgrade could not take the servers over: {last.get('reason')}"
    return text


UPGRADE_WAIT_S = 60.0  # quiesce (2 s at most) + exec + start-up + taking over every server


def cmd_upgrade(args: argparse.Namespace, out: Output) -> int:
    with connect(args.socket) as conn:
        old = conn.daemon_pid
        report = conn.call("upgrade", timeout_s=UPGRADE_WAIT_S)

    def human() -> str:
        took = report.get("took_s")
        return (f"lazyd (pid {report.get('pid', old)}) upgraded"
                + (f" in {took * 1000:.0f} ms" if isinstance(took, (int, float)) else "")
                + f": took over {len(report.get('servers', []))} servers and {report.get('sessions', 0)} sessions")

    out.result(report, human)
    return EXIT_OK


def wait_gone(pid: int, timeout_s: float) -> bool:
    """Wait until process `pid` has exited (a zombie counts as exited); False at the timeout."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])  # a pidfd reads ready once the process exits
    finally:
        os.close(fd)
