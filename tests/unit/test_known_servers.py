"""The known-servers table: what a command line runs, how names match, the packaged table, and
the user's entries on top of it (config.toml's `[known_servers]`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lazyd.config.load import parse_config_text
from lazyd.config.known import PACKAGED_FILE, packaged
from lazyd.core.sharing.known_servers import KnownServer, KnownServers, normalize, what_runs
from lazyd.errors import ConfigError

NM = "/home/u/proj/node_modules"


@pytest.mark.parametrize(("argv", "resolved", "first"), [
    (["npx", "-y", "@playwright/mcp@latest", "--headless"], [], "@playwright/mcp"),
    (["npx", "--yes", "@modelcontextprotocol/server-sequential-thinking"], [], "@modelcontextprotocol/server-sequential-thinking"),
    (["npx", "-p", "@playwright/mcp@0.0.83", "playwright-mcp"], [], "@playwright/mcp"),
    (["npx", "--package=chrome-devtools-mcp@1", "chrome-devtools-mcp"], [], "chrome-devtools-mcp"),
    (["npx", "chrome-devtools-mcp@latest"], [], "chrome-devtools-mcp"),
    (["/usr/bin/npm", "exec", "--", "@modelcontextprotocol/server-memory"], [], "@modelcontextprotocol/server-memory"),
    (["pnpm", "dlx", "@playwright/mcp"], [], "@playwright/mcp"),
    (["bunx", "@playwright/mcp@latest"], [], "@playwright/mcp"),
    (["uvx", "mcp-server-time", "--local-timezone", "UTC"], [], "mcp-server-time"),
    (["uvx", "mcp-server-git==2025.1.14"], [], "mcp-server-git"),
    (["uvx", "--from", "mcp-server-fetch[extra]>=1", "mcp-server-fetch"], [], "mcp-server-fetch"),
    (["uv", "tool", "run", "mcp-server-time"], [], "mcp-server-time"),
    (["pipx", "run", "mcp-server-time"], [], "mcp-server-time"),
    (["python3", "-m", "mcp_server_time"], [], "mcp_server_time"),
    (["/usr/bin/python3.12", "-u", "-m", "mcp_server_git.cli"], [], "mcp_server_git"),
    (["node", f"{NM}/@playwright/mcp/cli.js"], [], "@playwright/mcp"),
    (["node", "./server.js"], [], "server"),
    # A `.bin` link: its real path names the package; its own name is the executable's.
    ([f"{NM}/.bin/mcp-server-sequential-thinking"],
     [f"{NM}/@modelcontextprotocol/server-sequential-thinking/dist/index.js"],
     "@modelcontextprotocol/server-sequential-thinking"),
    (["/usr/local/bin/playwright-mcp"], ["/usr/local/bin/playwright-mcp"], "playwright-mcp"),
])
def test_what_runs_names_the_package_a_launcher_or_a_script_runs_first(
        argv: list[str], resolved: list[str], first: str) -> None:
    assert what_runs(argv, resolved)[0] == first


def test_what_runs_ends_with_the_executables_own_name_and_never_names_a_bin_directory() -> None:
    names = what_runs([f"{NM}/.bin/playwright-mcp"], [f"{NM}/@playwright/mcp/cli.js"])
    assert names == ["@playwright/mcp", "playwright-mcp"]
    assert what_runs(["npx"]) == ["npx"]  # nothing to run yet: only the launcher itself
    assert what_runs([]) == []


TABLE = KnownServers((
    KnownServer("playwright", "isolated", ("@playwright/mcp", "playwright-mcp")),
    KnownServer("time", "shared", ("mcp-server-time",)),
))


def test_lookup_matches_any_name_of_an_entry_as_pypi_normalizes_names_and_takes_the_first_found() -> None:
    assert TABLE.lookup(["mcp_server_time"]).name == "time"  # type: ignore[union-attr]
    assert TABLE.lookup(["MCP-Server.Time"]).name == "time"  # type: ignore[union-attr]
    assert TABLE.lookup(["unknown", "playwright-mcp"]).name == "playwright"  # type: ignore[union-attr]
    assert TABLE.lookup(["@playwright/mcp-extra", "playwright"]) is None  # names, not prefixes
    assert normalize("A__b..c-d") == "a-b-c-d"


def test_the_users_entries_replace_a_packaged_one_of_the_same_name_and_claim_their_names() -> None:
    user = KnownServers((KnownServer("browser", "session-aware", ("playwright-mcp",)),
                         KnownServer("time", "auto", ())))
    table = TABLE.overlaid(user)
    assert table.lookup(["playwright-mcp"]).name == "browser"  # type: ignore[union-attr]
    assert table.lookup(["@playwright/mcp"]).name == "playwright"  # type: ignore[union-attr]  # its other name stays
    assert table.lookup(["mcp-server-time"]) is None  # unlisted by the user


def test_the_packaged_table_starts_with_the_servers_whose_sharing_is_known() -> None:
    table = packaged()
    modes = {e.name: e.sharing for e in table.entries}
    assert {k: modes[k] for k in ("sequential-thinking", "playwright", "chrome-devtools")} == dict.fromkeys(
        ("sequential-thinking", "playwright", "chrome-devtools"), "isolated")
    assert all(modes[k] == "shared" for k in ("filesystem", "memory", "git", "fetch", "time", "everything"))
    assert all(e.runs and e.why for e in table.entries)
    for argv, name in ((["npx", "-y", "@modelcontextprotocol/server-sequential-thinking"], "sequential-thinking"),
                       (["npx", "@playwright/mcp@latest"], "playwright"), (["uvx", "mcp-server-time"], "time"),
                       (["npx", "-y", "chrome-devtools-mcp@latest"], "chrome-devtools"),
                       (["npx", "-y", "@modelcontextprotocol/server-everything"], "everything")):
        assert table.lookup(what_runs(argv)).name == name  # type: ignore[union-attr]


def test_the_packaged_table_is_package_data_that_pyproject_ships() -> None:
    root = Path(__file__).resolve().parents[2]
    assert (root / "lazyd" / "config" / PACKAGED_FILE).is_file()
    pyproject = (root / "pyproject.toml").read_text()
    assert f'"lazyd.config" = ["{PACKAGED_FILE}"]' in pyproject


def test_config_toml_adds_and_overrides_known_servers_and_an_empty_file_has_the_packaged_table() -> None:
    config = parse_config_text('[known_servers.mine]\nsharing = "isolated"\nruns = ["my-mcp"]\n'
                               '[known_servers.time]\nsharing = "auto"\n', {}, None)
    assert config.known_servers.lookup(["my-mcp"]).sharing == "isolated"  # type: ignore[union-attr]
    assert config.known_servers.lookup(["mcp-server-time"]) is None
    assert config.known_servers.lookup(["@playwright/mcp"]).name == "playwright"  # type: ignore[union-attr]
    assert parse_config_text("", {}, None).known_servers == packaged()


@pytest.mark.parametrize(("text", "error"), [
    ('[known_servers.x]\nruns = ["a"]\n', 'known_servers.x.sharing: is required: one of shared, isolated, session-aware, auto'),
    ('[known_servers.x]\nsharing = "maybe"\nruns = ["a"]\n', "known_servers.x.sharing: 'maybe' is not one of"),
    ('[known_servers.x]\nsharing = "shared"\n', "known_servers.x.runs: must not be empty"),
    ('[known_servers.x]\nsharing = "shared"\nruns = [""]\n', "known_servers.x.runs: holds an empty name"),
    ('[known_servers.x]\nsharing = "shared"\nruns = ["a"]\nmatch = 1\n', "known_servers.x.match: unknown key"),
    ('known_servers = 3\n', "known_servers: expected a table, got an integer"),
])
def test_a_bad_known_servers_entry_is_one_line_naming_the_key(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text, {}, None)
    assert error in str(caught.value) and "\n" not in str(caught.value)
