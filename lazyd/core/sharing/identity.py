"""Registration identity: when two client sessions may share one server process.

A registration (command, arguments, working directory, environment) is the same server as another
when they differ only in variables that do not count (lazyd/core/sharing/envrules.py); the resolved
command, an argument, the cwd or a counted value (typically a token) keeps them apart, and
`share = false` adds a per-session `instance`. `PATH` counts by what it resolves, not its value.

The digest is an HMAC under a per-user secret, so file names derived from it reveal no value and
cannot be precomputed from a guessed token; explanations name variables, never values. Pure: the
caller passes the environment and a PATH lookup.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import json
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from lazyd.core.sharing.envrules import PER_SESSION_ENV, classify, counts

# A shorter key would let someone who knows a cache file name brute-force the token behind it.
MIN_SECRET_BYTES = 16

# Enough to tell one user's registrations of a command apart; not a security boundary.
_READABLE_DIGEST_HEX = 6
_MAX_BASE_NAME_CHARS = 40
# Bumped if the encoding of key_material ever changes, so old and new digests never collide.
_KEY_FORMAT_VERSION = 1

# Commands that run another program named by their first positional argument; the readable name
# comes from that argument instead.
_LAUNCHERS = frozenset(
    {"npx", "uvx", "uv", "pipx", "bunx", "bun", "pnpm", "yarn", "node", "python", "python3",
     "deno", "docker"}
)
_VERSIONED_LAUNCHER = re.compile(r"(python3?|node)[.\d]*", re.ASCII)
# Search paths: they count by what they resolve for the registration, not by their value.
SEARCH_PATHS = frozenset({"PATH"})
RESOLVED_PREFIX = "resolves:"
# Launchers whose interpreter is found on PATH (`node` and `python` are the command themselves).
_NODE_LAUNCHERS = frozenset({"npx", "npm", "pnpm", "yarn", "corepack"})
_PYTHON_LAUNCHERS = frozenset({"uvx", "uv", "pipx"})
# Launcher subcommands that precede the real target ("uv tool run x", "pnpm dlx x", "docker run").
_SUBCOMMANDS = frozenset({"run", "exec", "dlx", "tool", "x"})
# Launcher options whose value is the next argument, so that value is not taken for the target
# ("docker run -e TOKEN image", "uvx --from pkg cmd", "node -r hook server.js").
_OPTIONS_WITH_VALUE = frozenset(
    {"-e", "--env", "--env-file", "-v", "--volume", "--mount", "--name", "--network", "--publish",
     "-w", "--workdir", "-u", "--user", "--entrypoint", "--platform", "-l", "--label", "--from",
     "--with", "--with-requirements", "--python", "-p", "--directory", "--project", "--index",
     "--package", "-r", "--require", "--import", "--loader", "-W", "-X", "-c", "--config",
     "--cwd", "--filter"}
)
# File extensions dropped from a base name ("fixture_server.py" -> "fixture_server").
_EXTENSIONS = (".tar.gz", ".py", ".pyz", ".js", ".mjs", ".cjs", ".ts", ".mts", ".tsx", ".jsx",
               ".tgz", ".whl", ".git", ".sh", ".exe")
# Stems too generic to name a server ("dist/index.js"); the nearest telling directory is used.
_GENERIC_STEMS = frozenset({"index", "main", "server", "cli", "app", "__main__", "mod"})
_GENERIC_DIRS = frozenset({"dist", "build", "out", "src", "lib", "bin", "build-output", "."})
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+", re.ASCII)


@dataclass(frozen=True)
class Identity:
    """What makes two registrations the same server; build it with `identity_for`."""

    argv: tuple[str, ...]
    cwd: str
    env: tuple[tuple[str, str], ...]
    instance: str = ""
    # Why each variable counts, for explanations only: neither keyed nor compared.
    declared: frozenset[str] = field(default=frozenset(), compare=False)
    forced: tuple[str, ...] = field(default=(), compare=False)
    # Search paths kept as what they resolve (see `identity_for`), not as their value.
    resolved: frozenset[str] = field(default=frozenset(), compare=False)

    def key_material(self) -> bytes:
        """Every field, canonically: JSON arrays keep argument boundaries, ASCII escapes make
        surrogate-carried names defined bytes."""
        document = {"v": _KEY_FORMAT_VERSION, "argv": list(self.argv), "cwd": self.cwd,
                    "env": [list(pair) for pair in self.env], "instance": self.instance}
        return json.dumps(document, ensure_ascii=True, separators=(",", ":"), sort_keys=True).encode("ascii")

    def digest(self, secret: bytes) -> str:
        """HMAC-SHA256 (hex) of `key_material`; ValueError for a secret too short to hide tokens."""
        if len(secret) < MIN_SECRET_BYTES:
            raise ValueError(f"the identity secret must be at least {MIN_SECRET_BYTES} bytes, got {len(secret)}")
        return hmac.new(secret, self.key_material(), hashlib.sha256).hexdigest()

    def readable_name(self, secret: bytes) -> str:
        """A stable name for status and file names: "server-everything-1a2b3c" (the suffix from the
        keyed digest varies with tokens without revealing them)."""
        return f"{_base_name(self.argv)}-{self.digest(secret)[:_READABLE_DIGEST_HEX]}"


def identity_for(argv: Sequence[str], cwd: str, env: Mapping[str, str], *, ignore: Iterable[str] = PER_SESSION_ENV,
                 which: Callable[[str, str | None], str | None], instance: str = "", force: Iterable[str] = (),
                 declared: Iterable[str] = (),
                 interpreter: Callable[[str], str | None] = lambda path: None) -> Identity:
    """The identity of a registration; ValueError for an empty command or a relative cwd.

    `argv[0]` is resolved with `which(name, PATH)` (the registration's PATH) or against `cwd`; an
    unresolvable command keeps its name (its start fails later, clearly). `ignore`, `force`,
    `declared`: lazyd/core/sharing/envrules.py; `instance`: the token of `share = false`.

    Clients prepend directories of their own to PATH (a new random one per run for Codex), so PATH
    is kept as what it resolves: the command and the interpreter of a launcher or of a
    `#!/usr/bin/env NAME` script (`interpreter(path)` reads NAME). Declared or forced, it counts
    by value.
    """
    if not argv or not argv[0]:
        raise ValueError("a registration needs a command, but argv is empty")
    if not posixpath.isabs(cwd):
        raise ValueError(f"the working directory must be an absolute path, got {cwd!r}")
    cwd = posixpath.normpath(cwd)
    command = _resolve(argv[0], cwd, env, which)
    patterns, forced, own = tuple(ignore), tuple(force), frozenset(declared)
    resolved: set[str] = set()
    kept_env: dict[str, str] = {}
    for name, value in env.items():
        if not counts(name, ignore=patterns, force=forced, declared=own):
            continue
        if name in SEARCH_PATHS and name not in own and not _matches_any(name, forced):
            value = _resolution(command, argv[1:], cwd, env, which, interpreter)
            resolved.add(name)
        kept_env[name] = value
    kept = tuple(sorted(kept_env.items()))
    return Identity(argv=(command, *argv[1:]), cwd=cwd, env=kept, instance=instance,
                    declared=own & set(kept_env), forced=forced, resolved=frozenset(resolved))


def explain_difference(a: Identity, b: Identity) -> list[str]:
    """Why `a` and `b` are not the same server, one reason per difference; values and arguments
    are never shown (either may be a token)."""
    reasons: list[str] = []
    if a.argv[:1] != b.argv[:1]:
        reasons.append(f"command differs: {_first(a.argv)} vs {_first(b.argv)}")
    args_a, args_b = a.argv[1:], b.argv[1:]
    if args_a != args_b:
        if len(args_a) != len(args_b):
            reasons.append(f"args differ ({len(args_a)} vs {len(args_b)} arguments)")
        else:
            position = next(i for i, (x, y) in enumerate(zip(args_a, args_b)) if x != y)
            reasons.append(f"args differ (argument {position + 1})")
    if a.cwd != b.cwd:
        reasons.append(f"cwd differs: {a.cwd} vs {b.cwd}")
    env_a, env_b = dict(a.env), dict(b.env)
    for name in sorted(env_a.keys() | env_b.keys()):
        kind = variable_class(a if name in env_a else b, name)
        if name not in env_a or name not in env_b:
            reasons.append(f"env {name} only in one ({kind})")
        elif env_a[name] == env_b[name]:
            continue
        elif name in a.resolved and name in b.resolved:
            detail = _resolution_difference(env_a[name], env_b[name])
            if detail:  # else only the command differs, said above
                reasons.append(f"env {name} resolves differently: {detail}")
        else:
            reasons.append(f"env {name} differs ({kind}, values hidden)")
    if a.instance != b.instance:
        reasons.append("share = false")
    return reasons


def counted_for_learning(identity: Identity, env: Mapping[str, str]) -> dict[str, str]:
    """The variables that count only because nothing says otherwise (not declared, forced or
    resolved): what the per-run learner (lazyd/core/sharing/noise.py) may look at."""
    return {name: env[name] for name, _ in identity.env
            if name in env and name not in identity.declared and name not in identity.resolved
            and not _matches_any(name, identity.forced)}


def same_without(a: Identity, b: Identity, names: Iterable[str]) -> bool:
    """Whether `a` and `b` are one identity once `names` are left out, `a` counting one of them."""
    drop = frozenset(names)
    if not any(name in drop for name, _ in a.env):
        return False
    return (a.argv, a.cwd, a.instance) == (b.argv, b.cwd, b.instance) and (
        tuple(p for p in a.env if p[0] not in drop) == tuple(p for p in b.env if p[0] not in drop))


def variable_class(identity: Identity, name: str) -> str:
    """Why `name` counts in `identity`: declared, forced, credential, setting or other."""
    return classify(name, force=identity.forced, declared=identity.declared)


def differing_env_names(a: Identity, b: Identity) -> list[str]:
    """The names of the counted variables that keep `a` and `b` apart (values never leave)."""
    env_a, env_b = dict(a.env), dict(b.env)
    return sorted(n for n in env_a.keys() | env_b.keys() if env_a.get(n) != env_b.get(n))


def _first(argv: tuple[str, ...]) -> str:
    return argv[0] if argv else "(none)"


def _resolve(command: str, cwd: str, env: Mapping[str, str], which: Callable[[str, str | None], str | None]) -> str:
    if "/" in command:
        return posixpath.normpath(posixpath.join(cwd, command))
    found = which(command, env.get("PATH"))
    if found is None:
        return command
    # A relative PATH entry yields a relative result; anchor it where the server will run.
    return posixpath.normpath(posixpath.join(cwd, found))


def _matches_any(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _interpreters_of(command: str, args: Sequence[str],
                     interpreter: Callable[[str], str | None]) -> list[str]:
    """The programs `command` runs through PATH: a launcher's interpreter, a script's."""
    program = posixpath.basename(command).removesuffix(".exe")
    names: list[str] = []
    if program in _NODE_LAUNCHERS:
        names.append("node")
    elif program in _PYTHON_LAUNCHERS:
        names.extend(("python3", "python"))
    if posixpath.isabs(command):
        named = interpreter(command)
        if named and "/" not in named and named not in names:
            names.append(named)
    return names


def _resolution(command: str, args: Sequence[str], cwd: str, env: Mapping[str, str],
                which: Callable[[str, str | None], str | None],
                interpreter: Callable[[str], str | None]) -> str:
    """A search path as what it resolves for this registration: canonical text (JSON)."""
    found = {"command": command}
    for name in _interpreters_of(command, args, interpreter):
        where = which(name, env.get("PATH"))
        found[name] = posixpath.normpath(posixpath.join(cwd, where)) if where else ""
    return RESOLVED_PREFIX + json.dumps(found, ensure_ascii=True, separators=(",", ":"), sort_keys=True)


def _resolution_difference(a: str, b: str) -> str:
    """Which interpreters both use resolve differently ("" if none); paths are no secret."""
    try:
        one, two = (json.loads(v.removeprefix(RESOLVED_PREFIX)) for v in (a, b))
    except ValueError:
        return "values hidden"
    parts = [f"{n} is {one.get(n) or '(not found)'} vs {two.get(n) or '(not found)'}"
             for n in sorted((set(one) & set(two)) - {"command"}) if (one.get(n) or "") != (two.get(n) or "")]
    return "; ".join(parts)


def _is_launcher(name: str) -> bool:
    return name in _LAUNCHERS or _VERSIONED_LAUNCHER.fullmatch(name) is not None


def _target_of_launcher(args: Sequence[str]) -> str | None:
    """The first argument of a launcher command line that names the program it runs."""
    skip_next = False
    for arg in args:
        if skip_next:
            skip_next = False
            continue
        if arg.startswith("-"):
            # `python -m package` is not in _OPTIONS_WITH_VALUE: its value is the target itself.
            skip_next = arg in _OPTIONS_WITH_VALUE
            continue
        if arg in _SUBCOMMANDS:
            continue
        return arg
    return None


def _package_dir(path: str) -> str | None:
    """`…/node_modules/task-master-ai/dist/mcp-server.js` -> "task-master-ai" (no scope); None
    outside `node_modules/` and for a `.bin/` link."""
    parts = path.split("/")
    if "node_modules" not in parts:
        return None
    rest = parts[len(parts) - parts[::-1].index("node_modules"):]
    if rest[:1] and rest[0].startswith("@"):
        rest = rest[1:]
    return rest[0] if len(rest) > 1 and rest[0] not in ("", ".bin") else None


def _strip_target(target: str) -> str:
    """ "@scope/pkg@1.2.3" -> "pkg", "ghcr.io/o/img:tag" -> "img", "pkg==1.0" -> "pkg"."""
    parts = _without_extension(target.rstrip("/")).split("/")
    # Version or tag suffixes: npm "@1.2.3", docker ":tag" / "@sha256:…", PEP 508 specifiers.
    stem = _without_extension(re.split(r"[@:=<>~!;\[ ]", parts[-1].lstrip("@"), maxsplit=1)[0])
    if stem in _GENERIC_STEMS:
        for directory in reversed(parts[:-1]):
            if directory and directory not in _GENERIC_DIRS and directory != "..":
                return directory
    return stem


def _without_extension(stem: str) -> str:
    for extension in _EXTENSIONS:
        if stem.endswith(extension) and len(stem) > len(extension):
            return stem[: -len(extension)]
    return stem


def _base_name(argv: tuple[str, ...]) -> str:
    program = posixpath.basename(argv[0]) if argv else ""
    name = program
    if _is_launcher(program.removesuffix(".exe")):
        target = _target_of_launcher(argv[1:])
        if target is not None:
            name = _package_dir(target) or _strip_target(target)
    else:
        # The whole path, so a generic "/opt/acme-mcp/bin/server" can be named after its directory.
        name = _package_dir(argv[0]) or _strip_target(argv[0])
    safe = _UNSAFE_NAME_CHARS.sub("-", name).strip(".-")[:_MAX_BASE_NAME_CHARS].strip(".-")
    return safe or "server"
