"""Which environment variables decide whether two registrations may share one server process.

A registration reaches the daemon with the whole environment its client gave the shim: the
user's login environment, what the registration itself declares (its `env` in the client's
config), and whatever the client adds for its own bookkeeping. Real clients add a lot, and some of
it changes at every run (Claude Code gives every server a new `CLAUDE_CODE_SESSION_ID` per
invocation). If every variable counted, no two sessions of the most used client would ever share.

The rule, first match wins:

1. A variable the registration **declares** (recorded by `lazyctl wrap` as `LAZYD_IDENTITY_ENV`)
   or the user **forces** (`identity_env` in config.toml, `--identity-env`) always counts.
2. **Per-session** variables never count: terminals, windows, multiplexer panes, ssh logins,
   service-manager bookkeeping, editors' IPC handles, AI clients' session markers (`PER_SESSION_ENV`,
   plus the user's `per_session_env`).
3. **Launcher context** (the variables npm, yarn and pnpm set for the process they run) does not
   count either, unless its name marks a credential or a setting (an `npm_config_..._authToken`
   or a registry URL still counts): `LAUNCHER_CONTEXT_ENV`.
4. Everything else counts by value: credentials (so different secrets never share and a session
   without the token never gets the process that has it), config files, endpoints, proxies, CA
   bundles, cloud profiles and regions, PATH (by what it resolves: lazyd/core/sharing/identity.py), HOME,
   and any variable lazyd knows nothing about, except the per-run variables learned for the
   session's client (lazyd/core/sharing/noise.py: the caller adds them to `ignore`).

Counting unknown variables is the safe default: a wrong split costs one more process, a wrong
merge gives one session a server configured for another. `classify` names the class a counted
variable falls in, for `lazyctl explain` (names only, never values).

Pure: no environment is read here; callers pass names.
"""

from __future__ import annotations

import fnmatch
import functools
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["PER_SESSION_ENV", "LAUNCHER_CONTEXT_ENV", "counts", "classify", "is_credential_name",
           "is_setting_name"]

# Variables (exact names or fnmatch patterns, case-sensitive) that vary per terminal, window, login
# or client session and carry no server setting. A shared server runs with the environment of the
# session that started it, so ignoring a variable is only safe where the server cannot care which
# session's value it got.
PER_SESSION_ENV: frozenset[str] = frozenset(
    {
        # Terminal emulators and their windows, tabs and panes. A server talks over pipes, never to
        # the terminal, so which terminal (and its size, type and version) launched the client is
        # irrelevant to it; these differ between any two terminals and would prevent all sharing.
        "TERM", "COLORTERM", "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "TERM_SESSION_ID",
        "LC_TERMINAL", "LC_TERMINAL_VERSION", "COLUMNS", "LINES", "WINDOWID", "VTE_VERSION",
        "ITERM_*", "KITTY_*", "WEZTERM_*", "ALACRITTY_*", "GHOSTTY_*", "KONSOLE_*",
        "GNOME_TERMINAL_SCREEN", "GNOME_TERMINAL_SERVICE", "TILIX_ID", "TERMINATOR_UUID",
        "WT_SESSION", "WT_PROFILE_ID", "__INTELLIJ_COMMAND_HISTFILE__", "SECURITYSESSIONID",
        # Desktop launch bookkeeping: a per-launch activation token and the launcher's pid.
        "XDG_ACTIVATION_TOKEN", "DESKTOP_STARTUP_ID", "GIO_LAUNCHED_DESKTOP_FILE",
        "GIO_LAUNCHED_DESKTOP_FILE_PID",
        # Terminal multiplexers: which session and pane the client runs in.
        "TMUX", "TMUX_PANE", "STY", "WINDOW", "ZELLIJ", "ZELLIJ_SESSION_NAME", "ZELLIJ_PANE_ID",
        # Shell bookkeeping. PWD and OLDPWD duplicate or predate the cwd, which is part of the
        # identity on its own (and PWD may spell it through a symlink); `_` is the last command
        # run; SHLVL is how deeply nested the shell is; the rest are prompt and direnv state that
        # changes on every prompt or `.envrc` edit (the variables direnv loads still count).
        "PWD", "OLDPWD", "_", "SHLVL", "STARSHIP_SESSION_KEY", "DIRENV_DIR", "DIRENV_FILE",
        "DIRENV_DIFF", "DIRENV_WATCHES",
        # SSH logins and agents: every login gets its own connection details, tty and (when
        # forwarded) agent socket. A shared server keeps the agent socket of the session that
        # started it, which may vanish with that login; a server that needs a stable agent
        # should get SSH_AUTH_SOCK from config.toml, where it is part of the identity again.
        "SSH_AUTH_SOCK", "SSH_AGENT_PID", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "GPG_TTY",
        # Service-manager and login bookkeeping: which unit, scope or login session the client
        # was started in (desktop terminals each get their own systemd scope).
        "INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID", "MANAGERPID", "XDG_SESSION_ID",
        "XPC_SERVICE_NAME",
        # Editors hosting the client: per-window IPC handles, pids and nonces. VS Code's variables
        # are all its own plumbing, so the whole prefix goes. GIT_ASKPASS is deliberately *kept*:
        # it changes how git (run by a server) asks for credentials, and it is the same for every
        # window of one editor install, so keeping it costs no sharing.
        "VSCODE_*", "CURSOR_TRACE_ID", "NVIM", "NVIM_LISTEN_ADDRESS",
        # AI clients' own variables, seen in what they give a stdio server. Clients identify
        # themselves to a server in `initialize`, not through the environment.
        # Claude Code 2.1.x: a new CLAUDE_CODE_SESSION_ID (and notes dir, launcher ids) per run,
        # its entry point, the project dir (the cwd already counts), an agent marker, and two
        # switches for its own subprocesses (corepack pinning, Windows exe lookup).
        "CLAUDECODE", "CLAUDE_CODE_*", "CLAUDE_PROJECT_DIR", "AI_AGENT",
        "COREPACK_ENABLE_AUTO_PIN", "NoDefaultCurrentDirectoryInExePath",
        # Gemini CLI 0.61: GEMINI_CLI=1 on every server, and its own GEMINI_CLI_* state (it
        # passes every GEMINI_CLI_ variable through, including per-IDE-window ones).
        "GEMINI_CLI", "GEMINI_CLI_*",
        # GitHub Copilot CLI 1.0.102: a new COPILOT_AGENT_SESSION_ID per run, and its release's
        # version and unpacked directory, which change with every upgrade of Copilot (the git
        # setting it appends counts, and `check --client copilot` rebuilds it). Kilo CLI 7.7.7:
        # its pid and a run id, new every run (its markers, like opencode's, count and are
        # rebuilt by a check).
        "COPILOT_AGENT_SESSION_ID", "COPILOT_CLI_BINARY_VERSION", "COPILOT_CLI_RESOLVED_DIST_DIR",
        "KILO_PID", "KILO_RUN_ID",
        # lazyd's own shim options: they are settings of the registration (linger, share, wake),
        # carried separately to the daemon, not settings of the server.
        "LAZYD_*",
        # Deliberately NOT listed: DISPLAY, WAYLAND_DISPLAY, XAUTHORITY and
        # DBUS_SESSION_BUS_ADDRESS. They are the same in every terminal of one desktop login, so
        # keeping them costs nothing there, and they differ exactly when sharing would be wrong:
        # an ssh session and the desktop must not share a server that opens windows (a headed
        # browser) or reads the keyring over D-Bus. PATH is kept too: it decides what the server's
        # own subprocesses run, so an activated virtualenv gets its own server.
    }
)

