"""One wrap, unwrap, reapply or status run over one client config file, as a transaction.

Any refusal writes nothing; the edited file must read back as decided before it replaces the
original; a failed replace puts the records back (docs/wrapping.md, "Safety"). Status changes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from lazyd.ctl.wrap import clients, filesafe, plan, shimargs
from lazyd.ctl.wrap.jsonedit import JsonConfig
from lazyd.ctl.wrap.model import Entry, RegState, changed_fields
from lazyd.ctl.wrap.records import Record, RecordStore, RegKey
from lazyd.ctl.wrap.tomledit import TomlConfig
from lazyd.errors import UsageError, WrapError
from lazyd.host.paths import resolve_paths

Op = Literal["wrap", "unwrap", "reapply", "status"]


@dataclass(frozen=True)
class Request:
    """What the user asked, as parsed from the command line (see cli.py for the flags)."""

    op: Op
    client: str
    file: str | None = None
    servers: tuple[str, ...] = ()
    all: bool = False
    project: str | None = None
    user_scope: bool = False
    dry_run: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    shim: str | None = None
    recover: bool = False


@dataclass
class Result:
    """The outcome for one registration; ``state`` (for --check) is never printed: it may hold secrets."""

    key: RegKey
    action: plan.Action
    reason: str
    changed: list[str] = field(default_factory=list)
    state: RegState | None = None
    cwd: str | None = None
    passed_env: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"server": self.key.server, "project": self.key.project, "action": self.action,
                "reason": self.reason, "changed": self.changed}  # fmt: skip


@dataclass
class Report:
    op: Op
    client: str
    file: str
    dry_run: bool = False
    written: bool = False
    backup: str | None = None
    results: list[Result] = field(default_factory=list)
    statuses: list[plan.Status] = field(default_factory=list)

    @property
    def refused(self) -> list[Result]:
        return [r for r in self.results if r.action == "refused"]

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {"op": self.op, "client": self.client, "file": self.file}
        if self.op == "status":
            data["servers"] = [asdict(s) for s in self.statuses]
        else:
            data.update(dry_run=self.dry_run, written=self.written, backup=self.backup,
                        results=[r.to_json() for r in self.results])  # fmt: skip
        return data


class Config(Protocol):
    def entries(self) -> list[Entry]: ...
    def apply(self, entry: Entry, new: RegState) -> None: ...
    def render(self) -> bytes: ...


def open_config(client: clients.Client, data: bytes, where: str) -> Config:
    """Parse ``data`` as ``client``'s config. Raises WrapError for a malformed file."""
    if client.format == "toml":
        return TomlConfig(data, container=client.container, where=where)
    if client.format == "yaml":
        from lazyd.ctl.wrap.yamledit import YamlConfig  # PyYAML only for the file of the one client that needs it

        return YamlConfig(data, container=client.container, where=where)
    return JsonConfig(data, container=client.container, projects=client.projects, dialect=client.dialect,
                      where=where, argv=client.argv, env_key=client.env_key, nested=client.nested)  # fmt: skip


def execute(request: Request, environ: Mapping[str, str], cwd: Path,
            before_replace: Callable[[], None] | None = None, state_dir: Path | None = None) -> Report:
    """Run ``request`` on the config ``environ`` and ``cwd`` locate (records and backups in
    ``state_dir``, default lazyd's; ``before_replace``: filesafe.replace_checked's test seam).
    UsageError for an impossible request, WrapError (SetupError: an unsafe state dir) when the run failed as a whole;
    per-registration refusals are in ``Report.refused``, with nothing written."""
    client = clients.client_named(request.client)
    if (request.project is not None or request.user_scope) and not client.projects:
        raise UsageError(f"--project and --user-scope apply to Claude Code's ~/.claude.json, not to {client.title}")
    if request.op != "status" and not (request.servers or request.all):
        raise UsageError("name the registrations: --server NAME (repeatable) or --all")
    path = clients.config_path(client, request.file, environ, cwd)
    settings = _settings(request, environ)
    state_dir = state_dir or resolve_paths().state_dir
    store = RecordStore(state_dir)
    report = Report(request.op, client.name, str(path), dry_run=request.dry_run)
    if request.op == "status":
        _status(request, client, path, store, settings, report)
        return report
    filesafe.ensure_state_dirs(state_dir)
    with filesafe.wrap_lock(state_dir):
        _change(request, client, path, store, state_dir, settings, report, before_replace)
    return report


