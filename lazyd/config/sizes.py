"""Sizes as users type them: `memory_max` in the config file and `--memory-max`, and in status output.

Binary units (K, M, G and T are powers of 1024, with or without "iB" or "B"), a fraction allowed,
or a bare number of bytes; `off` (also `none` and `0`) for no limit. Stdlib only and pure: the
shim checks `--memory-max` with it at a client's start, and the daemon reads the same option.
"""

from __future__ import annotations

import math
import re

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*", re.IGNORECASE | re.ASCII)
_POWERS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4}
_NO_LIMIT = ("off", "none", "0")
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def parse_size(text: str) -> int:
    """"1GiB", "1G", "1.5 GiB", "512MiB", "800000000" -> bytes; ValueError with a readable message."""
    match = _SIZE.fullmatch(text)
    if match is None or (match.group(3) and not match.group(2) and match.group(3).lower() != "b"):
        raise ValueError(f"{text!r} is not a size (use a number of bytes or a unit: 512MiB, 1GiB, 2G)")
    size = float(match.group(1)) * 1024 ** _POWERS[match.group(2).upper()]
    if not math.isfinite(size) or size < 1:
        raise ValueError(f"{text!r} is not a size of at least one byte")
    return int(size)


def parse_limit(text: str) -> int | None:
    """A size, or None for no limit (`off`, `none`, `0`); ValueError as `parse_size`."""
    return None if text.strip().lower() in _NO_LIMIT else parse_size(text)


def format_bytes(count: int) -> str:
    """1536 -> "1.5 KiB"; whole multiples drop the decimal: 1 GiB, not 1.0 GiB."""
    value = float(count)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            if unit == "B":
                return f"{count} B"
            return f"{f'{value:.1f}'.removesuffix('.0')} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
