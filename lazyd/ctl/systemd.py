"""`lazyctl systemd install|uninstall`: lazyd's systemd user units, written for this installation.

The unit texts live here (contrib/systemd/ holds the same with a conventional ExecStart; a test
keeps them identical). ExecStart runs *this* installation's daemon, never a PATH lookup (the user
manager's PATH is not the shell's, and pyenv or asdf pick a version by cwd). A unit file without
our marker line is the user's: neither replaced nor removed without `--force`. We never run
systemctl: the commands are printed, so nothing changes behind the user's back.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from lazyd.host import procfs
from lazyd.ctl.client import EXIT_OK
from lazyd.ctl.commands import Output
from lazyd.ctl.stop_post import stop_post
from lazyd.errors import CtlError, SetupError
from lazyd.host.paths import resolve_paths
from lazyd.host.privatefiles import write_private

MARKER = "# Written by `lazyctl systemd install`; change it with `systemctl --user edit`, not here."
CONTRIB_EXEC_START = "%h/.local/bin/lazyd"  # where `pip install --user` and pipx put the script
CONTRIB_LAZYCTL = "%h/.local/bin/lazyctl"  # ExecReload= and ExecStopPost= run lazyctl from there
UNIT_FILE_MODE = 0o644  # systemd reads user units as the user; 0644 is what systemctl edit writes

SOCKET_UNIT = """\
# lazyd.socket: the socket clients connect to; systemd starts lazyd.service on the first
# connection and holds connections made while it starts (docs/systemd.md).
[Unit]
Description=lazyd socket: lazy, shared MCP servers for AI clients

[Socket]
# The path lazyd-shim and lazyctl use by default: $XDG_RUNTIME_DIR/lazyd/lazyd.sock.
ListenStream=%t/lazyd/lazyd.sock
# Only this user may connect, and the directory is private too: lazyd refuses anything wider.
SocketMode=0600
DirectoryMode=0700
RemoveOnStop=yes
# A brake for a daemon that keeps failing before it takes the waiting connection (each such exit
# re-triggers the socket at once): more than 5 starts in 10 s and the socket unit fails
# ("trigger-limit-hit") instead of looping; shims then start a daemon themselves and show its
# error. A daemon with a bad config does not fail: it stays up and tells every client why.
TriggerLimitIntervalSec=10s
TriggerLimitBurst=5

[Install]
WantedBy=sockets.target
"""

SERVICE_UNIT = """\
# lazyd.service: the daemon, started by lazyd.socket (docs/systemd.md).
[Unit]
Description=lazyd: lazy, shared MCP servers for AI clients
Requires=lazyd.socket
After=lazyd.socket
# No start-rate limit: after a burst of crashes systemd would otherwise refuse to start lazyd
# until the user intervenes, and every client would fall back to running its servers directly.
# RestartSec alone paces restarts.
StartLimitIntervalSec=0

