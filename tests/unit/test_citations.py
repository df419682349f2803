"""Every file, test and section the docs and the source cite exists; the product cites only itself.

The rules are in tests/unit/citecheck.py. The first tests run them over the repository: the docs
and the README, the comments and docstrings of lazyd/, shim/ and tests/, the comments of contrib/
and the shipped TOML. The rest feed each rule a scratch text that breaks it once (and the same
text mended), so a rule that stopped seeing anything would fail here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit import citecheck
from tests.unit.citecheck import REPO, Broken, Text

DOCS = citecheck.markdown_files()
PYTHON = citecheck.python_files()
COMMENTED = citecheck.hash_comment_files()


def broken_in(texts: list[Text]) -> list[str]:
    return [str(b) for text in texts for b in citecheck.check_text(text)]


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_every_path_test_and_section_a_doc_cites_exists(path: Path) -> None:
    assert broken_in([Text(path, 1, path.read_text(), product=True, markdown=True)]) == []


def test_every_citation_in_the_comments_and_docstrings_of_lazyd_and_the_shim_resolves() -> None:
    texts = [t for p in PYTHON if citecheck.is_product(p) for t in citecheck.python_texts(p)]
    assert broken_in(texts) == []


def test_every_citation_in_the_comments_and_docstrings_of_the_tests_resolves() -> None:
    texts = [t for p in PYTHON if not citecheck.is_product(p) for t in citecheck.python_texts(p)]
    assert broken_in(texts) == []


def test_every_citation_in_the_comments_of_the_units_and_the_shipped_toml_resolves() -> None:
    assert COMMENTED, "no contrib/ or TOML file found"
    assert broken_in([t for p in COMMENTED for t in citecheck.hash_comment_texts(p)]) == []


def test_the_repository_has_citations_of_every_kind_for_the_rules_to_check() -> None:
    # A pattern that stopped matching would pass everything above; count what each one finds.
    body = "\n".join(t.body for t in citecheck.texts())
    found = {name: len(pattern.findall(body)) for name, pattern in [
        ("path", citecheck.PATH), ("bare", citecheck.BARE_PY), ("section", citecheck.SECTION),
        ("anchor", citecheck.ANCHOR), ("link", citecheck.LINK), ("continued test", citecheck.CONTINUED_TEST)]}
    assert found["path"] > 500 and found["bare"] > 200 and found["link"] > 30, found
    assert min(found.values()) >= 5, found


# --- each rule, broken once on a scratch text, against a scratch repository -----------------------

# A repository of a few files, so that these tests say what each rule does whatever the real tree
# is renamed to.
SCRATCH_REPO = {
    "README.md": "# lazyd\n",
    "docs/protocol.md": "# The wire\n\n## Frames\n\n### Hand-off (the default)\n",
    "docs/upgrade.md": "# Upgrades\n\n## How it works\n\n## Crashes\n",
    "docs/relay.md": "# The relay\n\n## Sharing one process\n",
    "docs/configuration.md": "# Config\n\n### Known servers\n",
    "lazyd/__init__.py": '"""The base."""\n',
    "lazyd/host/paths.py": '"""Paths."""\n',
    "lazyd/host/privatefiles.py": '"""Private files."""\n',
    "lazyd/config/known.py": '"""Known servers."""\n',
    "lazyd/core/__init__.py": '"""The core."""\n',
    "lazyd/core/eras/__init__.py": '"""The eras."""\n',
    "lazyd/core/relay/__init__.py": '"""The relay."""\n',
    "lazyd/core/relay/upstream.py": '"""Upstream."""\n\ndef forward() -> None:\n    pass\n',
    "lazyd/core/relay/core.py": ('"""The core."""\n\nclass RelayCore:\n    def __init__(self) -> None:\n'
                                 '        self.routes = 1\n\n    @classmethod\n    def from_state(cls) -> None:\n'
                                 '        pass\n'),
    "lazyd/core/lifecycle/machine.py": '"""The lifecycle.\n\n1. Starts.\n8. Sleep.\n9. Wake predicate.\n"""\n',
    "lazyd/core/lifecycle/predicate.py": '"""When the predicate runs."""\n',
    "lazyd/daemon/__init__.py": '"""The daemon."""\n',
    "lazyd/daemon/runtime/__init__.py": '"""Runtimes."""\n',
    "lazyd/daemon/runtime/supervisor.py": '"""One server."""\n',
    "lazyd/daemon/runtime/outbox.py": '"""The outbox."""\n',
    "lazyd/daemon/sessions/registry.py": '"""The registry."""\n',
    "lazyd/daemon/sessions/sharing_gate.py": '"""The gate."""\n',
    "shim/main.py": '"""The shim."""\n',
    "tests/unit/test_docs.py": "def test_toml_examples_load() -> None:\n    pass\n",
    "tests/unit/test_relay_core.py": "def test_a() -> None:\n    pass\n",
    "tests/unit/test_orphans.py": "def test_b() -> None:\n    pass\n",
    "tests/e2e/test_orphans.py": "def test_c() -> None:\n    pass\n",
    "tests/unit/test_wire.py": "",
}

Kinds = Callable[..., list[str]]


@pytest.fixture(scope="module")
def kinds(tmp_path_factory: pytest.TempPathFactory) -> Kinds:
    """kinds(body, source=...): the kinds of broken citation a text at `source` holds, sorted."""
    repo = tmp_path_factory.mktemp("repo")
    for name, text in SCRATCH_REPO.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)

    def kinds_of(body: str, source: str = "docs/scratch.md") -> list[str]:
        text = Text(repo / source, 1, body, product=not source.startswith("tests/"), markdown=source.endswith(".md"))
        return sorted(b.kind for b in citecheck.check_text(text, repo))

    return kinds_of


def test_a_project_path_that_does_not_exist_is_caught_with_globs_and_braces(kinds: Kinds) -> None:
    assert kinds("`lazyd/core/relay/core.py`, `tests/unit/test_relay_*.py`, `lazyd/core/{relay,eras}/`") == []
    assert kinds("`lazyd/core/relay.py` (the flat tree's name)") == ["path"]
    assert kinds("`tests/unit/test_nothing_*.py`") == ["path"]
    assert kinds("`lazyd/core/{relay,stateless}/`") == ["path"]
    [found] = citecheck.check_text(Text(REPO / "docs/scratch.md", 10, "one line\nthen `shim/nothing.py`.", True, True))
    assert (found.source, found.line, found.cited) == ("docs/scratch.md", 11, "shim/nothing.py")


def test_a_test_cited_by_name_must_be_defined_in_its_file_and_a_continuation_names_the_same_file(kinds: Kinds) -> None:
    good = "`tests/unit/test_docs.py::test_toml_examples_load`"
    assert kinds(good) == []
    assert kinds(good.replace("examples", "samples")) == ["test"]
    assert kinds("unit `test_docs.py::test_toml_examples_load`, `::test_gone`") == ["test"]
    assert kinds("unit `test_docs.py::test_toml_examples_load[x]`, `test_orphans.py::test_c`") == ["test"]
    assert kinds("e2e `test_orphans.py::test_c`, unit `test_orphans.py::test_b`, `::test_b`") == []


def test_in_the_docs_a_module_is_cited_by_its_full_path_and_a_test_file_unambiguously(kinds: Kinds) -> None:
    assert kinds("`lazyd/daemon/runtime/supervisor.py`") == []
    assert kinds("`supervisor.py`") == ["bare-name"]
    assert kinds("e2e `test_orphans.py`; unit `test_orphans.py`") == []  # one in each of e2e/ and unit/
    assert kinds("`test_orphans.py`") == ["bare-name"]
    assert kinds("`test_nothing.py`") == ["bare-name"]
    assert kinds("each package's `__init__.py` docstring") == []  # a kind of file, in every package


def test_in_a_docstring_a_bare_module_name_must_still_name_a_file(kinds: Kinds) -> None:
    assert kinds("the gate (sharing_gate.py)", source="lazyd/daemon/sessions/registry.py") == []
    assert kinds("the routes (relay_base.py)", source="lazyd/core/relay/core.py") == ["bare-name"]


def test_a_doc_cited_by_name_must_exist(kinds: Kinds) -> None:
    assert kinds("(docs/relay.md, relay.md, README.md)") == []
    assert kinds("(see wrap.md)") == ["doc"]
    assert kinds("(see docs/wrap.md)") == ["doc", "path"]


def test_a_section_cited_by_its_heading_must_be_a_heading_of_that_doc(kinds: Kinds) -> None:
    assert kinds('docs/protocol.md, "Frames"; docs/protocol.md, "Hand-off"') == []  # a heading's start
    assert kinds('docs/protocol.md, "Framing"') == ["section"]
    assert kinds('(docs/configuration.md,\n"Known servers")', source="lazyd/config/known.py") == []
    assert kinds('(docs/configuration.md,\n"Known server")', source="lazyd/config/known.py") == ["section"]


def test_an_anchor_and_a_markdown_link_must_reach_a_doc_and_one_of_its_headings(kinds: Kinds) -> None:
    assert kinds("[crashes](upgrade.md#crashes), docs/upgrade.md#crashes, [a](../README.md)") == []
    assert kinds("docs/upgrade.md#crash") == ["anchor"]
    assert kinds("[crashes](upgrade.md#crash)") == ["anchor"]
    assert kinds("[upgrades](upgrades.md)") == ["path"]
    assert kinds("[here](#nowhere)", source="docs/upgrade.md") == ["anchor"]
    assert kinds("[here](#crashes)", source="docs/upgrade.md") == []


def test_a_numbered_section_or_case_is_caught_no_project_doc_numbers_them(kinds: Kinds) -> None:
    assert kinds("the barrier §8 asks for") == ["numbered"]
    assert kinds("docs/relay.md §2") == ["numbered"]
    assert kinds("a slow consumer (case 11)", source="lazyd/daemon/runtime/outbox.py") == ["numbered"]
    assert kinds("the fuzzing of case 36", source="tests/unit/test_fuzz_wire.py") == []


def test_the_product_cites_no_shared_team_document_nor_an_issue_but_the_tests_may(kinds: Kinds) -> None:
    assert kinds("(PROTOCOL.md §4)", source="lazyd/core/relay/core.py") == ["external", "numbered"]
    assert kinds("no I/O (HOUSE_STYLE.md)", source="lazyd/core/relay/core.py") == ["external"]
    assert kinds("RELIABILITY case 5", source="lazyd/core/lifecycle/timing.py") == ["external", "numbered"]
    assert kinds("see DESIGN.md") == ["external"]
    assert kinds("the hub (issue 9)", source="lazyd/daemon/hub/server.py") == ["external"]
    assert kinds("msgpack bombs (RELIABILITY.md case 33, PROTOCOL.md §8)", source="tests/unit/test_wire.py") == []


def test_a_numbered_rule_of_a_module_must_be_numbered_in_that_modules_docstring(kinds: Kinds) -> None:
    machine = "lazyd/core/lifecycle/machine.py"
    assert kinds(f"(rule 9 of {machine})", source="lazyd/core/lifecycle/predicate.py") == []
    assert kinds(f"rules 1 and 8 of the lifecycle ({machine})", source="lazyd/core/lifecycle/requests.py") == []
    assert kinds(f"(rule 99 of {machine})", source="lazyd/core/lifecycle/predicate.py") == ["section"]


def test_a_member_of_one_of_lazyds_classes_must_be_defined_by_that_class(kinds: Kinds) -> None:
    assert kinds("`RelayCore.from_state`, `RelayCore.routes` (an attribute set in `__init__`)") == []
    assert kinds("`RelayCore.from_snapshot`") == ["name"]
    assert kinds("`Nursery.start_soon`") == []  # not a class of lazyd's: not checked


def test_a_module_named_by_its_dotted_name_must_exist_and_define_the_name_after_it(kinds: Kinds) -> None:
    assert kinds("`lazyd.core.relay.upstream.forward`, lazyd.daemon.runtime, `lazyd_shim.main`, lazyd.log.1") == []
    assert kinds("as lazyd.daemon.paths names it", source="lazyd/host/privatefiles.py") == ["name"]
    assert kinds("`lazyd.core.relay.upstream.backward`") == ["name"]
    assert kinds("`lazyd.core.relay_base.forward`") == ["name"]
    assert kinds("`lazyd.core.relay.core.RelayCore.from_state`") == []
    assert kinds("`lazyd.core.relay.core.RelayCore.from_snapshot`") == ["name"]


# --- docs/reliability.md: each guarantee with the test that proves it ---------------------------

# Guarantees held by construction and said to have no test, in the row itself. Only ever shrinks.
UNTESTED_GUARANTEES = ["A bug raised while serving one connection is logged with its traceback"]


def guarantee_rows(text: str) -> list[str]:
    """The rows of every `| guarantee | test that proves it |` table, header and rule excluded."""
    rows: list[str] = []
    for table in re.findall(r"^\| guarantee \| test that proves it \|\n\|[-|]+\|\n((?:\|.*\n?)*)", text, re.MULTILINE):
        rows += [line for line in table.splitlines() if line.strip()]
    return rows


def test_every_guarantee_in_reliability_md_names_a_test_that_proves_it() -> None:
    rows = guarantee_rows((REPO / "docs" / "reliability.md").read_text())
    assert len(rows) > 100, len(rows)  # the tables are still read
    untested = [row for row in rows if not re.search(r"test_\w*\.py|`::test_\w+`", row.rsplit(" | ", 1)[-1])]
    assert [row for row in untested if not row[2:].startswith(tuple(UNTESTED_GUARANTEES))] == [], (
        "a guarantee without the test that proves it")
    assert len(untested) == len(UNTESTED_GUARANTEES), "a guarantee now has its test: shorten the list"
    # Every test those rows name exists: test_every_path_test_and_section_a_doc_cites_exists[reliability.md].


def test_a_guarantee_row_without_a_test_is_told_apart_from_one_with_a_test() -> None:
    text = ("| guarantee | test that proves it |\n|---|---|\n"
            "| a | e2e `test_process.py::test_x` |\n| b | by construction |\n\nafter\n")
    rows = guarantee_rows(text)
    assert rows == ["| a | e2e `test_process.py::test_x` |", "| b | by construction |"]
