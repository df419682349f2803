"""`lazyctl share NAME [--off]`: opt a server in to one shared process (or out), in the config file.

A server nothing says is shareable gets a process per session (docs/relay.md, "Sharing one
process"). This writes the one line that says otherwise and reloads the daemon: `share = true`
in `[servers.NAME]` for a named server, else an entry `[known_servers."PKG"]` with `sharing =
"shared"` for the package the registration runs (`--off`: the opposite). tomlkit keeps every other
byte, and the result is checked as the daemon will read it before it replaces the file.
"""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, cast

from lazyd.ctl.client import EXIT_OK, connect
from lazyd.ctl.commands import Output
from lazyd.errors import ConfigError, CtlError, UsageError

if TYPE_CHECKING:
    import tomlkit

WHY = "set by lazyctl share"


def cmd_share(args: argparse.Namespace, out: Output) -> int:
    from lazyd.host.paths import resolve_paths  # platformdirs: only for the commands that need it

    path = Path(args.config) if args.config else resolve_paths().config_file
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    runs = None
    servers = _document(text).get("servers")
    if not (isinstance(servers, Mapping) and args.name in servers):
        with connect(args.socket) as conn:
            rows = conn.call("status", {"names": []})["servers"]
        runs = package_of(rows, args.name)
    new_text, what = edited(text, args.name, on=not args.off, runs=runs)
    _check(new_text, path)
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o600
    from lazyd.host.privatefiles import write_private

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private(path, new_text.encode("utf-8"), mode=mode)
    report: dict[str, Any] = {"config": str(path), "written": what, "reloaded": None}
    try:
        with connect(args.socket) as conn:
            report["reloaded"] = conn.call("reload", timeout_s=None)
    except CtlError as exc:
        report["reload_error"] = exc.message

    def human() -> str:
        line = f"{what} written to {path}"
        if report["reloaded"] is not None:
            return line + "; lazyd reloaded it (sessions from now on follow it)"
        return line + f"; lazyd not reloaded ({report.get('reload_error')}): it reads it at its next start"

    out.result(report, human)
    return EXIT_OK


def edited(text: str, name: str, *, on: bool, runs: str | None) -> tuple[str, str]:
    """`text` with the opt-in (or out) written, and what was written, in words: `share` in
    `[servers.NAME]` when `runs` is None, else an entry `[known_servers."RUNS"]`."""
    import tomlkit

    document = _document(text)
    if runs is None:
        server = cast(MutableMapping[str, Any], cast(Mapping[str, Any], document["servers"])[name])
        server["share"] = on
        return tomlkit.dumps(document), f"share = {'true' if on else 'false'} in [servers.{name}]"
    table = document.get("known_servers")
    if table is None:
        table = tomlkit.table(is_super_table=True)
        document["known_servers"] = table
    entry = tomlkit.table()
    entry["sharing"] = "shared" if on else "isolated"
    entry["runs"] = [runs]
    entry["why"] = WHY
    table[runs] = entry
    key = tomlkit.key(runs).as_string()
    return tomlkit.dumps(document), f'[known_servers.{key}] sharing = "{entry["sharing"]}"'


def _document(text: str) -> tomlkit.TOMLDocument:
    import tomlkit
    import tomlkit.exceptions

    try:
        return tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        raise CtlError(f"the config file cannot be read as TOML ({exc}): fix it first") from None


def package_of(rows: list[dict[str, Any]], name: str) -> str:
    """What the registration NAME runs (its package), from `status`; UsageError when there is
    no such server or nothing names what it runs."""
    row = next((r for r in rows if r.get("name") == name), None)
    if row is None:
        known = ", ".join(sorted(str(r.get("name")) for r in rows if not r.get("instance_of"))) or "none"
        raise UsageError(f"no server named {name!r} (lazyctl status lists them: {known})")
    if row.get("instance_of"):
        row = next((r for r in rows if r.get("name") == row["instance_of"]), row)
    runs = row.get("runs")
    if not isinstance(runs, str) or not runs:
        raise CtlError(f"lazyd does not know what {name} runs: set `share = true` in its registration "
                       "(lazyd-shim --share true) or in a [servers.NAME] table")
    return runs


def _check(text: str, path: Path) -> None:
    """The edited text as the daemon will read it: a config it would refuse is never written."""
    from lazyd.config.load import parse_config_text

    try:
        parse_config_text(text, os.environ, path)
    except ConfigError as exc:
        raise CtlError(f"the edited config would be refused, so it was not written: {exc}") from None
