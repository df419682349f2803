"""The house rules, read from the source (docs/architecture.md): floors, a pure core, one exception
tree, no friends, no cycles, short chains, small modules, rooms that say what they are for.

Testing policy: every rule is a function from the parsed tree (tests/unit/archcheck.py, which reads
the source once) to a list of violations, each one stable line of text. The real tree must have
none: there is no allowlist. Each rule is also run on a small tree written to tmp_path that breaks
it once, so a rule that stopped seeing anything fails here rather than passing quietly; and a tree
that keeps every rule must make none of them speak.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from tests.unit import archcheck as ac
from tests.unit.archcheck import STDLIB, Module

REPO = Path(__file__).resolve().parents[2]
ROOTS = {"lazyd": REPO / "lazyd", "lazyd_shim": REPO / "shim"}
PROJECT = frozenset(ROOTS)

MAX_MODULE_LINES = 600
MAX_CLASS_CHAIN = 3
MAX_FOLDER_MODULES = 20
MAX_PREFIX_FAMILY = 2  # a third module sharing a name prefix means the folder wants a package

# --- the floors, as docs/architecture.md's table states them ------------------------------------------
#
# One row per module or package (a row "lazyd/core/" covers every module under it; the longest
# row wins): its floor, and what it may import besides the standard library. Each entry is a
# project module or package as the docs write it, a third-party distribution, or STDLIB_FLOOR (every
# module whose floor is "stdlib floor"). A floor other than the stdlib floor may always import its
# own modules; a module of the stdlib floor imports exactly what its row says. The docs' table must
# say the same (test_the_docs_floor_table_states_the_rules_the_test_enforces).
STDLIB_FLOOR = "the stdlib floor"
ROWS: dict[str, tuple[str, frozenset[str]]] = {
    "lazyd/__init__.py": ("stdlib floor", frozenset()),
    "lazyd/errors.py": ("stdlib floor", frozenset()),
    "lazyd/protocol/__init__.py": ("stdlib floor", frozenset()),
    "lazyd/host/__init__.py": ("stdlib floor", frozenset()),
    "lazyd/config/durations.py": ("stdlib floor", frozenset()),
    "lazyd/config/sizes.py": ("stdlib floor", frozenset()),
    "lazyd/config/envnames.py": ("stdlib floor", frozenset()),
    "lazyd/host/daemonenv.py": ("stdlib floor", frozenset()),
    "lazyd/protocol/frames.py": ("stdlib floor", frozenset({"lazyd/errors.py"})),
    "lazyd/protocol/wire.py": ("stdlib floor", frozenset({"msgpack", "lazyd/errors.py", "lazyd/protocol/frames.py"})),
    "lazyd/protocol/smallpack.py": ("stdlib floor", frozenset()),
    "lazyd/host/sockpath.py": ("stdlib floor", frozenset({"lazyd/errors.py", "lazyd/host/privatefiles.py"})),
    "lazyd/host/fallback_journal.py": ("stdlib floor", frozenset()),
    "lazyd/host/privatefiles.py": ("stdlib floor", frozenset({"lazyd/errors.py"})),
    "lazyd/host/procfs.py": ("stdlib floor", frozenset()),
    "lazyd/protocol/jsonline.py": ("stdlib floor", frozenset()),
    "lazyd/protocol/linepeek.py": ("stdlib floor", frozenset({"lazyd/protocol/jsonline.py"})),
    "lazyd/handoff/__init__.py": ("stdlib floor", frozenset()),
    "lazyd/handoff/region.py": ("stdlib floor", frozenset()),
    "lazyd/handoff/recovery.py": ("stdlib floor", frozenset({"lazyd/protocol/frames.py", "lazyd/protocol/linepeek.py",
                                                            "lazyd/handoff/region.py"})),
    "lazyd/host/paths.py": ("daemon and lazyctl floor", frozenset({"platformdirs", "lazyd/errors.py", "lazyd/host/sockpath.py"})),
    "lazyd/config/__init__.py": ("config", frozenset()),
    "lazyd/config/load.py": ("config", frozenset({"lazyd/core/", STDLIB_FLOOR})),
    "lazyd/config/model.py": ("config", frozenset({"lazyd/core/", STDLIB_FLOOR})),
    "lazyd/config/values.py": ("config", frozenset({STDLIB_FLOOR})),
    "lazyd/config/known.py": ("config", frozenset({"lazyd/core/", STDLIB_FLOOR})),
    "lazyd/config/toml_text.py": ("config", frozenset({STDLIB_FLOOR})),
    "lazyd/core/": ("core", frozenset({"lazyd/errors.py", "lazyd/config/durations.py", "lazyd/config/envnames.py",
                                       "lazyd/config/sizes.py", "lazyd/protocol/jsonline.py"})),
    "lazyd/daemon/": ("shell", frozenset({STDLIB_FLOOR, "lazyd/host/paths.py", "lazyd/config/", "lazyd/core/", "trio",
                                          "sdnotify"})),
    "lazyd/ctl/": ("lazyctl", frozenset({STDLIB_FLOOR, "lazyd/host/paths.py", "lazyd/config/", "lazyd/core/", "tomlkit",
                                         "yaml", "shim/"})),
    "shim/": ("shim", frozenset({"msgpack", STDLIB_FLOOR})),
}

# What the core may import of the standard library: pure modules only (no I/O, no clock, no
# randomness, no environment, no logging), each with the names it may use where only some of the
# module is pure (None: all of it). A module imported under TYPE_CHECKING only gives the core a
# type, not the thing (the caller's `random.Random`), and is not counted.
CORE_STDLIB: dict[str, frozenset[str] | None] = {
    "__future__": None, "abc": None, "base64": None, "binascii": None, "bisect": None, "collections": None,
    "copy": None, "dataclasses": None, "enum": None, "fnmatch": None, "functools": None, "hashlib": None,
    "heapq": None, "hmac": None, "itertools": None, "json": None, "math": None, "numbers": None, "operator": None,
    "re": None, "string": None, "textwrap": None, "types": None, "typing": None, "unicodedata": None,
    # Paths as strings; exists, realpath, expanduser and the like ask the file system or the environment.
    "posixpath": frozenset({"basename", "dirname", "isabs", "join", "normpath", "split", "splitext", "commonpath",
                            "sep"}),
}
# Builtins that reach the world (files, the terminal, the interpreter's own import and eval).
CORE_REFUSED_BUILTINS = frozenset({"open", "input", "print", "exec", "eval", "compile", "__import__", "breakpoint",
                                   "help", "exit", "quit", "__builtins__"})


def doc_path_to_name(path: str) -> str:
    """"lazyd/core/" -> "lazyd.core", "shim/relay.py" -> "lazyd_shim.relay", "lazyd/__init__.py" -> "lazyd"."""
    parts = path.strip("/").removesuffix(".py").split("/")
    if parts[0] == "shim":
        parts[0] = "lazyd_shim"
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def row_of(name: str) -> str | None:
    """The row of a project module (None: no row places it)."""
    best = None
    for path in ROWS:
        row = doc_path_to_name(path)
        if (name == row if path.endswith(".py") else name == row or name.startswith(row + ".")):
            if best is None or len(row) > len(doc_path_to_name(best)):
                best = path
    return best


def covers(entry: str, target: str) -> bool:
    """Whether a row's entry (a doc path or STDLIB_FLOOR) lets a module import the project module `target`."""
    if entry == STDLIB_FLOOR:
        target_row = row_of(target)
        return target_row is not None and ROWS[target_row][0] == "stdlib floor"
    name = doc_path_to_name(entry)
    return target == name or (entry.endswith("/") and target.startswith(name + "."))


