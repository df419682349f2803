"""Per-run variables learned from sessions (lazyd/core/sharing/noise.py).

The rule under test: a variable whose value changes between sessions of one registration from one
client is per-run noise for that client, after 2 values when its name or values look generated
and after 3 new values in 3 sessions otherwise; a credential or a setting never is; what is
learned persists as names and counts, never values. Every case is written out as literals.
"""

from __future__ import annotations

import json

import pytest

from lazyd.core.sharing.noise import Evidence, PerRunLearner, is_shaped_name, is_shaped_value

REG = "reg-time"  # an opaque registration key, as the daemon passes one
OTHER_REG = "reg-everything"


def sessions(learner: PerRunLearner, client: str, values: list[dict[str, str]], reg: str = REG,
             start: float = 1000.0) -> list[list[str]]:
    return [learner.observe(client, reg, env, now=start + i) for i, env in enumerate(values)]


# ---- what gets learned, and when -----------------------------------------------------------------


def test_opencodes_pid_is_learned_at_its_second_value_and_only_for_opencode() -> None:
    learner = PerRunLearner()
    learned = sessions(learner, "opencode", [{"OPENCODE_PID": "8110", "OPENCODE": "1", "AGENT": "1"},
                                             {"OPENCODE_PID": "8235", "OPENCODE": "1", "AGENT": "1"}])
    assert learned == [[], ["OPENCODE_PID"]]
    assert learner.noise("opencode") == frozenset({"OPENCODE_PID"})
    assert learner.noise("claude") == frozenset()
    evidence = learner.evidence("opencode", "OPENCODE_PID")
    assert evidence is not None and evidence.describe() == "2 values in 2 sessions of opencode"


def test_constant_variables_a_client_sets_are_never_noise() -> None:
    learner = PerRunLearner()
    sessions(learner, "opencode", [{"OPENCODE": "1", "AGENT": "1"}] * 5)
    assert learner.noise("opencode") == frozenset()


@pytest.mark.parametrize("name", ["ACME_SESSION_ID", "FOO_RUN_ID", "X_PID", "TOOL_NONCE", "AGENT_INVOCATION_ID",
                                  "MY_TRACE_ID", "HARNESS_STARTED_AT", "BAR_SESSIONID", "LAUNCH_ID"])
def test_a_name_shaped_like_bookkeeping_is_learned_at_its_second_value(name: str) -> None:
    learner = PerRunLearner()
    assert sessions(learner, "agent", [{name: "alpha"}, {name: "beta"}]) == [[], [name]]


@pytest.mark.parametrize("first, second", [
    ("0b9f7a8e-3c51-4f0e-9a6d-2e8b1c7d5f40", "7d2c9e14-8a63-4b5f-b1e7-9c0a3f6d8e21"),  # uuids
    ("01JD6Z8W3K5M7N9P1Q3R5S7T9V", "01JD6Z9B4C6D8E0F2G4H6J8K0M"),  # ULIDs
    ("4f2a9c1e7b3d8a60e5c2", "9b1e6d3a0f7c4e28b5a1"),  # hex ids
    ("2026-12-01T20:50:51Z", "2026-12-01T21:03:17.512+00:00"),  # ISO times
])
def test_values_shaped_like_generated_ids_are_learned_at_the_second_value(first: str, second: str) -> None:
    learner = PerRunLearner()
    assert sessions(learner, "agent", [{"HARNESS_MARK": first}, {"HARNESS_MARK": second}]) == [[], ["HARNESS_MARK"]]


def test_an_unshaped_variable_needs_a_new_value_in_each_of_three_sessions() -> None:
    learner = PerRunLearner()
    learned = sessions(learner, "agent", [{"HARNESS_TURN": "a"}, {"HARNESS_TURN": "b"}, {"HARNESS_TURN": "c"}])
    assert learned == [[], [], ["HARNESS_TURN"]]
    evidence = learner.evidence("agent", "HARNESS_TURN")
    assert evidence is not None and evidence.describe() == "3 values in 3 sessions of agent"


def test_plain_numbers_are_no_shape_a_setting_changed_by_hand_twice_still_counts() -> None:
    learner = PerRunLearner()
    sessions(learner, "agent", [{"WORKERS": "4"}, {"WORKERS": "8"}])
    assert learner.noise("agent") == frozenset()


def test_a_counter_that_grows_at_every_run_is_learned_at_its_third_value() -> None:
    learner = PerRunLearner()
    assert sessions(learner, "agent", [{"HARNESS_RUN": "17"}, {"HARNESS_RUN": "18"}, {"HARNESS_RUN": "19"}]) == [
        [], [], ["HARNESS_RUN"]]


def test_a_variable_toggled_between_two_values_is_a_choice_and_keeps_counting() -> None:
    learner = PerRunLearner()
    sessions(learner, "agent", [{"MODE": "fast"}, {"MODE": "slow"}, {"MODE": "fast"}, {"MODE": "slow"},
                                {"MODE": "other"}])
    assert learner.noise("agent") == frozenset()


