"""Per-run variables in the registry: feeding the learner, and stopping the duplicates it exposes.

The learning is lazyd/core/sharing/noise.py's, its record lazyd/daemon/sessions/learned_env.py's.
Here each unnamed session's counted variables are fed to the learner before its identity is
decided (so what it proves applies to it already), and a runtime left behind by a variable just
learned (opencode's first run, whose identity counted its `OPENCODE_PID`) is stopped at once or
when its last session leaves, instead of lingering for a session that can never come.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

import trio

from lazyd.core.sharing.identity import Identity, counted_for_learning, same_without
from lazyd.daemon.connections.client_process import client_process, environment_names
from lazyd.daemon.sessions.learned_env import SessionClient
from lazyd.daemon.sessions.sharing_gate import RegistryView

log = logging.getLogger("lazyd.registry")

POLL_S = 1.0  # a session still choosing its process changes no lifecycle input: look again this often


def learn(registry: RegistryView, shim_pid: int, argv: list[str], cwd: str, env: Mapping[str, str], *,
          force: tuple[str, ...], ignore: tuple[str, ...],
          undecodable: list[str] | None = None) -> tuple[SessionClient, tuple[Identity, str | None] | None]:
    """Feed one session's counted variables to the learner of its client (guessed from its process
    name; one not seen yet is learned from at its initialize), and say which client it is, with the
    session's identity and why it must stay private when what it fed taught nothing new (None: the
    identity is decided again). Deciding it once, not twice, saves a session start a PATH lookup, a
    `#!` read and a digest."""
    name, pid = client_process(shim_pid)
    client = registry.learned.guess(name)  # the clientInfo name this process name was last seen as
    seen = SessionClient(name, environment_names(pid), client)
    if not name:
        return seen, None
    try:
        decided = registry.identity_of(argv, cwd, env, force=force, ignore=ignore, undecodable=undecodable,
                                       client=name)
    except ValueError:
        return seen, None  # refused by the caller, with the reason
    registration = dataclasses.replace(decided[0], env=()).digest(registry.secret)  # argv and cwd only
    counted = counted_for_learning(decided[0], env)
    seen = dataclasses.replace(seen, registration=registration, counted=counted)
    if not client:
        return seen, decided  # learned from at its initialize, under the name it gives
    new = registry.learned.observe(client, registration, counted)
    return seen, None if new else decided


def retire_duplicates(registry: RegistryView, base: Identity, noise: frozenset[str]) -> None:
    """Stop every unnamed runtime that is `base` but for a variable in `noise`."""
    if not noise:
        return
    for digest, identity in list(registry.identities.items()):
        if (digest not in registry.retiring and not identity.instance.startswith("named:")
                and not registry.is_second_lane(digest) and not registry.is_private(registry.runtimes[digest])
                and same_without(identity, base, noise)):
            registry.retiring.add(digest)
            registry.nursery.start_soon(_retire, registry, digest)


async def _retire(registry: RegistryView, digest: str) -> None:
    try:
        runtime = registry.runtimes.get(digest)
        if runtime is None:
            return
        while registry.in_use(runtime):
            with trio.move_on_after(POLL_S):
                await runtime.wait_changed()
        if registry.runtimes.get(digest) is runtime:
            log.info("server %s stopped: a learned per-run variable made it a duplicate", runtime.name)
            await registry.close_all(registry.forget({digest}))  # its cache file stays: same command
            registry.children_changed()
            registry.changes.note()
    finally:
        registry.retiring.discard(digest)