def _settings(request: Request, environ: Mapping[str, str]) -> plan.Settings:
    if request.shim is not None:
        return plan.Settings(shimargs.check_shim_path(request.shim), True, dict(request.env))
    if request.op in ("wrap", "reapply"):
        return plan.Settings(shimargs.find_shim(environ), False, dict(request.env))
    try:
        return plan.Settings(shimargs.find_shim(environ))
    except WrapError:
        return plan.Settings(shimargs.SHIM_NAME)  # recognition by name still works


def _in_scope(request: Request, project: str | None) -> bool:
    if request.project is not None:
        return project == request.project
    return project is None if request.user_scope else True


def _select(request: Request, entries: list[Entry], records: list[Record],
            file: str, client: str) -> list[tuple[RegKey, Entry | None, str | None]]:  # fmt: skip
    """(key, entry or None, refusal) for each selected registration, in file order."""
    scoped = [e for e in entries if _in_scope(request, e.project)]
    chosen: list[tuple[RegKey, Entry | None, str | None]] = []
    seen: set[tuple[str, str | None]] = set()
    if request.servers:
        for name in dict.fromkeys(request.servers):
            matches = [e for e in scoped if e.name == name]
            scopes = sorted({"user scope" if e.project is None else f"project {e.project}" for e in matches})
            if len(scopes) > 1:
                refusal = f"registered in several scopes ({', '.join(scopes)}): pass --project PATH or --user-scope"
                chosen.append((RegKey(client, file, name, None), None, refusal))
            elif matches:
                chosen.append((RegKey(client, file, name, matches[0].project), matches[0], None))
            else:
                project = request.project
                if project is None and not request.user_scope:
                    # Only a record can tell which scope a vanished registration was in.
                    projects = [r.key.project for r in records if r.key.server == name]
                    project = projects[0] if len(projects) == 1 else None
                chosen.append((RegKey(client, file, name, project), None, None))
        return chosen
    for entry in scoped:
        if (entry.name, entry.project) not in seen:
            seen.add((entry.name, entry.project))
            chosen.append((RegKey(client, file, entry.name, entry.project), entry, None))
    if request.op in ("unwrap", "status"):
        for record in records:
            if (record.key.server, record.key.project) not in seen and _in_scope(request, record.key.project):
                chosen.append((record.key, None, None))
    return chosen


def _status(request: Request, client: clients.Client, path: Path, store: RecordStore, settings: plan.Settings,
            report: Report) -> None:  # fmt: skip
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise WrapError(f"{path} does not exist") from None
    except OSError as exc:
        raise WrapError(f"cannot read {path}: {exc.strerror}") from None
    file = os.path.realpath(path)
    config = open_config(client, data, str(path))
    every = store.every()
    records, by_key = _records_of(every, client.name, file)
    twins: list[tuple[RegKey, tuple[str, ...]]] | None = None
    for key, entry, refusal in _select(request, config.entries(), records, file, client.name):
        if refusal is not None:
            report.statuses.append(plan.Status(key.server, None, "ambiguous", False, False, False, refusal))
            continue
        if entry is None and key not in by_key:
            raise WrapError(f"no server named {key.server!r} in {path}")
        twin = None
        if entry is not None and entry.state is not None and key not in by_key:
            if twins is None:
                twins = _wrapped_servers(every, settings.shim)
            twin = next((_twin_label(other) for other, argv in twins
                         if other != key and plan.same_server(entry.state, argv)), None)  # fmt: skip
        report.statuses.append(plan.describe(entry, by_key.get(key), settings.shim, key.server, key.project, twin))


def _wrapped_servers(records: list[Record], shim: str) -> list[tuple[RegKey, tuple[str, ...]]]:
    """The server argv of each registration lazyd wrapped that still runs through the shim (best
    effort: an unreadable file only hides its servers)."""
    found: list[tuple[RegKey, tuple[str, ...]]] = []
    entries: dict[tuple[str, str], list[Entry]] = {}
    for record in records:
        where = (record.key.client, record.key.file)
        if where not in entries:
            try:
                spec = clients.client_named(record.key.client)
                entries[where] = open_config(spec, Path(record.key.file).read_bytes(), record.key.file).entries()
            except (OSError, WrapError, UsageError):
                entries[where] = []
        for entry in entries[where]:
            if (entry.name, entry.project) == (record.key.server, record.key.project) and entry.state is not None:
                argv = plan.server_argv(entry.state, {record.shim, shim})
                if argv:
                    found.append((record.key, argv))
    return found


