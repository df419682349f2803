"""Registration records: what lazyd must remember about a registration it wrapped.

Only what the file cannot tell later (docs/wrapping.md, "Safety"). Command and args are not stored:
unwrap takes them from the wrapped args, so later edits survive and secrets stay out of one more file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lazyd.errors import WrapError
from lazyd.host.privatefiles import write_private

RECORD_VERSION = 1
RECORDS_DIR_NAME = "registrations"
_HASH_HEX_CHARS = 32  # 128 bits of sha256: no collision among one user's registrations


@dataclass(frozen=True)
class RegKey:
    """Which registration: a client's file (resolved path), a server name, and the project scope
    (``projects.<path>`` in ~/.claude.json) or None for a file's top-level servers."""

    client: str
    file: str
    server: str
    project: str | None = None

    def label(self) -> str:
        return self.server if self.project is None else f"{self.server} (project {self.project})"


@dataclass(frozen=True)
class Record:
    key: RegKey
    shim: str
    args_present: bool
    env_present: bool
    managed_env: Mapping[str, str] = field(default_factory=dict)
    # Per managed variable, its value before lazyd set it; None means it was absent.
    original_env: Mapping[str, str | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        """The record file's object: the key's fields beside the others, and the version."""
        fields = asdict(self)
        return {"version": RECORD_VERSION, **fields.pop("key"), **fields}


def record_from_json(raw: bytes, where: str) -> Record:
    """A record file's bytes as a Record; WrapError naming ``where`` if they are not one."""

    def bad(problem: str) -> WrapError:
        return WrapError(f"registration record {where} is unreadable ({problem}); move it away to continue")

    try:
        data = json.loads(raw)
    except ValueError:
        raise bad("not JSON") from None
    if not isinstance(data, dict):
        raise bad("not an object")
    if data.get("version") != RECORD_VERSION:
        raise bad(f"unknown version {data.get('version')!r}")
    strings = ("client", "file", "server", "shim")
    if not all(isinstance(data.get(name), str) for name in strings):
        raise bad("client, file, server and shim must be strings")
    project = data.get("project")
    if project is not None and not isinstance(project, str):
        raise bad("project must be a string or null")
    if not (isinstance(data.get("args_present"), bool) and isinstance(data.get("env_present"), bool)):
        raise bad("args_present and env_present must be booleans")
    managed, original = data.get("managed_env"), data.get("original_env")
    if not (isinstance(managed, dict) and all(isinstance(v, str) for v in managed.values())):
        raise bad("managed_env must map names to strings")
    if not (isinstance(original, dict) and all(v is None or isinstance(v, str) for v in original.values())):
        raise bad("original_env must map names to strings or null")
    key = RegKey(data["client"], data["file"], data["server"], project)
    return Record(key, data["shim"], data["args_present"], data["env_present"], dict(managed), dict(original))


class RecordStore:
    """The records directory. Callers hold the wrap lock (filesafe.wrap_lock) around any change."""

    def __init__(self, state_dir: Path) -> None:
        self.directory = state_dir / RECORDS_DIR_NAME

    def path_for(self, key: RegKey) -> Path:
        material = json.dumps([key.client, key.file, key.server, key.project]).encode()
        return self.directory / f"{hashlib.sha256(material).hexdigest()[:_HASH_HEX_CHARS]}.json"

    def read_raw(self, key: RegKey) -> bytes | None:
        """The record file's bytes (for rollback), or None when there is none."""
        try:
            return self.path_for(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise WrapError(f"cannot read registration record {self.path_for(key)}: {exc.strerror}") from None

    def every(self) -> list[Record]:
        """Every record, of every client and file, in file-name order."""
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise WrapError(f"cannot list {self.directory}: {exc.strerror}") from None
        found = []
        for name in names:
            if not name.endswith(".json"):
                continue
            path = self.directory / name
            try:
                raw = path.read_bytes()
            except OSError:
                continue  # removed by a concurrent unwrap of another file
            found.append(record_from_json(raw, str(path)))
        return found

    def save(self, record: Record) -> None:
        data = json.dumps(record.to_json(), indent=2, sort_keys=True).encode() + b"\n"
        self.write_raw(record.key, data)

    def write_raw(self, key: RegKey, data: bytes | None) -> None:
        """Replace the record file with ``data`` (None deletes it): used for saves and rollbacks."""
        path = self.path_for(key)
        try:
            if data is None:
                path.unlink(missing_ok=True)
            else:
                write_private(path, data)
        except OSError as exc:
            raise WrapError(f"cannot write registration record {path}: {exc.strerror}") from None
