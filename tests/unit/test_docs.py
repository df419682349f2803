"""The documentation stays true: every TOML example loads, and the docs speak of the product only.

Every fenced ```toml block in docs/ and the README is a config.toml example a user may paste, so
each is parsed by the daemon's own parser (`parse_config_text`, what `load_config` runs on the
file's text), with every `${VAR}` it references set and a home directory for `~`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lazyd.core.pressure import PressureSettings
from lazyd.config.load import parse_config_text
from lazyd.config.known import packaged
from lazyd.core.sharing.client_profiles import PROFILES

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([*(REPO / "docs").glob("*.md"), REPO / "README.md"])
FENCE = re.compile(r"^```toml\n(.*?)^```", re.MULTILINE | re.DOTALL)
REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def toml_examples() -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        for number, match in enumerate(FENCE.finditer(path.read_text()), start=1):
            found.append((f"{path.relative_to(REPO)}#{number}", match.group(1)))
    return found


EXAMPLES = toml_examples()


def test_the_docs_have_toml_examples_to_check() -> None:
    # A fence spelled differently would silently drop examples from the check below.
    assert len(EXAMPLES) >= 4, [name for name, _ in EXAMPLES]


@pytest.mark.parametrize(("name", "text"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_every_toml_example_in_the_docs_loads_with_the_daemons_parser(name: str, text: str) -> None:
    environ = {"HOME": "/home/u", **{var: "value" for var in REFERENCE.findall(text)}}
    config = parse_config_text(text, environ, Path(name))
    known_changed = config.known_servers != packaged()  # a [known_servers] example
    pressure_changed = config.pressure != PressureSettings()  # a [pressure] example
    assert (config.servers or config.tool_policy.rules or known_changed or pressure_changed
            or text.strip().startswith("[defaults]")), name


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_the_docs_speak_of_the_product_not_of_issues_or_paths_outside_the_repository(path: Path) -> None:
    text = path.read_text()
    assert not re.search(r"\bissues? #?\d", text, re.IGNORECASE), path
    assert "shared/" not in text, path


def test_lazyctl_md_names_every_client_profile_with_the_handshake_built_in() -> None:
    # `check --client`'s list and table in docs/lazyctl.md, against the table of profiles.
    text = (REPO / "docs" / "lazyctl.md").read_text()
    listed = re.search(r"^- `--client ([a-z|]+)` checks as", text, re.MULTILINE)
    assert listed is not None and tuple(listed.group(1).split("|")) == tuple(PROFILES)
    rows = {name: row for row in re.findall(r"^  \| (`.*?`.*) \|$", text, re.MULTILINE)
            for name in re.findall(r"`([a-z]+)`", row.split(" | ")[0])}
    assert set(rows) >= set(PROFILES), sorted(set(PROFILES) - set(rows))
    for name, profile in PROFILES.items():
        row = rows[name]
        if profile.builtin is None:
            assert "none yet" in row, row
            continue
        caps = profile.builtin["capabilities"]
        assert profile.release in row and f"`{profile.builtin['clientInfo']['name']}`" in row, row
        assert f"`{profile.builtin['protocolVersion']}`" in row, row
        assert all(f"`{cap}`" in row for cap in [*caps, *caps.get("experimental", {})]), row
        assert caps or "no capabilities" in row, row
