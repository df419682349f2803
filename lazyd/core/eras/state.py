"""Which protocol era the live process speaks, as the relay finds out at each start (pure state).

lazyd/core/eras/choice.py decides from the snapshot; this object holds what the relay learns of
the *live* process: its stage, the DiscoverResult that made it stateless, whose identity the probe
carried, and an `initialize` refusal held until the probe explains it. What is learned for good
goes into the snapshot (`mixed_connection`, `handshake_first`) for the next start's plan.

Stages: NONE (no process); PROBING (the connection began with the relay's era probe, unanswered);
HANDSHAKE (it began with the replayed `initialize`; a probe after the handshake may be on its
way); REPROBING (that `initialize` was refused by a server with a stateless era, and the relay
probed); NOT_STATELESS (the probe's answer was no stateless DiscoverResult, or the handshake
completed first: handshake era only); STATELESS (a stateless DiscoverResult, `discovery`).

What a stage means to the rest of the core (`stateless_up`): STATELESS is True; NONE and PROBING
are None (not known yet); HANDSHAKE, REPROBING and NOT_STATELESS are False (not known to carry the
stateless era).

The transitions
---------------
| event | from | to |
|---|---|---|
| spawned, the era probe first | any | PROBING |
| spawned, initialize first | any | HANDSHAKE |
| the probe answered with a stateless DiscoverResult | any | STATELESS |
| the probe answered otherwise | any | NOT_STATELESS |
| the first initialize refused by a server with a stateless era | HANDSHAKE | REPROBING |
| the discovery asked after the handshake answered with a DiscoverResult | any | STATELESS |
| the handshake completed with the probe unanswered | PROBING | NOT_STATELESS |
| the process ended | any | NONE |

"Any" for the probe's answers: a late DiscoverResult still means the connection carries both eras.
An `initialize` refused while the probe is unanswered changes no stage: it is `held`, and the
probe's answer decides what it meant (stateless only, or a failed start).
`tests/unit/test_era_state.py` checks that this table and TRANSITIONS agree.
"""

from __future__ import annotations

import enum

from lazyd.core.eras.asker import Asker
from lazyd.core.cache import Snapshot
from lazyd.core.eras.choice import Era, EraPolicy, EraSetting, StartPlan, facts_of
from lazyd.core.relay.jsonrpc import JsonObj
from lazyd.core.relay.actions import Action, Phase, SnapshotChanged


class Stage(enum.Enum):
    NONE = "NONE"
    PROBING = "PROBING"
    HANDSHAKE = "HANDSHAKE"
    REPROBING = "REPROBING"
    NOT_STATELESS = "NOT_STATELESS"
    STATELESS = "STATELESS"


class Event(enum.Enum):
    SPAWNED_PROBE_FIRST = "spawned, the era probe first"
    SPAWNED_INITIALIZE_FIRST = "spawned, initialize first"
    PROBE_STATELESS = "the probe answered with a stateless DiscoverResult"
    PROBE_OTHER = "the probe answered otherwise"
    FIRST_INITIALIZE_REFUSED = "the first initialize refused by a server with a stateless era"
    PROBE_AFTER_STATELESS = "the discovery asked after the handshake answered with a DiscoverResult"
    HANDSHAKE_BEFORE_PROBE = "the handshake completed with the probe unanswered"
    EXITED = "the process ended"


ANY = frozenset(Stage)
# event -> (the stages it may happen in, the stage it leads to): the module docstring's table.
TRANSITIONS: dict[Event, tuple[frozenset[Stage], Stage]] = {
    Event.SPAWNED_PROBE_FIRST: (ANY, Stage.PROBING),
    Event.SPAWNED_INITIALIZE_FIRST: (ANY, Stage.HANDSHAKE),
    Event.PROBE_STATELESS: (ANY, Stage.STATELESS),
    Event.PROBE_OTHER: (ANY, Stage.NOT_STATELESS),
    Event.FIRST_INITIALIZE_REFUSED: (frozenset({Stage.HANDSHAKE}), Stage.REPROBING),
    Event.PROBE_AFTER_STATELESS: (ANY, Stage.STATELESS),
    Event.HANDSHAKE_BEFORE_PROBE: (frozenset({Stage.PROBING}), Stage.NOT_STATELESS),
    Event.EXITED: (ANY, Stage.NONE),
}
_UP: dict[Stage, bool | None] = {
    Stage.NONE: None, Stage.PROBING: None, Stage.HANDSHAKE: False, Stage.REPROBING: False,
    Stage.NOT_STATELESS: False, Stage.STATELESS: True,
}