def is_project(name: str) -> bool:
    return name.split(".")[0] in PROJECT


def in_core(name: str) -> bool:
    return name == "lazyd.core" or name.startswith("lazyd.core.")


# --- the rules -----------------------------------------------------------------------------------------


def floor_violations(modules: Mapping[str, Module]) -> list[str]:
    """Each import that leaves its module's row: a project module it may not use, a third party it
    may not use, a standard module the core may not use, or a module that no row places."""
    out = []
    for module in modules.values():
        row = row_of(module.name)
        if row is None:
            out.append(f"{module.name} belongs to no floor")
            continue
        floor, allowed = ROWS[row]
        for imp in module.imports:
            if is_project(imp.target):
                target_row = row_of(imp.target)
                own_floor = floor != "stdlib floor" and target_row is not None and ROWS[target_row][0] == floor
                if imp.target == module.name or own_floor or any(covers(e, imp.target) for e in allowed):
                    continue
                out.append(f"{module.name} imports {imp.target}")
            elif imp.top in STDLIB:
                if floor == "core" and not imp.type_checking and not _core_may_import(imp.target):
                    out.append(f"{module.name} imports {imp.target}")
            elif imp.top not in allowed:
                out.append(f"{module.name} imports {imp.top}")
    return out


def _core_may_import(target: str) -> bool:
    parts = target.split(".")
    return any(".".join(parts[:end]) in CORE_STDLIB for end in range(1, len(parts) + 1))


def core_purity_violations(modules: Mapping[str, Module]) -> list[str]:
    """In the core: every use of a builtin that reaches the world (a local def, parameter or
    import of the same name is not the builtin), and every name of a partly pure standard module
    outside its pure part."""
    out = []
    for module in modules.values():
        if not in_core(module.name):
            continue
        for use in module.uses:
            parts = use.what.split(".")
            if parts[0] == "builtins" and len(parts) > 1 and parts[1] in CORE_REFUSED_BUILTINS:
                out.append(f"{module.name}:{use.line} uses the builtin {parts[1]}")
            pure = CORE_STDLIB.get(parts[0])
            if pure is not None and len(parts) > 1 and parts[1] not in pure and not use.type_checking:
                out.append(f"{module.name}:{use.line} uses {parts[0]}.{parts[1]}")
    return out


