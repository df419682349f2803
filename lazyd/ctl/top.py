"""`lazyctl top`: a live view of the daemon's servers, redrawn every second, in 80 columns.

One `status` call a second; what changes between two frames becomes CPU % and requests per minute.
Keys act on the selected server (`w` wake, `s` sleep, `r` restart, in a thread so the view goes
on). `curses.wrapper` restores the terminal on every way out; `frame_lines` is the pure part
(status data in, one frame's text out), tested without a terminal.
"""

from __future__ import annotations

import curses
import locale
import os
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lazyd.ctl.client import Connection, socket_path
from lazyd.ctl.format import NONE, age, human_bytes, shorten, state_text
from lazyd.errors import CtlError

WIDTH = 80
REFRESH_S = 1.0
BAR_CELLS = 8
RATE_WINDOW_S = 60.0  # requests per minute over the last minute (or what the view has seen of it)
HELP = "up/down select  w wake  s sleep  r restart  q quit"


@dataclass(frozen=True)
class Glyphs:
    full: str = "█"
    empty: str = "░"
    cursor: str = "▶"


ASCII = Glyphs("#", ".", ">")


@dataclass
class Rates:
    """What two frames tell apart: CPU % per server and of the daemon, and requests per minute."""

    _cpu: dict[str, tuple[float, int]] = field(default_factory=dict)  # name -> (time, ticks)
    _lines: dict[str, deque[tuple[float, int]]] = field(default_factory=dict)  # name -> (time, count)

    def cpu_pct(self, name: str, now: float, ticks: object, per_s: int) -> float | None:
        if not isinstance(ticks, int):
            self._cpu.pop(name, None)
            return None
        last = self._cpu.get(name)
        self._cpu[name] = (now, ticks)
        if last is None or now <= last[0] or ticks < last[1]:
            return None
        return 100.0 * (ticks - last[1]) / per_s / (now - last[0])

    def per_minute(self, name: str, now: float, count: object) -> float | None:
        if not isinstance(count, int):
            return None
        seen = self._lines.setdefault(name, deque())
        if seen and count < seen[-1][1]:
            seen.clear()  # a new runtime under the same name (a reload): start over
        seen.append((now, count))
        while len(seen) > 2 and now - seen[1][0] >= RATE_WINDOW_S:
            seen.popleft()
        first = seen[0]
        if now <= first[0]:
            return None
        return (count - first[1]) * 60.0 / (now - first[0])


def _bar(used: object, limit: object, machine: int, glyphs: Glyphs) -> str:
    """Tree memory against its memory_max, else against the machine's memory."""
    if not isinstance(used, int):
        return " " * BAR_CELLS
    whole = limit if isinstance(limit, int) and limit > 0 else machine
    filled = 0 if whole <= 0 else min(BAR_CELLS, round(BAR_CELLS * used / whole))
    return glyphs.full * filled + glyphs.empty * (BAR_CELLS - filled)


def _pct(value: float | None) -> str:
    return f"{value:5.1f}" if value is not None else "    -"


def frame_lines(data: Mapping[str, Any], rates: Rates, now: float, *, selected: int, machine_bytes: int,
                message: str = "", height: int = 24, glyphs: Glyphs = Glyphs()) -> list[str]:
    """The text of one frame, each line at most WIDTH characters."""
    per_s = int(data.get("clock_ticks") or 100)
    own = data.get("lazyd") or {}
    rows: Sequence[Mapping[str, Any]] = data.get("servers") or []
    daemon_cpu = rates.cpu_pct("\0lazyd", now, own.get("cpu_ticks"), per_s)
    states = [str(r.get("state")) for r in rows]
    head = (f"lazyd {data.get('daemon_pid')}  {len(rows)} servers, {states.count('running')} running  "
            f"own {human_bytes(own.get('memory_bytes'))} cpu {_pct(daemon_cpu).strip()}%")
    sub = (f"  daemon {human_bytes(own.get('daemon_bytes'))}, {own.get('sessions', 0)} sessions "
           f"{human_bytes(own.get('sessions_bytes'))}")
    pressure = data.get("pressure") or {}
    if pressure.get("under_pressure"):
        sub += f"  MEMORY PRESSURE {pressure.get('some_avg10')}%"
    lines = [head[:WIDTH], sub[:WIDTH], ""]
    header = f" {'NAME':<18} {'STATE':<10} {'SES':>3} {'MEMORY':>9} {'':<{BAR_CELLS}} {'CPU%':>5} {'REQ/M':>5} {'UPTIME':>6}  ERROR"
    lines.append(header[:WIDTH])
    room = max(1, height - len(lines) - 4)
    first = max(0, min(selected - room + 1, len(rows) - room)) if rows else 0
    for index, row in enumerate(rows):
        name = str(row.get("name"))
        cpu = rates.cpu_pct(name, now, row.get("cpu_ticks"), per_s)
        rpm = rates.per_minute(name, now, row.get("client_lines"))
        if not first <= index < first + room:
            continue
        error = row.get("last_error")
        text = (f"{shorten(name, 18):<18} {shorten(state_text(row), 10):<10} {row.get('clients', 0):>3} "
                f"{human_bytes(row.get('memory_bytes')):>9} {_bar(row.get('memory_bytes'), row.get('memory_max'), machine_bytes, glyphs)} "
                f"{_pct(cpu)} {(f'{rpm:5.0f}' if rpm is not None else '    -')} {age(row.get('uptime_s')):>6}  ")
        text += shorten(str(error), max(1, WIDTH - len(text))) if error else NONE
        lines.append((glyphs.cursor if index == selected else " ") + text[: WIDTH - 1])
    if not rows:
        lines.append(" no servers registered yet")
    lines.append("")
    chosen = rows[selected] if 0 <= selected < len(rows) else None
    detail, error_line = message, ""
    if chosen is not None:
        limit = chosen.get("memory_max")
        detail = detail or (f"{chosen.get('name')}: pid {chosen.get('pid') or NONE}, {chosen.get('processes', 0)} "
                            "processes" + (f", memory_max {human_bytes(limit)}" if isinstance(limit, int) else ""))
        error_line = f"last error: {chosen['last_error']}" if chosen.get("last_error") else ""
    lines += [shorten(detail, WIDTH) if detail else "", shorten(error_line, WIDTH) if error_line else "", HELP]
    return [line[:WIDTH] for line in lines]


