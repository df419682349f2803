"""`lazyctl top`'s frame (lazyd/ctl/top.py `frame_lines`): 80 columns, rates from two frames."""

from __future__ import annotations

from typing import Any

from lazyd.ctl.top import WIDTH, Rates, frame_lines

MiB = 1024 * 1024


def status(ticks: int, lines: int, **row: Any) -> dict[str, Any]:
    server = {"name": "a-server-with-a-very-long-name-indeed", "state": "running", "clients": 3, "pid": 7,
              "memory_bytes": 300 * MiB, "memory_max": 1024 * MiB, "cpu_ticks": ticks, "client_lines": lines,
              "uptime_s": 3725.0, "processes": 2,
              "last_error": "restarted: 1.3 GiB over memory_max 1 GiB and a long tail " * 3, **row}
    return {"daemon_pid": 42, "clock_ticks": 100, "servers": [server],
            "lazyd": {"memory_bytes": 12 * MiB, "daemon_bytes": 10 * MiB, "sessions": 4, "sessions_bytes": 2 * MiB,
                      "cpu_ticks": ticks},
            "pressure": {"under_pressure": True, "some_avg10": 12.5}}


def test_every_line_fits_80_columns_and_says_what_the_view_promises() -> None:
    rates = Rates()
    frame_lines(status(100, 10), rates, 0.0, selected=0, machine_bytes=16 * 1024 * MiB)
    lines = frame_lines(status(150, 40), rates, 1.0, selected=0, machine_bytes=16 * 1024 * MiB)
    assert all(len(line) <= WIDTH for line in lines)
    text = "\n".join(lines)
    assert "own 12 MiB" in text and "4 sessions 2 MiB" in text and "MEMORY PRESSURE 12.5%" in text
    row = next(line for line in lines if line.startswith("▶"))
    assert "300 MiB ██░░░░░░" in row  # 300 MiB of a 1 GiB limit: two of eight cells
    assert " 50.0 " in row  # 50 ticks of 100 a second over one second
    assert " 1800 " in row  # 30 lines in one second: 1800 a minute
    assert "1h2m" in row
    assert lines[-2].startswith("last error: restarted: 1.3 GiB over memory_max 1 GiB")  # the selected one's


def test_the_first_frame_has_no_rates_and_a_server_without_a_limit_is_measured_against_the_machine() -> None:
    lines = frame_lines(status(0, 0, memory_max=None, memory_bytes=8 * 1024 * MiB), Rates(), 0.0, selected=0,
                        machine_bytes=16 * 1024 * MiB)
    row = next(line for line in lines if line.startswith("▶"))
    assert "████░░░░" in row and "    -     -" in row


def test_many_servers_scroll_to_keep_the_selected_one_in_view() -> None:
    data = status(0, 0)
    data["servers"] = [dict(data["servers"][0], name=f"s{i:02}") for i in range(40)]
    lines = frame_lines(data, Rates(), 0.0, selected=39, machine_bytes=1, height=24)
    assert len(lines) <= 24 and any(line.startswith("▶s39") for line in lines)