def test_a_value_repeated_before_the_third_new_one_means_no_noise() -> None:
    learner = PerRunLearner()
    sessions(learner, "agent", [{"HARNESS_TURN": "a"}, {"HARNESS_TURN": "a"}, {"HARNESS_TURN": "b"},
                                {"HARNESS_TURN": "c"}])
    assert learner.noise("agent") == frozenset()


@pytest.mark.parametrize("name", ["GITHUB_TOKEN", "OPENAI_API_KEY", "SESSION_SECRET", "DB_PASSWORD", "AUTH_SESSION_ID",
                                  "DATABASE_URL", "GH_PAT", "SESSION_COOKIE", "AWS_SESSION_TOKEN"])
def test_a_credential_is_never_noise_however_often_it_changes(name: str) -> None:
    learner = PerRunLearner()
    sessions(learner, "agent", [{name: "0b9f7a8e-3c51-4f0e-9a6d-2e8b1c7d5f40"},
                                {name: "7d2c9e14-8a63-4b5f-b1e7-9c0a3f6d8e21"},
                                {name: "1a2b3c4d-0000-4f0e-9a6d-2e8b1c7d5f40"}])
    assert learner.noise("agent") == frozenset()


@pytest.mark.parametrize("name", ["SSL_CERT_FILE", "HTTPS_PROXY", "AWS_PROFILE", "RUN_DIR", "API_ENDPOINT",
                                  "SESSION_HOST", "NODE_EXTRA_CA_CERTS", "KUBECONFIG", "PID_FILE"])
def test_a_setting_is_never_noise_even_with_a_bookkeeping_name(name: str) -> None:
    learner = PerRunLearner()
    sessions(learner, "agent", [{name: "/a/1"}, {name: "/a/2"}, {name: "/a/3"}])
    assert learner.noise("agent") == frozenset()


def test_values_count_per_registration_so_two_registrations_of_one_run_prove_nothing() -> None:
    # One opencode run gives every server the same OPENCODE_PID: two servers, one value.
    learner = PerRunLearner()
    learner.observe("opencode", REG, {"OPENCODE_PID": "8110"}, now=1.0)
    learner.observe("opencode", OTHER_REG, {"OPENCODE_PID": "8110"}, now=1.0)
    assert learner.noise("opencode") == frozenset()
    assert learner.observe("opencode", OTHER_REG, {"OPENCODE_PID": "9001"}, now=2.0) == ["OPENCODE_PID"]


def test_values_seen_from_two_clients_are_not_pooled() -> None:
    learner = PerRunLearner()
    learner.observe("opencode", REG, {"HARNESS_SESSION_ID": "a"}, now=1.0)
    learner.observe("claude", REG, {"HARNESS_SESSION_ID": "b"}, now=2.0)
    assert learner.noise("opencode") == learner.noise("claude") == frozenset()


def test_a_learned_name_is_reported_once_and_then_applies_to_every_registration_of_the_client() -> None:
    learner = PerRunLearner()
    assert sessions(learner, "opencode", [{"OPENCODE_PID": "1"}, {"OPENCODE_PID": "2"}, {"OPENCODE_PID": "3"}]) == [
        [], ["OPENCODE_PID"], []]
    assert learner.observe("opencode", OTHER_REG, {"OPENCODE_PID": "4"}, now=5.0) == []
    assert "OPENCODE_PID" in learner.noise("opencode")


def test_nothing_is_learned_without_a_client_or_a_registration() -> None:
    learner = PerRunLearner()
    for client, reg in (("", REG), ("agent", "")):
        learner.observe(client, reg, {"X_PID": "1"}, now=1.0)
        learner.observe(client, reg, {"X_PID": "2"}, now=2.0)
    assert learner.learned() == {}


def test_forget_drops_a_clients_learned_names_and_its_evidence_in_progress() -> None:
    learner = PerRunLearner()
    sessions(learner, "opencode", [{"OPENCODE_PID": "1"}, {"OPENCODE_PID": "2"}])
    learner.observe("opencode", REG, {"HARNESS_TURN": "a"}, now=9.0)
    assert learner.forget("opencode") == 1
    assert learner.noise("opencode") == frozenset()
    assert learner.observe("opencode", REG, {"HARNESS_TURN": "b"}, now=10.0) == []


# ---- bounds --------------------------------------------------------------------------------------


def test_a_flood_of_clients_keeps_the_learner_bounded() -> None:
    learner = PerRunLearner()
    for i in range(200):
        learner.observe(f"client-{i}", REG, {"X_PID": str(i)}, now=float(i))
        learner.observe(f"client-{i}", REG, {"X_PID": str(i + 1)}, now=float(i))
    assert len(learner.learned()) == 32
    assert "client-199" in learner.learned() and "client-0" not in learner.learned()


