"""How lazyctl shows things to people: tables, sizes, ages, and the status summary line.

Pure functions from the daemon's status rows to text; `--json` prints the rows themselves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from lazyd.config.durations import format_duration
from lazyd.config.sizes import format_bytes

# Columns of `lazyctl status`, in order: header and how to spell one row's value.
STATUS_COLUMNS = ("NAME", "STATE", "PID", "ERA", "UPTIME", "CLIENTS", "MEMORY", "RESTARTS", "CACHE", "TOOLS",
                  "LAST ERROR")
SUMMARY_STATES = ("running", "sleeping", "failed")
MAX_ERROR_CHARS = 60  # the last error in the table; `--json` and `wake` show it whole
NONE = "-"


def human_bytes(count: int | None) -> str:
    """Sizes as the config, the hub and the errors spell them ("1.5 KiB", "1 GiB"); None -> "-"."""
    return NONE if count is None else format_bytes(count)


def age(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return NONE
    return format_duration(max(seconds, 0.0))


def shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart; the last column is not padded."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [str(cell).ljust(widths[i]) if i < len(row) - 1 else str(cell) for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def status_row(row: Mapping[str, Any], now: float) -> list[str]:
    listings = row.get("listings") or {}
    updated = row.get("cache_updated_at")
    error = row.get("last_error")
    return [
        str(row["name"]),
        state_text(row),
        str(row["pid"]) if row.get("pid") is not None else NONE,
        str(row.get("era") or NONE),  # the protocol era its process runs in (docs/protocol-eras.md)
        age(row.get("uptime_s")) + _upgrades(row.get("upgrades")),
        str(row.get("clients", 0)),
        _memory(row),
        str(row.get("restarts", 0)),
        age(now - updated) if isinstance(updated, (int, float)) else NONE,
        str(listings["tools"]) if "tools" in listings else NONE,
        shorten(str(error), MAX_ERROR_CHARS) if error else NONE,
    ]


def _memory(row: Mapping[str, Any]) -> str:
    """The tree's PSS, and its memory_max after a slash when it has one: "15.1 MiB/1.0 GiB"."""
    limit = row.get("memory_max")
    text = human_bytes(row.get("memory_bytes"))
    return f"{text}/{human_bytes(limit)}" if isinstance(limit, int) else text


def state_text(row: Mapping[str, Any]) -> str:
    """STATE: with why a server sleeps when memory pressure put it to sleep, and the check-linger mark."""
    state = str(row["state"])
    reason = row.get("last_stop_reason")
    if state == "sleeping" and isinstance(reason, str) and reason.startswith("memory pressure"):
        state += " (memory pressure)"
    # A process only listings came for lingers check_linger, not linger (docs/supervision.md).
    return state + (" (listings only)" if row.get("linger_rule") == "check_linger" else "")


def _upgrades(count: object) -> str:
    """The daemon upgrades a running process lived through: its uptime counts across them."""
    return f" ({count} upgrade{'s' if count != 1 else ''})" if isinstance(count, int) and count > 0 else ""


def summary_line(rows: Sequence[Mapping[str, Any]], lazyd: Mapping[str, Any] | None = None) -> str:
    """"3 servers: 1 running, 1 sleeping, 1 failed; memory 41.0 MiB" and lazyd's own cost (PSS)."""
    states = [str(r["state"]) for r in rows]
    parts = [f"{states.count(s)} {s}" for s in SUMMARY_STATES]
    parts += [f"{states.count(s)} {s}" for s in sorted(set(states) - set(SUMMARY_STATES))]
    memory = sum(int(r.get("memory_bytes") or 0) for r in rows)
    noun = "server" if len(rows) == 1 else "servers"
    line = f"{len(rows)} {noun}: {', '.join(parts)}; memory {human_bytes(memory)}"
    return line + own_cost(lazyd)


def own_cost(lazyd: Mapping[str, Any] | None) -> str:
    """"; lazyd 12.0 MiB (daemon 10.0 MiB, 4 sessions 2.0 MiB)", or "" from a daemon that does not say."""
    if not isinstance(lazyd, Mapping) or not isinstance(lazyd.get("memory_bytes"), int):
        return ""
    sessions = int(lazyd.get("sessions") or 0)
    return (f"; lazyd {human_bytes(lazyd['memory_bytes'])} (daemon {human_bytes(lazyd.get('daemon_bytes'))}, "
            f"{sessions} session{'' if sessions == 1 else 's'} {human_bytes(lazyd.get('sessions_bytes'))})")


def pressure_line(pressure: object) -> str:
    """A head line while memory pressure puts idle servers to sleep; "" otherwise."""
    if not isinstance(pressure, Mapping) or not pressure.get("under_pressure"):
        return ""
    pct = pressure.get("some_avg10")
    figure = f"{pct:.1f}%" if isinstance(pct, (int, float)) else "?"
    return (f"\nmemory pressure: some avg10 {figure} (until under {pressure.get('stop_pct')}%): idle servers "
            "are put to sleep, least recently used first")


def distinctions(rows: Sequence[Mapping[str, Any]]) -> str:
    """For servers that run the same command under different identities, what sets each apart: its
    cwd, the names (never the values) of the variables that differ, how it shares. Processes of one
    registration (`instance_of`) are not another identity. "" when every command runs once."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if not row.get("instance_of"):
            groups.setdefault(repr(row.get("command")), []).append(row)
    lines: list[str] = []
    for group in groups.values():
        if len(group) < 2:
            continue
        if not lines:
            lines.append("same command, different identities (explain NAME NAME says why in full):")
        width = max(len(str(r["name"])) for r in group)
        for row in group:
            names = [n for n in row.get("differs_by") or [] if n != "cwd"]
            share = share_words(row)
            env = "env differs: " + ", ".join(names) if names else "env the same"
            lines.append(f"  {str(row['name']):<{width}}  cwd {row.get('cwd') or NONE}; {env}; {share}")
    return "\n".join(lines)


def share_words(row: Mapping[str, Any]) -> str:
    """Why a row shares or not: the rule, or how to opt in when nothing says it is shareable."""
    opt_in = row.get("share_opt_in")
    if opt_in:
        return f"isolated: not known to be shareable — {opt_in} if it keeps no session's state"
    return str(row.get("share_rule") or ("shared" if row.get("share", True) else "one process per session"))


def unshared_line(row: Mapping[str, Any]) -> str:
    """A row of "one process per session:"; sessions that attached before the rule was known (they
    keep their process) are said, so CLIENTS never contradicts it."""
    line = f"  {row['name']}: {share_words(row)}"
    clients = int(row.get("clients") or 0)
    if clients > 1:
        line += f" ({clients} sessions attached before this was known still share it)"
    return line


def walls(refused: object, fallbacks: object) -> str:
    """Status head lines: connections refused and shims that ran their server directly since the
    daemon started ("" when none): the wall an operator must see."""
    lines = []
    for title, rows in (("refused since start", refused), ("servers run directly by their shim since start", fallbacks)):
        if not isinstance(rows, dict) or not rows:
            continue
        total = sum(int(row.get("count", 0)) for row in rows.values() if isinstance(row, dict))
        parts = [f"{row.get('count')} {kind} (last: {shorten(str(row.get('last_reason', '')), 160)})"
                 for kind, row in sorted(rows.items()) if isinstance(row, dict)]
        lines.append(f"\n{title}: {total}: " + "; ".join(parts))
    return "".join(lines)
