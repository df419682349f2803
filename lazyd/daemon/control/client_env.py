"""The environment a client gives a server, for a check that should land on that client's identity.

What a client's sessions really carried (lazyd/daemon/sessions/learned_env.py) wins over the
built-in profile (lazyd/core/sharing/client_profiles.py), a guess from a release: the variables
its sessions carried and which of its own it withheld (one that withheld nothing passes everything;
a filtering one only what it was seen to pass, and for a variable it never met, its release's rule).
"""

from __future__ import annotations

from collections.abc import Mapping
from lazyd.core.sharing.client_profiles import PROFILES, ClientProfile, full_environment
from lazyd.daemon.sessions.learned_env import LearnedEnv


def client_environment(learned: LearnedEnv, profile: ClientProfile | None, inherited: Mapping[str, str],
                       declared: Mapping[str, str], passed: tuple[str, ...]) -> tuple[dict[str, str], str]:
    """(the environment, the client's process name for its learned per-run variables)."""
    if profile is None:
        return full_environment(inherited, declared, passed), ""
    found = learned.client_record(profile.client_names)
    if found is None:
        return profile.environment(inherited, declared, passed), ""
    _, record = found
    # The record has names only: a value comes from the release's rule where it sets that name
    # (opencode's OPENCODE=1, Copilot's release directory and appended git setting), else from
    # the inherited environment; a name the client adds that the rule does not know stays out.
    rule = profile.environment(inherited, {}, passed) if PROFILES.get(profile.name) is profile else {}
    env = {k: rule.get(k, v) for k, v in inherited.items() if _passes(k, record, profile, inherited, passed)}
    added = record.get("added")
    if isinstance(added, list):
        env.update({k: v for k, v in rule.items() if k in added})
    return {**env, **declared}, str(record["process"])


def _passes(name: str, record: Mapping[str, object], profile: ClientProfile, inherited: Mapping[str, str],
            passed: tuple[str, ...]) -> bool:
    """Whether the recorded client gives a server `name` from the environment it was started in."""
    carried, dropped = record["env_names"], record.get("dropped")
    assert isinstance(carried, list)
    if name in carried or name in passed:  # a registration's `env_vars` pass on top
        return True
    if not isinstance(dropped, list):
        return False  # what it withheld is unknown: only what it was seen to carry
    if name in dropped:
        return False
    if not dropped:
        return True  # it withheld nothing: a client that passes everything on
    # A filtering client and a variable its sessions never met: its release's rule, if lazyd has
    # one, else withheld (as an allow-list would).
    builtin = PROFILES.get(profile.name) is profile
    return builtin and name in profile.environment({name: inherited[name]}, {}, passed)


def learned_profile(learned: LearnedEnv, client: str) -> ClientProfile | None:
    """A profile for a client seen only in sessions: by its clientInfo.name, or its process name."""
    clients = learned.clients
    names = [client] if client in clients else [n for n, r in clients.items() if r["process"] == client]
    if not names:
        return None
    return ClientProfile(client, client, tuple(names), None, "learned from its sessions", full_environment)
