"""`lazyctl wrap --client continue`: Continue's YAML list of servers, edited byte for byte.

The checks do not trust our own YAML reader: what a file means is read by the `yaml` package that
Continue itself reads its config with (tests/servers/node_modules/yaml, run with node), before and
after each edit. The fixture is tried as written, with CRLF line ends and without its final newline;
it has comments, block and flow servers, quoted and plain scalars, and anchors outside the servers.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from lazyd.ctl.wrap import spans, yamlspan
from lazyd.errors import WrapError
from tests.unit.fixtures_wrap.helpers import SECRETS, SHIM, Lazyctl
from tests.unit.fixtures_wrap.yaml_oracle import continues_reading

VARIANTS = ["lf", "crlf", "no-final-newline"]
MANAGED = {"LAZYD_LINGER": "10m", "LAZYD_NO_AUTOSTART": "1"}
FIXTURE = "continue.yaml"


@pytest.fixture
def lazyctl(tmp_path: Path) -> Lazyctl:
    return Lazyctl(tmp_path)


def test_our_reader_reads_the_fixture_as_continue_does() -> None:
    text = (Path(__file__).parent / "fixtures_wrap" / FIXTURE).read_text()
    ours = spans.to_python(yamlspan.parse(text))  # type: ignore[arg-type]
    theirs = continues_reading(text)
    assert isinstance(ours, dict)
    # The merge key is Continue's to apply (and ours never to edit): compare everything else.
    assert {k: v for k, v in ours.items() if k != "models"} == {k: v for k, v in theirs.items() if k != "models"}


DOCUMENTS = [
    "a: 1\nb: [x, 'y', \"z\"]\nc: {d: e, f: null}\n",
    "list:\n- a\n- b: c\n  d: e\n-   f\n",
    "s: 'it''s'\nd: \"tab\\there \\u00e9\"\nn: ~\nt: true\nf: 1.5\nh: 0x1f\no: 0o17\n",
    "folded: >-\n  one\n  two\n\n  three\nlit: |\n  x\n   y\nafter: 1\n",
    "plain: this is\n  continued\n  again\nnext: 2\n",
    "---\n# comment\nk: v # trailing\n\n\nz:\n",
    "flow: [a, [b, c], {d: e}]\nmulti: [one,\n  two,\n  three]\n",
    "quoted: \"a\n  b\"\nsingle: 'c\n\n  d'\n",
    "k: &anchor v\nl: *anchor\n",
    "url: http://x:80/a#b\nkey with spaces: v\n\"quoted key\": 1\n",
    "spaced : before the colon\n'q' : 2\nlist :\n  - a\n",
    "a: [x]   # flow then comment\nb: \"s\"  # quoted then comment\n",
]


@pytest.mark.parametrize("text", DOCUMENTS)
def test_our_reader_agrees_with_continues_yaml_library(text: str) -> None:
    assert spans.to_python(yamlspan.parse(text)) == continues_reading(text)  # type: ignore[arg-type]


def servers(doc: Any) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in doc["mcpServers"] if isinstance(s, dict) and "name" in s}


@pytest.mark.parametrize("kind", VARIANTS)
def test_wrap_puts_the_shim_first_and_continue_reads_exactly_that(lazyctl: Lazyctl, kind: str) -> None:
    path = lazyctl.fixture(FIXTURE, kind)
    before = path.read_bytes().decode()
    report = lazyctl.run("wrap", "continue", path, env=MANAGED)
    after = path.read_bytes().decode()
    assert report.written and not report.refused
    assert {r.key.server: r.action for r in report.results} == {
        "time": "wrapped", "filesystem": "wrapped", "flowy": "wrapped", "bare": "wrapped", "compact": "wrapped",
        "remote": "skipped", "mcpServers[6]": "skipped"}
    expected = copy.deepcopy(continues_reading(before))
    for reg in servers(expected).values():
        if "command" not in reg:
            continue
        reg["args"] = [reg["command"], *reg.get("args", [])]
        reg["command"] = SHIM
        declared = {"LAZYD_IDENTITY_ENV": ",".join(sorted(reg["env"]))} if reg.get("env") else {}
        reg["env"] = {**reg.get("env", {}), **declared, **MANAGED}
    assert continues_reading(after) == expected
    # Outside the servers, not a byte moved: the header, models (with their anchor) and rules.
    head, tail = before.index("mcpServers:"), before.index("rules:")
    assert after[:head] == before[:head] and after.endswith(before[tail:])
    # Inside, every line of the original is still there in order (wrap only adds and replaces values).
    kept = [line for line in before[head:tail].splitlines() if "command:" not in line and "args:" not in line
            and "{" not in line]  # fmt: skip
    lines = iter(after[head:].splitlines())
    assert all(any(line == other for other in lines) for line in kept)
    if kind == "crlf":
        assert after.count("\n") == after.count("\r\n")
    assert after.endswith("\n") == before.endswith("\n")


@pytest.mark.parametrize("kind", VARIANTS)
def test_unwrap_after_wrap_gives_back_the_original_file(lazyctl: Lazyctl, kind: str) -> None:
    path = lazyctl.fixture(FIXTURE, kind)
    before = path.read_bytes()
    lazyctl.run("wrap", "continue", path, env=MANAGED)
    assert lazyctl.run("unwrap", "continue", path).written
    assert path.read_bytes() == before
    assert not list((lazyctl.state_dir / "registrations").iterdir())


def test_wrapping_twice_never_nests_and_writes_nothing(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture(FIXTURE)
    lazyctl.run("wrap", "continue", path)
    once = path.read_bytes()
    report = lazyctl.run("wrap", "continue", path)
    assert not report.written and path.read_bytes() == once
    assert {r.action for r in report.results} <= {"unchanged", "skipped"}


def test_a_value_that_yaml_would_read_as_another_type_is_quoted(lazyctl: Lazyctl) -> None:
    path = lazyctl.put("config.yaml", b"mcpServers:\n  - name: s\n    command: x\n")
    lazyctl.run("wrap", "continue", path, env={"LAZYD_NO_AUTOSTART": "true", "LAZYD_LINGER": "30m"})
    text = path.read_text()
    assert 'LAZYD_NO_AUTOSTART: "true"' in text and "LAZYD_LINGER: 30m" in text
    assert continues_reading(text)["mcpServers"][0]["env"] == {"LAZYD_NO_AUTOSTART": "true", "LAZYD_LINGER": "30m"}


def test_a_plain_argument_that_flow_style_would_split_is_quoted_when_it_moves(lazyctl: Lazyctl) -> None:
    path = lazyctl.put("config.yaml", b"mcpServers:\n  - name: s\n    command: run,now\n    args: [x]\n")
    lazyctl.run("wrap", "continue", path)
    assert continues_reading(path.read_text())["mcpServers"][0]["args"] == ["run,now", "x"]


def test_env_goes_right_after_a_block_scalar_that_ends_a_server_not_after_the_blank_lines_and_comment_below_it(
        lazyctl: Lazyctl) -> None:  # fmt: skip
    """A block scalar's span ends with its last line: the blank line and the comment that follow
    belong to no server, so the new env is written above them, and unwrap gives the bytes back."""
    data = (b"mcpServers:\n  - name: s\n    command: x\n    notes: |\n      keep me\n\n# the next server\n"
            b"  - name: t\n    command: y\n")
    path = lazyctl.put("config.yaml", data)
    lazyctl.run("wrap", "continue", path, env=MANAGED)
    text = path.read_text()
    assert text.index("LAZYD_LINGER") < text.index("\n\n# the next server")
    assert continues_reading(text)["mcpServers"][0]["notes"] == "keep me\n"
    assert lazyctl.run("unwrap", "continue", path).written and path.read_bytes() == data


REFUSED = [
    ("an anchor in the server", "  - &s\n    name: s\n    command: x\n", "anchor, alias, tag or merge key"),
    ("an alias as its command", "  - name: s\n    command: *c\n", "anchor, alias, tag or merge key"),
    ("a merge key", "  - name: s\n    <<: *base\n    command: x\n", "anchor, alias, tag or merge key"),
    ("a merge key that brings the command", "  - name: s\n    <<: *base\n", "anchor, alias, tag or merge key"),
    ("a tag", "  - name: s\n    command: !!str x\n", "anchor, alias, tag or merge key"),
    ("a block scalar command", "  - name: s\n    command: |\n      x\n", "multi-line or block scalar"),
    ("a multi-line argument", "  - name: s\n    command: x\n    args: ['a\n      b']\n", "multi-line or block scalar"),
    ("two servers of one name", "  - {name: s, command: x}\n  - {name: s, command: y}\n", "two servers are named 's'"),
    ("a duplicate key", "  - {name: s, command: x, command: y}\n", "duplicate key 'command'"),
    ("a duplicate env key", "  - {name: s, command: x, env: {A: 1, A: 2}}\n", "duplicate key 'A' in its env"),
    ("a number among the args", "  - {name: s, command: x, args: [--port, 8080]}\n", "args are not a list of strings"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "servers_text", "message"), REFUSED, ids=[c[0] for c in REFUSED])
def test_a_server_that_cannot_be_edited_safely_is_refused_and_nothing_is_written(
        lazyctl: Lazyctl, case: str, servers_text: str, message: str) -> None:  # fmt: skip
    data = ("base: &base {command: z}\nc: &c y\nmcpServers:\n" + servers_text + "  - {name: ok, command: fine}\n").encode()
    path = lazyctl.put("config.yaml", data)
    report = lazyctl.run("wrap", "continue", path)
    refused = {r.key.server: r.reason for r in report.refused}
    assert refused and all(message in reason for reason in refused.values()), refused
    assert not report.written and path.read_bytes() == data
    # The same server, named alone: refused too; another server alone is fine.
    assert lazyctl.run("wrap", "continue", path, servers=("ok",)).written


MALFORMED = [
    ("two documents", b"a: 1\n---\nmcpServers: []\n", "several YAML documents"),
    ("a directive", b"%YAML 1.2\n---\nmcpServers: []\n", "directive"),
    ("bad indentation", b"mcpServers:\n  - name: s\n   command: x\n", "line 3"),
    ("an unterminated string", b"mcpServers:\n  - name: 's\n", "unexpected end of stream at line 3"),
    ("a tab in indentation", b"mcpServers:\n\t- name: s\n", "cannot start any token at line 2, column 1"),
    ("a list at the top", b"- a\n", "top level is not a mapping"),
    ("servers not a list", b"mcpServers: {s: {command: x}}\n", "not a list"),
    ("servers twice", b"mcpServers: []\nmcpServers: []\n", "appears twice"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "data", "message"), MALFORMED, ids=[c[0] for c in MALFORMED])
def test_a_file_we_cannot_read_exactly_is_refused_with_where_and_why(lazyctl: Lazyctl, case: str, data: bytes,
                                                                     message: str) -> None:  # fmt: skip
    path = lazyctl.put("config.yaml", data)
    with pytest.raises(WrapError, match=message):
        lazyctl.run("wrap", "continue", path)
    assert path.read_bytes() == data


def test_reports_never_hold_a_value_from_the_file(lazyctl: Lazyctl) -> None:
    path = lazyctl.fixture(FIXTURE)
    report = lazyctl.run("wrap", "continue", path, env=MANAGED)
    text = json.dumps(report.to_json())
    assert not any(secret in text for secret in SECRETS) and "mcp-server-time" not in text
