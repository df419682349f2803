"""`lazyctl`: the operator's command line for lazyd (docs/lazyctl.md).

Subcommands and options, the `--` that introduces a server command, and the exit statuses every
subcommand shares: 0 success, 1 the operation failed, 2 bad usage, 3 the daemon is not running
(like `systemctl status`); a failure is one line on stderr. With `--json`, stdout carries exactly
one JSON document: the result, or `{"error", "data"}`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from typing import NoReturn

from lazyd.core.sharing.client_profiles import PROFILES
from lazyd.ctl import commands, registration, share, systemd
from lazyd.ctl.client import EXIT_FAILED, EXIT_USAGE
from lazyd.ctl.commands import Output
from lazyd.ctl.wrap import cli as wrap_cli
from lazyd.errors import CtlError, LazydError, UsageError

EXIT_INTERRUPTED = 130  # the shell's convention for a command ended by Ctrl-C

Command = Callable[[argparse.Namespace, Output], int]
# Subcommands that take a server command after `--`.
TAKES_COMMAND = frozenset({"check", "explain"})


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error and exit status 2."""

    def error(self, message: str) -> NoReturn:
        raise SystemExit(_usage(self.prog, message))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="lazyctl",
        description="Inspect and steer lazyd, the per-user daemon that runs MCP servers lazily. "
        "Exit status: 0 ok, 1 failed, 2 bad usage, 3 lazyd not running.",
    )
    parser.add_argument("--socket", default=None, help="the daemon's socket (default: LAZYD_SOCKET, "
                        "else $XDG_RUNTIME_DIR/lazyd/lazyd.sock)")
    common = _Parser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    common.add_argument("--socket", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND")

    def add(name: str, run: Command, help_text: str, description: str | None = None, *,
            takes_name: bool = False) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_text, description=description or help_text)
        p.set_defaults(run=run)
        if takes_name:
            p.add_argument("name", metavar="NAME")
        return p

    p = add("status", commands.cmd_status, "show every server (or the named ones) and a summary",
            "Show name, state, pid, uptime, attached clients, memory (PSS) of the process tree, "
            "restarts, cache age, tool count and last error of each server, then a summary line. "
            "Exits 3 when lazyd is not running.")
    p.add_argument("names", nargs="*", metavar="NAME", help="only these servers")

    add("wake", partial(commands.cmd_start, op="wake", doing="waking"),
        "start a server now and wait until it runs or fails",
        "Start NAME (resetting its failure count) and wait until it is running, or failed "
        "within its start_timeout; a failure prints why and exits 1.", takes_name=True)

    add("sleep", commands.cmd_sleep, "stop a server now; the next request wakes it", takes_name=True)

    add("restart", partial(commands.cmd_start, op="restart", doing="restarting"),
        "stop a server by the stop ladder and start it again",
        "Stop NAME as `sleep` does and start it at once, waiting until it runs or fails; its "
        "in-flight requests are answered with an error, its sessions go on with the new process.", takes_name=True)

    add("top", commands.cmd_top, "a live view of the servers, refreshed every second",
        "Every server's state, sessions, tree memory (PSS, with a bar against its memory_max or the "
        "machine), CPU %, requests per minute, uptime and last error, and lazyd's own cost, redrawn "
        "every second in 80 columns. Keys: up/down (or k/j) select, w wake, s sleep, r restart the "
        "selected server, q quit. Needs a terminal.")

    p = add("logs", commands.cmd_logs, "show a server's stderr log",
            "Print the last lines of NAME's stderr log (kept by the daemon, rotated at 1 MiB); "
            "with -f keep printing new lines until Ctrl-C.", takes_name=True)
    p.add_argument("-f", "--follow", action="store_true", help="keep printing lines as they are written")
    p.add_argument("-n", "--lines", type=int, default=50, metavar="N", help="how many lines (default 50)")

    p = add("check", registration.cmd_check, "start a server in isolation and warm its cache",
            "Start the server in its own temporary process (never the shared one), perform the "
            "handshake, probe server/discover, fetch every listing page, stop it and write the "
            "cache, so the first session starts nothing. Never calls a tool. A failed check "
            "leaves the previous cache untouched. Name the server by NAME, --server NAME, or a "
            "command after `--` registered as `lazyd-shim -- COMMAND` here would be. Starts the "
            "daemon first if none runs, as a shim would (not with LAZYD_NO_AUTOSTART).")
    p.add_argument("name", nargs="?", metavar="NAME", help="a server name shown by `lazyctl status`")
    p.add_argument("--server", metavar="NAME", help="a named server from config.toml")
    p.add_argument("--cwd", metavar="DIR", help="working directory of a `--` command (default: here)")
    p.add_argument("--client", choices=tuple(PROFILES), metavar="CLIENT",
                   help="check as this client would start the server: its handshake (the latest "
                   "learned from its sessions, else one captured from its release) and the "
                   f"environment it gives a server ({', '.join(PROFILES)})")
    p.add_argument("--initialize-json", metavar="JSON|@FILE",
                   help="client initialize params, inline or from a file (params, an initialize "
                   "request, or a captured session of JSON lines); beats --client's; default: "
                   "protocol 2025-11-25, no capabilities")
    p.add_argument("--start-timeout", metavar="D",
                   help="bound on the check's start, handshake and listings, like the shim option "
                   "(default: LAZYD_START_TIMEOUT, else the server's start_timeout)")

    p = add("explain", registration.cmd_explain, "show a registration's identity and why two share or not",
            "Show the identity of a registration (resolved command, cwd, environment variable "
            "names; values are never shown) and the per-session variables left out of it. With "
            "two registrations, say whether they share one server process and if not, why. "
            "Registrations: NAME (see `lazyctl status`) or `-- COMMAND ARGS...` as run here.")
    p.add_argument("names", nargs="*", metavar="NAME")
    p.add_argument("--cwd", metavar="DIR", help="working directory of a `--` command (default: here)")

    add("reload", commands.cmd_reload, "re-read the config file and report what changed")
    p = add("share", share.cmd_share, "let every session of a server share one process (or not: --off)",
            "Write the one line of config that says a server keeps no session's state, so its "
            "sessions share one process, and reload lazyd. For a server of the config file: "
            "`share = true` in [servers.NAME]; for a registration a client made (see `lazyctl "
            "status`): an entry of the known-servers table for the package it runs. --off writes "
            "the opposite (share = false, or sharing = \"isolated\"). The rest of the file is kept "
            "byte for byte.", takes_name=True)
    p.add_argument("--off", action="store_true", help="one process per session instead")
    p.add_argument("--config", metavar="FILE", help="the config file lazyd reads (default: "
                   "~/.config/lazyd/config.toml, as lazyd's own default)")
    add("stop", commands.cmd_stop, "stop the daemon cleanly and wait until it has exited")
    add("upgrade", commands.cmd_upgrade, "restart the daemon as the lazyd installed now, keeping servers and sessions",
        "Hand the running daemon over to the lazyd installed now, in place (same pid): running "
        "servers keep running (same pids), client sessions stay connected and calls in flight are "
        "answered by the new daemon. If the new daemon cannot take the servers over (another state "
        "version, say), it stops them as `lazyctl stop` would, sessions reconnect, and this command "
        "says why and exits 1. The same as sending SIGUSR2 to lazyd, or `systemctl --user reload "
        "lazyd` under systemd.")

    p = add("systemd", systemd.cmd_systemd, "install or remove lazyd's systemd user units",
            "Write lazyd.socket and lazyd.service (ExecStart pointing at this installation) to "
            "~/.config/systemd/user, or remove them, and print the systemctl --user commands to run.")
    # stop-post: what lazyd.service's ExecStopPost= runs (lazyd/ctl/stop_post.py), not for users.
    p.add_argument("action", choices=("install", "uninstall", "stop-post"))
    p.add_argument("--unit-dir", metavar="DIR", help="where to write (default: $XDG_CONFIG_HOME/systemd/user)")
    p.add_argument("--force", action="store_true", help="replace or remove unit files lazyctl did not write")
    # wrap, unwrap, reapply, wrap-status: client config editing (lazyd/ctl/wrap/cli.py).
    wrap_cli.add_subcommands(add)
    return parser


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    command: list[str] | None = None
    if "--" in words:
        split = words.index("--")
        words, command = words[:split], words[split + 1:]
    parser = build_parser()
    args = parser.parse_args(words)
    if args.subcommand is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    prog = f"lazyctl {args.subcommand}"
    if command is not None and args.subcommand not in TAKES_COMMAND:
        return _usage(prog, "takes no command after `--`")
    if command is not None and not command:
        return _usage(prog, "no command after `--`")
    args.command = command
    out = Output(args.json)
    run: Command = args.run
    try:
        return run(args, out)
    except UsageError as exc:
        return _usage(prog, str(exc))
    except CtlError as exc:
        out.failure(exc.message, exc.data)
        return exc.exit_code
    except LazydError as exc:  # a WrapError, or a file or directory of lazyctl's own refused (SetupError)
        out.failure(str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0  # `lazyctl logs x | head`: the reader has what it wanted


def _usage(prog: str, message: str) -> int:
    print(f"{prog}: {message} (see {prog} --help)", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
