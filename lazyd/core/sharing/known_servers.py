"""Known servers: how popular MCP servers must be shared, by what a registration runs.

Pure: a table (`KnownServers`, from lazyd/config/known_servers.toml and the user's
`[known_servers]`, lazyd/config/known.py) and the names a command line runs (`what_runs`), so a
server lazyd never ran is decided before its first session (lazyd/core/sharing/modes.py).

What runs is named as its package index names it, so one entry covers every way to start it: the
npm package of `npx`, `npm exec`, `pnpm dlx`... or of a script in `node_modules/`; the PyPI
distribution of `uvx`, `uv tool run`, `pipx run` or the module of `python -m`; the image of
`docker run` without tag or digest; else the executable's name. `tree_runs` does the same for every
process a started tree ran (a wrapper that `exec`s, a launcher's children). Versions and extras
are dropped, scoped npm names keep their scope, names compare as PyPI normalizes them.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

# "auto" in an entry means "not known": the tool-name rule decides (how a user unlists a server).
KnownMode = Literal["shared", "isolated", "session-aware", "auto"]
KNOWN_MODES: Final[tuple[KnownMode, ...]] = ("shared", "isolated", "session-aware", "auto")

_NPM_LAUNCHERS: Final = frozenset({"npx", "bunx", "pnpx"})
# Launchers that take a subcommand first: name -> the subcommands that run a package.
_NPM_RUNNERS: Final = {"npm": ("exec", "x"), "pnpm": ("dlx", "exec"), "yarn": ("dlx",), "bun": ("x",)}
_PY_RUNNERS: Final = {"uvx": (), "uv": ("tool", "run"), "pipx": ("run",)}
# Options of those launchers that take a value (so the value is not the package).
_VALUED: Final = frozenset({"-p", "--package", "--from", "-c", "--call", "--python", "--with", "--index-url",
                            "--spec", "--registry", "--cache", "--userconfig", "-w", "--workspace"})
_SCRIPT_EXTENSIONS: Final = (".js", ".cjs", ".mjs", ".ts", ".py", ".exe")
_PYTHON: Final = re.compile(r"python(\d+(\.\d+)?)?")
_NODE: Final = frozenset({"node", "nodejs", "bun", "deno"})
_SEPARATORS: Final = re.compile(r"[-_.]+")
_CONTAINER_RUNNERS: Final = frozenset({"docker", "podman", "nerdctl"})
# Options of `docker run` that take no value (every other option without `=` takes the next word).
_CONTAINER_FLAGS: Final = frozenset({"-i", "-t", "-d", "-it", "-ti", "-P", "--rm", "--init", "--interactive", "--tty",
                                     "--detach", "--privileged", "--read-only", "--publish-all", "--no-healthcheck",
                                     "--oom-kill-disable", "-q", "--quiet"})
# Commands whose arguments name nothing a table can know (a shell running a wrapper is looked
# through by its children, not its script's name).
_SHELLS: Final = frozenset({"sh", "bash", "dash", "zsh", "env"})


@dataclass(frozen=True)
class KnownServer:
    """One entry: its name, how it is shared, the names that run it, and why (for `explain`)."""

    name: str
    sharing: KnownMode
    runs: tuple[str, ...]
    why: str = ""


@dataclass(frozen=True)
class KnownServers:
    entries: tuple[KnownServer, ...] = ()

    def lookup(self, names: Iterable[str]) -> KnownServer | None:
        """The entry that runs under one of `names` (what_runs' answer, most specific first)."""
        index = {normalize(run): entry for entry in self.entries for run in entry.runs}
        for name in names:
            entry = index.get(normalize(name))
            if entry is not None:
                return entry
        return None

    def overlaid(self, user: KnownServers) -> KnownServers:
        """This table with the user's entries on top: an entry of the same name replaces the
        packaged one, and a name the user lists stops matching any packaged entry."""
        names = {entry.name for entry in user.entries}
        claimed = {normalize(run) for entry in user.entries for run in entry.runs}
        kept = []
        for entry in self.entries:
            if entry.name in names:
                continue
            runs = tuple(run for run in entry.runs if normalize(run) not in claimed)
            if runs:
                kept.append(KnownServer(entry.name, entry.sharing, runs, entry.why))
        return KnownServers((*user.entries, *kept))


# Names that say nothing of which server runs: a script's generic file name, an interpreter, a
# launcher. A user's entry for one of them would opt in every server that happens to share it.
_GENERIC_NAMES: Final = frozenset({"index", "main", "server", "cli", "app", "__main__", "mod", "start", "run", "serve",
                                   "npm", "pnpm", "yarn", "uv", "pipx", "java", "ruby", "go",
                                   *_NPM_LAUNCHERS, *_NODE, *_SHELLS, *_CONTAINER_RUNNERS, *_PY_RUNNERS})


def names_a_server(name: str) -> bool:
    """Whether `name` (of what_runs) names a particular server, not a generic script or a program
    that runs any (`index`, `node`, `python3.12`, `npx`)."""
    bare = name.strip().lower()
    return bool(bare) and bare not in _GENERIC_NAMES and _PYTHON.fullmatch(bare) is None


def normalize(name: str) -> str:
    """How names compare: PyPI's normalization (lower case, `-_.` runs as one `-`)."""
    return _SEPARATORS.sub("-", name.strip().lower())


def what_runs(argv: Sequence[str], resolved: Sequence[str] = ()) -> list[str]:
    """The names of what `argv` runs, most specific first; `resolved`: the real paths of the
    command and its script (a package in `node_modules/` on them counts too)."""
    if not argv:
        return []
    names: list[str] = []
    command = posixpath.basename(argv[0])
    args = list(argv[1:])
    if command in _NPM_LAUNCHERS:
        names += _npm_package(args)
    elif command in _NPM_RUNNERS and args and args[0] in _NPM_RUNNERS[command]:
        names += _npm_package(args[1:])
    elif command in _PY_RUNNERS and args[: len(_PY_RUNNERS[command])] == list(_PY_RUNNERS[command]):
        names += _py_package(args[len(_PY_RUNNERS[command]):])
    elif _PYTHON.fullmatch(command) and "-m" in args and args.index("-m") + 1 < len(args):
        names.append(args[args.index("-m") + 1].split(".")[0])
    elif _PYTHON.fullmatch(command):
        script = next((a for a in args if not a.startswith("-")), None)
        if script is not None:
            names.append(_bare(script))  # a console script or a server's own file
    elif command in _CONTAINER_RUNNERS and args[:1] == ["run"]:
        names += _container_image(args[1:])
    elif command in _NODE:
        script = next((a for a in args if not a.startswith("-")), None)
        if script is not None:
            package = _node_modules_package(script)
            names.append(package if package else _bare(script))  # `dist/index.js` says nothing
    for path in (*resolved, argv[0]):
        package = _node_modules_package(path)
        if package and package not in names:
            names.append(package)
    bare = _bare(argv[0])
    if bare not in names:
        names.append(bare)
    return [n for n in names if n]


def tree_runs(argvs: Sequence[Sequence[str]], resolved: Sequence[Sequence[str]] = (),
              packages: Sequence[str | None] = ()) -> list[str]:
    """What a process tree runs, root first: each process's package (`packages[i]`, from its
    package.json), then `what_runs` of its command line; a shell or `env` names nothing."""
    names: list[str] = []
    for i, argv in enumerate(argvs):
        if not argv or posixpath.basename(argv[0]) in _SHELLS:
            continue
        found = [packages[i]] if i < len(packages) and packages[i] else []
        found += what_runs(argv, resolved[i] if i < len(resolved) else ())
        names += [name for name in found if name and name not in names]
    return names


def _container_image(args: list[str]) -> list[str]:
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg.startswith("-"):
            skip = "=" not in arg and arg not in _CONTAINER_FLAGS
        else:
            image = re.split(r"@", arg, maxsplit=1)[0]
            last = image.rfind("/")
            colon = image.rfind(":")
            if colon > last:
                image = image[:colon]  # the tag (a colon before the last slash is a registry's port)
            for prefix in ("docker.io/library/", "docker.io/", "library/"):
                if image.startswith(prefix):
                    image = image[len(prefix):]
                    break
            return [image]
    return []


def _first_positional(args: list[str]) -> str | None:
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--":
            continue
        if arg.startswith("-"):
            skip = arg in _VALUED
            continue
        return arg
    return None


def _option(args: list[str], *flags: str) -> str | None:
    for i, arg in enumerate(args):
        for flag in flags:
            if arg == flag and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(flag + "="):
                return arg[len(flag) + 1:]
    return None


def _npm_package(args: list[str]) -> list[str]:
    spec = _option(args, "-p", "--package") or _first_positional(args)
    return [_npm_name(spec)] if spec else []


def _npm_name(spec: str) -> str:
    """`@scope/name@1.2` -> `@scope/name`; `name@latest` -> `name`."""
    at = spec.rfind("@")
    return spec[:at] if at > 0 else spec


def _py_package(args: list[str]) -> list[str]:
    spec = _option(args, "--from") or _first_positional(args)
    if not spec:
        return []
    return [re.split(r"[\[<>=!~@ ;]", spec, maxsplit=1)[0]]


def _node_modules_package(path: str) -> str | None:
    """The package a path lies in: `…/node_modules/@scope/name/…` -> `@scope/name`."""
    parts = path.split("/")
    if "node_modules" not in parts:
        return None
    at = len(parts) - 1 - parts[::-1].index("node_modules")
    rest = parts[at + 1:]
    if not rest or rest[0] in ("", ".bin"):
        return None
    if rest[0].startswith("@"):
        return "/".join(rest[:2]) if len(rest) > 1 else None
    return rest[0]


def _bare(path: str) -> str:
    name = posixpath.basename(path)
    for extension in _SCRIPT_EXTENSIONS:
        if name.endswith(extension):
            return name[: -len(extension)]
    return name
