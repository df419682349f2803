"""Servers that outlive a crash under systemd: their pipes in the service's file-descriptor store.

A daemon that crashes takes its descriptors with it, and a server whose pipes are gone is lost.
Under systemd the daemon hands a copy of each server's three pipes, and the secrets memfd, to the
service manager (`FDSTORE=1`, `FDNAME=`), which passes them to the restarted daemon
(`LISTEN_FDNAMES`). Beside them it keeps the state an upgrade writes (lazyd/daemon/upgrade/state.py)
in `lazyd.standby`, rewritten as things change (the status signal, coalesced). Restarted, the
daemon takes the servers over (lazyd/daemon/upgrade/inherit.py `inherit_stored`); they are no
longer its children, so their ends are learnt through pidfds and their exit status is unknown.
Hand-off sessions are kept in the same store (lazyd/daemon/handoff/stored_sessions.py); frame
connections died with the daemon and their shims reconnect.

Enabled with a notify socket and `LAZYD_FDSTORE=1` (the unit sets it beside
`FileDescriptorStoreMax=`, without which systemd drops what it is sent). The stored descriptors
must fit under the soft limit the restarted daemon gets: systemd moves them to 3, 4, ... and one
past the limit fails every start (status 202/FDS). So the unit sets that limit
(`STORE_SOFT_NOFILE`; children still get 1024) and the daemon stores no more than fits
(`FdStore.budget`): past it a server or a session is lost after a crash as without a store.
"""

from __future__ import annotations

import array
import json
import logging
import os
import resource
import socket
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import trio

from lazyd.daemon.sessions.registry import Registry
from lazyd.daemon.runtime_dir import SD_LISTEN_FDS_START
from lazyd.daemon.upgrade.state import write_secrets, write_state

log = logging.getLogger("lazyd.fdstore")

FDSTORE_ENV = "LAZYD_FDSTORE"
STORE_SOFT_NOFILE = 16384
# The unit's soft descriptor limit (lazyd/ctl/systemd.py writes it; systemd clamps it to the hard
# limit): every stored descriptor is passed below it.
STORE_HEADROOM = 64  # below that limit: fds 0-2, the socket, and what the daemon opens first
SECRETS_NAME = "lazyd-secrets"
STANDBY_SUFFIX = ".standby"
STANDBY_MIN_INTERVAL_S = 0.5  # a burst of changes is one write
PIPES = ("in", "out", "err")


def standby_path(lock: Path) -> Path:
    return lock.with_suffix(STANDBY_SUFFIX)


def pipe_names(key: str, pid: int) -> tuple[str, str, str]:
    """The FDNAME of each pipe of server `key`'s process `pid` (letters, digits, '-' only)."""
    return tuple(f"srv-{key[:32]}-{pid}-{p}" for p in PIPES)  # type: ignore[return-value]


class FdStore:
    """The sending side: store and remove named descriptors (never raises; logs once)."""

    def __init__(self, address: str, budget: int | None = None) -> None:
        self._address = "\0" + address[1:] if address.startswith("@") else address
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._failed = False
        self._full = False
        self.names: set[str] = set()  # what the store holds of ours
        if budget is None:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            soft = STORE_SOFT_NOFILE if hard == resource.RLIM_INFINITY else min(hard, STORE_SOFT_NOFILE)
            budget = soft - STORE_HEADROOM
        self.budget = budget  # the most descriptors the store may hold (see the module docstring)

    @classmethod
    def from_environ(cls, notify_env: Mapping[str, str], environ: Mapping[str, str]) -> FdStore | None:
        address = notify_env.get("NOTIFY_SOCKET")
        if not address or environ.get(FDSTORE_ENV) != "1":
            return None
        return cls(address)

    def store(self, name: str, fd: int, *, poll: bool = True) -> bool:
        """Store `fd` as `name`; with `poll` (systemd's default) the manager drops it by itself once
        it hangs up (POLLHUP or POLLERR: a server's pipe whose process ended). False, with nothing
        sent, when the store is at its budget (logged once)."""
        if name not in self.names and not self.room(1):
            return False
        self.names.add(name)
        self._send(f"FDSTORE=1\nFDNAME={name}" + ("" if poll else "\nFDPOLL=0"), [fd])
        return True

    def room(self, count: int) -> bool:
        """Whether `count` more descriptors fit in the budget (that they do not is logged once, and
        again after the store had room)."""
        if len(self.names) + count <= self.budget:
            self._full = False
            return True
        if not self._full:
            log.warning("the fd store holds %d descriptors, as many as the restarted daemon could be passed: "
                        "servers and sessions beyond them are not kept across a crash", len(self.names))
        self._full = True
        return False

    def given(self, names: Iterable[str]) -> None:
        """What systemd passed back at start: in the store still."""
        self.names.update(names)

    def remove(self, name: str) -> None:
        self.names.discard(name)
        self._send(f"FDSTOREREMOVE=1\nFDNAME={name}", [])

    def _send(self, text: str, fds: list[int]) -> None:
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        try:
            self._sock.sendmsg([text.encode()], ancillary, 0, self._address)
        except OSError as exc:
            if not self._failed:
                log.warning("cannot reach systemd's fd store (%s): a crash will stop the servers", exc)
            self._failed = True


