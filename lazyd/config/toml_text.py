"""TOML text as plain data, for the config file and the known-servers table.

The standard library's parser reads a text it accepts; tomlkit is imported only for a text it
refuses, to say what is wrong in the words and line numbers lazyd has always given (and to accept
whatever tomlkit accepts, should the two disagree): kept by every daemon, its modules would cost
resident memory for its whole life (docs/benchmarks.md, "The fixed cost beside mcp-mux").
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from lazyd.errors import ConfigError


def parse_toml(text: str, label: str) -> dict[str, Any]:
    """`text` as plain data; for a text that is not TOML, a one-line ConfigError with its line."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        pass
    # Only a refused text gets here: the error path pays for tomlkit, not every start.
    import tomlkit
    import tomlkit.exceptions

    try:
        document: dict[str, Any] = tomlkit.parse(text).unwrap()
    except tomlkit.exceptions.ParseError as error:
        message = re.sub(r" at line \d+ col \d+$", "", str(error))
        raise ConfigError(f"{label}: line {error.line}: {message}") from None
    except tomlkit.exceptions.TOMLKitError as error:
        # Some tomlkit errors (a key defined twice) carry no position; tomllib's do.
        raise ConfigError(f"{label}: {_located(text) or error}") from None
    return document


def _located(text: str) -> str | None:
    """tomllib's "problem (at line N, column M)" as "line N: problem", or None."""
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        found = re.fullmatch(r"(.*) \(at line (\d+), column \d+\)", str(error))
        if found:
            return f"line {found.group(2)}: {found.group(1)}"
    return None