[Service]
# READY=1 comes only once lazyd accepts connections; STATUS= shows the server counts.
Type=notify
NotifyAccess=main
ExecStart={exec_start}
# A reload is an upgrade: lazyd execs the lazyd installed now in place (same MAINPID), keeps
# its servers and sessions, and says RELOADING=1 ... READY=1; lazyctl waits for the new daemon's
# answer, so `systemctl --user reload lazyd` returns once it is done (and fails if the new
# daemon could not take the servers over). The new daemon reads the config too.
ExecReload={lazyctl} upgrade
# A crash must keep the servers (their pipes wait in the fd store for the restarted daemon), so
# systemd kills the main process alone, never the servers in the cgroup. On stop, lazyd stops its
# servers itself (stdin EOF, SIGTERM, SIGKILL per process group) on SIGTERM; after a stop that
# ended (or timed out: a hung lazyd is SIGKILLed after TimeoutStopSec), `lazyctl systemd
# stop-post` SIGKILLs whatever is still in the cgroup. After a crash or a watchdog abort it
# leaves the servers to the restarted daemon.
KillMode=process
ExecStopPost=-{lazyctl} systemd stop-post
# lazyd bounds its own shutdown at 15 s; this is the backstop.
TimeoutStopSec=20s
Restart=on-failure
RestartSec=2s
# Exit status 2 is a file only the user can fix: restarting cannot fix it. (A bad config does not
# exit: the daemon stays up, answers every client with the error and loads the file once fixed.)
# 202 (the stored descriptors could not be passed) and 203 (lazyd is no longer installed) are
# systemd's own failures to start it, which no restart fixes either; each would otherwise restart
# for ever, the sessions' shims waiting on sockets the fd store holds, instead of the unit failing,
# which empties the store, so that each shim takes its session back itself.
RestartPreventExitStatus=2 202 203
# lazyd pings every WatchdogSec/2 from its event loop; a loop stuck this long is aborted
# (SIGABRT; SIGKILL after TimeoutAbortSec if it is stopped or in the kernel) and restarted, and
# the new daemon takes the servers over from the fd store.
WatchdogSec=60s
TimeoutAbortSec=5s
# Each server's pipes are kept here (FDSTORE=1), so that after a crash the restarted lazyd
# takes the servers over instead of losing them, and each hand-off session's socket and client
# ends, so that its shim goes on waiting while lazyd restarts: 3 per server process, 1 to 3 per
# session, and 1 for lazyd. lazyd stores no more than fits under the soft limit below; past it a
# server or session is lost or taken back by its shim after a crash, as without a store.
FileDescriptorStoreMax=16384
Environment=LAZYD_FDSTORE=1
# Descriptors: systemd passes the store's descriptors to a restarted lazyd below its soft limit,
# so the soft limit is raised to hold them (systemd keeps it at most the hard one). lazyd raises
# its soft limit to the hard one at start (a session holds 1 to 5, a server about 5), and starts
# its servers with 1024 (LAZYD_INHERITED_NOFILE), as systemd starts services by default.
LimitNOFILE=16384:524288
Environment=LAZYD_INHERITED_NOFILE=1024

[Install]
Also=lazyd.socket
"""

UNIT_NAMES = ("lazyd.socket", "lazyd.service")
WANTS_LINKS = ("sockets.target.wants/lazyd.socket", "default.target.wants/lazyd.service")
_PLAIN_ARG = re.compile(r"[A-Za-z0-9_./:=+,@-]+")
_REFUSED_IN_EXECUTABLE = "\"'\\"  # "Executable name contains special characters" (systemd 252)


def exec_start_argv(script: str = "lazyd", module: str = "lazyd.daemon") -> list[str]:
    """The command that runs this installation's daemon (or another of its scripts): the script
    beside the running Python if there is one, else that Python with ``-m``."""
    path = Path(sys.executable).parent / script
    if path.is_file() and os.access(path, os.X_OK):
        return [str(path)]
    return [sys.executable, "-m", module]


def quote_exec_arg(arg: str, *, executable: bool = False) -> str:
    """One ExecStart word (systemd.service(5) "Command lines"): `%` is doubled (a specifier
    otherwise), and so is `$` except in the executable, which systemd takes literally; anything
    not plain is double-quoted with C escapes."""
    if _PLAIN_ARG.fullmatch(arg):
        return arg
    arg = arg.replace("%", "%%")
    if not executable:
        arg = arg.replace("$", "$$")
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def exec_start_line(argv: list[str]) -> str:
    """The ExecStart= value for `argv`; ValueError if systemd cannot run that executable path."""
    if any(c in argv[0] for c in _REFUSED_IN_EXECUTABLE) or not argv[0].isprintable():
        raise ValueError(f"systemd refuses an executable path with quotes or backslashes: {argv[0]!r}")
    return " ".join([quote_exec_arg(argv[0], executable=True), *(quote_exec_arg(a) for a in argv[1:])])


def render_units(exec_start: str, *, marker: bool, lazyctl: str = CONTRIB_LAZYCTL) -> dict[str, str]:
    """Unit name -> text; `exec_start` and `lazyctl` are already quoted command lines."""
    head = MARKER + "\n" if marker else ""
    return {"lazyd.socket": head + SOCKET_UNIT,
            "lazyd.service": head + SERVICE_UNIT.replace("{exec_start}", exec_start).replace("{lazyctl}", lazyctl)}


def lazyctl_argv() -> list[str]:
    return exec_start_argv("lazyctl", "lazyd.ctl.main")


def default_unit_dir() -> Path:
    """Where systemd looks for the user's own units: $XDG_CONFIG_HOME/systemd/user."""
    config = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(config) if config.startswith("/") else Path.home() / ".config"
    return base / "systemd" / "user"


