"""What a daemon hands its successor: the envelope, the state file, and the secrets in memory.

The envelope (`LAZYD_UPGRADE`) names the inherited descriptors; its meaning never changes with the
state's version, so a successor that cannot read the state still knows what to keep and whom to
tell why. The state file (docs/upgrade.md "How it works") holds no secrets; the secrets (commands,
environments, identities) go in a sealed memfd, never a file (under systemd the same memfd goes to
the fd store, lazyd/daemon/upgrade/stored_servers.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from lazyd.core import state_codec as sc
from lazyd.errors import InheritError, StateFileError
from lazyd.host.paths import Paths
from lazyd.host.privatefiles import read_private, write_private

ENVELOPE_ENV = "LAZYD_UPGRADE"
STATE_FORMAT = "lazyd-upgrade-state"
STATE_VERSION = 1
STATE_SUFFIX = ".upgrade"  # beside the lock: lazyd.lock -> lazyd.upgrade
# Caches of hundreds of servers fit many times over; a larger file is not one lazyd wrote.
MAX_STATE_BYTES = 256 * 1024 * 1024
MAX_SECRETS_BYTES = 64 * 1024 * 1024
# Steps from an older version to the next; a version missing here is refused.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}
_SEALS = getattr(fcntl, "F_SEAL_SEAL", 1) | getattr(fcntl, "F_SEAL_SHRINK", 2) | getattr(fcntl, "F_SEAL_GROW", 4) \
    | getattr(fcntl, "F_SEAL_WRITE", 8)
_ADD_SEALS = getattr(fcntl, "F_ADD_SEALS", 1033)


@dataclass
class Envelope:
    """The descriptors and paths a successor needs before it reads any state (module docstring)."""

    state: str
    listener: int
    lock: int
    activated: bool
    fds: list[int] = field(default_factory=list)  # every descriptor inherited, the ones above included
    secrets: int | None = None
    reply: int | None = None  # the `lazyctl upgrade` connection, answered by the successor
    from_pid: int = 0
    upgrades: int = 0  # how many upgrades this daemon went through before this one
    started_at: float = 0.0  # when the first daemon of this chain started (wall clock)
    v: int = 1
    # Each server process as [pid, start ticks]: a successor that cannot read the state still
    # stops them by the ladder (they are its children) instead of leaving them behind.
    servers: list[list[int]] = field(default_factory=list)
    began: float = 0.0  # when the upgrade was asked for (wall clock)

    def encode(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> Envelope:
        """Raises InheritError for an envelope this lazyd cannot read."""
        try:
            envelope: Envelope = sc.load(cls, json.loads(text), "envelope")
        except (ValueError, RecursionError) as exc:
            raise InheritError(f"{ENVELOPE_ENV} is not an envelope this lazyd reads ({str(exc)[:120]})") from None
        return envelope


def state_path(paths: Paths) -> Path:
    """Where the state is handed over: beside the instance lock, in the private runtime dir."""
    return paths.lock.with_suffix(STATE_SUFFIX)


def encode_state(body: dict[str, Any], version: int) -> bytes:
    """The file's bytes: ASCII JSON (bytes that are not UTF-8 ride as escaped surrogates)."""
    text = json.dumps(body, ensure_ascii=True, allow_nan=True, separators=(",", ":"))
    digest = hashlib.sha256(text.encode("ascii")).hexdigest()
    head = json.dumps({"format": STATE_FORMAT, "version": version, "sha256": digest, "written_at": time.time(),
                       "pid": os.getpid()}, separators=(",", ":"))
    # The header on a line of its own: a reader learns the version before it parses the body.
    return head.encode("ascii") + b"\n" + text.encode("ascii")


def write_state(path: Path, body: dict[str, Any]) -> None:
    """Write the state (0600, atomic, not synced: it is read a moment later by the same machine)."""
    write_private(path, encode_state(body, STATE_VERSION), durable=False)


def read_state(path: Path) -> tuple[dict[str, Any], float]:
    """The state body and when it was written (wall clock); the file is removed either way.

    Raises InheritError with one line: no file, not lazyd's, corrupt, or of a version this lazyd
    neither reads nor migrates."""
    try:
        data = read_private(path, MAX_STATE_BYTES, secret=True)
    except StateFileError as exc:
        raise InheritError(f"the state file {exc}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    if data is None:
        raise InheritError(f"the state file {path} is missing")
    head_line, _, text = data.partition(b"\n")
    try:
        head = sc.obj(json.loads(head_line), "header")
        if head.get("format") != STATE_FORMAT:
            raise ValueError("not a lazyd upgrade state")
        version = sc.integer(head.get("version"), "version")
        written_at = sc.number(head.get("written_at"), "written_at")
        digest = sc.text(head.get("sha256"), "sha256")
    except (ValueError, RecursionError) as exc:
        raise InheritError(f"the state file {path} is not one lazyd wrote ({exc})") from None
    if version > STATE_VERSION:
        raise InheritError(f"the state was written by a newer lazyd (state version {version}; this lazyd reads "
                            f"version {STATE_VERSION}): a downgrade cannot take its servers over")
    if hashlib.sha256(text).hexdigest() != digest:
        raise InheritError(f"the state file {path} is corrupt: its checksum does not match its contents")
    try:
        body = sc.obj(json.loads(text), "state")
    except (ValueError, RecursionError) as exc:
        raise InheritError(f"the state file {path} is corrupt ({exc})") from None
    while version < STATE_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise InheritError(f"the state was written by an older lazyd (state version {version}), which this "
                                f"lazyd (version {STATE_VERSION}) does not migrate")
        body, version = step(body), version + 1
    return body, written_at


def write_secrets(secrets: dict[str, Any]) -> int:
    """A sealed memfd holding `secrets` (JSON), positioned at its start; the caller owns the fd."""
    fd = os.memfd_create("lazyd-secrets", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        data = json.dumps(secrets, ensure_ascii=True, separators=(",", ":")).encode("ascii")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        fcntl.fcntl(fd, _ADD_SEALS, _SEALS)  # nothing can change it after this, not even us
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_secrets(fd: int) -> dict[str, Any]:
    """The secrets in memfd `fd` (which is closed); InheritError if it is not what we wrote."""
    try:
        chunks = []
        total = 0
        while chunk := os.pread(fd, 1024 * 1024, total):
            chunks.append(chunk)
            total += len(chunk)
            if total > MAX_SECRETS_BYTES:
                raise InheritError("the inherited secrets are larger than any lazyd writes")
        return sc.obj(json.loads(b"".join(chunks)), "secrets")
    except (OSError, ValueError, RecursionError) as exc:
        raise InheritError(f"the inherited secrets cannot be read ({str(exc)[:120]})") from None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
