"""The daemon's own log is its owner's only: created 0600 whatever the umask, tightened when found
wider, and every file a rotation makes is 0600 too (lazyd/daemon/log.py)."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from lazyd.daemon.log import PrivateRotatingFileHandler


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture(autouse=True)
def permissive_umask() -> Iterator[None]:
    old = os.umask(0o022)  # what most users have: new files 0644 unless the code says otherwise
    yield
    os.umask(old)


def write(handler: logging.Handler, text: str) -> None:
    handler.emit(logging.makeLogRecord({"msg": text, "levelno": logging.INFO, "levelname": "INFO"}))


def test_a_new_log_is_created_0600_under_a_0022_umask(tmp_path: Path) -> None:
    handler = PrivateRotatingFileHandler(tmp_path / "lazyd.log", 1024, 1)
    write(handler, "server stderr: token=abc")
    handler.close()
    assert mode(tmp_path / "lazyd.log") == 0o600


def test_an_existing_wider_log_and_backup_are_tightened_and_keep_their_lines(tmp_path: Path) -> None:
    log, backup = tmp_path / "lazyd.log", tmp_path / "lazyd.log.1"
    log.write_text("old line\n")
    backup.write_text("older line\n")
    log.chmod(0o644)
    backup.chmod(0o664)
    handler = PrivateRotatingFileHandler(log, 1024, 1)
    write(handler, "new line")
    handler.close()
    assert (mode(log), mode(backup)) == (0o600, 0o600)
    assert log.read_text() == "old line\nnew line\n"


def test_every_file_a_rotation_makes_is_0600(tmp_path: Path) -> None:
    log = tmp_path / "lazyd.log"
    handler = PrivateRotatingFileHandler(log, 64, 1)
    for n in range(10):
        write(handler, f"line {n} " + "x" * 30)
    handler.close()
    assert (tmp_path / "lazyd.log.1").exists()
    assert (mode(log), mode(tmp_path / "lazyd.log.1")) == (0o600, 0o600)


def test_a_symbolic_link_at_the_logs_name_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("")
    target.chmod(0o644)
    (tmp_path / "lazyd.log").symlink_to(target)
    with pytest.raises(OSError):
        PrivateRotatingFileHandler(tmp_path / "lazyd.log", 1024, 1)
    assert target.read_text() == "" and mode(target) == 0o644


@pytest.mark.parametrize("max_bytes,backup_count", [(64, 1), (200, 1), (100, 3), (0, 1), (64, 0)])
def test_a_rotation_leaves_the_same_files_as_the_standard_librarys_rotating_handler(
        tmp_path: Path, max_bytes: int, backup_count: int) -> None:
    import logging.handlers  # the reference: what the daemon no longer imports

    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    theirs.mkdir()
    handlers: list[logging.Handler] = [
        PrivateRotatingFileHandler(ours / "lazyd.log", max_bytes, backup_count),
        logging.handlers.RotatingFileHandler(theirs / "lazyd.log", maxBytes=max_bytes, backupCount=backup_count,
                                             encoding="utf-8")]
    for n in range(40):
        for handler in handlers:
            write(handler, f"line {n} " + "x" * (n % 7) * 9 + " é")
    for handler in handlers:
        handler.close()
    files = {path.name: path.read_text(encoding="utf-8") for path in ours.iterdir()}
    assert files == {path.name: path.read_text(encoding="utf-8") for path in theirs.iterdir()}
    assert "line 39" in files["lazyd.log"]


def test_a_record_is_formatted_once_for_the_size_check_and_the_write(tmp_path: Path) -> None:
    formatted: list[str] = []

    class Counting(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            formatted.append(record.getMessage())
            return super().format(record)

    handler = PrivateRotatingFileHandler(tmp_path / "lazyd.log", 1024, 1)
    handler.setFormatter(Counting())
    write(handler, "session 7 adopted")
    handler.close()
    assert formatted == ["session 7 adopted"]
    assert (tmp_path / "lazyd.log").read_text() == "session 7 adopted\n"