def dynamic_import_violations(modules: Mapping[str, Module]) -> list[str]:
    """Every import the source cannot show: a module name computed at run time (a literal one is an
    import like any other, and the floors judge it), or code loaded from a path."""
    return [f"{m.name}:{line} {why}" for m in modules.values() for line, why in m.dynamic]


def friend_violations(modules: Mapping[str, Module]) -> list[str]:
    """Every private name (`_x`) of another project module read or written: `module._x`, `from m
    import _x`, `Class._x` of an imported class, and `obj._x` where `_x` is defined by another
    project module and not by this one (a private name the project never defines, like os._exit,
    is the standard library's business)."""
    owners: defaultdict[str, set[str]] = defaultdict(set)
    for module in modules.values():
        for name in module.private_defs:
            owners[name].add(module.name)
    out = []
    for module in modules.values():
        for use in module.private_uses:
            if use.owner is not None:
                out.append(f"{module.name}:{use.line} reaches {use.text}, private to {use.owner}")
            elif use.name not in module.private_defs and owners[use.name] - {module.name}:
                others = ", ".join(sorted(owners[use.name] - {module.name}))
                out.append(f"{module.name}:{use.line} touches {use.text}, private to {others}")
    return out


def cycle_violations(modules: Mapping[str, Module]) -> list[str]:
    """Every import cycle among project modules; imports under TYPE_CHECKING and inside functions count."""
    edges = {m.name: {i.target for i in m.imports if i.target in modules and i.target != m.name}
             for m in modules.values()}
    return [f"import cycle: {', '.join(c)}" for c in ac.cycles(edges)]


def chain_violations(modules: Mapping[str, Module]) -> list[str]:
    """Every class at the end of a chain of more than MAX_CLASS_CHAIN project classes."""
    classes = ac.all_classes(modules.values())
    out = []
    for qualname in classes:
        depth = ac.project_class_depth(qualname, classes)
        if depth > MAX_CLASS_CHAIN:
            out.append(f"class {qualname} is {depth} project classes deep")
    return out


def size_violations(modules: Mapping[str, Module]) -> list[str]:
    return [f"{m.name} is over {MAX_MODULE_LINES} lines" for m in modules.values() if m.lines > MAX_MODULE_LINES]


def exception_violations(modules: Mapping[str, Module]) -> list[str]:
    """Exception classes outside the one tree: any project class that derives, directly or through
    project classes, from an exception of the builtins, the standard library or a third party (its
    base resolved as Python would: `ConnectionError` through the builtins module, `timeout` after
    `from socket import timeout`) but does not descend from lazyd.errors.LazydError; and a public one
    defined anywhere but lazyd.errors."""
    classes = ac.all_classes(modules.values())
    outside: dict[str, bool] = {}

    def outside_exception(base: str) -> bool:
        if base not in outside:
            outside[base] = not is_project(base) and ac.is_outside_exception(base)
        return outside[base]

    def is_exception(qualname: str, seen: frozenset[str] = frozenset()) -> bool:
        return any(outside_exception(b) or (b in classes and b not in seen and is_exception(b, seen | {qualname}))
                   for b in classes[qualname].bases)

    def in_tree(qualname: str, seen: frozenset[str] = frozenset()) -> bool:
        return qualname == "lazyd.errors.LazydError" or any(
            in_tree(b, seen | {qualname}) for b in classes[qualname].bases if b in classes and b not in seen)

    out = []
    for qualname, info in classes.items():
        if not is_exception(qualname):
            continue
        if not qualname.startswith("lazyd.errors.") and not info.name.startswith("_"):
            out.append(f"exception {qualname} is defined outside lazyd.errors")
        if not in_tree(qualname):
            out.append(f"exception {qualname} is not a LazydError")
    return out


# MCP protocol versions are dates; they are written once, with the eras they belong to. Client
# handshakes captured from real clients (client_profiles.py) are data, and keep theirs.
VERSION_LITERAL = re.compile(r"""["']\d{4}-\d{2}-\d{2}["']""")
VERSION_HOMES = frozenset({"lazyd.core.eras.versions", "lazyd.core.sharing.client_profiles"})


def version_literal_violations(modules: Mapping[str, Module]) -> list[str]:
    return [f"{m.name} spells a protocol version" for m in modules.values()
            if m.name not in VERSION_HOMES and VERSION_LITERAL.search(m.source)]


def _folders(modules: Mapping[str, Module]) -> dict[Path, list[Module]]:
    folders: defaultdict[Path, list[Module]] = defaultdict(list)
    for module in modules.values():
        folders[module.path.parent].append(module)
    return folders


def _shown(folder: Path, modules: Mapping[str, Module]) -> str:
    roots = {m.path.parent.parent for name, m in modules.items() if name in PROJECT}
    for root in roots:
        if folder.is_relative_to(root):
            return folder.relative_to(root).as_posix()
    return folder.as_posix()


