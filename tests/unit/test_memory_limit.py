"""A server's memory limit: the rule of lazyd/core/memory.py, the lifecycle's rule 11, sizes, config.

Pure: explicit samples and times; the lifecycle fed the memory input as the supervisor feeds it.
"""

from __future__ import annotations

import random

import pytest

from lazyd.config.load import parse_config_text, policy_with_options
from lazyd.config.model import Policy
from lazyd.core.lifecycle.machine import Lifecycle, LifecyclePolicy, Log, Spawn, State, Stop
from lazyd.config.sizes import format_bytes, parse_limit, parse_size
from lazyd.core.memory import PARK_WINDOW_S, MemoryLimit, Park, Restart
from lazyd.errors import ConfigError

MiB = 1024 * 1024
GiB = 1024 * MiB


def test_one_sample_over_the_limit_is_forgiven_and_two_in_a_row_restart() -> None:
    limit = MemoryLimit(GiB)
    assert limit.sample(0.0, 2 * GiB, 7) is None
    assert limit.sample(2.0, GiB, 7) is None  # back at the limit: the count starts again
    assert limit.sample(4.0, 2 * GiB, 7) is None
    assert limit.sample(6.0, int(1.3 * GiB), 7) == Restart("restarted: 1.3 GiB over memory_max 1 GiB", 1)


def test_a_new_process_starts_the_count_again() -> None:
    limit = MemoryLimit(GiB)
    assert limit.sample(0.0, 2 * GiB, 7) is None
    assert limit.sample(2.0, 2 * GiB, 8) is None  # another pid: a new process, counted afresh


def test_the_third_breach_within_the_window_parks_and_older_ones_are_forgotten() -> None:
    limit = MemoryLimit(100 * MiB)
    verdicts = []
    for t in (0.0, 2.0, 10.0, 12.0, 20.0, 22.0):
        verdicts.append(limit.sample(t, 200 * MiB, 7))
    assert verdicts[1] == Restart("restarted: 200 MiB over memory_max 100 MiB", 1)
    assert verdicts[3] == Restart("restarted: 200 MiB over memory_max 100 MiB", 2)
    assert verdicts[5] == Park("parked: 3 times over memory_max 100 MiB within 10m (last 200 MiB)")
    spaced = MemoryLimit(100 * MiB)
    for t in (0.0, 2.0, PARK_WINDOW_S - 10, PARK_WINDOW_S - 8):
        last = spaced.sample(t, 200 * MiB, 7)
    assert last == Restart("restarted: 200 MiB over memory_max 100 MiB", 2)
    spaced.sample(2 * PARK_WINDOW_S + 10, 200 * MiB, 7)
    assert isinstance(spaced.sample(2 * PARK_WINDOW_S + 12, 200 * MiB, 7), Restart)


@pytest.mark.parametrize(("text", "size"), [("1GiB", GiB), ("1G", GiB), ("1.5 GiB", 3 * GiB // 2), ("512MiB", 512 * MiB),
                                            ("512m", 512 * MiB), ("800000000", 800000000), ("64KB", 65536), ("10B", 10)])
def test_sizes_are_read_in_binary_units(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "GiB", "1 XB", "-1G", "1iB", "0", "0.1B", "\uff11GiB"])
def test_a_bad_size_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_a_limit_is_a_size_or_off_as_the_shim_and_the_config_read_it() -> None:
    assert [parse_limit(t) for t in ("off", " None ", "0", "2G")] == [None, None, None, 2 * GiB]
    with pytest.raises(ValueError, match="'lots' is not a size"):
        parse_limit("lots")


@pytest.mark.parametrize(("size", "text"), [(512, "512 B"), (1536, "1.5 KiB"), (GiB, "1 GiB"), (int(1.34 * GiB), "1.3 GiB")])
def test_sizes_are_written_as_lazyctl_writes_them(size: int, text: str) -> None:
    assert format_bytes(size) == text


def running(policy: LifecyclePolicy = LifecyclePolicy(), clients: int = 1) -> Lifecycle:
    life = Lifecycle(policy, random.Random(1))
    if life.boot(0.0) != [Spawn()]:  # keep_alive starts at boot
        assert life.demand(0.0) == [Spawn()]
    life.spawned(0.1, 42)
    life.ready(0.2)
    life.load(0.3, clients, 0)
    return life


def test_a_restart_stops_by_the_ladder_and_backs_off_for_the_sessions_attached() -> None:
    life = running()
    assert life.memory_stop(100.0, "restarted: x", park=False, breaches=2) == [Stop("restarted: x")]
    assert (life.state, life.last_error) == (State.STOPPING, "restarted: x")
    life.exited(101.0, "restarted: x", requested=True)
    assert life.state is State.BACKOFF
    assert life.next_restart_at is not None and 101.0 + 0.8 <= life.next_restart_at <= 101.0 + 1.2  # step 2: 1 s
    assert life.tick(life.next_restart_at) == [Spawn()]


