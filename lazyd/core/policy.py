"""Tool policy: which tools may run, which need the user's confirmation, which are refused.

Pure. `[policy]` in config.toml (docs/hub.md, "The tool policy") builds a `ToolPolicy`; the hub and
the per-server policy gate ask `ToolPolicy.decide` about every `tools/call`. A pattern is
`SERVER.TOOL` (`*` any run, `?` one character, no escape); it matches when it splits at one of
its dots into globs matching the whole server name and the whole tool name, so `git.*` never
matches the server `git.hub`. A dotless pattern with text on both sides is an error.

Precedence: an exact rule (no wildcards) decides, so it can carve an exception out of a glob;
else the strictest matching glob (deny over ask over allow: no order in a TOML table may turn a
deny into an allow); else `default`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Decision = Literal["allow", "ask", "deny"]
DECISIONS: tuple[Decision, ...] = ("allow", "ask", "deny")
_STRICTNESS: dict[Decision, int] = {"allow": 0, "ask": 1, "deny": 2}
# Far beyond `server.tool` names (MCP names are at most 128 characters each); bounds the regexes.
MAX_PATTERN_CHARS = 300
_WILDCARDS = frozenset("*?")


def _glob(text: str) -> re.Pattern[str]:
    parts = [".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text]
    return re.compile("".join(parts), re.DOTALL)


@dataclass(frozen=True)
class Rule:
    """One `pattern = decision` line of `[policy.rules]`, compiled."""

    pattern: str
    decision: Decision
    exact: bool  # no wildcard: matches the one tool whose `server.tool` equals the pattern
    splits: tuple[tuple[re.Pattern[str], re.Pattern[str]], ...]

    def matches(self, server: str, tool: str) -> bool:
        if self.exact:
            return f"{server}.{tool}" == self.pattern
        return any(s.fullmatch(server) is not None and t.fullmatch(tool) is not None for s, t in self.splits)


def compile_rule(pattern: str, decision: Decision) -> Rule:
    """Compile one rule; raises ValueError with a one-line problem (the caller adds where)."""
    if not pattern:
        raise ValueError("the pattern is empty")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"the pattern is longer than {MAX_PATTERN_CHARS} characters")
    if any(c.isspace() or not c.isprintable() for c in pattern):
        raise ValueError("the pattern contains a space or a control character")
    splits = tuple(
        (_glob(pattern[:i]), _glob(pattern[i + 1 :]))
        for i, c in enumerate(pattern)
        if c == "." and 0 < i < len(pattern) - 1
    )
    if not splits:
        raise ValueError(
            f"{pattern!r} is not SERVER.TOOL (for example github.create_issue, github.* or *.delete_*)")
    exact = not any(c in _WILDCARDS for c in pattern)
    return Rule(pattern, decision, exact, splits)


@dataclass(frozen=True)
class Verdict:
    """What the policy says about one tool, and which rule said it (None: the default)."""

    decision: Decision
    rule: str | None

    def reason(self) -> str:
        """The rule in words, for tool errors and the log: never the call's arguments."""
        if self.rule is None:
            return f'the default policy (default = "{self.decision}")'
        return f'rule "{self.rule}" = "{self.decision}"'


@dataclass(frozen=True)
class ToolPolicy:
    """Every rule of `[policy]`; `ToolPolicy()` (no rules, default allow) lets everything run."""

    rules: tuple[Rule, ...] = ()
    default: Decision = "allow"

    @property
    def active(self) -> bool:
        """Whether any tool could be refused or asked about: else callers skip the policy."""
        return bool(self.rules) or self.default != "allow"

    @property
    def can_deny(self) -> bool:
        """Whether any tool could be denied (and so hidden from listings)."""
        return self.default == "deny" or any(rule.decision == "deny" for rule in self.rules)

    def denied(self, server: str, tools: list[str]) -> frozenset[str]:
        """Which of `tools` of `server` this policy denies (and so hides from listings)."""
        if not self.can_deny:
            return frozenset()
        return frozenset(tool for tool in tools if self.decide(server, tool).decision == "deny")

    def decide(self, server: str, tool: str) -> Verdict:
        """The verdict for `tool` of `server`, by the precedence in the module docstring."""
        strictest: Rule | None = None
        for rule in self.rules:
            if not rule.matches(server, tool):
                continue
            if rule.exact:
                return Verdict(rule.decision, rule.pattern)
            if strictest is None or _STRICTNESS[rule.decision] > _STRICTNESS[strictest.decision]:
                strictest = rule
        if strictest is not None:
            return Verdict(strictest.decision, strictest.pattern)
        return Verdict(self.default, None)
