"""`lazyctl share`'s edit of the config file: one line added or changed, every other byte kept,
and the result a config the daemon reads as opted in."""

from __future__ import annotations

from pathlib import Path

import pytest

from lazyd.config.load import parse_config_text
from lazyd.ctl.share import edited, package_of
from lazyd.errors import CtlError, UsageError

CONFIG = '''# my servers
[defaults]
idle_timeout = "10m"   # keep them a while

[servers.notes]
command = "notes-mcp"
args = ["--dir", "~/notes"]

[known_servers.acme]
sharing = "isolated"
runs = ["acme-mcp"]
'''


def test_a_named_server_gets_share_true_in_its_table_and_nothing_else_changes() -> None:
    text, what = edited(CONFIG, "notes", on=True, runs=None)
    assert what == "share = true in [servers.notes]"
    assert text == CONFIG.replace('args = ["--dir", "~/notes"]\n', 'args = ["--dir", "~/notes"]\nshare = true\n')
    assert parse_config_text(text, {}, Path("c.toml")).servers["notes"].policy.share is True
    # Again, then off: the same line changes in place.
    again, _ = edited(text, "notes", on=True, runs=None)
    assert again == text
    off, what = edited(text, "notes", on=False, runs=None)
    assert off == text.replace("share = true", "share = false") and what == "share = false in [servers.notes]"


def test_a_client_registration_gets_a_known_servers_entry_for_its_package() -> None:
    text, what = edited(CONFIG, "git-mcp-server-1a2b3c", on=True, runs="@cyanheads/git-mcp-server")
    assert what == '[known_servers."@cyanheads/git-mcp-server"] sharing = "shared"'
    assert text.startswith(CONFIG)  # appended: every byte before it kept
    table = parse_config_text(text, {}, Path("c.toml")).known_servers
    entry = table.lookup(["@cyanheads/git-mcp-server"])
    assert entry is not None and (entry.sharing, entry.runs) == ("shared", ("@cyanheads/git-mcp-server",))
    off, _ = edited(text, "git-mcp-server-1a2b3c", on=False, runs="@cyanheads/git-mcp-server")
    entry = parse_config_text(off, {}, Path("c.toml")).known_servers.lookup(["@cyanheads/git-mcp-server"])
    assert entry is not None and entry.sharing == "isolated"


def test_an_empty_config_file_gets_just_the_entry() -> None:
    text, _ = edited("", "x", on=True, runs="mcp-server-time")
    assert text == '[known_servers.mcp-server-time]\nsharing = "shared"\nruns = ["mcp-server-time"]\nwhy = "set by lazyctl share"\n'


def test_a_file_that_is_not_toml_is_refused_with_one_line() -> None:
    with pytest.raises(CtlError, match="cannot be read as TOML"):
        edited("[servers\n", "x", on=True, runs="p")


def test_a_registration_is_opted_in_by_the_package_it_runs_and_never_by_a_name_that_covers_others() -> None:
    rows = [{"name": "git-mcp-server-1a2b3c", "instance_of": None, "runs": "@cyanheads/git-mcp-server"},
            {"name": "git-mcp-server-1a2b3c.1", "instance_of": "git-mcp-server-1a2b3c", "runs": None},
            {"name": "index-9f8e7d", "instance_of": None, "runs": None}]
    assert package_of(rows, "git-mcp-server-1a2b3c") == "@cyanheads/git-mcp-server"
    assert package_of(rows, "git-mcp-server-1a2b3c.1") == "@cyanheads/git-mcp-server"  # its registration's
    with pytest.raises(CtlError, match="does not know what index-9f8e7d runs"):
        package_of(rows, "index-9f8e7d")
    with pytest.raises(UsageError, match="no server named 'nope'"):
        package_of(rows, "nope")
