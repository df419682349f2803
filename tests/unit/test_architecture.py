"""The house rules, read from the source (docs/architecture.md): floors, no cycles, short chains.

Testing policy: every rule is a function from the parsed tree (tests/unit/archcheck.py) to a list
of violations, each one stable line of text. The real tree must have none: there is no allowlist.
Each rule is also run on a small tree written to tmp_path that breaks it once, so a rule that
stopped seeing anything would fail here rather than pass quietly.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from tests.unit import archcheck as ac
from tests.unit.archcheck import STDLIB, Module

REPO = Path(__file__).resolve().parents[2]
ROOTS = {"lazyd": REPO / "lazyd", "lazyd_shim": REPO / "shim"}

# The core decides; it is given the time and the randomness, and does no I/O. A module it imports
# for a type only (under TYPE_CHECKING) gives it no access to the thing, and is not counted here.
FORBIDDEN_IN_CORE = frozenset({
    "trio", "asyncio", "threading", "concurrent", "subprocess", "signal", "os", "pathlib", "shutil", "tempfile",
    "socket", "select", "selectors", "time", "datetime", "random", "secrets", "uuid", "logging", "sys",
    "platformdirs", "sdnotify", "msgpack",
})
MAX_MODULE_LINES = 600
MAX_CLASS_CHAIN = 3

# The floors, bottom up, as docs/architecture.md's table gives them: which lazyd modules belong to
# each, and what each may import besides the standard library (project floors and third parties).
BASE = frozenset({"lazyd", "lazyd.errors", "lazyd.durations", "lazyd.envnames", "lazyd.frames", "lazyd.wire",
                  "lazyd.sockpath", "lazyd.fallbacks", "lazyd.privatefiles", "lazyd.procfs", "lazyd.linepeek",
                  "lazyd.handoff", "lazyd.handoff.region", "lazyd.handoff.snapshot"})
FLOOR_RULES: dict[str, frozenset[str]] = {
    "base": frozenset({"base", "msgpack"}),
    "paths": frozenset({"base", "platformdirs"}),
    "core": frozenset({"core", "lazyd.errors", "lazyd.durations", "lazyd.envnames"}),
    "config": frozenset({"base", "core", "config", "tomlkit"}),
    "daemon": frozenset({"base", "paths", "core", "config", "daemon", "trio", "sdnotify"}),
    "ctl": frozenset({"base", "paths", "core", "config", "ctl", "shim", "tomlkit"}),
    "shim": frozenset({"base", "shim", "msgpack"}),
}


def floor_of(name: str) -> str | None:
    """The floor of a project module, None for anything outside the project."""
    if name in BASE:
        return "base"
    if name == "lazyd.paths":
        return "paths"
    for prefix, floor in (("lazyd.config", "config"), ("lazyd.core", "core"), ("lazyd.daemon", "daemon"), ("lazyd.ctl", "ctl"),
                          ("lazyd_shim", "shim")):
        if name == prefix or name.startswith(prefix + "."):
            return floor
    return "unplaced" if name.split(".")[0] in ROOTS else None


# --- the rules -----------------------------------------------------------------------------------------


def floor_violations(modules: Mapping[str, Module]) -> list[str]:
    """Each import that leaves its module's floor: a project module of a floor it may not use, a
    third-party package it may not use, a forbidden standard module in the core, or a module that
    belongs to no floor at all."""
    out = []
    for module in modules.values():
        floor = floor_of(module.name)
        if floor == "unplaced":
            out.append(f"{module.name} belongs to no floor")
            continue
        assert floor is not None
        allowed = FLOOR_RULES[floor]
        for imp in module.imports:
            target_floor = floor_of(imp.target)
            if target_floor is not None:
                if target_floor in allowed or imp.target in allowed:
                    continue
                out.append(f"{module.name} imports {imp.target}")
            elif imp.top in STDLIB:
                if floor == "core" and imp.top in FORBIDDEN_IN_CORE and not imp.type_checking:
                    out.append(f"{module.name} imports {imp.top}")
            elif imp.top not in allowed:
                out.append(f"{module.name} imports {imp.top}")
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


_EXCEPTION_BASES = frozenset({"Exception", "ValueError", "RuntimeError", "OSError", "LookupError", "KeyError",
                              "TypeError", "BaseException"})


def exception_violations(modules: Mapping[str, Module]) -> list[str]:
    """Exception classes outside the one tree: a public one defined anywhere but lazyd.errors, or
    any that does not descend from lazyd.errors.LazydError."""
    classes = ac.all_classes(modules.values())

    def is_exception(qualname: str, seen: frozenset[str] = frozenset()) -> bool:
        info = classes[qualname]
        return any(b in _EXCEPTION_BASES or (b in classes and b not in seen and is_exception(b, seen | {qualname}))
                   for b in info.bases)

    def in_tree(qualname: str) -> bool:
        return qualname == "lazyd.errors.LazydError" or any(in_tree(b) for b in classes[qualname].bases if b in classes)

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
            if m.name not in VERSION_HOMES and VERSION_LITERAL.search(m.path.read_text())]


RULES: dict[str, Callable[[Mapping[str, Module]], list[str]]] = {
    "floors": floor_violations,
    "cycles": cycle_violations,
    "class chains": chain_violations,
    "module size": size_violations,
    "exceptions": exception_violations,
    "protocol versions": version_literal_violations,
}


@pytest.fixture(scope="module")
def tree() -> dict[str, Module]:
    return ac.load(ROOTS)


@pytest.mark.parametrize("rule", RULES)
def test_the_source_keeps_every_rule(tree: dict[str, Module], rule: str) -> None:
    assert sorted(RULES[rule](tree)) == []


def test_the_tree_is_read_whole(tree: dict[str, Module]) -> None:
    # A parser that silently found nothing would make every rule pass.
    assert {"lazyd.wire", "lazyd.core.relay.core", "lazyd.daemon.main", "lazyd.ctl.main", "lazyd_shim.main"} <= set(tree)
    assert any(i.target == "lazyd_shim.connect" for i in tree["lazyd.ctl.client"].imports)  # importlib, seen
    assert any(i.type_checking for i in tree["lazyd_shim.relay"].imports)


# --- each rule, broken once in a tree of its own ----------------------------------------------------------


def write_tree(root: Path, files: Mapping[str, str]) -> dict[str, Module]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in ("lazyd", "lazyd/core", "lazyd/daemon", "lazyd/ctl", "shim"):
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").touch()
    return ac.load({"lazyd": root / "lazyd", "lazyd_shim": root / "shim"})


BROKEN: dict[str, tuple[str, dict[str, str], str]] = {
    "a core module that reads the clock": (
        "floors", {"lazyd/core/decide.py": "import time\n"}, "lazyd.core.decide imports time"),
    "a core module that logs from inside a function": (
        "floors", {"lazyd/core/decide.py": "def f():\n    import logging\n"}, "lazyd.core.decide imports logging"),
    "a core module that imports the shell": (
        "floors", {"lazyd/core/decide.py": "from lazyd.daemon import run\n", "lazyd/daemon/run.py": ""},
        "lazyd.core.decide imports lazyd.daemon.run"),
    "lazyctl importing the daemon": (
        "floors", {"lazyd/ctl/main.py": "from lazyd.daemon.paths import resolve\n", "lazyd/daemon/paths.py": ""},
        "lazyd.ctl.main imports lazyd.daemon.paths"),
    "lazyctl importing the daemon for a type only": (
        "floors", {"lazyd/ctl/main.py": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    import lazyd.daemon.x\n",
                   "lazyd/daemon/x.py": ""}, "lazyd.ctl.main imports lazyd.daemon.x"),
    "the shim importing the core": (
        "floors", {"shim/options.py": "from lazyd.core.durations import parse\n", "lazyd/core/durations.py": ""},
        "lazyd_shim.options imports lazyd.core.durations"),
    "the shim importing trio": ("floors", {"shim/relay.py": "import trio\n"}, "lazyd_shim.relay imports trio"),
    "the shim importing platformdirs through the floor": (
        "floors", {"shim/connect.py": "from lazyd import paths\n", "lazyd/paths.py": ""},
        "lazyd_shim.connect imports lazyd.paths"),
    "a base floor module importing platformdirs": (
        "floors", {"lazyd/wire.py": "import platformdirs\n"}, "lazyd.wire imports platformdirs"),
    "a module in no floor": ("floors", {"lazyd/extra.py": ""}, "lazyd.extra belongs to no floor"),
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
    "a module of 401 lines": (
        "module size", {"lazyd/core/long.py": "x = 1\n" * 601}, "lazyd.core.long is over 600 lines"),
    "an exception outside the tree": (
        "exceptions", {"lazyd/errors.py": "class LazydError(Exception): pass\n",
                       "lazyd/daemon/x.py": "class Broken(ValueError): pass\n"},
        "exception lazyd.daemon.x.Broken is defined outside lazyd.errors"),
    "a protocol version spelt outside the eras": (
        "protocol versions", {"lazyd/daemon/control/check.py": 'VERSION = "2025-11-25"\n'},
        "lazyd.daemon.control.check spells a protocol version"),
    "a private exception with no common root": (
        "exceptions", {"lazyd/errors.py": "class LazydError(Exception): pass\n",
                       "shim/connect.py": "class _NoDaemon(Exception): pass\n"},
        "exception lazyd_shim.connect._NoDaemon is not a LazydError"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_each_rule_reports_the_one_thing_a_small_tree_breaks(tmp_path: Path, case: str) -> None:
    rule, files, expected = BROKEN[case]
    assert expected in RULES[rule](write_tree(tmp_path, files))


def test_a_tree_that_keeps_every_rule_reports_nothing(tmp_path: Path) -> None:
    modules = write_tree(tmp_path, {
        "lazyd/errors.py": "class LazydError(Exception): pass\nclass WireError(LazydError): pass\n",
        "lazyd/wire.py": "import socket\nimport msgpack\nfrom lazyd.errors import WireError\n",
        "lazyd/core/decide.py": "import json\nfrom lazyd.errors import LazydError\nTYPE_CHECKING = False\n"
                                "if TYPE_CHECKING:\n    import random\n",
        "lazyd/daemon/main.py": "import trio\nfrom lazyd import wire\nfrom lazyd.core import decide\n",
        "lazyd/ctl/main.py": "import importlib\nimportlib.import_module('lazyd_shim.connect')\n",
        "shim/connect.py": "import socket\nfrom lazyd import wire\nfrom lazyd.errors import LazydError\n"
                           "class _NoDaemon(LazydError): pass\n",
    })
    assert {name: rule(modules) for name, rule in RULES.items()} == {name: [] for name in RULES}


# --- what is really loaded at run time ----------------------------------------------------------------------


def loaded_modules(code: str) -> set[str]:
    script = f"import sys\n{code}\nprint('\\n'.join(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


def test_the_shim_loads_no_lazyd_module_beyond_the_stdlib_floor_and_no_trio() -> None:
    loaded = loaded_modules("import lazyd_shim.main, lazyd_shim.connect, lazyd_shim.relay, lazyd_shim.fallback")
    project = {m for m in loaded if m.split(".")[0] == "lazyd"}
    assert project and project <= BASE, sorted(project - BASE)
    assert not {m for m in loaded if m.split(".")[0] in ("trio", "platformdirs", "tomlkit")}


def test_a_shim_start_up_to_its_hello_loads_no_regular_expressions_enums_or_durations(tmp_path: Path) -> None:
    """A warm session start is one interpreter start plus what the shim imports before its hello:
    `socket` (which builds enums of every constant of `_socket`), `re` (with its pattern
    compiles), `signal` and `lazyd.durations` were most of the shim's ~9 ms of imports, none of
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
    costly = {"socket", "enum", "selectors", "re", "signal", "functools", "lazyd.durations", "lazyd.envnames", "typing"}
    assert not loaded & costly, sorted(loaded & costly)


def test_lazyctl_loads_nothing_of_the_daemon_and_no_trio() -> None:
    loaded = loaded_modules("import lazyd.ctl.main")
    assert "lazyd.ctl.main" in loaded
    assert not {m for m in loaded if m.startswith("lazyd.daemon") or m.split(".")[0] == "trio"}


# --- the documentation says the same ------------------------------------------------------------------------


def test_the_floors_table_in_the_docs_lists_every_top_floor_module_with_its_floor() -> None:
    text = (REPO / "docs" / "architecture.md").read_text()
    rows = dict(re.findall(r"^\| `(lazyd/[a-z_]+\.py)` \| ([a-z ]+?) \|", text, re.MULTILINE))
    top = {f"lazyd/{p.name}" for p in (REPO / "lazyd").glob("*.py") if p.name != "__init__.py"}
    assert set(rows) == top
    for path, floor in rows.items():
        expected = floor_of("lazyd." + Path(path).stem)
        names = {"base": "stdlib floor", "paths": "daemon and lazyctl floor", "config": "config"}
        assert floor == names[expected or ""], path
