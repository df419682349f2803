"""TOML text as plain data, for the config file and the known-servers table.

The standard library's parser reads it; a text it refuses is one ConfigError line that names the
line, as every error of the config file does.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from lazyd.errors import ConfigError

_WHERE = re.compile(r"(.*) \(at (?:line (\d+), column \d+|end of document)\)")


def parse_toml(text: str, label: str) -> dict[str, Any]:
    """`text` as plain data; for a text that is not TOML, a one-line ConfigError with its line."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        found = _WHERE.fullmatch(str(error))
        if found is None:
            raise ConfigError(f"{label}: {error}") from None
        line = found.group(2) or len(text.splitlines()) or 1
        raise ConfigError(f"{label}: line {line}: {found.group(1)}") from None
