"""Lists of environment variable names as users type them: ``--identity-env A,B_*``.

The shim checks ``--identity-env`` and ``--per-session-env`` at every client start, the daemon
reads the same options from the hello, and the config file's `identity_env` and `per_session_env`
hold the same names: one rule here, so they can never disagree. Standard library only and pure;
what the names mean for sharing is lazyd/core/sharing/envrules.py's business.
"""

from __future__ import annotations

import re

# A plain variable name, or an fnmatch pattern over the characters names use (`B_*`, `npm_config_?`).
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[A-Za-z0-9_*?\[\]!.-]+", re.ASCII)


def parse_names(text: str) -> tuple[str, ...]:
    """A comma-separated list of variable names or patterns (`LAZYD_IDENTITY_ENV=A,B_*`); ValueError
    naming the first bad entry: an empty entry, or one with `=` or spaces."""
    return tuple(dict.fromkeys(checked_name(part.strip()) for part in text.split(",")))


def checked_name(entry: str) -> str:
    """One variable name or pattern, as the list of `parse_names` or the config's arrays hold it."""
    if not entry or _NAME.fullmatch(entry) is None:
        raise ValueError(f"{entry!r} is not a variable name or pattern (use NAME,OTHER_*)")
    return entry
