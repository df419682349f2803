"""Tool policy patterns and precedence (lazyd/core/policy.py), and the `[policy]` table of config.toml.

Every example of the module docstring and of docs/hub.md is a case here: the patterns must match
exactly as documented, no more and no less.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lazyd.config.load import parse_config_text
from lazyd.errors import ConfigError
from lazyd.core.policy import ToolPolicy, Verdict, compile_rule


def policy(rules: dict[str, str], default: str = "allow") -> ToolPolicy:
    return ToolPolicy(tuple(compile_rule(p, d) for p, d in rules.items()), default)  # type: ignore[arg-type]


@pytest.mark.parametrize(("pattern", "server", "tool", "matches"), [
    ("github.create_issue", "github", "create_issue", True),
    ("github.create_issue", "github", "create_issues", False),
    ("github.create_issue", "gitlab", "create_issue", False),
    ("github.*", "github", "create_issue", True),
    ("github.*", "github", "x", True),
    ("github.*", "github.enterprise", "create_issue", False),  # the server part matches on its own
    ("github.*", "githubx", "create_issue", False),
    ("*.delete_*", "fs", "delete_file", True),
    ("*.delete_*", "my.server", "delete_", True),
    ("*.delete_*", "fs", "undelete_file", False),
    ("*.delete_*", "fs", "file.delete_x", False),  # `*` of the server part cannot eat the tool's dot
    ("*.*", "any", "thing", True),
    ("git?ub.*", "github", "a", True),
    ("git?ub.*", "gitub", "a", False),
    ("a.b.c", "a.b", "c", True),  # a dotted pattern reads every way it can be split
    ("a.b.c", "a", "b.c", True),
    ("a.b.c", "a", "b", False),
    ("*.get_*", "time", "get_current_time", True),
    ("Time.*", "time", "get_current_time", False),  # case-sensitive
    ("fs.[ab]", "fs", "a", False),  # no character classes: [ab] is literal
    ("fs.[ab]", "fs", "[ab]", True),
])
def test_patterns_match_exactly_as_documented(pattern: str, server: str, tool: str, matches: bool) -> None:
    assert compile_rule(pattern, "deny").matches(server, tool) is matches


@pytest.mark.parametrize(("pattern", "problem"), [
    ("github", "is not SERVER.TOOL"),
    (".tool", "is not SERVER.TOOL"),
    ("server.", "is not SERVER.TOOL"),
    ("", "the pattern is empty"),
    ("a b.c", "a space or a control character"),
    ("a.b\n", "a space or a control character"),
    ("a." + "x" * 400, "longer than"),
])
def test_a_pattern_that_is_not_server_dot_tool_is_refused_with_its_reason(pattern: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        compile_rule(pattern, "deny")


def test_an_exact_rule_overrides_every_glob_even_a_stricter_one() -> None:
    rules = policy({"*.delete_*": "ask", "scratch.delete_note": "allow", "scratch.*": "deny"})
    assert rules.decide("scratch", "delete_note") == Verdict("allow", "scratch.delete_note")
    assert rules.decide("scratch", "delete_all") == Verdict("deny", "scratch.*")
    assert rules.decide("fs", "delete_file") == Verdict("ask", "*.delete_*")


def test_of_matching_globs_the_strictest_wins_whatever_their_order() -> None:
    for order in (("github.*", "*.delete_*"), ("*.delete_*", "github.*")):
        decisions = {"github.*": "deny", "*.delete_*": "ask"}
        rules = policy({p: decisions[p] for p in order})
        assert rules.decide("github", "delete_repo") == Verdict("deny", "github.*")
    loose = policy({"*.*": "allow", "*.delete_*": "ask"})
    assert loose.decide("fs", "delete_file").decision == "ask"


def test_with_no_matching_rule_the_default_decides() -> None:
    assert policy({"a.b": "deny"}).decide("c", "d") == Verdict("allow", None)
    allowlist = policy({"time.*": "allow"}, default="deny")
    assert allowlist.decide("time", "convert_time") == Verdict("allow", "time.*")
    assert allowlist.decide("github", "create_issue") == Verdict("deny", None)
    assert Verdict("deny", None).reason() == 'the default policy (default = "deny")'
    assert Verdict("ask", "*.delete_*").reason() == 'rule "*.delete_*" = "ask"'


def test_an_empty_policy_is_inactive_and_allows_everything() -> None:
    assert not ToolPolicy().active
    assert ToolPolicy().decide("any", "tool") == Verdict("allow", None)
    assert policy({}, default="ask").active
    assert policy({"a.b": "allow"}).active


@given(st.from_regex(r"[a-z][a-z0-9_-]{0,10}", fullmatch=True), st.from_regex(r"[a-z][a-z0-9_.-]{0,15}", fullmatch=True))
def test_an_exact_pattern_matches_its_own_tool_and_server_star_matches_every_tool_of_the_server(server: str, tool: str) -> None:
    assert compile_rule(f"{server}.{tool}", "deny").matches(server, tool)
    assert compile_rule(f"{server}.*", "deny").matches(server, tool)
    assert not compile_rule(f"{server}x.*", "deny").matches(server, tool)


def test_the_policy_table_of_config_toml_builds_the_rules() -> None:
    config = parse_config_text('[policy]\ndefault = "ask"\n'
                               'rules = { "fixture.crash" = "deny", "*.get_*" = "allow" }\n', {}, None)
    assert config.tool_policy.default == "ask"
    assert [(r.pattern, r.decision) for r in config.tool_policy.rules] == [("fixture.crash", "deny"), ("*.get_*", "allow")]
    assert parse_config_text("", {}, None).tool_policy == ToolPolicy()


@pytest.mark.parametrize(("text", "error"), [
    ('[policy]\nrules = { github.create = "ask" }',
     'config.toml: policy.rules.github: is a table: quote patterns, as in "github.create_issue" = "ask"'),
    ('[policy]\nrules = { "github" = "ask" }',
     "config.toml: policy.rules.github: 'github' is not SERVER.TOOL (for example github.create_issue, github.* or *.delete_*)"),
    ('[policy]\nrules = { "a.b" = "never" }',
     "config.toml: policy.rules.\"a.b\": 'never' is not one of: allow, ask, deny"),
    ('[policy]\nrules = { "a.b" = true }',
     'config.toml: policy.rules."a.b": a boolean is not one of: allow, ask, deny'),
    ('[policy]\ndefault = "maybe"', "config.toml: policy.default: 'maybe' is not one of: allow, ask, deny"),
    ('[policy]\nrule = {}', "config.toml: policy.rule: unknown key; did you mean 'rules'? allowed here: default, rules"),
    ('policy = "deny"', "config.toml: policy: expected a table, got a string"),
])
def test_a_bad_policy_table_is_one_line_naming_the_key(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text, {}, None)
    assert str(caught.value) == error


def test_denied_names_exactly_the_listed_tools_the_policy_would_refuse() -> None:
    policy = ToolPolicy((compile_rule("fs.rm_*", "deny"), compile_rule("fs.rm_safe", "allow"), compile_rule("*.x", "ask")))
    assert policy.denied("fs", ["rm_rf", "rm_safe", "read", "x"]) == {"rm_rf"}
    assert policy.denied("git", ["rm_rf"]) == set()
    assert ToolPolicy((), "deny").denied("fs", ["a", "b"]) == {"a", "b"}
    assert ToolPolicy((compile_rule("*.x", "ask"),)).denied("fs", ["x"]) == set()