# What a package manager sets for the program it runs (`npx claude`, `npm run agent`): the
# script's name and version, the caller's directory, npm's own path and user agent. None of it is
# a server setting, and it differs between running a client through npx and from PATH.
LAUNCHER_CONTEXT_ENV: frozenset[str] = frozenset(
    {"npm_*", "INIT_CWD", "NODE", "PROJECT_CWD", "BERRY_BIN_FOLDER", "PNPM_SCRIPT_SRC_DIR"}
)

# Name parts that mark a credential: the substrings Gemini CLI 0.61 strips from a server's
# environment (TOKEN, SECRET, PASSWORD, PASSWD, KEY, AUTH, CREDENTIAL, CREDS, PRIVATE; its CERT
# is a CA bundle, a setting below), plus COOKIE and PAT (personal access tokens). Case-insensitive.
_CREDENTIAL = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|AUTH|CREDENTIAL|CREDS|PRIVATE|COOKIE|"
                         r"(^|_)PAT($|_)", re.IGNORECASE)
# Names that are credentials without saying so (connection strings carry passwords).
_CREDENTIAL_NAMES = frozenset({"CLIENT_ID", "DB_URI", "DATABASE_URL", "CONNECTION_STRING",
                               "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "SLACK_WEBHOOK_URL",
                               "TWILIO_ACCOUNT_SID"})
# Git's settings from the environment (git-config(1), ENVIRONMENT): GIT_CONFIG_COUNT pairs
# GIT_CONFIG_KEY_<n> with GIT_CONFIG_VALUE_<n>, as if each were given with `git -c KEY=VALUE`. A key
# is a setting's name (`safe.bareRepository`, `http.extraHeader`), never a secret, whatever
# "KEY" says; a value is whatever that setting holds, which may be a secret (an `http.extraHeader`
# of `Authorization: ...` is how CI hands git a token), and so is GIT_CONFIG_PARAMETERS, where
# `git -c` passes its pairs on to the git processes it runs.
_GIT_SETTING_NAME = re.compile(r"^GIT_CONFIG_(COUNT|KEY_\d+)$")
_GIT_SETTING_VALUE = re.compile(r"^GIT_CONFIG_(VALUE_\d+|PARAMETERS)$")
# Settings: config files and directories, endpoints and URLs, proxies, CA bundles, cloud profiles
# and regions, and where programs and homes are.
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
    """One expression for a whole list of fnmatch patterns (case-sensitive, as fnmatchcase):
    every session's identity tests each of its variables against the same few lists, and one
    match per list instead of one fnmatch per pattern was most of the daemon's work per hello."""
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
    """Whether an inherited variable `name` is part of the identity (the module docstring's rule).

    `ignore` is the per-session list in force (PER_SESSION_ENV and the user's additions), `force`
    the user's identity_env names or patterns, `declared` the names the registration declares.
    """
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
    """The class of a counted variable, for explanations: declared, forced, credential, setting
    or other (a variable lazyd knows nothing about, counted to be safe)."""
    if name in set(declared):
        return "declared"
    if _matches(name, force):
        return "forced"
    if is_credential_name(name):
        return "credential"
    if is_setting_name(name):
        return "setting"
    return "other"
