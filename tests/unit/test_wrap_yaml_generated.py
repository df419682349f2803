"""Generated Continue configs: our YAML reader reads each as Continue's YAML library does, wrap makes
exactly the expected change as that library reads it, and unwrap gives back every byte.

The configs vary what people write: items indented or compact under `mcpServers:`, block and flow
servers, args and env in block or flow style (or absent, or `{}`), plain, single- and
double-quoted scalars (among them commands with a space, a comma, a leading dash), comments on
their own lines and after values, sections before and after the servers, LF or CRLF, with and
without a final newline.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.ctl.wrap import spans, yamlspan
from tests.unit.fixtures_wrap.helpers import SHIM, Lazyctl
from tests.unit.fixtures_wrap.yaml_oracle import continues_readings

MANAGED = {"LAZYD_LINGER": "10m"}
WORDS = ["npx", "/usr/bin/server", "-y", "--port", "@scope/pkg", "a b", "run,now", "x: y", "8080", "it's", "é", "-"]


def scalar(draw: st.DrawFn, value: str, flow: bool) -> str:
    unsafe = ",:' " if flow else ":' "
    plain_ok = value not in ("8080", "-") and value[0] not in "@`" and not any(c in value for c in unsafe)
    styles = (["plain"] if plain_ok else []) + ["single", "double"]
    style = draw(st.sampled_from(styles))
    if style == "plain":
        return value
    if style == "single":
        return "'" + value.replace("'", "''") + "'"
    return json.dumps(value)


def comment(draw: st.DrawFn) -> str:
    return draw(st.sampled_from(["", "", "  # note"]))


@st.composite
def server(draw: st.DrawFn, name: str, indent: int) -> tuple[str, dict[str, Any]]:
    command = draw(st.sampled_from(WORDS[:2] + ["-dash", "a b", "run,now"]))
    args = draw(st.one_of(st.none(), st.lists(st.sampled_from(WORDS), max_size=3)))
    env = draw(st.one_of(st.none(), st.dictionaries(st.sampled_from(["API_KEY", "PORT", "MODE"]),
                                                    st.sampled_from(["v", "8080", "a b"]), max_size=2)))  # fmt: skip
    cwd = draw(st.sampled_from([None, "/srv"]))
    value: dict[str, Any] = {"name": name, "command": command}
    if args is not None:
        value["args"] = args
    if env is not None:
        value["env"] = env
    if cwd is not None:
        value["cwd"] = cwd
    pad = " " * indent
    if draw(st.booleans()):  # a flow server on one line
        parts = [f"name: {name}", f"command: {scalar(draw, command, True)}"]
        if args is not None:
            parts.append("args: [" + ", ".join(scalar(draw, a, True) for a in args) + "]")
        if env is not None:
            parts.append("env: {" + ", ".join(f"{k}: {scalar(draw, v, True)}" for k, v in env.items()) + "}")
        if cwd is not None:
            parts.append(f"cwd: {cwd}")
        return f"{pad}- {{{', '.join(parts)}}}{comment(draw)}\n", value
    inner = " " * (indent + 2)
    # A plain command with a comma is quoted when wrap moves it into a flow list, and stays quoted
    # after unwrap (docs/wrapping.md): not generated here.
    spelled = scalar(draw, command, "," in command)
    lines = [f"{pad}- name: {name}{comment(draw)}", f"{inner}command: {spelled}{comment(draw)}"]
    if args is not None:
        if not args or draw(st.booleans()):
            lines.append(f"{inner}args: [" + ", ".join(scalar(draw, a, True) for a in args) + "]")
        else:
            lines.append(f"{inner}args:")
            dash = inner + " " * draw(st.sampled_from([0, 2]))
            lines += [f"{dash}- {scalar(draw, a, False)}{comment(draw)}" for a in args]
    if env is not None:
        if not env or draw(st.booleans()):
            lines.append(f"{inner}env: {{" + ", ".join(f"{k}: {scalar(draw, v, True)}" for k, v in env.items()) + "}")
        else:
            lines.append(f"{inner}env:")
            lines += [f"{inner}  {k}: {scalar(draw, v, False)}{comment(draw)}" for k, v in env.items()]
    if cwd is not None:
        lines.insert(draw(st.sampled_from([1, 2])), f"{inner}cwd: {cwd}")
    return "\n".join(lines) + "\n", value


@st.composite
def config(draw: st.DrawFn) -> tuple[str, list[dict[str, Any]]]:
    indent = draw(st.sampled_from([0, 2, 4]))
    text = draw(st.sampled_from(["", "# Continue\n", "name: A\nversion: 1.0.0\nschema: v1\n"]))
    text += "mcpServers:" + comment(draw) + "\n"
    servers = []
    for number in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            text += " " * indent + "# a server\n"
        item, value = draw(server(f"s{number}", indent))
        text += item
        servers.append(value)
    text += draw(st.sampled_from(["", "rules:\n  - Be brief.\n", "\n# the end\n"]))
    if draw(st.booleans()):
        text = text.rstrip("\n")
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    return text, servers


def wrapped(reg: dict[str, Any]) -> dict[str, Any]:
    reg = copy.deepcopy(reg)
    dash = ["--"] if reg["command"].startswith("-") else []
    reg["args"] = [*dash, reg["command"], *reg.get("args", [])]
    reg["command"] = SHIM
    declared = {"LAZYD_IDENTITY_ENV": ",".join(sorted(reg["env"]))} if reg.get("env") else {}
    reg["env"] = {**reg.get("env", {}), **declared, **MANAGED}
    return reg


@settings(derandomize=True, max_examples=40, deadline=None, database=None)
@given(config())
def test_a_generated_config_is_read_as_continue_reads_it_wrapped_exactly_and_unwrapped_to_its_bytes(
        tmp_path_factory: Any, case: tuple[str, list[dict[str, Any]]]) -> None:  # fmt: skip
    text, servers = case
    lazyctl = Lazyctl(tmp_path_factory.mktemp("gen"))
    path = lazyctl.put("config.yaml", text.encode())
    report = lazyctl.run("wrap", "continue", path, env=MANAGED)
    assert not report.refused, [(r.key.server, r.reason) for r in report.refused]
    after = path.read_bytes().decode()
    before_read, after_read = continues_readings([text, after])
    assert spans.to_python(yamlspan.parse(text)) == before_read  # type: ignore[arg-type]
    assert before_read["mcpServers"] == servers
    assert after_read == {**before_read, "mcpServers": [wrapped(s) for s in servers]}
    assert after.endswith("\n") == text.endswith("\n") and after.count("\r\n") == (after.count("\n") if "\r\n" in text else 0)
    lazyctl.run("unwrap", "continue", path)
    assert path.read_bytes() == text.encode()


def test_the_generator_makes_what_it_says(tmp_path: Path) -> None:
    # A fixed example of each shape, so that a generator bug cannot hide behind luck.
    text = "mcpServers:\n- name: s\n  command: 'a b'\n  args:\n  - -y\n  env:\n    K: v\n- {name: t, command: \"run,now\"}\n"
    assert spans.to_python(yamlspan.parse(text)) == {"mcpServers": [  # type: ignore[arg-type]
        {"name": "s", "command": "a b", "args": ["-y"], "env": {"K": "v"}}, {"name": "t", "command": "run,now"}]}
