"""Where the socket is (lazyd/host/sockpath.py): the same choice as platformdirs, without importing it.

Each case runs platformdirs and our rule in a fresh interpreter under the same environment and
compares the two, with real directories of the modes and owners each rule looks at.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lazyd.host import sockpath

_PATHS_SCRIPT = """
import json, os, warnings
warnings.simplefilter("ignore")
import platformdirs
from lazyd.host import sockpath
print(json.dumps([os.path.join(platformdirs.user_runtime_dir("lazyd"), "lazyd.sock"),
                  sockpath.default_socket_path(os.environ)]))
"""


def socket_paths_in(env_changes: dict[str, str | None]) -> tuple[str, str]:
    env = dict(os.environ)
    for key in ("LAZYD_SOCKET", "XDG_RUNTIME_DIR", "TMPDIR", "TEMP", "TMP"):
        env.pop(key, None)
    for key, value in env_changes.items():
        if value is not None:
            env[key] = value
    out = subprocess.run([sys.executable, "-c", _PATHS_SCRIPT], env=env, capture_output=True, text=True, check=True)
    expected, ours = json.loads(out.stdout)
    return expected, ours


def private_dir(path: Path, mode: int = 0o700) -> str:
    path.mkdir(parents=True)
    path.chmod(mode)
    return str(path)


def test_the_socket_path_is_in_a_private_xdg_runtime_dir_like_platformdirs(tmp_path: Path) -> None:
    xdg = private_dir(tmp_path / "xdg")
    expected, ours = socket_paths_in({"XDG_RUNTIME_DIR": xdg})
    assert ours == expected == f"{xdg}/lazyd/lazyd.sock"


def test_a_missing_xdg_runtime_dir_is_still_used_like_platformdirs(tmp_path: Path) -> None:
    expected, ours = socket_paths_in({"XDG_RUNTIME_DIR": str(tmp_path / "not-yet")})
    assert ours == expected == f"{tmp_path}/not-yet/lazyd/lazyd.sock"


@pytest.mark.parametrize("mode", [0o755, 0o770, 0o711])
def test_an_xdg_runtime_dir_that_is_not_0700_is_skipped_like_platformdirs(tmp_path: Path, mode: int) -> None:
    tmp = private_dir(tmp_path / "tmp", 0o755)
    expected, ours = socket_paths_in({"XDG_RUNTIME_DIR": private_dir(tmp_path / "xdg", mode), "TMPDIR": tmp})
    assert ours == expected
    assert not ours.startswith(str(tmp_path / "xdg"))


def test_an_xdg_runtime_dir_below_a_group_writable_parent_is_skipped_like_platformdirs(tmp_path: Path) -> None:
    shared = private_dir(tmp_path / "shared", 0o775)
    expected, ours = socket_paths_in({"XDG_RUNTIME_DIR": private_dir(Path(shared) / "xdg")})
    assert ours == expected
    assert not ours.startswith(shared)


def test_an_xdg_runtime_dir_that_is_a_symlink_is_skipped_like_platformdirs(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(private_dir(tmp_path / "real"))
    expected, ours = socket_paths_in({"XDG_RUNTIME_DIR": str(tmp_path / "link")})
    assert ours == expected
    assert "link" not in ours


def test_a_relative_xdg_runtime_dir_is_ignored_like_platformdirs() -> None:
    expected, ours = socket_paths_in({"XDG_RUNTIME_DIR": "relative/run"})
    assert ours == expected


def test_without_xdg_runtime_dir_the_tmpdir_fallback_matches_platformdirs(tmp_path: Path) -> None:
    tmp = private_dir(tmp_path / "tmp", 0o755)
    expected, ours = socket_paths_in({"TMPDIR": tmp})
    assert ours == expected
    if not os.path.isdir(f"/run/user/{os.geteuid()}"):
        assert ours == f"{tmp}/runtime-{os.geteuid()}/lazyd/lazyd.sock"


def test_an_unusable_tmpdir_falls_back_to_tmp_like_platformdirs(tmp_path: Path) -> None:
    expected, ours = socket_paths_in({"TMPDIR": str(tmp_path / "missing"), "TEMP": "relative"})
    assert ours == expected


def test_lazyd_socket_overrides_every_other_choice(tmp_path: Path) -> None:
    path = str(tmp_path / "custom.sock")
    assert sockpath.default_socket_path({"LAZYD_SOCKET": path, "XDG_RUNTIME_DIR": str(tmp_path)}) == path