# What era detection keeps of the live process (lazyd/core/state_codec.py).
KEPT = {"lane": Era | None, "stage": Stage, "discovery": JsonObj | None, "probe_asker": Asker | None,
        "held": JsonObj | None, "plan": StartPlan | None}


class EraState:
    """The era detection of one server instance (see the module docstring)."""

    def __init__(self, setting: EraSetting, snapshot: Snapshot) -> None:
        self.policy = EraPolicy(setting)
        self.snapshot = snapshot
        # The era of this instance's process, given with its first client (None until then).
        self.lane: Era | None = None
        self.plan: StartPlan | None = None  # the live process's start plan
        self.stage = Stage.NONE
        self.discovery: JsonObj | None = None  # the DiscoverResult that made the process STATELESS
        self.probe_asker: Asker | None = None  # whose identity the relay's discovery request carried
        self.held: JsonObj | None = None  # an initialize error held until the probe answers

    @property
    def setting(self) -> EraSetting:
        return self.policy.setting

    @property
    def stateless_up(self) -> bool | None:
        """Whether the live process speaks the stateless era (None: not known yet, or no process)."""
        return _UP[self.stage]

    def move(self, event: Event) -> None:
        sources, target = TRANSITIONS[event]
        if self.stage not in sources:
            raise AssertionError(f"era detection: {event.value!r} cannot happen in stage {self.stage.value}")
        self.stage = target

    # ---- the start plan --------------------------------------------------------------------------

    def start_plan(self, phase: Phase) -> StartPlan:
        """The live process's plan, else the one the next start would follow."""
        if self.plan is not None and phase is not Phase.DOWN:
            return self.plan
        return self.policy.start_plan(self.lane, facts_of(self.snapshot))

    def spawned(self) -> StartPlan:
        """A process follows the plan of its lane, and takes the plan's lane when it had none."""
        plan = self.plan = self.policy.start_plan(self.lane, facts_of(self.snapshot))
        if self.lane is None:
            self.lane = "stateless" if plan.initialize == "never" else "handshake"
        self.move(Event.SPAWNED_PROBE_FIRST if plan.probe_first else Event.SPAWNED_INITIALIZE_FIRST)
        return plan

    def gone(self) -> None:
        self.move(Event.EXITED)
        self.discovery = None
        self.probe_asker = None
        self.held = None

    # ---- what the rest of the core reads ---------------------------------------------------------

    def bridging(self, phase: Phase, handshake_live: bool) -> bool:
        """Whether handshake-era clients are served through the bridge right now."""
        if phase is Phase.DOWN:
            # What the next start will do: a plan that never replays a handshake bridges.
            return self.start_plan(phase).initialize == "never"
        # A replayed handshake (pending or done) means the process serves the handshake natively.
        return not handshake_live and self.stateless_up is True

    def can_fetch(self, phase: Phase) -> bool:
        """Whether stateless requests of the relay's own can go to the live process now."""
        return self.stateless_up is True and phase in (Phase.REFRESH, Phase.READY)

    def process_era(self, phase: Phase, handshake_live: bool) -> str | None:
        """"handshake", "stateless" (handshake-era clients bridged), "both", or None."""
        if phase is Phase.DOWN:
            return None
        if self.stateless_up is True:
            return "both" if handshake_live else "stateless"
        if self.stateless_up is False or handshake_live:
            return "handshake"
        return None  # the era probe is on its way

    # ---- what is learned for good ----------------------------------------------------------------

    def learn_first_initialize(self, accepted: bool) -> list[Action]:
        """Record whether a first `initialize` was accepted; only a refusal (stateless only)
        changes which process a client gets, so only it is saved at once."""
        if accepted:
            self.snapshot.handshake_first = True
            return []
        if self.snapshot.handshake_first is False:
            return []
        self.snapshot.handshake_first = False
        return [SnapshotChanged()]

    def learn_mixed(self, value: bool) -> list[Action]:
        """Whether one connection carries both eras, recorded in the snapshot."""
        if self.snapshot.mixed_connection is value:
            return []
        self.snapshot.mixed_connection = value
        return [SnapshotChanged()]