class _Action:
    """One key's control op, run in a thread so the view keeps drawing; its outcome for the footer."""

    def __init__(self) -> None:
        self.message = ""
        self._thread: threading.Thread | None = None

    def start(self, path: str, op: str, name: str) -> None:
        if self._thread is not None and self._thread.is_alive():
            return  # one key's op at a time
        verb = {"wake": "waking", "sleep": "putting to sleep", "restart": "restarting"}[op]
        self.message = f"{verb} {name}…"

        def run() -> None:
            try:
                with Connection(path) as conn:
                    row = conn.call(op, {"name": name}, timeout_s=None)
                self.message = f"{name}: {row.get('state')}" + (f" (pid {row['pid']})" if row.get("pid") else "")
            except CtlError as exc:
                self.message = exc.message

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()


def _loop(screen: curses.window, path: str, glyphs: Glyphs) -> None:
    curses.curs_set(0)
    screen.timeout(int(REFRESH_S * 1000))
    rates, action = Rates(), _Action()
    machine = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")  # MemTotal, as sysinfo(2) gives it
    selected = 0
    next_status = 0.0
    data: Mapping[str, Any] = {}
    error = ""
    while True:
        now = time.monotonic()
        if now >= next_status:
            next_status = now + REFRESH_S
            try:
                with Connection(path) as conn:
                    data = conn.call("status", {"names": []})
                error = ""
            except CtlError as exc:
                error = exc.message
            rows = data.get("servers") or []
            selected = max(0, min(selected, len(rows) - 1))
            height, _width = screen.getmaxyx()
            lines = frame_lines(data, rates, now, selected=selected, machine_bytes=machine,
                                message=error or action.message, height=height, glyphs=glyphs)
            screen.erase()
            for y, line in enumerate(lines[:height]):
                try:
                    screen.addstr(y, 0, line)
                except curses.error:
                    pass  # the last cell of a small terminal
            screen.redrawwin()  # whole lines each frame: a frame reads the same in a log of the terminal
            screen.refresh()
        key = screen.getch()
        rows = data.get("servers") or []
        if key in (ord("q"), ord("Q"), 27):
            return
        if key in (curses.KEY_DOWN, ord("j")):
            selected = min(selected + 1, len(rows) - 1)
            next_status = 0.0
        elif key in (curses.KEY_UP, ord("k")):
            selected = max(selected - 1, 0)
            next_status = 0.0
        elif key in (ord("w"), ord("s"), ord("r")) and 0 <= selected < len(rows):
            op = {ord("w"): "wake", ord("s"): "sleep", ord("r"): "restart"}[key]
            action.start(path, op, str(rows[selected]["name"]))
            next_status = 0.0


def run_top(socket: str | None) -> None:
    """Until `q`: raises CtlError (not running) before touching the terminal."""
    path = socket_path(socket)
    with Connection(path) as conn:
        conn.call("ping", {})
    locale.setlocale(locale.LC_ALL, "")  # curses writes UTF-8 only under a UTF-8 locale
    glyphs = Glyphs() if locale.getpreferredencoding(False).lower().replace("-", "") == "utf8" else ASCII
    try:
        curses.wrapper(_loop, path, glyphs)
    except KeyboardInterrupt:
        pass
