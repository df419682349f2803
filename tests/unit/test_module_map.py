"""docs/architecture.md's map of the modules is the tree's: every package and module, once, by room.

The map is written from the docstrings by tests/unit/modulemap.py; the committed one must be what
it writes today. Independently of the writer, the committed map is read back as rows and checked
against the files, so a writer that skipped a module would fail here too.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from tests.unit import modulemap
from tests.unit.modulemap import REPO, MapError

ROW = re.compile(r"^\| `([^`]+)` \|", re.MULTILINE)


def committed_rows() -> list[str]:
    return ROW.findall(modulemap.committed((REPO / modulemap.DOC).read_text()))


def tree() -> set[str]:
    modules = {p.relative_to(REPO).as_posix() for root in modulemap.SOURCES for p in (REPO / root).rglob("*.py")
               if p.name != "__init__.py" and "__pycache__" not in p.parts}
    return modules | {f"{package}/" for package in modulemap.packages(REPO)}


def test_the_committed_module_map_is_the_one_the_tree_writes() -> None:
    text = (REPO / modulemap.DOC).read_text()
    assert modulemap.committed(text), f"{modulemap.DOC} has lost its module map markers"
    assert modulemap.committed(text) == modulemap.render(modulemap.rooms()), (
        "docs/architecture.md's module map is out of date: run `python3 -m tests.unit.modulemap --write`"
    )


def test_every_module_and_package_is_a_row_of_the_map_exactly_once_and_every_row_is_in_the_tree() -> None:
    rows = Counter(committed_rows())
    assert sorted(tree() - set(rows)) == [], "missing from the module map"
    assert sorted(set(rows) - tree()) == [], "in the module map but not in the tree"
    assert [row for row, count in rows.items() if count > 1] == [], "listed more than once"


# --- the writer, on a scratch tree -------------------------------------------------------------

def scratch(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


TREE = {
    "lazyd/__init__.py": '"""The base."""\n',
    "lazyd/errors.py": '"""Every error. More words.\n\nA second paragraph."""\n',
    "lazyd/core/__init__.py": '"""The core.\n\nRooms: relay/, eras/.\n"""\n',
    "lazyd/core/eras/__init__.py": '"""The eras."""\n',
    "lazyd/core/eras/choice.py": '"""Which era (pure). Not this."""\n',
    "lazyd/core/relay/__init__.py": '"""The relay."""\n',
    "lazyd/core/relay/core.py": '"""``RelayCore`` | one line."""\n',
    "lazyd/daemon/__init__.py": '"""The shell."""\n',
    "shim/__init__.py": '"""The shim."""\n',
    "shim/main.py": '"""The entry point."""\n',
}


def test_the_writer_lists_every_room_in_floor_order_with_first_sentences(tmp_path: Path) -> None:
    repo = scratch(tmp_path, TREE)
    found = modulemap.rooms(repo)
    assert [room.package for room in found] == [
        "lazyd", "lazyd/core", "lazyd/core/relay", "lazyd/core/eras", "lazyd/daemon", "shim"]
    assert found[0].modules == (("lazyd/errors.py", "Every error."),)
    assert found[3].modules == (("lazyd/core/eras/choice.py", "Which era (pure)."),)
    text = modulemap.render(found)
    assert "| `lazyd/core/relay/core.py` | `RelayCore` \\| one line. |" in text  # a table cell stays one cell
    assert "| `lazyd/core/` | The core. |" in text


def test_a_module_without_a_docstring_stops_the_writer_with_its_name(tmp_path: Path) -> None:
    repo = scratch(tmp_path, {**TREE, "lazyd/core/eras/state.py": "X = 1\n"})
    with pytest.raises(MapError, match="state.py: no docstring"):
        modulemap.rooms(repo)


def test_a_module_added_to_the_tree_makes_the_committed_map_stale(tmp_path: Path) -> None:
    repo = scratch(tmp_path, {**TREE, "docs/architecture.md": f"# A\n\n{modulemap.BEGIN}\n{modulemap.END}\n"})
    assert modulemap.write(repo)
    before = (repo / "docs/architecture.md").read_text()
    assert modulemap.committed(before) == modulemap.render(modulemap.rooms(repo))
    scratch(repo, {"lazyd/core/eras/state.py": '"""The live era."""\n'})
    assert modulemap.committed(before) != modulemap.render(modulemap.rooms(repo))
    assert modulemap.write(repo) and "| `lazyd/core/eras/state.py` | The live era. |" in (
        repo / "docs/architecture.md").read_text()
