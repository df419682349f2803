"""Which environment variables decide whether two registrations may share one server process.

A registration brings its client's whole environment, and clients add variables that change at
every run (Claude Code's `CLAUDE_CODE_SESSION_ID`): if all counted, nothing would ever share. The
rule, first match wins (docs/configuration.md, "The built-in per-session variables", says why each
name is there):

1. A variable the registration **declares** (`LAZYD_IDENTITY_ENV`) or the user **forces**
   (`identity_env`, `--identity-env`) counts.
2. **Per-session** variables (`PER_SESSION_ENV` plus the user's `per_session_env`) do not.
3. **Launcher context** (`LAUNCHER_CONTEXT_ENV`) does not, unless its name marks a credential or a
   setting.
4. Everything else counts by value, unknown variables included (PATH by what it resolves:
   lazyd/core/sharing/identity.py), except the per-run variables learned for the session's client
   (lazyd/core/sharing/noise.py: the caller adds them to `ignore`). A wrong split costs a process;
   a wrong merge gives a session a server configured for another.

Pure: callers pass names, never values.
"""

from __future__ import annotations

import fnmatch
import functools
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

# Exact names or fnmatch patterns (case-sensitive) that vary per terminal, login or client session
# and carry no server setting: a shared server runs with the environment of the session that
# started it, so only a variable the server cannot care about may be left out.
PER_SESSION_ENV: frozenset[str] = frozenset(
    {
        # Terminal emulators: a server talks over pipes, never to the terminal.
        "TERM", "COLORTERM", "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "TERM_SESSION_ID",
        "LC_TERMINAL", "LC_TERMINAL_VERSION", "COLUMNS", "LINES", "WINDOWID", "VTE_VERSION",
        "ITERM_*", "KITTY_*", "WEZTERM_*", "ALACRITTY_*", "GHOSTTY_*", "KONSOLE_*",
        "GNOME_TERMINAL_SCREEN", "GNOME_TERMINAL_SERVICE", "TILIX_ID", "TERMINATOR_UUID",
        "WT_SESSION", "WT_PROFILE_ID", "__INTELLIJ_COMMAND_HISTFILE__", "SECURITYSESSIONID",
        # Desktop launches, multiplexers, shell bookkeeping (the cwd counts on its own).
        "XDG_ACTIVATION_TOKEN", "DESKTOP_STARTUP_ID", "GIO_LAUNCHED_DESKTOP_FILE",
        "GIO_LAUNCHED_DESKTOP_FILE_PID",
        "TMUX", "TMUX_PANE", "STY", "WINDOW", "ZELLIJ", "ZELLIJ_SESSION_NAME", "ZELLIJ_PANE_ID",
        "PWD", "OLDPWD", "_", "SHLVL", "STARSHIP_SESSION_KEY", "DIRENV_DIR", "DIRENV_FILE",
        "DIRENV_DIFF", "DIRENV_WATCHES",
        # Logins and agents (a server that needs a stable agent gets SSH_AUTH_SOCK from config.toml).
        "SSH_AUTH_SOCK", "SSH_AGENT_PID", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "GPG_TTY",
        "INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID", "MANAGERPID", "XDG_SESSION_ID",
        "XPC_SERVICE_NAME",
        # Editors' per-window plumbing (GIT_ASKPASS is kept: it changes how git asks for secrets).
        "VSCODE_*", "CURSOR_TRACE_ID", "NVIM", "NVIM_LISTEN_ADDRESS",
        # AI clients' own markers, seen in what each gives a stdio server (Claude Code, Gemini CLI,
        # Copilot CLI, Kilo CLI): clients identify themselves in `initialize`.
        "CLAUDECODE", "CLAUDE_CODE_*", "CLAUDE_PROJECT_DIR", "AI_AGENT",
        "COREPACK_ENABLE_AUTO_PIN", "NoDefaultCurrentDirectoryInExePath",
        "GEMINI_CLI", "GEMINI_CLI_*",
        "COPILOT_AGENT_SESSION_ID", "COPILOT_CLI_BINARY_VERSION", "COPILOT_CLI_RESOLVED_DIST_DIR",
        "KILO_PID", "KILO_RUN_ID",
        # lazyd's own shim options: settings of the registration, carried to the daemon apart.
        "LAZYD_*",
        # Not listed: DISPLAY, WAYLAND_DISPLAY, XAUTHORITY, DBUS_SESSION_BUS_ADDRESS (the same in
        # one desktop login, different exactly when sharing would be wrong) and PATH.
    }
)