def folder_violations(modules: Mapping[str, Module]) -> list[str]:
    """Rooms a newcomer can find: no folder of more than MAX_FOLDER_MODULES modules (its
    `__init__.py` not counted), and no more than MAX_PREFIX_FAMILY modules of one folder sharing a
    name prefix (the part before the first `_`): a family like that is a package waiting to be made."""
    out = []
    for folder, members in sorted(_folders(modules).items()):
        stems = sorted(m.path.stem for m in members if not m.is_package)
        if len(stems) > MAX_FOLDER_MODULES:
            out.append(f"{_shown(folder, modules)} holds {len(stems)} modules (at most {MAX_FOLDER_MODULES})")
        families = Counter(stem.split("_")[0] for stem in stems if not stem.startswith("_"))
        for prefix, count in sorted(families.items()):
            if count > MAX_PREFIX_FAMILY:
                names = ", ".join(s for s in stems if s.split("_")[0] == prefix)
                out.append(f"{_shown(folder, modules)}: {names} share the prefix {prefix}")
    return out


MIN_ROOM_WORDS = 6


def package_violations(modules: Mapping[str, Module]) -> list[str]:
    """Every folder of modules is a package whose `__init__.py` docstring says what the room is for
    (a sentence of at least MIN_ROOM_WORDS words), and every package is one the install ships:
    listed in pyproject.toml's [tool.setuptools] packages, which lists nothing else."""
    out = []
    packages = {m.name for m in modules.values() if m.is_package}
    for module in modules.values():
        parts = module.name.split(".")
        for end in range(1, len(parts) if not module.is_package else len(parts)):
            if ".".join(parts[:end]) not in packages:
                out.append(f"{'.'.join(parts[:end])} has no __init__.py")
    for name in sorted(packages):
        doc = modules[name].docstring or ""
        if len(doc.split()) < MIN_ROOM_WORDS:
            out.append(f"{name}'s __init__.py does not say what the room is for")
    top = modules.get("lazyd")
    pyproject = top.path.parent.parent / "pyproject.toml" if top is not None else None
    if pyproject is None or not pyproject.exists():
        return [*out, "no pyproject.toml beside the lazyd package"]
    listed = set(tomllib.loads(pyproject.read_text()).get("tool", {}).get("setuptools", {}).get("packages", []))
    out += [f"package {name} is not in pyproject.toml's packages" for name in sorted(packages - listed)]
    out += [f"pyproject.toml lists {name}, which is no package" for name in sorted(listed - packages)]
    return sorted(set(out))


RULES: dict[str, Callable[[Mapping[str, Module]], list[str]]] = {
    "floors": floor_violations,
    "a pure core": core_purity_violations,
    "dynamic imports": dynamic_import_violations,
    "no friends": friend_violations,
    "cycles": cycle_violations,
    "class chains": chain_violations,
    "module size": size_violations,
    "exceptions": exception_violations,
    "protocol versions": version_literal_violations,
    "folders": folder_violations,
    "packages": package_violations,
}


@pytest.fixture(scope="module")
def tree() -> dict[str, Module]:
    return ac.load(ROOTS)


@pytest.mark.parametrize("rule", RULES)
def test_the_source_keeps_every_rule(tree: dict[str, Module], rule: str) -> None:
    assert sorted(RULES[rule](tree)) == []


def test_the_tree_is_read_whole(tree: dict[str, Module]) -> None:
    # A parser that silently found nothing would make every rule pass.
    assert {"lazyd.protocol.wire", "lazyd.core.relay.core", "lazyd.daemon.main", "lazyd.ctl.main", "lazyd_shim.main"} <= set(tree)
    assert any(i.target == "lazyd_shim.connect" for i in tree["lazyd.ctl.client"].imports)  # importlib, seen
    assert any(i.type_checking for i in tree["lazyd_shim.relay"].imports)
    assert any(u.what == "posixpath.normpath" for u in tree["lazyd.core.sharing.identity"].uses)
    assert "_usage" in tree["lazyd.core.lifecycle.machine"].private_defs
    assert tree["lazyd.errors"].classes and all(c.bases for c in tree["lazyd.errors"].classes)
    assert "builtins.Exception" in {b for c in tree["lazyd.errors"].classes for b in c.bases}


# --- each rule, broken once in a tree of its own ----------------------------------------------------------

ROOM = '"""A room of the scratch tree, for the test to read."""\n'


