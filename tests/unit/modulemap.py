"""docs/architecture.md's map of the modules, written from the tree: one table per room.

A room is a package. Its row is its `__init__` docstring's first paragraph (what the room is for
and what it may touch); each module's row is the first sentence of its own docstring. So the map
changes when the tree does, and the test (test_module_map.py) fails until it is written again:

    python3 -m tests.unit.modulemap --write

The rooms come bottom up, by floor (FLOORS below); rooms within a room in the order the parent's
docstring lists them ("Rooms: relay/, eras/, ..."), then any it does not list, by name.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = Path("docs/architecture.md")
BEGIN = "<!-- module map: written by `python3 -m tests.unit.modulemap --write` from the docstrings; do not edit -->"
END = "<!-- end of the module map -->"
# The top rooms, bottom up: everything imports only rooms before it (and its own).
FLOORS = ("lazyd", "lazyd/handoff", "lazyd/core", "lazyd/config", "lazyd/daemon", "lazyd/ctl", "shim")
SOURCES = ("lazyd", "shim")


class MapError(Exception):
    """A module the map cannot describe (it has no docstring to take the line from)."""


@dataclass(frozen=True)
class Room:
    package: str  # "lazyd/core/relay"
    about: str
    modules: tuple[tuple[str, str], ...]  # (path, first sentence)


def docstring(path: Path) -> str:
    text = ast.get_docstring(ast.parse(path.read_text()))
    if not text or not text.strip():
        raise MapError(f"{path}: no docstring, so the module map has nothing to say of it")
    return text


def first_paragraph(text: str) -> str:
    return " ".join(text.strip().split("\n\n")[0].split())


def first_sentence(text: str) -> str:
    paragraph = first_paragraph(text)
    return re.split(r"(?<=[.)])\s+(?=[A-Z`])", paragraph, maxsplit=1)[0]


def cell(text: str) -> str:
    """Markdown for a table cell: RST's double backticks as single ones, pipes escaped."""
    return text.replace("``", "`").replace("|", "\\|")


def packages(repo: Path) -> list[str]:
    found = [p.parent.relative_to(repo).as_posix() for root in SOURCES for p in (repo / root).rglob("__init__.py")]
    return sorted(p for p in found if "__pycache__" not in p)


def listed_rooms(about: str) -> list[str]:
    """`Rooms: relay/ (...), eras/ (...), lifecycle/.` in a package docstring -> the names, in order."""
    match = re.search(r"Rooms:(.*?)(?:;|\.\s|\.$)", about, re.DOTALL)
    return re.findall(r"(\w+)/", match.group(1)) if match else []


def order(repo: Path, names: list[str]) -> list[str]:
    ordered: list[str] = []

    def visit(package: str) -> None:
        if package not in names or package in ordered:
            return
        ordered.append(package)
        children = [n for n in names if n.rsplit("/", 1)[0] == package and n != package and n not in FLOORS]
        about = docstring(repo / package / "__init__.py")
        listed = [f"{package}/{name}" for name in listed_rooms(about)]
        for child in [c for c in listed if c in children] + sorted(c for c in children if c not in listed):
            visit(child)

    for top in [f for f in FLOORS if f in names] + [n for n in names if n not in FLOORS]:
        visit(top)
    return ordered


def rooms(repo: Path = REPO) -> list[Room]:
    out = []
    for package in order(repo, packages(repo)):
        about = first_paragraph(docstring(repo / package / "__init__.py"))
        modules = tuple(
            (path.relative_to(repo).as_posix(), first_sentence(docstring(path)))
            for path in sorted((repo / package).glob("*.py")) if path.name != "__init__.py"
        )
        out.append(Room(package, about, modules))
    return out


def render(found: list[Room]) -> str:
    lines = [BEGIN, ""]
    for room in found:
        lines += [f"### `{room.package}/`", "", "| module | what it is |", "|---|---|",
                  f"| `{room.package}/` | {cell(room.about)} |"]
        lines += [f"| `{path}` | {cell(line)} |" for path, line in room.modules]
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def committed(text: str) -> str:
    """The map as docs/architecture.md holds it now, markers included ("" when it has none)."""
    start, end = text.find(BEGIN), text.find(END)
    return text[start: end + len(END)] if 0 <= start < end else ""


def write(repo: Path = REPO) -> bool:
    path = repo / DOC
    text = path.read_text()
    old = committed(text)
    if not old:
        raise MapError(f"{DOC} has no module map between its markers to replace")
    new = render(rooms(repo))
    path.write_text(text.replace(old, new))
    return new != old


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        print(render(rooms()))
    else:
        print(f"{DOC}: {'written' if write() else 'already up to date'}")
