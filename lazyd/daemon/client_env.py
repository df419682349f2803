"""The environment a client gives a server, for a check that should land on that client's identity.

What a client's sessions really carried (lazyd/daemon/learned_env.py, names only) wins over the
built-in profile (lazyd/core/client_profiles.py): the profile is a guess from a client release,
the record is what this client on this machine does. A client lazyd has no profile for is named by
the `clientInfo.name` its sessions send, or by the name of its process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from lazyd.core.client_profiles import ClientProfile, full_environment

if TYPE_CHECKING:
    from lazyd.daemon.registry import Registry


def client_environment(registry: Registry, profile: ClientProfile | None, inherited: Mapping[str, str],
                       declared: Mapping[str, str], passed: tuple[str, ...]) -> tuple[dict[str, str], str]:
    """(the environment, the client's process name for its learned per-run variables)."""
    if profile is None:
        return full_environment(inherited, declared, passed), ""
    found = registry.learned.client_record(profile.client_names)
    if found is None:
        return profile.environment(inherited, declared, passed), ""
    _, record = found
    # A registration's `env_vars` pass on top of what the recorded sessions carried.
    names = {*record["env_names"], *passed}
    env = {**{k: v for k, v in inherited.items() if k in names}, **declared}
    return env, str(record["process"])


def learned_profile(registry: Registry, client: str) -> ClientProfile | None:
    """A profile for a client seen only in sessions: by its clientInfo.name, or its process name."""
    clients = registry.learned.clients
    names = [client] if client in clients else [n for n, r in clients.items() if r["process"] == client]
    if not names:
        return None
    return ClientProfile(client, client, tuple(names), None, "learned from its sessions", full_environment)