def write_tree(root: Path, files: Mapping[str, str], bare: str | None = None) -> dict[str, Module]:
    """A small lazyd: `files` (path -> text) plus what every tree has, each package with a docstring
    (but the folder `bare`, left without __init__.py) and pyproject.toml listing the packages
    (unless `files` writes its own)."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in ("lazyd", "lazyd/core", "lazyd/daemon", "lazyd/ctl", "shim"):
        (root / package).mkdir(parents=True, exist_ok=True)
    for folder in [p for p in root.rglob("*") if p.is_dir() and any(p.glob("*.py"))]:
        init = folder / "__init__.py"
        if not init.exists():
            init.write_text(ROOM)
    for package in ("lazyd", "lazyd/core", "lazyd/daemon", "lazyd/ctl", "shim"):
        if not (root / package / "__init__.py").exists():
            (root / package / "__init__.py").write_text(ROOM)
    if bare is not None:
        (root / bare / "__init__.py").unlink()
    modules = ac.load({"lazyd": root / "lazyd", "lazyd_shim": root / "shim"})
    if "pyproject.toml" not in files:
        packages = sorted(m.name for m in modules.values() if m.is_package)
        (root / "pyproject.toml").write_text(f"[tool.setuptools]\npackages = {packages!r}\n".replace("'", '"'))
    return modules


ERRORS = "class LazydError(Exception): pass\n"

# case -> (the rule, the files of the tree, what the rule reports: exactly that, nothing else)
BROKEN: dict[str, tuple[str, dict[str, str], str | tuple[str, ...]]] = {
    # floors
    "a core module that maps memory": (
        "floors", {"lazyd/core/sharing/modes.py": "import mmap\n"}, "lazyd.core.sharing.modes imports mmap"),
    "a core module that imports a standard module the allowlist does not name": (
        "floors", {"lazyd/core/decide.py": "import urllib.request\n"}, "lazyd.core.decide imports urllib.request"),
    "a core module that logs from inside a function": (
        "floors", {"lazyd/core/decide.py": "def f():\n    import logging\n"}, "lazyd.core.decide imports logging"),
    "a core module that imports the shell": (
        "floors", {"lazyd/core/decide.py": "from lazyd.daemon import run\n", "lazyd/daemon/run.py": ""},
        "lazyd.core.decide imports lazyd.daemon.run"),
    "a core module that imports a third party": (
        "floors", {"lazyd/core/decide.py": "import msgpack\n"}, "lazyd.core.decide imports msgpack"),
    "lazyctl importing the daemon": (
        "floors", {"lazyd/ctl/main.py": "from lazyd.daemon.paths import resolve\n", "lazyd/daemon/paths.py": ""},
        "lazyd.ctl.main imports lazyd.daemon.paths"),
    "lazyctl importing the daemon for a type only": (
        "floors", {"lazyd/ctl/main.py": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    import lazyd.daemon.x\n",
                   "lazyd/daemon/x.py": ""}, "lazyd.ctl.main imports lazyd.daemon.x"),
    "lazyctl importing the daemon with a literal importlib name": (
        "floors", {"lazyd/ctl/main.py": "import importlib\nimportlib.import_module('lazyd.daemon.x')\n",
                   "lazyd/daemon/x.py": ""}, "lazyd.ctl.main imports lazyd.daemon.x"),
    "the shim importing the core": (
        "floors", {"shim/options.py": "from lazyd.core.durations import parse\n", "lazyd/core/durations.py": ""},
        "lazyd_shim.options imports lazyd.core.durations"),
    "the shim importing trio": ("floors", {"shim/relay.py": "import trio\n"}, "lazyd_shim.relay imports trio"),
    "the shim importing platformdirs through the floor": (
        "floors", {"shim/connect.py": "from lazyd.host import paths\n", "lazyd/host/paths.py": ""},
        "lazyd_shim.connect imports lazyd.host.paths"),
    "a stdlib floor module importing platformdirs": (
        "floors", {"lazyd/protocol/wire.py": "import platformdirs\n"}, "lazyd.protocol.wire imports platformdirs"),
    "the exception tree importing msgpack": (
        "floors", {"lazyd/errors.py": ERRORS + "import msgpack\n"}, "lazyd.errors imports msgpack"),
    "the exception tree importing another module of its own floor": (
        "floors", {"lazyd/errors.py": "from lazyd.config import durations\n", "lazyd/config/durations.py": ""},
        "lazyd.errors imports lazyd.config.durations"),
    "a stdlib floor module importing one its row does not name": (
        "floors", {"lazyd/protocol/frames.py": "from lazyd.protocol import wire\n", "lazyd/protocol/wire.py": ""}, "lazyd.protocol.frames imports lazyd.protocol.wire"),
    "a module in no floor": ("floors", {"lazyd/extra.py": ""}, "lazyd.extra belongs to no floor"),
    # a pure core
    "a core module that opens a file at import": (
        "a pure core", {"lazyd/core/sharing/modes.py": "MODES = open('/etc/modes').read()\n"},
        "lazyd.core.sharing.modes:1 uses the builtin open"),
    "a core function that calls the builtin open": (
        "a pure core", {"lazyd/core/decide.py": "def load(path):\n    with open(path) as f:\n        return f.read()\n"},
        "lazyd.core.decide:2 uses the builtin open"),
    "a core function that evaluates text": (
        "a pure core", {"lazyd/core/decide.py": "class C:\n    def f(self, x):\n        return [eval(y) for y in x]\n"},
        "lazyd.core.decide:3 uses the builtin eval"),
    "a core module that keeps the builtin open to call later": (
        "a pure core", {"lazyd/core/decide.py": "READ = open\n"}, "lazyd.core.decide:1 uses the builtin open"),
    "a core module that asks the file system through posixpath": (
        "a pure core", {"lazyd/core/decide.py": "import posixpath\ndef f(p):\n    return posixpath.exists(p)\n"},
        "lazyd.core.decide:3 uses posixpath.exists"),
    "a core module that imports an impure name of posixpath": (
        "a pure core", {"lazyd/core/decide.py": "from posixpath import expanduser\n"},
        "lazyd.core.decide:1 uses posixpath.expanduser"),
    # dynamic imports
    "lazyctl importing a computed module name": (
        "dynamic imports", {"lazyd/ctl/main.py": "import importlib\ndef load(name):\n"
                                                 "    return importlib.import_module(name)\n"},
        "lazyd.ctl.main:3 calls importlib.import_module with a computed name"),
    "the shim importing a computed name with __import__": (
        "dynamic imports", {"shim/relay.py": "def load(where):\n    return __import__('lazyd.' + where)\n"},
        "lazyd_shim.relay:2 calls builtins.__import__ with a computed name"),
    "the daemon importing through an alias of import_module": (
        "dynamic imports", {"lazyd/daemon/x.py": "from importlib import import_module as load\nNAME = 'os'\nload(NAME)\n"},
        "lazyd.daemon.x:3 calls importlib.import_module with a computed name"),
    "the daemon keeping import_module to call later": (
        "dynamic imports", {"lazyd/daemon/x.py": "import importlib\nLOAD = importlib.import_module\n"},
        "lazyd.daemon.x:2 takes importlib.import_module without calling it"),
    "lazyctl loading code from a path": (
        "dynamic imports", {"lazyd/ctl/main.py": "import runpy\nrunpy.run_path('/tmp/x.py')\n"},
        "lazyd.ctl.main:2 loads code from a path with runpy.run_path"),
    # no friends
    "a module that reads another's private attribute": (
        "no friends", {"lazyd/core/a.py": "class A:\n    def __init__(self):\n        self._count = 0\n",
                       "lazyd/core/b.py": "def peek(a):\n    return a._count\n"},
        "lazyd.core.b:2 touches a._count, private to lazyd.core.a"),
    "a module that writes another's private attribute": (
        "no friends", {"lazyd/core/a.py": "class A:\n    _limit: int = 3\n",
                       "lazyd/core/b.py": "def bump(a):\n    a._limit = 4\n"},
        "lazyd.core.b:2 touches a._limit, private to lazyd.core.a"),
    "a module that imports another's private name": (
        "no friends", {"lazyd/core/a.py": "def _helper():\n    pass\n",
                       "lazyd/core/b.py": "from lazyd.core.a import _helper\n"},
        "lazyd.core.b:1 reaches from lazyd.core.a import _helper, private to lazyd.core.a"),
    "a module that calls another module's private function": (
        "no friends", {"lazyd/core/a.py": "def _helper():\n    pass\n",
                       "lazyd/core/b.py": "from lazyd.core import a\n_helper = None\ndef f():\n    a._helper()\n"},
        "lazyd.core.b:4 reaches a._helper, private to lazyd.core.a"),
    "a module that reaches a private name through getattr": (
        "no friends", {"lazyd/daemon/a.py": "class A:\n    __slots__ = ('_lines',)\n",
                       "shim/b.py": "def peek(a):\n    return getattr(a, '_lines')\n"},
        "lazyd_shim.b:2 touches getattr(a, '_lines'), private to lazyd.daemon.a"),
    # the rest
    "a cycle behind TYPE_CHECKING": (
        "cycles", {"lazyd/core/a.py": "from lazyd.core import b\n",
                   "lazyd/core/b.py": "from typing import TYPE_CHECKING\n"
                                      "if TYPE_CHECKING:\n    from lazyd.core.a import A\n"},
        "import cycle: lazyd.core.a, lazyd.core.b"),
    "a chain of four classes": (
        "class chains", {"lazyd/core/a.py": "class A: pass\nclass B(A): pass\n",
                         "lazyd/core/c.py": "from lazyd.core.a import B\nclass C(B): pass\n",
                         "lazyd/core/d.py": "from lazyd.core import c\nclass D(c.C): pass\n"},
        "class lazyd.core.d.D is 4 project classes deep"),
    "a module of 601 lines": (
        "module size", {"lazyd/core/long.py": "x = 1\n" * 601}, "lazyd.core.long is over 600 lines"),
    "an exception outside the tree": (
        "exceptions", {"lazyd/errors.py": ERRORS,
                       "lazyd/daemon/x.py": "from lazyd.errors import LazydError\nclass Broken(LazydError, ValueError): pass\n"},
        "exception lazyd.daemon.x.Broken is defined outside lazyd.errors"),
    "a builtin exception kind the old list did not name, in the daemon": (
        "exceptions", {"lazyd/errors.py": ERRORS, "lazyd/daemon/x.py": "class StrayError(ConnectionError): pass\n"},
        ("exception lazyd.daemon.x.StrayError is defined outside lazyd.errors",
         "exception lazyd.daemon.x.StrayError is not a LazydError")),
    "a standard library exception imported by name": (
        "exceptions", {"lazyd/errors.py": ERRORS,
                       "lazyd/daemon/x.py": "from http.client import HTTPException as Bad\nclass _Stray(Bad): pass\n"},
        "exception lazyd.daemon.x._Stray is not a LazydError"),
    "an exception that derives through a project class in another module": (
        "exceptions", {"lazyd/errors.py": ERRORS, "lazyd/core/a.py": "import socket\nclass _Base(socket.timeout): pass\n",
                       "lazyd/core/b.py": "from lazyd.core.a import _Base\nclass _Late(_Base): pass\n"},
        ("exception lazyd.core.a._Base is not a LazydError", "exception lazyd.core.b._Late is not a LazydError")),
    "a private exception with no common root": (
        "exceptions", {"lazyd/errors.py": ERRORS, "shim/connect.py": "class _NoDaemon(Exception): pass\n"},
        "exception lazyd_shim.connect._NoDaemon is not a LazydError"),
    "a protocol version spelt outside the eras": (
        "protocol versions", {"lazyd/daemon/control/check.py": 'VERSION = "2025-11-25"\n'},
        "lazyd.daemon.control.check spells a protocol version"),
    "a folder of 21 modules": (
        "folders", {f"lazyd/daemon/m{i:02}.py": "" for i in range(21)}, "lazyd/daemon holds 21 modules (at most 20)"),
    "three modules of a folder sharing a prefix": (
        "folders", {"lazyd/core/relay.py": "", "lazyd/core/relay_state.py": "", "lazyd/core/relay_ids.py": ""},
        "lazyd/core: relay, relay_ids, relay_state share the prefix relay"),
    "a folder of modules with no __init__.py": (
        # "#bare" names a folder write_tree leaves without __init__.py
        "packages", {"lazyd/core/room/a.py": "", "#bare": "lazyd/core/room"}, "lazyd.core.room has no __init__.py"),
    "a package whose __init__ says nothing": (
        "packages", {"lazyd/core/room/__init__.py": '"""Room."""\n', "lazyd/core/room/a.py": ""},
        "lazyd.core.room's __init__.py does not say what the room is for"),
    "a package the install would not ship": (
        "packages", {"lazyd/core/room/a.py": "",
                     "pyproject.toml": '[tool.setuptools]\npackages = ["lazyd", "lazyd.core", "lazyd.daemon", '
                                       '"lazyd.ctl", "lazyd_shim"]\n'},
        "package lazyd.core.room is not in pyproject.toml's packages"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_each_rule_reports_the_one_thing_a_small_tree_breaks(tmp_path: Path, case: str) -> None:
    rule, files, expected = BROKEN[case]
    modules = write_tree(tmp_path, {k: v for k, v in files.items() if k != "#bare"}, files.get("#bare"))
    assert RULES[rule](modules) == ([expected] if isinstance(expected, str) else list(expected))


def test_a_tree_that_keeps_every_rule_reports_nothing(tmp_path: Path) -> None:
    modules = write_tree(tmp_path, {
        "lazyd/errors.py": "class LazydError(Exception): pass\nclass WireError(LazydError): pass\n",
        "lazyd/protocol/wire.py": "import socket\nimport msgpack\nfrom lazyd.errors import WireError\n",
        "lazyd/protocol/frames.py": "from lazyd import errors\n",
        "lazyd/core/decide.py": "import json\nimport posixpath\nfrom lazyd.errors import LazydError\n"
                                "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    import random\n"
                                "def f(open, p):\n    return open(posixpath.basename(p))\n"
                                "def g(data):\n    def print(x):\n        return x\n    return print(data)\n"
                                "class _Own(LazydError):\n    def __init__(self):\n        self._n = 1\n"
                                "    def n(self):\n        return self._n\n",
        "lazyd/core/other.py": "from lazyd.core.decide import f\nimport json as _json\nopen = f\nx = open\n"
                               "def h(obj):\n    return obj._n_\n",
        "lazyd/daemon/main.py": "import os\nimport trio\nfrom lazyd.protocol import wire\nfrom lazyd.core import decide\n"
                                "def bye():\n    os._exit(0)\n",
        "lazyd/ctl/main.py": "import importlib\nimportlib.import_module('lazyd_shim.connect')\n",
        "shim/connect.py": "import socket\nfrom lazyd.protocol import wire\nfrom lazyd.errors import LazydError\n"
                           "class _NoDaemon(LazydError): pass\n",
    })
    assert {name: rule(modules) for name, rule in RULES.items()} == {name: [] for name in RULES}


# --- what is really loaded at run time ----------------------------------------------------------------------

SHIM_FLOOR = frozenset(doc_path_to_name(p) for p, (floor, _) in ROWS.items() if floor == "stdlib floor")


def loaded_modules(code: str) -> set[str]:
    script = f"import sys\n{code}\nprint('\\n'.join(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


def test_the_shim_loads_no_lazyd_module_beyond_the_stdlib_floor_and_no_trio() -> None:
    loaded = loaded_modules("import lazyd_shim.main, lazyd_shim.connect, lazyd_shim.relay, lazyd_shim.fallback")
    project = {m for m in loaded if m.split(".")[0] == "lazyd"}
    assert project and project <= SHIM_FLOOR, sorted(project - SHIM_FLOOR)
    assert not {m for m in loaded if m.split(".")[0] in ("trio", "platformdirs", "tomlkit")}


def test_a_shim_start_up_to_its_hello_loads_no_regular_expressions_enums_or_durations(tmp_path: Path) -> None:
    """A warm session start is one interpreter start plus what the shim imports before its hello:
    `socket` (which builds enums of every constant of `_socket`), `re` (with its pattern
    compiles), `signal` and `lazyd.config.durations` were most of the shim's ~9 ms of imports, none of
    them needed: the C modules do, and options are parsed only when set. Run without site (`-S`), as a
    non-editable install has no finder that loads `re` first, so that what the shim adds shows."""
    (tmp_path / "lazyd_shim").symlink_to(REPO / "shim")
    (tmp_path / "lazyd").symlink_to(REPO / "lazyd")
    import msgpack

    site = str(Path(msgpack.__file__).resolve().parents[1])
    code = (f"import sys; sys.path[:0] = [{str(tmp_path)!r}, {site!r}]\n"
            "from lazyd_shim import main, connect, handoff, options\n"
            "opts = options.parse(['--', 'server'], {})\n"
            "connect.build_hello(opts, [])\n"
            "print('\\n'.join(sorted(sys.modules)))")
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    assert "lazyd_shim.handoff" in loaded
    costly = {"socket", "enum", "selectors", "re", "signal", "functools", "lazyd.config.durations", "lazyd.config.envnames", "typing"}
    assert not loaded & costly, sorted(loaded & costly)


def test_lazyctl_loads_nothing_of_the_daemon_and_no_trio() -> None:
    loaded = loaded_modules("import lazyd.ctl.main")
    assert "lazyd.ctl.main" in loaded
    assert not {m for m in loaded if m.startswith("lazyd.daemon") or m.split(".")[0] == "trio"}


def test_a_daemon_reading_a_valid_config_keeps_no_tomlkit_difflib_logging_handlers_zipfile_or_hub() -> None:
    """Modules stay resident for the daemon's life: tomlkit (~1 MiB) and difflib are loaded only
    for a text the standard library's TOML parser refuses and for a misspelled name, the hub's
    modules by the first hub session, the daemon's log rotates without logging.handlers (which
    brings pickle and handlers it never uses), and the packaged known-servers table is read
    without importlib.resources' readers (which bring zipfile, 0.36 MiB)."""
    loaded = loaded_modules(
        "import lazyd.daemon.main\n"
        "from lazyd.config.load import parse_config_text\n"
        "config = parse_config_text('[defaults]\\nlinger = \"5m\"\\n[servers.a]\\ncommand = \"x\"\\n', {}, None)\n"
        "assert config.servers['a'].command == 'x' and config.known_servers.entries, config")
    assert "lazyd.config.known" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("tomlkit", "difflib", "zipfile") or m == "logging.handlers"
                or m.startswith("lazyd.daemon.hub")}


# --- the documentation says the same ------------------------------------------------------------------------

FLOOR_ROW = re.compile(r"^\| `([^`]+)`[^|]*\| ([a-z ]+?) \| (.*) \|$", re.MULTILINE)


def docs_floor_table() -> dict[str, tuple[str, frozenset[str]]]:
    """docs/architecture.md's floor table: module -> (floor, what it may import). The "may import"
    cell is read up to its first ':' or ';' (what follows explains), parentheses dropped: a list of
    `code` entries and "the stdlib floor", or "nothing"."""
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text.split("## The floors", 1)[1].split("\n## ", 1)[0]
    table = {}
    for path, floor, cell in FLOOR_ROW.findall(section):
        may = re.sub(r"\([^)]*\)", "", re.split(r"[:;]", cell, maxsplit=1)[0]).strip()
        entries = set()
        for item in [] if may == "nothing" else [i.strip() for i in may.split(",")]:
            assert item == STDLIB_FLOOR or re.fullmatch(r"`[^`]+`", item), f"{path}: cannot read {item!r}"
            entries.add(item.strip("`"))
        table[path] = (floor, frozenset(entries))
    return table


def test_the_docs_floor_table_states_the_rules_the_test_enforces() -> None:
    assert docs_floor_table() == ROWS

