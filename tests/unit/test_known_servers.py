"""The known-servers table: what a command line runs, how names match, the packaged table, and
the user's entries on top of it (config.toml's `[known_servers]`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lazyd.config.load import parse_config_text
from lazyd.config.known import PACKAGED_FILE, packaged
from lazyd.core.sharing.known_servers import (KnownServer, KnownServers, names_a_server, normalize, tree_runs,
                                              what_runs)
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
    # A Python script: its file names it (a console script, or a server's own file).
    (["/usr/bin/python3.11", "-u", "/home/u/.local/bin/mcp-server-time"], [], "mcp-server-time"),
    (["python3", "/srv/acme/acme_server.py"], [], "acme_server"),
    # A container: its image, without registry defaults, tag or digest.
    (["docker", "run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"], [],
     "ghcr.io/github/github-mcp-server"),
    (["docker", "run", "--rm", "-i", "--name=fetch", "-v", "/a:/b", "mcp/fetch:latest", "--ignore-robots-txt"], [],
     "mcp/fetch"),
    (["podman", "run", "-it", "docker.io/mcp/time@sha256:0123"], [], "mcp/time"),
    (["docker", "run", "-i", "localhost:5000/acme/mcp"], [], "localhost:5000/acme/mcp"),
])
def test_what_runs_names_the_package_a_launcher_or_a_script_runs_first(
        argv: list[str], resolved: list[str], first: str) -> None:
    assert what_runs(argv, resolved)[0] == first


def test_what_runs_ends_with_the_executables_own_name_and_never_names_a_bin_directory() -> None:
    names = what_runs([f"{NM}/.bin/playwright-mcp"], [f"{NM}/@playwright/mcp/cli.js"])
    assert names == ["@playwright/mcp", "playwright-mcp"]
    assert what_runs(["npx"]) == ["npx"]  # nothing to run yet: only the launcher itself
    assert what_runs([]) == []


def test_tree_runs_names_what_a_started_tree_runs_whatever_the_registered_command_line_said() -> None:
    thinking = f"{NM}/@modelcontextprotocol/server-sequential-thinking/dist/index.js"
    # A wrapper that exec'd node: the process is node now.
    assert tree_runs([["node", thinking]])[0] == "@modelcontextprotocol/server-sequential-thinking"
    # A wrapper that forked: the shell names nothing, its child does.
    assert tree_runs([["/bin/sh", "/home/u/think.sh"], ["node", thinking]])[0] == (
        "@modelcontextprotocol/server-sequential-thinking")
    # npx's child runs the package's bin through a shell: the package is found under the launcher.
    tree = [["npm", "exec", "@playwright/mcp"], ["sh", "-c", "playwright-mcp"],
            ["node", "/home/u/.npm/_npx/ab12/node_modules/.bin/playwright-mcp"]]
    resolved = [[], [], ["/usr/bin/node", "/home/u/.npm/_npx/ab12/node_modules/@playwright/mcp/cli.js"]]
    assert tree_runs(tree, resolved)[:2] == ["@playwright/mcp", "npm"]
    # A global bin link outside node_modules: the package.json the caller read names it.
    assert tree_runs([["node", "/usr/lib/tm/dist/mcp-server.js"]], packages=["task-master-ai"])[0] == "task-master-ai"
    # uvx's child is Python running the console script.
    assert tree_runs([["uvx", "mcp-server-time"], ["/home/u/.cache/uv/x/bin/python", "/home/u/.cache/uv/x/bin/mcp-server-time"]])[0] == "mcp-server-time"
    assert tree_runs([]) == [] and tree_runs([[]]) == []
    # Each name once, in the order found.
    names = tree_runs([["node", thinking], ["node", thinking]])
    assert len(names) == len(set(names))


def test_only_a_name_that_says_which_server_runs_can_name_an_entry_lazyctl_share_writes() -> None:
    for name in ("@cyanheads/git-mcp-server", "task-master-ai", "mcp-server-time", "fixture_server", "mcp/fetch"):
        assert names_a_server(name)
    for name in ("index", "server", "main", "node", "python3.12", "python", "npx", "uvx", "sh", "docker", "", "Index"):
        assert not names_a_server(name)


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


def test_the_packaged_table_covers_the_most_used_servers_each_with_its_reason() -> None:
    table = packaged()
    modes = {e.name: e.sharing for e in table.entries}
    assert len(modes) >= 40
    isolated = ("sequential-thinking", "playwright", "chrome-devtools", "git-mcp-server", "task-master", "puppeteer",
                "desktop-commander", "browsermcp", "serena", "mcp-remote")
    assert {k: modes[k] for k in isolated} == dict.fromkeys(isolated, "isolated")
    assert all(modes[k] == "shared" for k in ("filesystem", "memory", "git", "fetch", "time", "everything", "github",
                                               "context7"))
    assert all(e.runs and e.why for e in table.entries)
    assert [e.name for e in table.entries] == sorted(e.name for e in table.entries)
    runs = [normalize(r) for e in table.entries for r in e.runs]
    assert len(runs) == len(set(runs))  # no name in two entries
    for argv, name in ((["npx", "-y", "@modelcontextprotocol/server-sequential-thinking"], "sequential-thinking"),
                       (["npx", "@playwright/mcp@latest"], "playwright"), (["uvx", "mcp-server-time"], "time"),
                       (["npx", "-y", "chrome-devtools-mcp@latest"], "chrome-devtools"),
                       (["npx", "-y", "@modelcontextprotocol/server-everything"], "everything"),
                       (["npx", "-y", "@cyanheads/git-mcp-server"], "git-mcp-server"),
                       (["node", f"{NM}/task-master-ai/dist/mcp-server.js"], "task-master"),
                       (["npx", "-y", "--package=task-master-ai", "task-master-ai"], "task-master"),
                       (["docker", "run", "-i", "--rm", "ghcr.io/github/github-mcp-server"], "github")):
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