def test_a_restart_with_nobody_attached_leaves_it_asleep_for_the_next_request() -> None:
    life = running(clients=0)
    life.memory_stop(5.0, "restarted: x", park=False, breaches=1)
    life.exited(5.5, "restarted: x", requested=True)
    assert life.state is State.SLEEPING and life.last_error == "restarted: x"


def test_a_park_leaves_it_failed_with_the_reason() -> None:
    life = running()
    assert life.memory_stop(5.0, "parked: y", park=True, breaches=0) == [Stop("parked: y"), Log("parked as failed: parked: y")]
    life.exited(6.0, "parked: y", requested=True)
    assert life.state is State.FAILED and life.last_error == "parked: y"


def test_memory_stop_outside_a_run_is_ignored() -> None:
    life = Lifecycle(LifecyclePolicy(), random.Random(1))
    assert isinstance(life.memory_stop(0.0, "r", park=False, breaches=1)[0], Log)
    assert life.state is State.SLEEPING


def test_pressure_sleeps_only_a_running_idle_server_that_is_not_kept_alive() -> None:
    life = running()
    life.load(1.0, 1, 1)
    assert life.pressure_sleep(2.0, "memory pressure") == []
    life.load(3.0, 1, 0)
    assert life.pressure_sleep(4.0, "memory pressure") == [Stop("memory pressure")]
    kept = running(LifecyclePolicy(keep_alive=True))
    assert kept.pressure_sleep(5.0, "memory pressure") == []


def test_memory_max_is_read_from_defaults_servers_and_the_shim_option() -> None:
    config = parse_config_text('[defaults]\nmemory_max = "1GiB"\n[servers.a]\ncommand = "a"\n'
                               '[servers.b]\ncommand = "b"\nmemory_max = "256MiB"\n[servers.c]\ncommand = "c"\n'
                               'memory_max = false\n', {}, None)
    assert config.defaults.memory_max == GiB
    assert [config.servers[n].policy.memory_max for n in "abc"] == [GiB, 256 * MiB, None]
    assert policy_with_options(Policy(), {"memory_max": "2G"}).memory_max == 2 * GiB
    assert policy_with_options(Policy(memory_max=GiB), {"memory_max": "off"}).memory_max is None
    assert Policy().memory_max is None  # off by default


@pytest.mark.parametrize(("text", "message"), [
    ('[defaults]\nmemory_max = "lots"\n', "config.toml: defaults.memory_max: 'lots' is not a size"),
    ('[defaults]\nmemory_max = [1]\n', 'config.toml: defaults.memory_max: expected a size such as "1GiB" or false'),
    ("[pressure]\nstart = 5\nstop = 6\n", "config.toml: pressure.stop: 6 is above start (5)"),
    ('[pressure]\nstart = "5"\n', "config.toml: pressure.start: expected a percentage"),
    ('[pressure]\nfiles = ["rel/path"]\n', "config.toml: pressure.files: 'rel/path' is not an absolute path"),
    ("[pressure]\nlimit = 1\n", "config.toml: pressure.limit: unknown key"),
])
def test_bad_memory_settings_are_one_line_naming_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text, {}, None)
    assert str(caught.value).startswith(message)


def test_pressure_settings_have_defaults_and_are_read_whole() -> None:
    assert parse_config_text("", {}, None).pressure.start_pct == 10.0
    pressure = parse_config_text('[pressure]\nenabled = false\nstart = 20\nstop = 10.5\npause = "30s"\n'
                                 'files = ["/tmp/psi"]\n', {}, None).pressure
    assert (pressure.enabled, pressure.start_pct, pressure.stop_pct, pressure.pause_s, pressure.files) == (
        False, 20.0, 10.5, 30.0, ("/tmp/psi",))


def test_a_successor_daemon_takes_up_the_count_and_the_breaches_of_the_window() -> None:
    before = MemoryLimit(100 * MiB)
    for t in (0.0, 2.0, 10.0, 12.0, 14.0):  # two breaches, then one sample over
        before.sample(t, 200 * MiB, 7)
    state = before.to_state(15.0)
    after = MemoryLimit(100 * MiB)
    after.restore(state, 1000.0)  # the successor's clock reads 1000 at the moment of the write
    assert after.over == 1
    assert after.sample(1001.0, 200 * MiB, 7) == Park("parked: 3 times over memory_max 100 MiB within 10m (last 200 MiB)")
    with pytest.raises(ValueError):
        MemoryLimit(MiB).restore({"over": 0, "breaches": ["x"]}, 0.0)
