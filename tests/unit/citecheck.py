"""Reading what the docs and the source cite, and checking that each citation names something real.

A citation is anything a reader would follow: a project path (`lazyd/daemon/runtime/supervisor.py`,
`tests/unit/test_relay_*.py`, `lazyd/core/{relay,eras}/`), a test by name (a test file, `::`, the
function), a module by its bare file name, a doc and one of its sections (`docs/protocol.md,
"Frames"`, `relay.md#sharing-one-process`, a Markdown link), a member of one of lazyd's classes
(`RelayCore.from_state`), a module by its dotted name (`lazyd.core.relay.upstream.forward`), a module's numbered rule ("rule 9 of" a module), and numbered sections
or cases (a section sign or the word "case" before a number).
The team's shared documents (`PROTOCOL.md`, `HOUSE_STYLE.md`, `RELIABILITY.md`, `DESIGN.md`) are
not part of the product, so the product's docs and docstrings may not cite them at all: what they
say is written in the project's own docs (docs/protocol-eras.md, docs/relay.md, docs/reliability.md).

`check_text` is the whole rule set over one text; `sources` says which texts of the repository are
read (Markdown whole, Python by its comments and docstrings only, config and unit files by their
comments). Everything is read from the files, nothing is imported.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# The team's shared documents: outside the repository, so never cited by the product.
EXTERNAL_DOCS = ("PROTOCOL", "HOUSE_STYLE", "RELIABILITY", "DESIGN")
ROOTS = ("lazyd", "shim", "docs", "tests", "contrib")
# Installed, not written here: a path into it names what npm put there.
NOT_OURS = ("tests/servers/node_modules",)
# Names every package has: "each package's `__init__.py`" names a kind of file, not one file.
GENERIC_NAMES = {"__init__.py", "__main__.py", "conftest.py"}
SKIPPED_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".pytest_cache", ".hypothesis"}


@dataclass(frozen=True)
class Broken:
    source: str  # the citing file, relative to the repository
    line: int
    kind: str  # path, test, bare-name, doc, section, anchor, numbered, external
    cited: str
    why: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.kind}: {self.cited!r}: {self.why}"


@dataclass(frozen=True)
class Text:
    """One stretch of prose: a whole Markdown file, a docstring, or a run of comment lines."""

    source: Path  # the citing file (absolute)
    line: int  # the line the text starts on
    body: str
    product: bool  # the product's docs and source (not the tests): held to the no-outside-docs rule
    markdown: bool


# --- the patterns ----------------------------------------------------------------------------------

PATH = re.compile(
    r"(?<![\w./~$@-])((?:%s)/[\w.*{},/-]*)(::[\w\[\]-]+(?:::[\w\[\]-]+)?)?" % "|".join(ROOTS)
)
BARE_PY = re.compile(r"(?<![\w./{,*-])([A-Za-z_]\w*\.py)(::[\w\[\]-]+(?:::[\w\[\]-]+)?)?(?![\w/])")
CONTINUED_TEST = re.compile(r"`::(\w+)")  # `::test_b` after a test file's `::test_a`: the same file
QUOTE = r"[\"“]([^\"”\n]+)[\"”]"
MD = r"((?:[\w.-]+/)*[\w.-]+\.md)"
SECTION = re.compile(MD + r"(?:'s)?,?\s+" + QUOTE)
ANCHOR = re.compile(r"(?<!\]\()" + MD + r"#([\w-]+)")  # a link's own target is the link rule's
LINK = re.compile(r"\]\(([^)\s]+)\)")
DOC_NAME = re.compile(r"(?<![\w/.-])(?<!\]\()" + MD + r"(?![\w/])")
EXTERNAL = re.compile(r"\b(%s)(\.md)?\b" % "|".join(EXTERNAL_DOCS))
NUMBERED = re.compile(r"(?:(" + MD[1:-1] + r")\s+)?(§\s?\d+(?:\s?-\s?§?\d+)?)")
CASE = re.compile(r"\b(cases?\s+\d+(?:\s?[-–,]\s?\d+)*)\b", re.IGNORECASE)
MEMBER = re.compile(r"`([A-Z]\w+)\.(\w+)")  # `RelayCore.from_state`: a class of lazyd's and one of its members
# `lazyd.core.relay.upstream.forward`: a module by its dotted name, and maybe one name it defines
DOTTED = re.compile(r"(?<![\w.])((?:lazyd|lazyd_shim)(?:\.\w+){2,})")
# `rule 9 of lazyd/core/lifecycle/machine.py`, `rules 1 and 8 of the lifecycle (its module)`
RULE = re.compile(r"\brules?\s+(\d+(?:\s*(?:,|and|-)\s*\d+)*)\s+of\s+(?:[\w ]+\(\s*)?((?:lazyd|shim)/[\w/]+\.py)")
ISSUE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
E2E_OR_UNIT = re.compile(r"\b(e2e|unit)\b")


def expand_braces(path: str) -> list[str]:
    """`lazyd/{config,handoff}/` -> both paths (one level of braces, as the docs write them)."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    return [out for choice in match.group(1).split(",")
            for out in expand_braces(path[: match.start()] + choice + path[match.end():])]


