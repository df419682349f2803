"""What each AI client sends a server and which environment it gives it: for `check --client X`.

A check warms the cache a client's sessions will use only if it looks like that client: the same
`initialize` params and the same environment as far as the identity goes. Each profile holds the
`clientInfo.name` values its sessions send (the daemon learns their latest handshake,
lazyd/daemon/control/handshakes.py), the handshake captured from its current release (a tee in
front of server-everything), and its rule for a stdio server's environment (from its source and
/proc/PID/environ; docs/configuration.md, "What each client gives a server"). Once the daemon saw
a session of a client, a check rebuilds its environment from the names its sessions carried
(lazyd/daemon/sessions/learned_env.py). Pure: callers pass the environments.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# (inherited, declared, passed): passed are the names a registration asks to pass through (Codex's
# `env_vars`); clients that pass everything on ignore them.
Environment = Callable[[Mapping[str, str], Mapping[str, str], tuple[str, ...]], dict[str, str]]


@dataclass(frozen=True)
class PassesOn:
    """A client that passes its environment on, less `withheld` (and the names without a value if
    `drop_empty`), its `markers` under the registration's variables and its `overrides` over them."""

    withheld: frozenset[str] = frozenset()
    markers: Mapping[str, str] = field(default_factory=dict)
    overrides: Mapping[str, str] = field(default_factory=dict)
    drop_empty: bool = False

    def __call__(self, inherited: Mapping[str, str], declared: Mapping[str, str],
                 passed: tuple[str, ...] = ()) -> dict[str, str]:
        kept = {k: v for k, v in inherited.items() if k not in self.withheld and (v or not self.drop_empty)}
        return {**kept, **self.markers, **declared, **self.overrides}


full_environment = PassesOn()


# ---- Gemini CLI 0.61.0 (packages/core/src/services/environmentSanitization.ts) --------------------

_GEMINI_ALWAYS_ALLOWED = frozenset({
    "PATH", "SYSTEMROOT", "COMSPEC", "PATHEXT", "WINDIR", "TEMP", "TMP", "USERPROFILE", "SYSTEMDRIVE",
    "HOME", "LANG", "SHELL", "TMPDIR", "USER", "LOGNAME", "TERM", "COLORTERM", "ADDITIONAL_CONTEXT",
    "AVAILABLE_LABELS", "BRANCH_NAME", "DESCRIPTION", "EVENT_NAME", "GITHUB_ENV", "IS_PULL_REQUEST",
    "ISSUES_TO_TRIAGE", "ISSUE_BODY", "ISSUE_NUMBER", "ISSUE_TITLE", "PULL_REQUEST_NUMBER",
    "REPOSITORY", "TITLE", "TRIGGERING_ACTOR",
})
_GEMINI_NEVER_ALLOWED = frozenset({
    "CLIENT_ID", "DB_URI", "CONNECTION_STRING", "AWS_DEFAULT_REGION", "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID", "SLACK_WEBHOOK_URL", "TWILIO_ACCOUNT_SID", "DATABASE_URL",
    "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_ACCOUNT", "FIREBASE_PROJECT_ID",
})
_GEMINI_NAME_PATTERNS = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|AUTH|CREDENTIAL|CREDS|PRIVATE|CERT",
                                   re.IGNORECASE)
_GEMINI_VALUE_PATTERNS = tuple(re.compile(p, re.IGNORECASE) for p in (
    r"-----BEGIN (RSA|OPENSSH|EC|PGP) PRIVATE KEY-----",
    r"-----BEGIN CERTIFICATE-----",
    r"(https?|ftp|smtp)://[^:\s]{1,1024}:[^@\s]{1,1024}@",
    r"(ghp|gho|ghu|ghs|ghr|github_pat)_[a-zA-Z0-9_]{36,}",
    r"AIzaSy[a-zA-Z0-9_\\-]{33}",
    r"AKIA[A-Z0-9]{16}",
    r"eyJ[a-zA-Z0-9_-]{0,10240}\.[a-zA-Z0-9_-]{0,10240}\.[a-zA-Z0-9_-]{0,10240}",
    r"(s|r)k_(live|test)_[0-9a-zA-Z]{24}",
    r"xox[abpr]-[a-zA-Z0-9-]+",
))
# Declared variables Gemini refuses to set on a server (isDangerousExecutionEnvironmentVariable).
_GEMINI_BLOCKED_DECLARED = frozenset({
    "NODE_OPTIONS", "NODE_CLI_FLAGS", "_FORCE_NODE_OPTIONS", "NODE_PATH", "ELECTRON_RUN_AS_NODE",
    "PYTHONPATH", "PYTHONSTARTUP", "RUBYOPT", "RUBYLIB", "PERL5OPT", "PERL5LIB", "LD_PRELOAD",
    "LD_AUDIT", "LD_DEBUG", "LD_PROFILE", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES",
    "DYLD_FORCE_FLAT_NAMESPACE", "DYLD_LIBRARY_PATH", "DYLD_FRAMEWORK_PATH",
    "DYLD_FALLBACK_LIBRARY_PATH", "DYLD_FALLBACK_FRAMEWORK_PATH", "BASH_ENV", "ENV", "PERL5DB",
    "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "CLASSPATH", "DOTNET_STARTUP_HOOKS", "CORECLR_PROFILER_PATH",
})