def cmd_systemd(args: argparse.Namespace, out: Output) -> int:
    unit_dir = Path(args.unit_dir) if args.unit_dir else default_unit_dir()
    if args.action == "stop-post":
        return stop_post(os.environ)
    if args.action == "install":
        return _install(unit_dir, args.force, out)
    return _uninstall(unit_dir, args.force, out)


def _install(unit_dir: Path, force: bool, out: Output) -> int:
    argv = exec_start_argv()
    try:
        units = render_units(exec_start_line(argv), marker=True, lazyctl=exec_start_line(lazyctl_argv()))
    except ValueError as exc:
        raise CtlError(f"{exc}; install lazyd under another path") from None
    for name in UNIT_NAMES:
        _refuse_foreign(unit_dir / name, force)
    try:
        unit_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CtlError(f"cannot create {unit_dir}: {exc.strerror}") from None
    files = {name: _write(unit_dir / name, text) for name, text in units.items()}
    commands = ["systemctl --user daemon-reload", "systemctl --user enable --now lazyd.socket"]
    if _unmanaged_daemon():
        # A daemon started by a shim holds the socket path the socket unit is about to bind.
        commands.insert(0, "lazyctl stop")
    data = {"unit_dir": str(unit_dir), "files": files, "exec_start": argv, "commands": commands}
    out.result(data, lambda: "\n".join(
        [*(f"{state} {unit_dir / name}" for name, state in files.items()),
         f"ExecStart={units['lazyd.service'].split('ExecStart=')[1].splitlines()[0]}",
         "now run:", *(f"  {c}" for c in commands)]))
    return EXIT_OK


def _uninstall(unit_dir: Path, force: bool, out: Output) -> int:
    enabled = [link for link in WANTS_LINKS if os.path.lexists(unit_dir / link)]
    if enabled:
        raise CtlError("lazyd is still enabled: run `systemctl --user disable --now lazyd.socket "
                       "lazyd.service` first, then uninstall again")
    files: dict[str, str] = {}
    for name in UNIT_NAMES:
        path = unit_dir / name
        if not path.exists():
            continue
        _refuse_foreign(path, force)
        try:
            path.unlink()
        except OSError as exc:
            raise CtlError(f"cannot remove {path}: {exc.strerror}") from None
        files[name] = "removed"
    commands = ["systemctl --user daemon-reload"] if files else []
    data = {"unit_dir": str(unit_dir), "files": files, "commands": commands}
    out.result(data, lambda: "\n".join(
        [*(f"removed {unit_dir / n}" for n in files), "now run:", *(f"  {c}" for c in commands)]
        if files else [f"no lazyd units installed in {unit_dir}"]))
    return EXIT_OK


def _refuse_foreign(path: Path, force: bool) -> None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline().rstrip("\n")
    except FileNotFoundError:
        return
    except OSError as exc:
        raise CtlError(f"cannot read {path}: {exc.strerror}") from None
    if first != MARKER and not force:
        raise CtlError(f"{path} was not written by lazyctl; keep it, or pass --force to replace it")


def _write(path: Path, text: str) -> str:
    try:
        if path.read_text(encoding="utf-8") == text:
            return "unchanged"
        state = "updated"
    except FileNotFoundError:
        state = "created"
    except (OSError, UnicodeError):
        state = "updated"
    try:
        # Exactly 0644 whatever the umask; not durable, as systemctl edit's own writes are not.
        write_private(path, text.encode("utf-8"), mode=UNIT_FILE_MODE, durable=False)
    except OSError as exc:
        raise CtlError(f"cannot write {path}: {exc.strerror}") from None
    return state


def _unmanaged_daemon() -> bool:
    """True if a lazyd that systemd did not start holds the instance lock (read, never taken).

    Not a connect probe: connecting to an installed socket unit would start the service."""
    try:
        lock = resolve_paths().lock
        pid = int(lock.read_text(encoding="ascii").strip() or 0)
    except (OSError, ValueError, SetupError):
        return False
    cgroup, cmdline = procfs.read_cgroup(pid), procfs.read_cmdline(pid)
    if cgroup is None or cmdline is None:
        return False
    # The lock file keeps the last holder's pid after it exits: make sure the pid is still lazyd.
    return pid > 0 and b"lazyd" in b"\0".join(cmdline) and "lazyd.service" not in cgroup
