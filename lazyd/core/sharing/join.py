"""Which process a new session of a registration joins, given the sharing decision (lazyd/core/sharing/modes.py).

Pure: fed the decision, whether the registration's own process is taken, whether the sessions'
compatibility keys conflict, and how long this session has waited; the daemon (lazyd/daemon/sessions/sharing_gate.py)
carries the answer out.

- `shared` and `session-aware`: the registration's process (BASE).
- `isolated`: a process of its own (OWN): the registration's process when no session holds it,
  else a free private instance, else a new one.
- sessions whose compatibility keys differ (their roots: lazyd/core/sharing/roots.py) never share
  a process, whatever the mode: a session whose key is not that of the sessions on the
  registration's process gets one of its own (OWN).
- undecided (never run, nothing declared, not a known server): the first session takes the
  registration's process, so its start can tell what it is; a second session that arrives while
  the process is taken WAITs, up to `bound_s`, for that start to decide. Past the bound, or when no
  start is under way `grace_s` after the session came (the first session sent nothing that needs
  the server), it gets a process of its own: not known to be shareable means not shared. One
  process too many costs memory; one shared by mistake leaks one session's state into another.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from lazyd.core.sharing.modes import NOT_KNOWN_PREFIX, SharingDecision
from lazyd.config.durations import format_duration

__all__ = ["Join", "JoinChoice", "join"]


class Join(enum.Enum):
    BASE = "base"  # the registration's own process
    OWN = "own"  # a process of the session's own
    WAIT = "wait"  # not decided yet: wait for the first start to tell


@dataclass(frozen=True)
class JoinChoice:
    join: Join
    rule: str  # why, in status words (the decision's rule, or the undecided case's)


def join(decision: SharingDecision, *, base_taken: bool, waited_s: float, bound_s: float,
         starting: bool = True, grace_s: float = 0.0, key_conflict: bool = False) -> JoinChoice:
    """Where a session goes (see the module docstring). `key_conflict`: the sessions on the
    registration's process have another compatibility key than this one (their roots differ:
    lazyd/core/sharing/roots.py), which no sharing mode overrides."""
    if decision.mode == "isolated":
        return JoinChoice(Join.OWN, decision.rule)
    if key_conflict:
        return JoinChoice(Join.OWN, "its own process: its roots differ from those of the sessions sharing one")
    if decision.mode is not None:
        return JoinChoice(Join.BASE, decision.rule)
    if not base_taken:
        return JoinChoice(Join.BASE, "auto: undecided, so the first session's start decides")
    if not starting and waited_s >= grace_s:
        return JoinChoice(Join.OWN, f"{NOT_KNOWN_PREFIX}: no start under way to tell)")
    if waited_s < bound_s:
        return JoinChoice(Join.WAIT, decision.rule)
    return JoinChoice(Join.OWN, f"{NOT_KNOWN_PREFIX}: its first start had not told after {format_duration(bound_s)})")