def _gemini_redacts(name: str, value: str, strict: bool) -> bool:
    key = name.upper()
    if key.startswith("GEMINI_CLI_"):
        return False
    if value and any(p.search(value.upper()) for p in _GEMINI_VALUE_PATTERNS):
        return True
    if key.startswith("GIT_CONFIG_") or key in _GEMINI_ALWAYS_ALLOWED:
        return False
    if key in _GEMINI_NEVER_ALLOWED or strict:
        return True
    return _GEMINI_NAME_PATTERNS.search(key) is not None


def gemini_environment(inherited: Mapping[str, str], declared: Mapping[str, str],
                       passed: tuple[str, ...] = ()) -> dict[str, str]:
    """Redacted as Gemini always does for servers (in GitHub Actions only the allowed pass)."""
    strict = bool(inherited.get("GITHUB_SHA")) or inherited.get("SURFACE") == "Github"
    env = {"GEMINI_CLI": "1"}
    env.update({k: v for k, v in inherited.items() if not _gemini_redacts(k, v, strict)})
    env.update({k: v for k, v in declared.items() if k not in _GEMINI_BLOCKED_DECLARED})
    return env


# ---- Codex CLI (codex-rs/rmcp-client/src/utils.rs, DEFAULT_ENV_VARS on unix) ----------------------

# Its allow-list and the CA bundle variables; the vendor directory it puts first on PATH splits
# nothing (PATH counts by what it resolves).
CODEX_DEFAULT_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "USER", "__CF_USER_TEXT_ENCODING", "LANG",
                     "LC_ALL", "TERM", "TMPDIR", "TZ", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO",
                     "NODE_EXTRA_CA_CERTS", "PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")


def codex_environment(inherited: Mapping[str, str], declared: Mapping[str, str],
                      passed: tuple[str, ...] = ()) -> dict[str, str]:
    """Its allow-list and the registration's `env_vars` names, then the registration's `env`."""
    env = {k: inherited[k] for k in (*CODEX_DEFAULT_ENV, *passed) if k in inherited}
    env.update(declared)
    return env


# Everything, its two markers, the registration's `environment` (not OPENCODE_PID: per run).
opencode_environment = PassesOn(markers={"AGENT": "1", "OPENCODE": "1"})


# ---- GitHub Copilot CLI 1.0.102 ---------------------------------------------------------------------

COPILOT_VERSION = "1.0.102"
# What Copilot keeps from its servers: its model provider settings and sign-in tokens.
COPILOT_WITHHELD = frozenset({
    "COPILOT_OFFLINE", "COPILOT_API_URL", "COPILOT_AGENT_MODEL", "COPILOT_GITHUB_TOKEN", "GITHUB_TOKEN",
    "GITHUB_PERSONAL_ACCESS_TOKEN", "COPILOT_PROVIDER_BASE_URL", "COPILOT_PROVIDER_API_KEY",
    "COPILOT_PROVIDER_TYPE", "COPILOT_PROVIDER_WIRE_API", "COPILOT_PROVIDER_BEARER_TOKEN",
    "COPILOT_PROVIDER_MODEL_ID", "COPILOT_PROVIDER_HEADERS", "COPILOT_PROVIDER_AZURE_API_VERSION",
    "COPILOT_PROVIDER_MAX_OUTPUT_TOKENS", "COPILOT_PROVIDER_MAX_PROMPT_TOKENS", "COPILOT_PROVIDER_WIRE_MODEL",
    "COPILOT_PROVIDER_MODEL_LIMITS_ID",
})
# The git setting Copilot appends to the GIT_CONFIG_COUNT/KEY_N/VALUE_N list it passes on.
COPILOT_GIT_SETTING = ("safe.bareRepository", "explicit")