def _twin_label(key: RegKey) -> str:
    title = clients.CLIENTS[key.client].title if key.client in clients.CLIENTS else key.client
    return f"{title}'s {key.label()} ({key.file})"


def _records_of(every: list[Record], client: str, file: str) -> tuple[list[Record], dict[RegKey, Record]]:
    """The records of ``client``'s ``file`` (servers gone from it included), and by key."""
    records = [r for r in every if r.key.client == client and r.key.file == file]
    return records, {r.key: r for r in records}


def _decide(request: Request, key: RegKey, entry: Entry | None, record: Record | None,
            settings: plan.Settings, where: str) -> plan.Decision:  # fmt: skip
    if request.op == "unwrap":
        return plan.plan_unwrap(key, entry, record, settings.shim, recover=request.recover)
    if entry is None:
        return plan.Decision("refused", f"no server named {key.server!r} in {where}")
    return plan.plan_wrap(key, entry, record, settings, reapply=request.op == "reapply")


def _change(request: Request, client: clients.Client, path: Path, store: RecordStore, state_dir: Path,
            settings: plan.Settings, report: Report, before_replace: Callable[[], None] | None) -> None:  # fmt: skip
    snapshot = filesafe.read_snapshot(path)
    file = str(snapshot.path)
    config = open_config(client, snapshot.data, str(path))
    entries = config.entries()
    records, by_key = _records_of(store.every(), client.name, file)
    decided: list[tuple[Result, Entry | None, plan.Decision]] = []
    for key, entry, refusal in _select(request, entries, records, file, client.name):
        record = by_key.get(key)
        decision = plan.Decision("refused", refusal) if refusal else _decide(request, key, entry, record, settings, str(path))
        result = Result(key, decision.action, decision.reason, state=entry.state if entry else None,
                        cwd=(entry.cwd if entry else None) or key.project,
                        passed_env=entry.passed_env if entry else ())  # fmt: skip
        report.results.append(result)
        decided.append((result, entry, decision))
    if report.refused:
        return
    expected: dict[int, RegState] = {}
    for result, entry, decision in decided:
        if decision.state is not None and entry is not None and entry.state is not None:
            config.apply(entry, decision.state)
            result.changed = changed_fields(entry.state, decision.state, argv=client.argv, env_key=client.env_key)
            result.state = decision.state
            expected[id(entry)] = decision.state
    new_data = config.render()
    _verify(client, new_data, entries, expected, str(path))
    record_changes = [(r.key, d.record) for r, _, d in decided if d.record_changes]
    if request.dry_run or (new_data == snapshot.data and not record_changes):
        return
    if new_data != snapshot.data:
        report.backup = str(filesafe.backup(snapshot, state_dir))
    previous = {key: store.read_raw(key) for key, _ in record_changes}
    try:
        for key, record in record_changes:
            if record is None:
                store.write_raw(key, None)
            else:
                store.save(record)
        if new_data != snapshot.data:
            filesafe.replace_checked(snapshot, new_data, before_replace)
    except WrapError as exc:
        _roll_back(store, previous)
        kept = f"; the original is backed up at {report.backup}" if report.backup else ""
        raise type(exc)(f"{exc}{kept}") from None
    except BaseException:
        _roll_back(store, previous)
        raise
    report.written = new_data != snapshot.data


def _roll_back(store: RecordStore, previous: Mapping[RegKey, bytes | None]) -> None:
    for key, raw in previous.items():
        try:
            store.write_raw(key, raw)
        except WrapError:
            pass  # the primary error is what the user must see; this one is in the same directory


def _verify(client: clients.Client, data: bytes, before: list[Entry], expected: Mapping[int, RegState],
            where: str) -> None:  # fmt: skip
    """Read the rendered file back: decided registrations must read as decided, others as before."""
    try:
        after = open_config(client, data, where).entries()
    except WrapError as exc:
        raise WrapError(f"internal error: the edited {where} would not parse ({exc}); nothing written") from None
    want = [(e.name, e.project, e.transport, expected.get(id(e), e.state)) for e in before]
    got = [(e.name, e.project, e.transport, e.state) for e in after]
    if want != got:
        raise WrapError(f"internal error: the edited {where} does not read back as intended; nothing written")
