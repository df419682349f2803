"""The known-servers table: the one shipped in the package, and the user's `[known_servers]`.

`packaged()` reads lazyd/config/known_servers.toml, package data, through its package's loader;
`parse_table` checks either table with the config file's one-line errors. The model and the
matching are pure (lazyd/core/sharing/known_servers.py).
"""

from __future__ import annotations

import functools
import pkgutil

from lazyd.config import values as cv
from lazyd.config.toml_text import parse_toml
from lazyd.core.sharing.known_servers import KNOWN_MODES, KnownServer, KnownServers
from lazyd.errors import ConfigError

PACKAGED_FILE = "known_servers.toml"
_ENTRY_KEYS = ("sharing", "runs", "why")


@functools.cache
def packaged() -> KnownServers:
    """The table shipped with lazyd. A missing or broken file is lazyd's own defect: it raises."""
    # pkgutil, not importlib.resources, whose readers import zipfile for the daemon's whole life
    # (docs/benchmarks.md, "The fixed cost beside mcp-mux"); the loader reads a zipped package too.
    data = pkgutil.get_data("lazyd.config", PACKAGED_FILE)
    if data is None:
        raise RuntimeError(f"lazyd's {PACKAGED_FILE}: the package's loader cannot read data")
    text = data.decode("utf-8")
    document = parse_toml(text, f"lazyd's {PACKAGED_FILE}")
    return parse_table(cv.At(f"lazyd's {PACKAGED_FILE}"), document)


def parse_table(at: cv.At, value: object) -> KnownServers:
    """`{NAME: {sharing, runs, why}}` as KnownServers; ConfigError naming the key otherwise."""
    entries = []
    for name, entry in cv.table(at, value).items():
        where = at / name
        fields = cv.table(where, entry)
        cv.check_keys(where, fields, _ENTRY_KEYS)
        if "sharing" not in fields:
            raise (where / "sharing").error(f"is required: one of {', '.join(KNOWN_MODES)}")
        mode = cv.one_of(where / "sharing", fields["sharing"], KNOWN_MODES)
        runs = tuple(cv.strings(where / "runs", fields.get("runs", []), allow_empty=mode == "auto"))
        if any(not run.strip() for run in runs):
            raise (where / "runs").error("holds an empty name")
        why = cv.string(where / "why", fields.get("why", ""))
        entries.append(KnownServer(name, mode, runs, why))
    return KnownServers(tuple(entries))
