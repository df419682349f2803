"""The hand-over's plain data: the state file, the envelope, the secrets memfd, a connection's bytes.

The relay core's and the lifecycle's own round trips are tested in test_relay_state.py and
test_lifecycle_state.py; here is what the shell writes around them.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.protocol import wire
from lazyd.config.load import WakePredicate
from lazyd.core import state_codec as sc
from lazyd.core.lifecycle import machine as lc
from lazyd.daemon.process.command import SpawnSpec
from lazyd.daemon.runtime.config import RuntimeConfig
from lazyd.daemon.upgrade import state as us
from lazyd.daemon.upgrade.connection_state import ConnectionState, SessionState, inbound_bytes
from lazyd.errors import InheritError
from lazyd.protocol.frames import Ctl, Line
from lazyd.host.privatefiles import write_private

BODY = {"runtimes": {"ab12": {"name": "time", "proc": {"pid": 42}}}, "raw": "\udcff bytes", "n": [1, 2.5, None]}


def test_the_state_round_trips_in_a_0600_file_that_is_gone_once_read(tmp_path: Path) -> None:
    path = tmp_path / "lazyd.upgrade"
    us.write_state(path, BODY)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    header = json.loads(path.read_bytes().split(b"\n", 1)[0])
    assert header["format"] == "lazyd-upgrade-state" and header["version"] == us.STATE_VERSION
    body, written_at = us.read_state(path)
    assert body == BODY and written_at > 0
    assert not path.exists()  # read once: a second successor finds nothing to take over


def write_version(path: Path, body: dict[str, Any], version: int) -> None:
    """A state file as a lazyd writing `version` writes it."""
    write_private(path, us.encode_state(body, version), durable=False)


def test_a_state_of_a_newer_version_is_refused_with_one_line_naming_both_versions(tmp_path: Path) -> None:
    path = tmp_path / "lazyd.upgrade"
    write_version(path, BODY, us.STATE_VERSION + 1)
    with pytest.raises(InheritError) as caught:
        us.read_state(path)
    message = str(caught.value)
    assert "\n" not in message
    assert f"state version {us.STATE_VERSION + 1}" in message and f"reads version {us.STATE_VERSION}" in message


def test_an_older_version_is_migrated_step_by_step_or_refused_when_no_step_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "lazyd.upgrade"
    monkeypatch.setattr(us, "STATE_VERSION", 3)
    write_version(path, {"old": True}, 1)
    monkeypatch.setattr(us, "MIGRATIONS", {1: lambda b: {**b, "one": True}, 2: lambda b: {**b, "two": True}})
    body, _ = us.read_state(path)
    assert body == {"old": True, "one": True, "two": True}
    write_version(path, {"old": True}, 1)
    monkeypatch.setattr(us, "MIGRATIONS", {2: lambda b: b})
    with pytest.raises(InheritError, match=r"older lazyd \(state version 1\), which this lazyd \(version 3\) does not"):
        us.read_state(path)


def test_a_corrupt_a_foreign_and_a_missing_state_file_each_say_which(tmp_path: Path) -> None:
    path = tmp_path / "lazyd.upgrade"
    us.write_state(path, BODY)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01  # one bit of the body
    path.write_bytes(bytes(data))
    os.chmod(path, 0o600)
    with pytest.raises(InheritError, match="corrupt: its checksum does not match"):
        us.read_state(path)
    path.write_bytes(b'{"format": "something else"}\n{}')
    os.chmod(path, 0o600)
    with pytest.raises(InheritError, match="not one lazyd wrote"):
        us.read_state(path)
    with pytest.raises(InheritError, match="is missing"):
        us.read_state(path)


def test_a_state_file_others_can_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lazyd.upgrade"
    us.write_state(path, BODY)
    os.chmod(path, 0o644)
    with pytest.raises(InheritError):
        us.read_state(path)


def test_the_secrets_go_through_a_sealed_memfd_and_come_back() -> None:
    secrets = {"runtimes": {"ab12": {"env": {"API_TOKEN": "s3cret"}}}}
    fd = us.write_secrets(secrets)
    try:
        assert os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:lazyd-secrets")
        with pytest.raises(PermissionError):
            os.write(fd, b"x")  # sealed: not even its writer can change it
        copy = os.dup(fd)
    finally:
        os.close(fd)
    assert us.read_secrets(copy) == secrets
    with pytest.raises(OSError):
        os.fstat(copy)  # read_secrets closed it


def test_the_envelope_round_trips_and_a_foreign_one_is_an_adoption_error() -> None:
    envelope = us.Envelope("/run/lazyd.upgrade", 3, 4, True, [3, 4, 9, 10], 9, 10, 1234, 2, 1700000000.5,
                           servers=[[55, 123456]], began=1700000100.25)
    assert us.Envelope.decode(envelope.encode()) == envelope
    with pytest.raises(InheritError, match="LAZYD_UPGRADE"):
        us.Envelope.decode('{"state": 1}')
    with pytest.raises(InheritError):
        us.Envelope.decode("not json")


frames = st.lists(st.one_of(st.binary(max_size=200).map(Line),
                            st.binary(min_size=1, max_size=50).map(lambda d: Line(d, 7)),
                            st.text(max_size=20).map(lambda op: Ctl(op or "status", {"names": [op]}))),
                  max_size=12)


@settings(max_examples=200, deadline=None)
@given(frames, st.data())
def test_what_a_decoder_read_and_did_not_hand_out_gives_a_new_decoder_the_same_frames(
    sent: list[Line | Ctl], data: st.DataObject
) -> None:
    stream = b"".join(wire.encode(f) for f in sent)
    cut = data.draw(st.integers(0, len(stream)))
    taken = data.draw(st.integers(0, len(sent)))
    old = wire.FrameDecoder()
    got = old.feed(stream[:cut])
    handled, pending = got[:taken], got[taken:]
    # The successor: what the old decoder held, then the rest of the stream as the socket gives it.
    new = wire.FrameDecoder()
    rest = new.feed(inbound_bytes(old, pending)) + new.feed(stream[cut:])
    assert [f.to_map() for f in handled + rest] == [f.to_map() for f in sent]


@given(st.binary(max_size=64), st.binary(max_size=64), st.lists(st.binary(max_size=32), max_size=3))
def test_a_connection_state_round_trips_through_json_with_any_bytes(inbound: bytes, outbound: bytes,
                                                                    lines: list[bytes]) -> None:
    state = ConnectionState("session", 17, inbound, outbound, SessionState(3, 999, "ab" * 32, None, lines, lines[::-1]))
    written = json.loads(json.dumps(sc.dump(state)))
    assert sc.load(ConnectionState, written, "connection") == state
    with pytest.raises(ValueError, match="unknown value"):
        sc.load(ConnectionState, {**written, "kind": "hub"}, "connection")
    with pytest.raises(ValueError, match="three descriptors"):
        sc.load(ConnectionState, {**written, "kind": "handoff"}, "connection")


# Every value config.toml and the shim accept (docs/configuration.md), written out literally: a
# setting the successor cannot read back would refuse the whole upgrade.
@pytest.mark.parametrize("share", [True, False, "auto", "session-aware"])
@pytest.mark.parametrize("era", ["auto", "handshake", "stateless"])
@pytest.mark.parametrize("sampling", ["refuse", "most-recent"])
def test_a_runtime_s_configuration_round_trips_split_into_state_and_secrets(share: object, era: str,
                                                                            sampling: str) -> None:
    config = RuntimeConfig("time", "ab12", SpawnSpec(("uvx", "mcp-server-time"), "/srv", {"TOKEN": "s3cret"},
                                                     Path("/logs/time.log"), 4096),
                           lc.LifecyclePolicy(linger_s=30.0, keep_alive=True, wake_interval_s=60.0),
                           WakePredicate(("probe", "--quick"), 60.0, 5.0), sampling, share, era)  # type: ignore[arg-type]
    state, secrets = config.to_state(), config.secrets()
    assert "s3cret" not in json.dumps(state) and "uvx" not in json.dumps(state)  # the secrets' part only
    assert RuntimeConfig.from_state(json.loads(json.dumps(state)), json.loads(json.dumps(secrets))) == config


def test_a_runtime_configuration_with_an_unknown_setting_is_refused_by_name() -> None:
    config = RuntimeConfig("time", "ab12", SpawnSpec(("t",), "/", {}, Path("/l"), 1), lc.LifecyclePolicy(), None,
                           "refuse", "auto")
    state = {**config.to_state(), "share": "sometimes"}
    with pytest.raises(ValueError, match="runtime.config"):
        RuntimeConfig.from_state(state, config.secrets())


def test_an_upgrade_does_not_go_on_with_a_hand_off_region_of_another_layout() -> None:
    from lazyd.daemon.upgrade.connection_state import ConnectionState, SessionState
    from lazyd.daemon.upgrade.inherit import _handed_off
    from lazyd.handoff.region import create_region

    region = create_region()
    os.pwrite(region, b"LZH4", 0)  # what a predecessor of layout 4 wrote
    stdin_r, stdin_w = os.pipe2(os.O_NONBLOCK)
    stdout_r, stdout_w = os.pipe2(os.O_NONBLOCK)
    state = ConnectionState("handoff", -1, session=SessionState(1, 4242, "srv", None), fds=[stdin_r, stdout_w, region])
    assert _handed_off(None, None, state, None) is None  # type: ignore[arg-type]
    for fd in (stdin_r, stdout_w, region):  # closed: the shim answers from its own region
        with pytest.raises(OSError):
            os.fstat(fd)
    os.close(stdin_w)
    os.close(stdout_r)