def copilot_environment(inherited: Mapping[str, str], declared: Mapping[str, str],
                        passed: tuple[str, ...] = ()) -> dict[str, str]:
    """Everything but its provider settings and sign-in tokens, the registration's `env`,
    PYTHONUNBUFFERED, one more git setting; its per-session bookkeeping left out."""
    env = PassesOn(COPILOT_WITHHELD)(inherited, declared)
    env.setdefault("PYTHONUNBUFFERED", "1")
    count = env.get("GIT_CONFIG_COUNT", "0")
    index = int(count) if count.isdigit() else 0
    env["GIT_CONFIG_COUNT"] = str(index + 1)
    env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = COPILOT_GIT_SETTING
    return env


# ---- Kilo CLI 7.7.7, Continue cn 1.5.47, Amp ---------------------------------------------------------

KILO_VERSION = "7.7.7"
# opencode's environment and Kilo's own markers (not KILO_PID and KILO_RUN_ID: per run).
kilo_environment = PassesOn(markers={
    "AGENT": "1", "OPENCODE": "1", "KILO": "1", "KILOCODE_FEATURE": "cli", "KILOCODE_VERSION": KILO_VERSION,
    "KILO_PROCESS_ROLE": "main"})
# Every inherited variable with a value, the registration's `env` on top.
continue_environment = PassesOn(drop_empty=True)
# Everything but its API key, the registration's `env`, AWS_VAULT_PROMPT=stdout over both.
amp_environment = PassesOn(withheld=frozenset({"AMP_API_KEY"}), overrides={"AWS_VAULT_PROMPT": "stdout"})


@dataclass(frozen=True)
class ClientProfile:
    name: str  # lazyctl's name for the client (as in `wrap --client`)
    title: str
    client_names: tuple[str, ...]  # clientInfo.name values its sessions send, preferred first
    builtin: Mapping[str, Any] | None  # initialize params captured from `release`
    release: str
    environment: Environment


def _params(version: str, caps: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    return {"protocolVersion": version, "capabilities": caps, "clientInfo": info}


PROFILES: dict[str, ClientProfile] = {p.name: p for p in (
    ClientProfile(
        "claude", "Claude Code", ("claude-code",),
        _params("2025-11-25", {"roots": {"listChanged": True}, "elicitation": {"form": {}, "url": {}}},
                {"name": "claude-code", "title": "Claude Code", "version": "2.1.332",
                 "description": "Anthropic's agentic coding tool", "websiteUrl": "https://claude.com/claude-code"}),
        "Claude Code 2.1.332", full_environment),
    ClientProfile(
        "gemini", "Gemini CLI", ("gemini-cli-mcp-client", "mcp-test-client"),
        _params("2025-06-18", {"roots": {"listChanged": True}},
                {"name": "gemini-cli-mcp-client", "version": "0.61.0"}),
        "Gemini CLI 0.61.0", gemini_environment),
    ClientProfile(
        "codex", "Codex CLI", ("codex-mcp-client",),
        _params("2025-06-18", {"experimental": {"codex/auth-change": {}}, "elicitation": {"form": {}, "url": {}}},
                {"name": "codex-mcp-client", "title": "Codex", "version": "0.171.0"}),
        "Codex CLI 0.171.0", codex_environment),
    ClientProfile("cursor", "Cursor", ("cursor-vscode",), None, "not captured", full_environment),
    ClientProfile("vscode", "VS Code", ("Visual Studio Code",), None, "not captured", full_environment),
    ClientProfile("windsurf", "Windsurf", ("windsurf-client",), None, "not captured", full_environment),
    ClientProfile(
        "opencode", "opencode", ("opencode",),
        _params("2025-11-25", {"roots": {}}, {"name": "opencode", "version": "1.18.33"}),
        "opencode 1.18.33", opencode_environment),
    ClientProfile(
        "copilot", "GitHub Copilot CLI", ("copilot-cli",),
        _params("2025-11-25", {"sampling": {}, "elicitation": {"form": {}, "url": {}}},
                {"name": "copilot-cli", "version": COPILOT_VERSION}),
        f"GitHub Copilot CLI {COPILOT_VERSION}", copilot_environment),
    ClientProfile(
        "kilo", "Kilo CLI", ("kilo",),
        _params("2025-11-25", {"roots": {}}, {"name": "kilo", "version": KILO_VERSION}),
        f"Kilo CLI {KILO_VERSION}", kilo_environment),
    ClientProfile(
        "continue", "Continue CLI (cn)", ("continue-cli-client",),
        _params("2025-11-25", {}, {"name": "continue-cli-client", "version": "1.0.0"}),
        "Continue cn 1.5.47", continue_environment),
    ClientProfile(
        "amp", "Amp", ("amp-mcp-client",),
        _params("2025-11-25", {}, {"name": "amp-mcp-client", "version": "0.0.0-dev"}),
        "Amp 0.0.1790142911", amp_environment),
)}
