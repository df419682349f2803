"""Safety of config edits: backups, modes, records, the lock, and writes racing ours."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lazyd.ctl.wrap import engine
from lazyd.errors import SetupError, WrapError
from tests.unit.fixtures_wrap.helpers import SHIM, Lazyctl

WAIT_S = 20.0  # bound on waiting for another process to reach a state; never a timing assertion
DATA = b'{"mcpServers": {"s": {"command": "server", "env": {"TOKEN": "SECRET-token"}}}}\n'


@pytest.fixture
def lazyctl(tmp_path: Path) -> Lazyctl:
    return Lazyctl(tmp_path)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _records(lazyctl: Lazyctl) -> dict[str, bytes]:
    directory = lazyctl.state_dir / "registrations"
    return {p.name: p.read_bytes() for p in directory.iterdir()} if directory.exists() else {}


def test_the_original_is_backed_up_privately_before_it_is_replaced(lazyctl: Lazyctl) -> None:
    path = lazyctl.put("mcp.json", DATA, mode=0o644)
    report = lazyctl.run("wrap", "cursor", path)
    assert report.backup is not None
    backup = Path(report.backup)
    assert backup.read_bytes() == DATA and _mode(backup) == 0o600
    for directory in (lazyctl.state_dir, lazyctl.state_dir / "backups", lazyctl.state_dir / "registrations"):
        assert _mode(directory) == 0o700
    (record,) = (lazyctl.state_dir / "registrations").iterdir()
    assert _mode(record) == 0o600
    assert json.loads(record.read_bytes())["server"] == "s"
    assert _mode(path) == 0o644


def test_records_hold_no_command_args_or_foreign_env_values(lazyctl: Lazyctl) -> None:
    path = lazyctl.put("mcp.json", DATA)
    lazyctl.run("wrap", "cursor", path, env={"LAZYD_LINGER": "10m"})
    (raw,) = _records(lazyctl).values()
    assert b"SECRET-token" not in raw and b'"server"' in raw and b"10m" in raw
    assert b'"command"' not in raw


def test_a_write_by_someone_else_between_read_and_replace_aborts_the_edit(lazyctl: Lazyctl) -> None:
    path = lazyctl.put("mcp.json", DATA)
    theirs = DATA.replace(b"server", b"their-server")

    def external_write() -> None:
        path.write_bytes(theirs)

    with pytest.raises(WrapError, match="contents changed") as caught:
        lazyctl.run("wrap", "cursor", path, before_replace=external_write)
    assert path.read_bytes() == theirs  # their write survives
    assert "backed up at" in str(caught.value)
    (backup,) = (lazyctl.state_dir / "backups").iterdir()
    assert backup.read_bytes() == DATA
    assert _records(lazyctl) == {}  # the record written before the replace was rolled back
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_conflict_restores_the_previous_record_not_just_removes_the_new_one(lazyctl: Lazyctl) -> None:
    path = lazyctl.put("mcp.json", DATA)
    lazyctl.run("wrap", "cursor", path, env={"LAZYD_LINGER": "10m"})
    before = _records(lazyctl)

    def external_chmod() -> None:
        path.chmod(0o600)

    with pytest.raises(WrapError, match="permissions"):
        lazyctl.run("wrap", "cursor", path, env={"LAZYD_LINGER": "1h"}, before_replace=external_chmod)
    assert _records(lazyctl) == before
    assert b'"10m"' in path.read_bytes()


def test_a_replaced_file_is_detected_too(lazyctl: Lazyctl) -> None:
    path = lazyctl.put("mcp.json", DATA)

    def replace_same_bytes() -> None:
        other = path.with_name("other.json")
        other.write_bytes(DATA)
        os.replace(other, path)

    with pytest.raises(WrapError, match="replaced by another file"):
        lazyctl.run("wrap", "cursor", path, before_replace=replace_same_bytes)


def test_dry_run_writes_nothing_at_all(lazyctl: Lazyctl) -> None:
    path = lazyctl.put("mcp.json", DATA)
    before = os.stat(path)
    report = lazyctl.run("wrap", "cursor", path, dry_run=True, env={"LAZYD_LINGER": "10m"})
    assert [r.changed for r in report.results] == [["command", "args", "env.LAZYD_IDENTITY_ENV", "env.LAZYD_LINGER"]]
    after = os.stat(path)
    assert path.read_bytes() == DATA
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert _records(lazyctl) == {} and not list((lazyctl.state_dir / "backups").iterdir())


def test_a_symlinked_config_is_edited_through_its_link(lazyctl: Lazyctl) -> None:
    target = lazyctl.put("dotfiles/mcp.json", DATA, mode=0o600)
    link = lazyctl.root / "home" / "mcp.json"
    link.symlink_to(target)
    lazyctl.run("wrap", "cursor", link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert SHIM.encode() in target.read_bytes() and _mode(target) == 0o600


def test_a_hard_linked_config_is_refused(lazyctl: Lazyctl) -> None:
    path = lazyctl.put("mcp.json", DATA)
    os.link(path, lazyctl.root / "home" / "second-name.json")
    with pytest.raises(WrapError, match="hard links"):
        lazyctl.run("wrap", "cursor", path)
    assert path.read_bytes() == DATA


def test_a_missing_file_is_a_clear_error(lazyctl: Lazyctl) -> None:
    with pytest.raises(WrapError, match="does not exist"):
        lazyctl.run("wrap", "cursor", lazyctl.root / "home" / "nope.json")


def test_a_state_dir_others_can_read_is_refused(lazyctl: Lazyctl) -> None:
    path = lazyctl.put("mcp.json", DATA)
    lazyctl.state_dir.mkdir(parents=True, mode=0o755)
    lazyctl.state_dir.chmod(0o755)
    with pytest.raises(SetupError, match="lazyd state dir"):
        lazyctl.run("wrap", "cursor", path)
    assert path.read_bytes() == DATA


@pytest.mark.parametrize(("text", "problem"), [("{not json", "not JSON"), ('{"version": 7}', "unknown version 7"),
                                                ("[]", "not an object")])
def test_an_unreadable_record_stops_the_edit_naming_the_file(
        lazyctl: Lazyctl, text: str, problem: str) -> None:  # fmt: skip
    path = lazyctl.put("mcp.json", DATA)
    lazyctl.run("wrap", "cursor", path)
    [name] = _records(lazyctl)
    record = lazyctl.state_dir / "registrations" / name
    record.write_text(text)
    wrapped = path.read_bytes()
    with pytest.raises(WrapError, match=re.escape(f"registration record {record} is unreadable ({problem}); move it away")):
        lazyctl.run("unwrap", "cursor", path)
    assert path.read_bytes() == wrapped


_CHILD = """
import os, sys
from pathlib import Path
from lazyd.ctl.wrap import engine
request = engine.Request("wrap", "cursor", sys.argv[1], all=True, shim=sys.argv[2])
report = engine.execute(request, os.environ, Path.cwd())
print("written" if report.written else "not written", flush=True)
"""


def _read_until(proc: subprocess.Popen[bytes], stream: object, needle: bytes) -> bytes:
    fd = stream.fileno()  # type: ignore[attr-defined]
    seen = b""
    deadline = time.monotonic() + WAIT_S
    while needle not in seen:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"timed out waiting for {needle!r}; got {seen!r}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            chunk = os.read(fd, 4096)
            assert chunk, f"stream closed before {needle!r}; got {seen!r}"
            seen += chunk
    return seen


def test_a_second_lazyctl_waits_for_the_lock_before_reading_the_file(lazyctl: Lazyctl) -> None:
    path = lazyctl.put("mcp.json", DATA)
    lazyctl.run("status", "cursor", path)  # creates nothing; the lock file comes with the first edit
    lazyctl.run("wrap", "cursor", path, servers=("s",), dry_run=True)
    lock = os.open(lazyctl.state_dir / "wrap.lock", os.O_RDWR)
    fcntl.flock(lock, fcntl.LOCK_EX)
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(path), SHIM], env={**os.environ, **lazyctl.env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        _read_until(proc, proc.stderr, b"waiting for another lazyctl")
        # It is blocked on the lock: while we hold it, an edit of ours is not lost to it.
        path.write_bytes(DATA.replace(b"server", b"edited-server"))
    finally:
        os.close(lock)
    out, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, err
    assert out.strip() == b"written"
    assert b"edited-server" in path.read_bytes()  # it read the file only after our edit
