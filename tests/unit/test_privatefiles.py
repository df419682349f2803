"""Private files (lazyd/host/privatefiles.py): the judge of what lazyd reads of its own files and the one
line it gives otherwise, and the one atomic writer."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from lazyd.errors import StateFileError
from lazyd.host.privatefiles import StagedFile, read_private, write_private
from lazyd.daemon.runtime.cache_store import SECRET_BYTES, load_or_create_secret


def private(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


def test_a_missing_file_reads_as_none_and_a_private_one_as_its_bytes(tmp_path: Path) -> None:
    assert read_private(tmp_path / "absent", 10) is None
    assert read_private(private(tmp_path / "f", b"abc"), 10) == b"abc"


@pytest.mark.parametrize(("mode", "secret", "refused"), [
    (0o644, False, False), (0o640, True, True), (0o604, True, True), (0o620, False, True), (0o602, False, True),
])
def test_group_or_other_write_is_refused_and_for_a_secret_read_too(
    tmp_path: Path, mode: int, secret: bool, refused: bool,
) -> None:
    path = private(tmp_path / "f", b"x", mode)
    if not refused:
        assert read_private(path, 10, secret=secret) == b"x"
        return
    with pytest.raises(StateFileError) as caught:
        read_private(path, 10, secret=secret)
    assert str(caught.value) == (f"{path}: is {'readable or writable' if secret else 'writable'} by group or "
                                 f"others (mode {mode:04o}); fix it with: chmod 600 {path}")


def test_a_symlink_a_directory_and_an_oversized_file_are_refused_with_the_fix(tmp_path: Path) -> None:
    target = private(tmp_path / "target", b"x")
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "dir").mkdir()
    big = private(tmp_path / "big", b"x" * 11)
    messages = []
    for path in (tmp_path / "link", tmp_path / "dir", big):
        with pytest.raises(StateFileError) as caught:
            read_private(path, 10)
        messages.append(str(caught.value))
    assert messages == [f"{tmp_path / 'link'}: is a symbolic link, not a file lazyd wrote; remove it",
                        f"{tmp_path / 'dir'}: is not a regular file; remove it",
                        f"{big}: is larger than 10 bytes, which no file lazyd writes is; remove it"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")
def test_a_file_of_another_uid_is_refused(tmp_path: Path) -> None:
    path = private(tmp_path / "f", b"x")
    os.chown(path, 65534, 65534)
    with pytest.raises(StateFileError, match="is owned by uid 65534, not by you"):
        read_private(path, 10)


def test_the_identity_key_is_created_once_0600_and_read_back(tmp_path: Path) -> None:
    key = load_or_create_secret(tmp_path / "state")
    assert len(key) == SECRET_BYTES and load_or_create_secret(tmp_path / "state") == key
    assert (tmp_path / "state" / "identity.key").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("size", [0, 1, SECRET_BYTES - 1, SECRET_BYTES + 1])
def test_an_identity_key_of_the_wrong_length_is_refused_and_left_in_place(tmp_path: Path, size: int) -> None:
    path = private(tmp_path / "identity.key", b"k" * size)
    with pytest.raises(StateFileError) as caught:
        load_or_create_secret(tmp_path)
    assert str(caught.value).startswith(f"{path}: is not a lazyd identity key ({size} bytes, expected 32); "
                                        "remove it and lazyd makes a new one")
    assert path.read_bytes() == b"k" * size  # never replaced behind the user's back


# --- the one atomic writer ------------------------------------------------------------------------


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_a_written_file_has_exactly_its_mode_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        write_private(tmp_path / "secret", b"s")
        write_private(tmp_path / "unit", b"u", mode=0o644, durable=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "secret").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "unit").st_mode) == 0o644


def test_a_write_replaces_the_old_file_whole_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = private(tmp_path / "state.json", b"old contents, longer than the new")
    inode = os.stat(target).st_ino
    assert write_private(target, b"new") is True
    assert target.read_bytes() == b"new"
    assert os.stat(target).st_ino != inode  # a new file renamed over the old one, never rewritten in place
    assert leftovers(tmp_path) == []


def test_a_symlink_at_the_target_is_replaced_and_never_followed(tmp_path: Path) -> None:
    victim = private(tmp_path / "victim", b"keep me")
    (tmp_path / "cache.json").symlink_to(victim)
    write_private(tmp_path / "cache.json", b"ours")
    assert victim.read_bytes() == b"keep me"
    assert not (tmp_path / "cache.json").is_symlink() and (tmp_path / "cache.json").read_bytes() == b"ours"


def test_an_exclusive_write_keeps_the_file_another_writer_made_first(tmp_path: Path) -> None:
    assert write_private(tmp_path / "identity.key", b"first", exclusive=True) is True
    assert write_private(tmp_path / "identity.key", b"second", exclusive=True) is False
    assert (tmp_path / "identity.key").read_bytes() == b"first"
    assert leftovers(tmp_path) == []


def test_a_failed_write_leaves_the_target_and_no_temporary_file(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()  # rename(2) cannot put a file over a directory
    with pytest.raises(IsADirectoryError):
        write_private(tmp_path / "taken", b"x")
    assert (tmp_path / "taken").is_dir() and leftovers(tmp_path) == []


def test_a_staged_file_left_without_a_commit_disappears(tmp_path: Path) -> None:
    target = private(tmp_path / "config.json", b"original")
    with StagedFile(target) as first, StagedFile(target) as second:
        assert first.tmp != second.tmp  # two writers at once never share a temporary name
        first.write(b"abandoned")
    assert target.read_bytes() == b"original" and leftovers(tmp_path) == []
