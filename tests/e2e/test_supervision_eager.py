"""Servers that should keep running on their own: an eager server whose start fails backs off and
parks, and a failed `lazyctl wake` says why.

The backoff schedule is asserted as literal numbers (0.5, 1, 2, 4 s, +-20 %), not computed from the
lifecycle's constants, in two ways: the delays the daemon logs when it schedules each restart, and
the spawns it actually made, which must never come earlier than the logged delay. The crashing
server is `/bin/sh -c 'exit 1'`, which dies within milliseconds, so what separates two spawns is
the backoff and not a slow interpreter start; the intervals are only checked from below, which a
loaded machine can only satisfy more easily.
"""

from __future__ import annotations

import re

import pytest

from lazyd.errors import CtlError
from tests.conftest import UserEnv, start_daemon
from tests.e2e.supervision_support import (
    PARK_DEADLINE_S,
    control,
    daemon_log,
    server_table,
    spawn_times,
    status_rows,
    wait_for_row,
    write_config,
)

pytestmark = pytest.mark.e2e

CRASHER = ["/bin/sh", "-c", "echo 'eager: cannot open the database' >&2; exit 1"]
# The literal schedule: delay before the restart after the n-th consecutive failure.
SCHEDULE_S = [0.5, 1.0, 2.0, 4.0]
JITTER = 0.2
SPAWNS_BEFORE_PARKING = 5
LOG_STAMP_SLACK_S = 0.002  # the server log's stamps are in milliseconds


def logged_delays_s(user: UserEnv, name: str) -> list[float]:
    pattern = re.compile(rf"\[{re.escape(name)}\] failure (\d+) in a row; restarting in (\d+)ms")
    return [int(ms) / 1000 for _, ms in pattern.findall(daemon_log(user))]


def test_an_eager_server_that_fails_at_start_backs_off_on_schedule_and_parks_after_five_spawns(
    user_env: UserEnv,
) -> None:
    write_config(user_env, server_table("eager", command=CRASHER, start="eager"))
    start_daemon(user_env)
    row = wait_for_row(user_env, "eager", lambda r: r["state"] == "failed", "the eager server to park",
                       PARK_DEADLINE_S)
    assert (row["pid"], row["clients"], row["next_restart_in_s"]) == (None, 0, None)
    assert "exited with status 1" in row["last_error"] and "cannot open the database" in row["last_error"]
    times = spawn_times(user_env, "eager")
    assert len(times) == SPAWNS_BEFORE_PARKING, times
    delays = logged_delays_s(user_env, "eager")
    assert len(delays) == len(SCHEDULE_S), daemon_log(user_env)
    for nominal, delay in zip(SCHEDULE_S, delays):
        assert nominal * (1 - JITTER) - 0.001 <= delay <= nominal * (1 + JITTER) + 0.001, (nominal, delays)
    intervals = [(b - a).total_seconds() for a, b in zip(times, times[1:])]
    for delay, interval in zip(delays, intervals):
        assert interval >= delay - LOG_STAMP_SLACK_S, (delays, intervals)
    assert "[eager] parked as failed after 5 failed restarts within 1m" in daemon_log(user_env)
    # Parked means parked: a failed `lazyctl wake` is one more try that leaves it failed (with its
    # reason), not a new crash loop and not `sleeping`.
    with pytest.raises(CtlError, match="eager did not start: exited with status 1"):
        control(user_env, "wake", name="eager")
    row = status_rows(user_env)["eager"]
    assert (row["state"], row["pid"], row["failures"]) == ("failed", None, 1)
    assert "cannot open the database" in row["last_error"]
    assert len(spawn_times(user_env, "eager")) == SPAWNS_BEFORE_PARKING + 1


def test_a_failed_lazyctl_wake_of_a_lazy_server_with_no_client_shows_failed_with_its_reason(
    user_env: UserEnv,
) -> None:
    write_config(user_env, server_table("lazy", command=CRASHER))
    start_daemon(user_env)
    assert status_rows(user_env)["lazy"]["state"] == "sleeping"
    with pytest.raises(CtlError, match="lazy did not start: exited with status 1"):
        control(user_env, "wake", name="lazy")
    row = status_rows(user_env)["lazy"]
    assert row["state"] == "failed" and "cannot open the database" in row["last_error"]
    assert len(spawn_times(user_env, "lazy")) == 1
