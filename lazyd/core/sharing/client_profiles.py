"""What each AI client sends a server and which environment it gives it: for `check --client X`.

A check warms the cache a client's sessions will use only if it looks like that client to the
server and to lazyd: the same `initialize` params (the cache and the server's answers may depend
on them) and the same environment as far as the identity goes (or the check warms another
identity's cache). Each profile therefore holds:

- `client_names`: the `clientInfo.name` values the client's sessions send, by which the daemon
  learns the latest handshake of each client from real sessions (lazyd/daemon/control/handshakes.py);
- `builtin`: the handshake captured from the client's current release, used until one is learned;
- `environment`: the client's rule for a stdio server's environment, from its own source.

Captured here (a tee between the client and server-everything, and /proc/PID/environ):

- Claude Code 2.1.332: `initialize` at 2025-11-25 with capabilities `roots` and `elicitation`
  (form and url), after a `server/discover` probe at 2026-07-28; the whole environment, plus its
  own variables (envrules.PER_SESSION_ENV), plus the registration's env.
- Gemini CLI 0.61.0: sessions send `gemini-cli-mcp-client` at 2025-06-18 with `roots`; `gemini mcp
  list` sends `mcp-test-client` with no capabilities, same version. The environment is
  sanitized (`gemini_environment`, its environmentSanitization rule), plus GEMINI_CLI=1, plus the
  registration's env (less variables that change how programs load: NODE_OPTIONS, LD_PRELOAD...).
- Codex CLI 0.171.0 (`codex exec`, which starts every server before it needs a model):
  `codex-mcp-client` at 2025-06-18 with `elicitation` and `experimental.codex/auth-change`
  (captured with a tee); only a handful of variables pass
  (`CODEX_DEFAULT_ENV`: its allow-list and six CA bundle variables), plus the registration's
  `env_vars` names and its env; its vendor directory first on PATH.
- opencode 1.18.33 (`opencode mcp list`, learned by the daemon): `opencode` at 2025-11-25 with
  `roots`; the whole environment plus AGENT=1 and OPENCODE=1 (and OPENCODE_PID, its own pid,
  which changes every run and so is no part of a check), plus the registration's `environment`.
- GitHub Copilot CLI 1.0.102 (`copilot -p` offline, a tee in front of server-everything): probes
  `server/discover` at 2026-07-28 (its clientInfo and capabilities in the probe's `_meta`), then
  `copilot-cli` at 2025-11-25 with `sampling` and `elicitation` (form and url). The whole
  environment less its model provider settings and sign-in tokens (COPILOT_WITHHELD), plus
  PYTHONUNBUFFERED=1 unless set, one more git setting appended to GIT_CONFIG_COUNT/KEY_N/VALUE_N
  (`safe.bareRepository=explicit`), and its own bookkeeping: COPILOT_AGENT_SESSION_ID (new every
  run), COPILOT_CLI_BINARY_VERSION and COPILOT_CLI_RESOLVED_DIST_DIR (its unpacked release under
  the cache dir), per-session variables all three (lazyd/core/sharing/envrules.py).
- Kilo CLI 7.7.7 (`kilo mcp list`, opencode's code under another name): `kilo` at 2025-11-25 with
  `roots`, no probe; the whole environment plus opencode's AGENT=1 and OPENCODE=1 and its own
  KILO=1, KILOCODE_FEATURE=cli, KILOCODE_VERSION, KILO_PROCESS_ROLE=main, and KILO_PID and
  KILO_RUN_ID (new every run).
- Continue `cn` 1.5.47 (`cn -p` against a loopback endpoint that refuses): `continue-cli-client`
  1.0.0 at 2025-11-25 with no capabilities, no probe; every inherited variable with a non-empty
  value (an empty one is dropped), the registration's `env` on top.
- Amp (`amp mcp doctor`, 0.0.1790142911): `amp-mcp-client` 0.0.0-dev at 2025-11-25 with no
  capabilities, no probe; the whole environment less AMP_API_KEY (its own key), the
  registration's `env`, and AWS_VAULT_PROMPT=stdout over both.

These are first guesses: once the daemon has seen a session of a client, `check --client X`
rebuilds X's environment from the names its sessions really carried (lazyd/daemon/sessions/learned_env.py).

Pure: callers pass the environments.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ClientProfile", "PROFILES", "profile_named", "profile_for_client_info",
           "gemini_environment", "codex_environment", "opencode_environment", "full_environment",
           "copilot_environment", "kilo_environment", "continue_environment", "amp_environment"]

# (inherited, declared, passed): passed are the names a registration asks to pass through (Codex's
# `env_vars`); clients that pass everything on ignore them.
Environment = Callable[[Mapping[str, str], Mapping[str, str], tuple[str, ...]], dict[str, str]]


def full_environment(inherited: Mapping[str, str], declared: Mapping[str, str],
                     passed: tuple[str, ...] = ()) -> dict[str, str]:
    """A client that passes everything on: the inherited environment, the registration's on top."""
    return {**inherited, **declared}


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
    """The environment Gemini CLI 0.61.0 gives a stdio server (redaction always on for servers;
    in a GitHub Actions run, GITHUB_SHA set, only the always-allowed variables pass)."""
    strict = bool(inherited.get("GITHUB_SHA")) or inherited.get("SURFACE") == "Github"
    env = {"GEMINI_CLI": "1"}
    env.update({k: v for k, v in inherited.items() if not _gemini_redacts(k, v, strict)})
    env.update({k: v for k, v in declared.items() if k not in _GEMINI_BLOCKED_DECLARED})
    return env