def strip_punctuation(path: str) -> str:
    return path.rstrip(".,;:)")


# --- the repository as the checks see it -----------------------------------------------------------

@cache
def basenames(repo: Path = REPO) -> dict[str, tuple[str, ...]]:
    """Every file name in the repository (outside .git, the venv and node_modules) -> its paths."""
    found: dict[str, list[str]] = {}
    for top, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
        for name in files:
            found.setdefault(name, []).append((Path(top) / name).relative_to(repo).as_posix())
    return {name: tuple(sorted(paths)) for name, paths in found.items()}


def exists(rel: str, repo: Path) -> bool:
    if any(rel == root or rel.startswith(root + "/") for root in NOT_OURS):
        return True
    if "*" in rel:
        return any(repo.glob(rel.rstrip("/")))
    return (repo / rel).exists()


@cache
def headings(doc: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A doc's headings (their text, backticks removed) and their anchors as GitHub makes them."""
    titles: list[str] = []
    anchors: list[str] = []
    seen: dict[str, int] = {}
    fenced = False
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not match:
            continue
        title = match.group(1)
        titles.append(title.replace("`", ""))
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.append(slug if count == 0 else f"{slug}-{count}")
    return tuple(titles), tuple(anchors)


def section_matches(cited: str, title: str) -> bool:
    """`"Hand-off"` names `### Hand-off (the default; ...)`; `"Sharing"` names `### Sharing: ...`."""
    cited, title = cited.casefold().strip(), title.casefold().strip()
    return title == cited or any(title.startswith(cited + tail) for tail in (":", " (", " —", " -", ","))


@cache
def defined_tests(path: Path) -> frozenset[str]:
    """`name` and `Class::method` for every function and class a test module defines."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names.update(f"{node.name}::{item.name}" for item in node.body
                         if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return frozenset(names)


# --- the checks ------------------------------------------------------------------------------------

def resolve_doc(name: str, text: Text, repo: Path) -> Path | None:
    """A cited doc: from the repository root, beside the citing file, or in docs/ (`relay.md`)."""
    for base in (repo, text.source.parent, repo / "docs"):
        candidate = (base / name).resolve()
        if candidate.is_file() and candidate.is_relative_to(repo):
            return candidate
    return None


@cache
def top_level_names(module: Path) -> frozenset[str]:
    """What a module defines or imports at its top level."""
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return frozenset(names)


def dotted_module(name: str, repo: Path) -> str | None:
    """Why `lazyd.daemon.runtime.supervisor.ServerRuntime` names nothing, or None when it resolves.

    A name whose second part is no module or package of lazyd (`lazyd.log.1`, a file) is no module
    path, and is not judged."""
    parts = name.split(".")
    parts[0] = "shim" if parts[0] == "lazyd_shim" else parts[0]

    def module(k: int) -> Path | None:
        base = repo.joinpath(*parts[:k])
        found = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        return found if found.is_file() else None

    if module(2) is None:
        return None
    k = max(k for k in range(2, len(parts) + 1) if module(k) is not None)
    rest = parts[k:]
    if not rest:
        return None
    found = module(k)
    assert found is not None
    if rest[0] not in top_level_names(found):
        return f"{found.relative_to(repo)} defines no {rest[0]}"
    if len(rest) == 2 and rest[1] in classes(repo).get(rest[0], ()):
        return None  # a class and one of its members
    return f"{found.relative_to(repo)}: no {'.'.join(rest)}" if len(rest) > 1 else None


@cache
def classes(repo: Path = REPO) -> dict[str, frozenset[str]]:
    """Every class lazyd and the shim define -> the names it defines (methods, attributes, `self.x`).

    Two classes of one name pool their members: a citation names the class, not its module.
    """
    found: dict[str, set[str]] = {}
    for path in [*repo.glob("lazyd/**/*.py"), *repo.glob("shim/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            members = found.setdefault(node.name, set())
            for item in ast.walk(node):
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and item is not node:
                    members.add(item.name)
                elif isinstance(item, ast.Name) and isinstance(item.ctx, ast.Store):
                    members.add(item.id)
                elif (isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store)
                      and isinstance(item.value, ast.Name) and item.value.id in {"self", "cls"}):
                    members.add(item.attr)
    return {name: frozenset(members) for name, members in found.items()}


# --- the rules: each reads one text and reports what it cites that does not exist -----------------

Report = Callable[[int, str, str, str], None]  # (position in the text, kind, what is cited, why)


def check_text(text: Text, repo: Path = REPO) -> list[Broken]:
    out: list[Broken] = []
    source = text.source.relative_to(repo).as_posix() if text.source.is_relative_to(repo) else str(text.source)

    def report(pos: int, kind: str, cited: str, why: str) -> None:
        out.append(Broken(source, text.line + text.body.count("\n", 0, pos), kind, cited, why))

    test_files = paths(text, repo, report) + bare_names(text, repo, report)
    continued_tests(text, repo, report, test_files)
    for rule in (docs_and_sections, links, members, dotted_names, module_rules, numbered, outside):
        rule(text, repo, report)
    return out


def cited_test(pos: int, path: str, name: str, repo: Path, report: Report) -> None:
    name = name.split("[")[0]  # a parametrized case: `test_x[case]`
    if path.endswith(".py") and name not in defined_tests(repo / path):
        report(pos, "test", f"{path}::{name}", f"{path} defines no {name}")


def paths(text: Text, repo: Path, report: Report) -> list[tuple[int, str]]:
    """Project paths (globs and braces expanded), and tests named after one. Returns the test files
    cited, by position, for the `::name` that may follow them."""
    test_files = []
    for match in PATH.finditer(text.body):
        raw = strip_punctuation(match.group(1))
        last = raw.rstrip("/").rsplit("/", 1)[-1]
        if "." not in last and last != last.lower() and not raw.endswith("/"):
            continue  # a key such as `lazyd/sessionId` in `_meta`, not a path
        for path in expand_braces(raw):
            if not exists(path, repo):
                report(match.start(), "path", path, "no such file or directory in the repository")
            elif match.group(2):
                cited_test(match.start(), path, match.group(2)[2:], repo, report)
                test_files.append((match.start(), path))
    return test_files


def bare_names(text: Text, repo: Path, report: Report) -> list[tuple[int, str]]:
    """A file by its name alone. In the docs a module of lazyd or the shim is cited by its full path
    (a bare name stops saying which after a move), and a test file by a name that is unambiguous
    once its line's `e2e` or `unit` is read; in the source, a bare name must still name a file."""
    test_files = []
    body = text.body
    for match in BARE_PY.finditer(body):
        name = match.group(1)
        if name in GENERIC_NAMES:
            continue
        candidates = list(basenames(repo).get(name, ()))
        project = [p for p in candidates if p.startswith(("lazyd/", "shim/"))]
        tests = [p for p in candidates if p.startswith("tests/")]
        if not candidates:
            report(match.start(), "bare-name", name, "no file of that name in the repository")
        elif text.markdown and project and not tests:
            report(match.start(), "bare-name", name, f"write the full path ({', '.join(project)})")
        elif tests:
            qualifier = E2E_OR_UNIT.findall(body[body.rfind("\n", 0, match.start()) + 1: match.start()])
            if qualifier and len(tests) > 1:
                tests = [p for p in tests if p.startswith(f"tests/{qualifier[-1]}/")] or tests
            if len(tests) > 1 and text.markdown:
                report(match.start(), "bare-name", name, f"ambiguous: {', '.join(tests)}; write the full path")
            elif len(tests) == 1:
                if match.group(2):
                    cited_test(match.start(), tests[0], match.group(2)[2:], repo, report)
                test_files.append((match.start(), tests[0]))
    return test_files


def continued_tests(text: Text, repo: Path, report: Report, test_files: list[tuple[int, str]]) -> None:
    """`::test_b` after a test file's `::test_a` on the same line names a test of that file."""
    test_files = sorted(test_files)
    for match in CONTINUED_TEST.finditer(text.body):
        line_start = text.body.rfind("\n", 0, match.start()) + 1
        before = [path for pos, path in test_files if line_start <= pos < match.start()]
        if before:
            cited_test(match.start(), before[-1], match.group(1), repo, report)


def docs_and_sections(text: Text, repo: Path, report: Report) -> None:
    external = {f"{name}.md" for name in EXTERNAL_DOCS}
    for match in DOC_NAME.finditer(text.body):
        name = match.group(1)
        if Path(name).name not in external and resolve_doc(name, text, repo) is None:
            report(match.start(), "doc", name, "no such doc in the repository")
    for match in SECTION.finditer(text.body):
        doc = resolve_doc(match.group(1), text, repo)
        if doc is not None and not any(section_matches(match.group(2), t) for t in headings(doc)[0]):
            report(match.start(), "section", f"{match.group(1)}, \"{match.group(2)}\"",
                   f"{doc.relative_to(repo)} has no such heading")
    for match in ANCHOR.finditer(text.body):
        doc = resolve_doc(match.group(1), text, repo)
        if doc is not None and match.group(2) not in headings(doc)[1]:
            report(match.start(), "anchor", match.group(0), f"{doc.relative_to(repo)} has no heading with that anchor")


def links(text: Text, repo: Path, report: Report) -> None:
    """A Markdown link's target, relative to the doc, and its anchor."""
    if not text.markdown:
        return
    for match in LINK.finditer(text.body):
        target = match.group(1)
        if target.startswith("#"):
            if target[1:] not in headings(text.source)[1]:
                report(match.start(), "anchor", target, "this doc has no heading with that anchor")
            continue
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:: not the repository's
        path, _, anchor = target.partition("#")
        resolved = (text.source.parent / path).resolve()
        if not resolved.exists() or not resolved.is_relative_to(repo):
            report(match.start(), "path", target, "the link's target does not exist in the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in headings(resolved)[1]:
            report(match.start(), "anchor", target, f"{path} has no heading with that anchor")


def members(text: Text, repo: Path, report: Report) -> None:
    """`Class.member` for a class of lazyd's (a class of another library's is not checked)."""
    known = classes(repo)
    for match in MEMBER.finditer(text.body):
        owner, member = match.groups()
        if owner in known and member not in known[owner]:
            report(match.start(), "name", f"{owner}.{member}", f"no class {owner} in lazyd/ or shim/ defines {member}")


def dotted_names(text: Text, repo: Path, report: Report) -> None:
    for match in DOTTED.finditer(text.body):
        why = dotted_module(match.group(1).rstrip("."), repo)
        if why:
            report(match.start(), "name", match.group(1), why)


def module_rules(text: Text, repo: Path, report: Report) -> None:
    """`rule 9 of` a module: its docstring numbers its rules ("9. The wake predicate ...")."""
    for match in RULE.finditer(text.body):
        module = repo / match.group(2)
        rules = (ast.get_docstring(ast.parse(module.read_text())) or "") if module.is_file() else ""
        for number in re.findall(r"\d+", match.group(1)):
            if not re.search(rf"^\s*{number}\.\s", rules, re.MULTILINE):
                report(match.start(), "section", f"rule {number} of {match.group(2)}",
                       "that module's docstring numbers no such rule")


def numbered(text: Text, repo: Path, report: Report) -> None:
    """A numbered section (a section sign, a number) names a doc whose headings are numbered, and no
    project doc's are; nor does one number cases, so the product cites none ("case", a number)."""
    for match in NUMBERED.finditer(text.body):
        if match.group(1) and not text.product and Path(match.group(1)).stem in EXTERNAL_DOCS:
            continue  # the tests may trace the team's shared documents; the product may not
        doc = resolve_doc(match.group(1), text, repo) if match.group(1) else None
        number = re.search(r"\d+", match.group(2))
        assert number is not None
        if doc is None or not any(re.match(rf"{number.group()}[.\s]", t) for t in headings(doc)[0]):
            report(match.start(), "numbered", match.group(0).strip(), "names a numbered section no project doc has")
    if text.product:
        for match in CASE.finditer(text.body):
            report(match.start(), "numbered", match.group(1),
                   "names a numbered case no project doc has (say what is guaranteed, or cite docs/reliability.md)")


def outside(text: Text, repo: Path, report: Report) -> None:
    """The product speaks of itself: no shared team document, no issue."""
    if not text.product:
        return
    for match in ISSUE.finditer(text.body):
        report(match.start(), "external", match.group(0), "the product speaks of itself, not of issues")
    for match in EXTERNAL.finditer(text.body):
        report(match.start(), "external", match.group(0),
               "a shared team document, not part of the product: cite the project doc that says it, or the fact")


# --- the texts of the repository -------------------------------------------------------------------

def markdown_files(repo: Path = REPO) -> list[Path]:
    return sorted([*(repo / "docs").glob("*.md"), repo / "README.md"])


def python_files(repo: Path = REPO) -> list[Path]:
    files = [*repo.glob("lazyd/**/*.py"), *repo.glob("shim/**/*.py"), repo / "shim" / "lazyd-shim",
             *repo.glob("tests/**/*.py")]
    return sorted(p for p in files if "node_modules" not in p.parts)


def hash_comment_files(repo: Path = REPO) -> list[Path]:
    """Files whose `#` comments are prose: the systemd units, the shipped TOML."""
    return sorted([*(p for p in (repo / "contrib").rglob("*") if p.is_file()), *repo.glob("lazyd/**/*.toml")])


def is_product(path: Path, repo: Path = REPO) -> bool:
    return not path.relative_to(repo).as_posix().startswith("tests/")


@cache
def python_texts(path: Path, repo: Path = REPO) -> tuple[Text, ...]:
    """A Python file's docstrings, and its comments in runs of consecutive lines (a citation may wrap)."""
    return tuple(_python_texts(path, repo))


def _python_texts(path: Path, repo: Path) -> Iterator[Text]:
    source = path.read_text()
    product = is_product(path, repo)
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                yield Text(path, first.lineno, first.value.value, product, markdown=False)
    run: list[str] = []
    start = last = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        line = token.start[0]
        if run and line != last + 1:
            yield Text(path, start, "\n".join(run), product, markdown=False)
            run = []
        if not run:
            start = line
        run.append(token.string.lstrip("#").strip())
        last = line
    if run:
        yield Text(path, start, "\n".join(run), product, markdown=False)


def hash_comment_texts(path: Path, repo: Path = REPO) -> Iterator[Text]:
    """The `#` comments of a unit or TOML file, in runs of consecutive lines."""
    run: list[str] = []
    start = 0
    for number, line in enumerate([*path.read_text().splitlines(), ""], start=1):
        if line.lstrip().startswith("#"):
            start = start if run else number
            run.append(line.lstrip().lstrip("#").strip())
        elif run:
            yield Text(path, start, "\n".join(run), is_product(path, repo), markdown=False)
            run = []


def texts(repo: Path = REPO) -> Iterator[Text]:
    for path in markdown_files(repo):
        yield Text(path, 1, path.read_text(), product=True, markdown=True)
    for path in python_files(repo):
        yield from python_texts(path, repo)
    for path in hash_comment_files(repo):
        yield from hash_comment_texts(path, repo)
