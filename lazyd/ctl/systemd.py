"""`lazyctl systemd install|uninstall`: lazyd's systemd user units, written for this installation.

The units are contrib/systemd/'s, shipped as package data (`units`, a link to that directory),
their Exec lines pointed at *this* installation's scripts, never a PATH lookup (the user manager's
PATH is not the shell's, and pyenv or asdf pick a version by cwd). A unit file without our marker
line is the user's: neither replaced nor removed without `--force`. We never run
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
UNIT_FILE_MODE = 0o644  # systemd reads user units as the user; 0644 is what systemctl edit writes
UNITS = Path(__file__).with_name("units")
# contrib/systemd/'s Exec lines run the scripts where `pip install --user` and pipx put them.
_CONVENTIONAL_EXEC = re.compile(r"^(Exec\w+=-?)%h/\.local/bin/(lazyd|lazyctl)(?=[ \n])", re.MULTILINE)

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


def render_units(lazyd: str, lazyctl: str) -> dict[str, str]:
    """Unit name -> text: the shipped units with our marker, their Exec lines running the already
    quoted command lines `lazyd` and `lazyctl`."""
    commands = {"lazyd": lazyd, "lazyctl": lazyctl}
    units = {}
    for name in UNIT_NAMES:
        try:
            text = (UNITS / name).read_text()
        except OSError as exc:
            raise CtlError(f"cannot read {UNITS / name}: {exc.strerror}; reinstall lazyd") from None
        units[name] = MARKER + "\n" + _CONVENTIONAL_EXEC.sub(lambda m: m[1] + commands[m[2]], text)
    return units


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
        units = render_units(exec_start_line(argv), exec_start_line(exec_start_argv("lazyctl", "lazyd.ctl.main")))
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
    """True if a lazyd that systemd did not start holds the instance lock (read, never taken): not a
    connect probe, since connecting to an installed socket unit would start the service."""
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