def test_a_flood_of_names_for_one_client_keeps_its_learned_set_bounded() -> None:
    learner = PerRunLearner()
    learner.observe("agent", REG, {f"V{i}_PID": "1" for i in range(100)}, now=1.0)
    learner.observe("agent", REG, {f"V{i}_PID": "2" for i in range(100)}, now=2.0)
    assert len(learner.noise("agent")) == 64


def test_a_very_long_name_is_not_learned() -> None:
    learner = PerRunLearner()
    name = "A" * 200 + "_PID"
    sessions(learner, "agent", [{name: "1"}, {name: "2"}])
    assert learner.noise("agent") == frozenset()


# ---- persisted form ------------------------------------------------------------------------------


def test_the_persisted_form_holds_names_and_counts_and_no_value() -> None:
    learner = PerRunLearner()
    sessions(learner, "opencode", [{"OPENCODE_PID": "8110-planted"}, {"OPENCODE_PID": "8235-planted"}])
    text = json.dumps(learner.to_json())
    assert "planted" not in text and "8110" not in text
    assert learner.to_json() == {"v": 1, "clients": {"opencode": {"OPENCODE_PID": {
        "values": 2, "sessions": 2, "learned_at": 1001.0}}}}


def test_a_persisted_learner_comes_back_with_its_evidence() -> None:
    learner = PerRunLearner()
    sessions(learner, "opencode", [{"OPENCODE_PID": "1"}, {"OPENCODE_PID": "2"}])
    again = PerRunLearner.from_json(json.loads(json.dumps(learner.to_json())))
    assert again.noise("opencode") == frozenset({"OPENCODE_PID"})
    assert again.evidence("opencode", "OPENCODE_PID") == Evidence("opencode", 2, 2, 1001.0)


@pytest.mark.parametrize("data", [
    None, [], "x", {"v": 2, "clients": {"a": {"X_PID": {"values": 2, "sessions": 2, "learned_at": 1}}}},
    {"v": 1, "clients": []}, {"v": 1, "clients": {"a": []}},
    {"v": 1, "clients": {"a": {"X_PID": {"values": "2", "sessions": 2, "learned_at": 1}}}},
    {"v": 1, "clients": {"a": {"X_PID": {"values": True, "sessions": 2, "learned_at": 1}}}},
    {"v": 1, "clients": {"": {"X_PID": {"values": 2, "sessions": 2, "learned_at": 1}}}},
])
def test_a_malformed_persisted_form_gives_a_learner_that_knows_nothing(data: object) -> None:
    assert PerRunLearner.from_json(data).learned() == {}


def test_a_persisted_credential_name_is_not_taken_back_as_noise() -> None:
    data = {"v": 1, "clients": {"a": {"GITHUB_TOKEN": {"values": 2, "sessions": 2, "learned_at": 1},
                                      "X_PID": {"values": 2, "sessions": 2, "learned_at": 1}}}}
    assert PerRunLearner.from_json(data).noise("a") == frozenset({"X_PID"})


# ---- shapes --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, shaped", [("OPENCODE_PID", True), ("PID", True), ("CODEX_SESSION_ID", True),
                                          ("RUN_ID", True), ("RAPID", False), ("PIDGIN", False),
                                          ("SESSION", False), ("IDENTITY", False)])
def test_name_shapes(name: str, shaped: bool) -> None:
    assert is_shaped_name(name) is shaped


@pytest.mark.parametrize("value, shaped", [("0b9f7a8e-3c51-4f0e-9a6d-2e8b1c7d5f40", True), ("4f2a9c1e7b3d8a60", True),
                                           ("2026-12-01T20:50:51Z", True), ("8110", False), ("1", False),
                                           ("deadbeef", False), ("/usr/bin", False), ("fast", False)])
def test_value_shapes(value: str, shaped: bool) -> None:
    assert is_shaped_value(value) is shaped


def test_claude_codes_session_id_would_be_learned_from_two_runs_but_not_its_notes_directory() -> None:
    # What Claude Code 2.1.332 gave a server in two `claude mcp list` runs (envrules lists these by
    # name; the learner would have found the id by itself, and rightly keeps a *_DIR counting).
    learner = PerRunLearner()
    learned = sessions(learner, "claude", [
        {"CLAUDE_CODE_SESSION_ID": "e43a65f1-fa83-49f4-8e44-e6e7fc693f2b",
         "CLAUDE_CODE_CHILD_NOTES_DIR": "/tmp/claude-0/-tmp-p1/e43a65f1-fa83-49f4-8e44-e6e7fc693f2b/started",
         "AI_AGENT": "claude-code_2-1-332_harness"},
        {"CLAUDE_CODE_SESSION_ID": "8548b43c-34b8-4cfb-876b-33b873806ef4",
         "CLAUDE_CODE_CHILD_NOTES_DIR": "/tmp/claude-0/-tmp-p1/8548b43c-34b8-4cfb-876b-33b873806ef4/started",
         "AI_AGENT": "claude-code_2-1-332_harness"}])
    assert learned == [[], ["CLAUDE_CODE_SESSION_ID"]]
