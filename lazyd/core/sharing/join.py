"""Which process a new session of a registration joins, given the sharing decision (lazyd/core/sharing/modes.py).

Pure; lazyd/daemon/sessions/sharing_gate.py carries the answer out. `shared` and `session-aware`
join the registration's process (BASE); `isolated` gets one of its own (OWN); so does a session
whose compatibility key (its roots: lazyd/core/sharing/roots.py) differs from that of the sessions
on the registration's process, whatever the mode. Undecided: the first session takes the
registration's process so its start can tell; a second WAITs for that, up to `bound_s`, and gets
its own past it, or when no start is under way `grace_s` after it came. One process too many costs
memory; one shared by mistake leaks a session's state into another.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from lazyd.core.sharing.modes import NOT_KNOWN_PREFIX, SharingDecision
from lazyd.config.durations import format_duration


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
    """Where a session goes (module docstring); `key_conflict`: the sessions on the registration's
    process have another compatibility key, which no mode overrides."""
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