# ---- Codex CLI (codex-rs/rmcp-client/src/utils.rs, DEFAULT_ENV_VARS on unix) ----------------------

# 0.171 passes the CA bundle variables too (seen in /proc/PID/environ of its servers), and puts its
# own vendor directory (`.../vendor/<target>/codex-path`, holding `rg`) first on PATH: PATH counts
# by what it resolves (lazyd/core/sharing/identity.py), so that prefix splits nothing.
CODEX_DEFAULT_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "USER", "__CF_USER_TEXT_ENCODING", "LANG",
                     "LC_ALL", "TERM", "TMPDIR", "TZ", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO",
                     "NODE_EXTRA_CA_CERTS", "PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")


def codex_environment(inherited: Mapping[str, str], declared: Mapping[str, str],
                      passed: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment Codex gives a stdio server: its allow-list and the registration's
    `env_vars` names from the inherited environment, then the registration's `env`."""
    env = {k: inherited[k] for k in (*CODEX_DEFAULT_ENV, *passed) if k in inherited}
    env.update(declared)
    return env


def opencode_environment(inherited: Mapping[str, str], declared: Mapping[str, str],
                         passed: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment opencode gives a local server: everything, its two markers, the
    registration's `environment` on top (OPENCODE_PID left out: it is a new value every run)."""
    return {**inherited, "AGENT": "1", "OPENCODE": "1", **declared}


# ---- GitHub Copilot CLI 1.0.102 ---------------------------------------------------------------------

COPILOT_VERSION = "1.0.102"
# What Copilot keeps from its servers (seen: set in its environment, absent from theirs): its own
# model provider settings and the GitHub tokens it signs in with. GH_TOKEN, COPILOT_MODEL and its
# other settings pass.
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
    """The environment Copilot CLI 1.0.102 gives a local server: everything but its provider
    settings and sign-in tokens, the registration's `env`, PYTHONUNBUFFERED, and one more git
    setting. Its own bookkeeping (COPILOT_AGENT_SESSION_ID, new every run, and its release's
    version and directory) is left out: none of it counts (envrules.PER_SESSION_ENV)."""
    env = {**{k: v for k, v in inherited.items() if k not in COPILOT_WITHHELD}, **declared}
    env.setdefault("PYTHONUNBUFFERED", "1")
    count = env.get("GIT_CONFIG_COUNT", "0")
    index = int(count) if count.isdigit() else 0
    env["GIT_CONFIG_COUNT"] = str(index + 1)
    env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = COPILOT_GIT_SETTING
    return env


# ---- Kilo CLI 7.7.7, Continue cn 1.5.47, Amp ---------------------------------------------------------

KILO_VERSION = "7.7.7"


def kilo_environment(inherited: Mapping[str, str], declared: Mapping[str, str],
                     passed: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment Kilo gives a local server: opencode's (everything, AGENT=1, OPENCODE=1) and
    its own markers (KILO_PID and KILO_RUN_ID left out: new values every run)."""
    return {**inherited, "AGENT": "1", "OPENCODE": "1", "KILO": "1", "KILOCODE_FEATURE": "cli",
            "KILOCODE_VERSION": KILO_VERSION, "KILO_PROCESS_ROLE": "main", **declared}


def continue_environment(inherited: Mapping[str, str], declared: Mapping[str, str],
                         passed: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment `cn` gives a server: every inherited variable with a value, the
    registration's `env` on top (its own test is `!(name in env) && value`)."""
    return {**{k: v for k, v in inherited.items() if v}, **declared}


def amp_environment(inherited: Mapping[str, str], declared: Mapping[str, str],
                    passed: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment Amp gives a server: everything but its own API key, the registration's
    `env`, and AWS_VAULT_PROMPT=stdout over both."""
    env = {k: v for k, v in inherited.items() if k != "AMP_API_KEY"}
    return {**env, **declared, "AWS_VAULT_PROMPT": "stdout"}


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


def profile_named(name: str) -> ClientProfile | None:
    return PROFILES.get(name)


def profile_for_client_info(client_name: str) -> ClientProfile | None:
    """The profile whose sessions send `clientInfo.name == client_name`, if any."""
    return next((p for p in PROFILES.values() if client_name in p.client_names), None)