# What npm, yarn and pnpm set for the program they run: no server setting.
LAUNCHER_CONTEXT_ENV: frozenset[str] = frozenset(
    {"npm_*", "INIT_CWD", "NODE", "PROJECT_CWD", "BERRY_BIN_FOLDER", "PNPM_SCRIPT_SRC_DIR"}
)

# Name parts that mark a credential: those Gemini CLI strips from a server's environment (not its
# CERT: a CA bundle is a setting), plus COOKIE and PAT.
_CREDENTIAL = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|AUTH|CREDENTIAL|CREDS|PRIVATE|COOKIE|"
                         r"(^|_)PAT($|_)", re.IGNORECASE)
# Names that are credentials without saying so (connection strings carry passwords).
_CREDENTIAL_NAMES = frozenset({"CLIENT_ID", "DB_URI", "DATABASE_URL", "CONNECTION_STRING",
                               "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "SLACK_WEBHOOK_URL",
                               "TWILIO_ACCOUNT_SID"})
# Git's settings from the environment (git-config(1)): GIT_CONFIG_KEY_<n> names a setting, never a
# secret whatever "KEY" says; GIT_CONFIG_VALUE_<n> and GIT_CONFIG_PARAMETERS may hold one (an
# `http.extraHeader` of `Authorization: ...`).
_GIT_SETTING_NAME = re.compile(r"^GIT_CONFIG_(COUNT|KEY_\d+)$")
_GIT_SETTING_VALUE = re.compile(r"^GIT_CONFIG_(VALUE_\d+|PARAMETERS)$")
_SETTING = re.compile(
    r"(^|_)(URL|URI|ENDPOINT|HOST|PORT|PROXY|CONFIG|CONF|PROFILE|REGION|ZONE|PROJECT|ACCOUNT|"
    r"CERT|CERTS|CA|CAFILE|BUNDLE|HOME|DIR|DIRS|PATH|FILE|REGISTRY|LOCALE|TZ|LANG)($|_)|"
    r"PROXY|^SSL_|^KUBECONFIG$|^DOCKER_|^LC_|^LANG$",
    re.IGNORECASE,
)


# npm settings that change what `npx` (run by a server) fetches and whom it trusts.
_NPM_SETTING = re.compile(r"registry|config|cafile|^ca$|proxy|strict_ssl|cert", re.IGNORECASE)


def _matches(name: str, patterns: Iterable[str]) -> bool:
    compiled = _compiled(tuple(patterns))
    return compiled is not None and compiled.match(name) is not None


@functools.lru_cache(maxsize=64)
def _compiled(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """One expression for a list of fnmatch patterns (case-sensitive): every hello tests each
    variable against the same few lists, and one match per list is much cheaper than per pattern."""
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(pattern)})" for pattern in patterns))


def is_credential_name(name: str) -> bool:
    """Whether `name` looks like it holds a secret (a token, key, password, connection string, a
    git setting's value)."""
    if _GIT_SETTING_VALUE.match(name):
        return True
    if _GIT_SETTING_NAME.match(name):
        return False
    return name.upper() in _CREDENTIAL_NAMES or _CREDENTIAL.search(name) is not None


def is_setting_name(name: str) -> bool:
    """Whether `name` looks like a setting that changes what a server does or where it connects
    (CA bundles such as SSL_CERT_FILE and NODE_EXTRA_CA_CERTS included, and git's settings)."""
    return _SETTING.search(name) is not None or "CERT" in name.upper()


def counts(name: str, *, ignore: Iterable[str], force: Iterable[str] = (),
           declared: Iterable[str] = ()) -> bool:
    """Whether an inherited variable is part of the identity (the module docstring's rule);
    `ignore`: the per-session list in force, `force`: identity_env, `declared`: the registration's."""
    if name in set(declared) or _matches(name, force):
        return True
    if _matches(name, ignore):
        return False
    if _matches(name, LAUNCHER_CONTEXT_ENV):
        # npm exports its whole config as npm_config_*: the prefix itself says nothing.
        option = name.removeprefix("npm_config_")
        return is_credential_name(option) or _NPM_SETTING.search(option) is not None
    return True


def classify(name: str, *, force: Iterable[str] = (), declared: Iterable[str] = ()) -> str:
    """The class of a counted variable, for `lazyctl explain`: declared, forced, credential,
    setting or other."""
    if name in set(declared):
        return "declared"
    if _matches(name, force):
        return "forced"
    if is_credential_name(name):
        return "credential"
    if is_setting_name(name):
        return "setting"
    return "other"