def stored_fds(environ: Mapping[str, str], count: int) -> dict[str, int]:
    """The named descriptors systemd passed after the socket (fd 3): name -> fd. A name passed
    more than once (which of its copies is the one meant cannot be told) is left out, its copies
    closed: what owned it is then taken for lost."""
    names = (environ.get("LISTEN_FDNAMES") or "").split(":")
    given = [(names[i], SD_LISTEN_FDS_START + i) for i in range(1, count) if i < len(names) and names[i]]
    seen = Counter(name for name, _ in given)
    for name, fd in given:
        if seen[name] > 1:
            os.close(fd)
    doubled = sorted(name for name, times in seen.items() if times > 1)
    if doubled:
        log.warning("the fd store gave %d name(s) more than once (%s); each is taken for lost",
                    len(doubled), ", ".join(doubled[:5]))
    return {name: fd for name, fd in given if seen[name] == 1}


async def keep_standby(registry: Registry, store: FdStore, lock: Path, changed: Callable[[], Awaitable[None]],
                       given: Mapping[str, int] | None = None) -> None:
    """Keep the store and the standby state current, until cancelled (module docstring)."""
    stored: dict[str, int] = dict(given or {})  # name -> the fd we sent (or were given back)
    secrets_text = ""
    while True:
        state, secrets, _ = registry.to_state(trio.current_time())
        wanted: dict[str, int] = {}
        for key, runtime in registry.runtimes.items():
            proc = state["runtimes"][key].get("proc")
            if proc is None:
                continue
            for name, fd in zip(pipe_names(key, proc["pid"]), (proc["stdin"], proc["stdout"], proc["stderr"])):
                if fd is not None:
                    wanted[name] = fd
        for name in [n for n in stored if n not in wanted and n != SECRETS_NAME]:
            store.remove(name)
            del stored[name]
        for name, fd in wanted.items():
            if name not in stored and store.store(name, fd):
                stored[name] = fd
        text = json.dumps(secrets, sort_keys=True)
        if text != secrets_text:
            fd = write_secrets(secrets)
            store.remove(SECRETS_NAME)
            store.store(SECRETS_NAME, fd)
            os.close(fd)  # the store holds its own copy
            secrets_text = text
        state["connections"] = []
        write_state(standby_path(lock), state)
        await changed()
        await trio.sleep(STANDBY_MIN_INTERVAL_S)


def rewire(state: dict[str, Any], stored: Mapping[str, int]) -> list[str]:
    """Point each process of a standby state at the descriptors the store gave back; a process
    whose pipes did not all come back is left out (it is taken for gone). Returns the keys of
    the runtimes whose process was left out."""
    lost: list[str] = []
    for key, runtime in state.get("runtimes", {}).items():
        proc = runtime.get("proc") if isinstance(runtime, dict) else None
        if not isinstance(proc, dict):
            continue
        names = pipe_names(key, proc.get("pid", -1))
        if names[1] in stored and names[2] in stored:
            proc["stdin"], proc["stdout"], proc["stderr"] = stored.get(names[0]), stored[names[1]], stored[names[2]]
            proc["pending"] = ""  # what the old daemon had read of stdout died with it
        else:
            runtime["proc"] = None
            lost.append(key)
    return lost
