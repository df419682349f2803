"""Load with faults: 20 clients × 500 interleaved calls on one shared server, with random
cancellations and one client killed midway (issue 7, guarantee 6).

Testing policy: real shims driven line by line, one thread per client, every byte of every
client's stdout parsed. All clients use the same ids (1..500) on purpose, and every answer carries
something only its own request could produce (the echoed text, or the sleep length), so a
misrouted, duplicated or lost answer is visible. The random plan comes from a fixed seed, so a
failure replays. No timing is asserted; every wait is bounded.
"""

from __future__ import annotations

import json
import random
import signal
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.conftest import UserEnv
from tests.e2e.faults_support import RawShim, cancel, server_status, tool_call, wait_for

pytestmark = pytest.mark.e2e

CLIENTS = 20
CALLS = 500
SEED = 20240607
SLEEP_SHARE = 0.08  # calls that would sleep for a minute: answered only if their cancel were lost
CANCELLED_ECHO_SHARE = 0.05  # echoes cancelled right after sending: the cancel races the answer
CANCEL_DELAY_LINES = 20  # a cancel follows its request by up to this many lines
VICTIM = 7  # the client killed once it has half of its answers
JOIN_S = 240.0  # bound on one client's whole run; reached only if something hangs


@dataclass
class Plan:
    """What one client sends, and what it may and must get back."""

    payload: bytes
    echoes: dict[int, str] = field(default_factory=dict)  # id -> the text only this request can get back
    sleeps: dict[int, float] = field(default_factory=dict)  # id -> seconds (never answered: cancelled)
    cancelled: set[int] = field(default_factory=set)


def make_plan(client: int, rng: random.Random) -> Plan:
    lines: list[tuple[int, dict[str, Any]]] = []  # (position, message); cancels sorted in later
    plan = Plan(b"")
    for i in range(1, CALLS + 1):
        roll = rng.random()
        if roll < SLEEP_SHARE:
            seconds = 60 + client / 100  # "slept 60.07" would name client 7
            plan.sleeps[i] = seconds
            lines.append((2 * i, tool_call(i, "sleep", {"seconds": seconds})))
            plan.cancelled.add(i)
        else:
            plan.echoes[i] = f"c{client}-{i}"
            lines.append((2 * i, tool_call(i, "echo", {"text": plan.echoes[i]})))
            if roll < SLEEP_SHARE + CANCELLED_ECHO_SHARE:
                plan.cancelled.add(i)
        if i in plan.cancelled:
            lines.append((2 * (i + rng.randint(0, CANCEL_DELAY_LINES)) + 1, cancel(i)))
    lines.sort(key=lambda entry: entry[0])
    plan.payload = b"".join(json.dumps(message).encode() + b"\n" for _, message in lines)
    return plan


@dataclass
class Outcome:
    answers: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def drive(client: int, shim: RawShim, plan: Plan, outcome: Outcome, half_done: threading.Event) -> None:
    """Send the plan, read until every answer that must come has come, then fence."""
    try:
        shim.initialize()
        writer = threading.Thread(target=_write, args=(shim, plan.payload), daemon=True)
        writer.start()
        required = {i for i in plan.echoes if i not in plan.cancelled}
        fenced = False
        while True:
            message = shim.read()
            if message.get("id") == "fence":
                assert message == {"jsonrpc": "2.0", "id": "fence", "result": {}}, message
                break
            outcome.answers.setdefault(message["id"], []).append(message)
            required.discard(message["id"])
            if client == VICTIM and len(outcome.answers) >= CALLS // 2:
                half_done.set()
                return
            if not required and not fenced:
                # Whatever a cancelled echo still gets comes before the fence's answer.
                writer.join(JOIN_S)
                shim.send({"jsonrpc": "2.0", "id": "fence", "method": "ping"})
                fenced = True
    except Exception as exc:  # reported by the test, with the client's number
        outcome.failures.append(f"client {client}: {exc!r}")
        half_done.set()


def _write(shim: RawShim, payload: bytes) -> None:
    try:
        shim.send_raw(payload)
    except BrokenPipeError:
        pass  # the victim, killed while its requests were still being written


def check(client: int, plan: Plan, outcome: Outcome) -> list[str]:
    """Every answer went to its own request, at most once; every uncancelled echo exactly once."""
    problems = list(outcome.failures)
    for request_id, messages in outcome.answers.items():
        if len(messages) > 1:
            problems.append(f"client {client}: id {request_id} answered {len(messages)} times")
        message = messages[0]
        if request_id in plan.sleeps:
            problems.append(f"client {client}: cancelled sleep {request_id} was answered: {message}")
        elif request_id not in plan.echoes:
            problems.append(f"client {client}: an answer for id {request_id!r}, which it never sent")
        elif "result" not in message or message["result"]["content"][0]["text"] != plan.echoes[request_id]:
            problems.append(f"client {client}: id {request_id} got {message}, not its own echo")
    if client != VICTIM:
        missing = sorted(i for i in plan.echoes if i not in plan.cancelled and i not in outcome.answers)
        if missing:
            problems.append(f"client {client}: {len(missing)} uncancelled calls never answered, e.g. {missing[:5]}")
    return problems


def test_twenty_clients_times_five_hundred_calls_with_cancellations_and_a_killed_client_answer_each_survivor_once(
    user_env: UserEnv,
) -> None:
    rng = random.Random(SEED)
    plans = [make_plan(c, rng) for c in range(CLIENTS)]
    assert sum(len(p.cancelled) for p in plans) > CLIENTS * CALLS * SLEEP_SHARE / 2  # the plan has teeth
    shims = [RawShim(user_env) for _ in range(CLIENTS)]
    outcomes = [Outcome() for _ in range(CLIENTS)]
    victim_half_done = threading.Event()
    try:
        threads = [threading.Thread(target=drive, args=(c, shims[c], plans[c], outcomes[c], victim_half_done))
                   for c in range(CLIENTS)]
        for thread in threads:
            thread.start()
        assert victim_half_done.wait(JOIN_S)
        shims[VICTIM].kill(signal.SIGKILL)
        for thread in threads:
            thread.join(JOIN_S)
        assert not any(thread.is_alive() for thread in threads), "a client hung"
        problems = [p for c in range(CLIENTS) for p in check(c, plans[c], outcomes[c])]
        assert problems == [], problems[:20]
        # Every cancel reached its request: with the victim's calls cancelled on its detach too,
        # nothing is left in flight at the server.
        wait_for(lambda: [(s["clients"], s["inflight"]) for s in server_status(user_env)] == [(CLIENTS - 1, 0)],
                 "the server to have nothing in flight and 19 clients")
        assert len(user_env.server_pids("fixture_server")) == 1
    finally:
        for shim in shims:
            shim.close()
