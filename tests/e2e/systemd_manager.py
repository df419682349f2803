"""A real `systemd --user` for one test: its own mount namespace, cgroup, HOME and runtime dir.

These machines run as root with no systemd as PID 1, yet Debian's systemd can run a user manager
inside a private mount namespace (`unshare -m --propagation private`) once it is given what a
booted system has and what it must not touch:

- a tmpfs on /run/systemd with /run/systemd/system in it (without it the manager exits: "system
  has not been booted with systemd"); the host's /run/systemd is untouched;
- a FIFO bound over /dev/kmsg: there is no journald, so the manager logs to kmsg; the FIFO is
  read (opened read-write, so that the manager closing its end is never an EOF) into
  `manager.log`, which the tests read for "Main process exited", "Killing process" and starts;
- no cgroup-v1 resource hierarchy (cpu, memory, ...): as root the manager would move itself into
  `init.scope` of each of them; they are unmounted inside the namespace only;
- a cgroup of its own (in the name=systemd and the unified hierarchy, whichever exist): the
  manager takes its cgroup as its root, so two tests never share `/app.slice/lazyd.service`.

`systemctl --user` reaches the manager through `$XDG_RUNTIME_DIR/systemd/private` (no D-Bus), from
outside the namespace. Where any of this cannot be done (not root, no unshare, no systemd, a
mount refused), `UserManager.start` skips the test with the reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

SYSTEMD = "/lib/systemd/systemd"
START_WAIT_S = 10.0  # the manager answers within a fraction of a second; reached only when broken
STEP_TIMEOUT_S = 30.0  # bound on one systemctl call
CGROUP_ROOT = Path("/sys/fs/cgroup")
RESOURCE_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids",
                        "net_cls", "net_prio", "perf_event", "hugetlb", "rdma", "misc", "cpu,cpuacct",
                        "net_cls,net_prio")

# Run inside the namespace; $1 is the test's directory, $2 the cgroup name. Each step says what
# failed on stderr, which becomes the skip reason.
WRAPPER = r"""
set -e
D=$1; G=$2
mount -t tmpfs tmpfs /run/systemd || { echo "cannot mount a tmpfs on /run/systemd" >&2; exit 3; }
mkdir /run/systemd/system
for c in RESOURCES; do
    if mountpoint -q "/sys/fs/cgroup/$c" 2>/dev/null; then umount "/sys/fs/cgroup/$c" || true; fi
done
joined=
for h in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified /sys/fs/cgroup; do
    if [ -f "$h/cgroup.procs" ] && [ ! -e "$h/$G" ]; then
        mkdir "$h/$G" && echo $$ > "$h/$G/cgroup.procs" && joined="$joined $h/$G"
    fi
done
[ -n "$joined" ] || { echo "cannot make a cgroup of its own for the manager" >&2; exit 3; }
echo "$joined" > "$D/cgroups"
mkfifo "$D/kmsg"
cat 0<>"$D/kmsg" >> "$D/manager.log" &
mount --bind "$D/kmsg" /dev/kmsg || { echo "cannot bind a FIFO over /dev/kmsg" >&2; exit 3; }
# The manager logs to the console when it has one; kmsg is the FIFO.
export SYSTEMD_LOG_TARGET=kmsg
exec @MANAGER@ --user
""".replace("RESOURCES", " ".join(RESOURCE_CONTROLLERS)).replace("@MANAGER@", SYSTEMD)


def unavailable_reason() -> str | None:
    """Why no user manager can run here, or None."""
    if os.geteuid() != 0:
        return "a user manager in a private mount namespace needs root (CI runs as root)"
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    if not os.access(SYSTEMD, os.X_OK):
        return f"{SYSTEMD} is not installed"
    if shutil.which("systemctl") is None:
        return "systemctl is not installed"
    if not (CGROUP_ROOT / "systemd").is_dir() and not (CGROUP_ROOT / "cgroup.procs").is_file():
        return "no cgroup hierarchy systemd can use under /sys/fs/cgroup"
    return None


class UserManager:
    """One `systemd --user`; `env` is the user's (HOME, XDG_RUNTIME_DIR, ...), shared with shims."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root / "manager"
        self.env = env
        self.cgroup = f"lazyd-test-{uuid.uuid4().hex[:10]}"
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(cls, root: Path, env: dict[str, str]) -> UserManager:
        reason = unavailable_reason()
        if reason is not None:
            print(f"skipping: {reason}")
            pytest.skip(reason)
        manager = cls(root, env)
        manager.root.mkdir()
        out = open(manager.root / "manager.stderr", "wb")
        manager.proc = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", WRAPPER, "wrapper", str(manager.root),
             manager.cgroup], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
        private = Path(env["XDG_RUNTIME_DIR"]) / "systemd" / "private"
        deadline = time.monotonic() + START_WAIT_S
        while time.monotonic() < deadline:
            if manager.proc.poll() is not None:
                text = (manager.root / "manager.stderr").read_text(errors="replace").strip()
                manager.stop()
                reason = f"the user manager cannot run here: {text.splitlines()[-1] if text else manager.proc.returncode}"
                print(f"skipping: {reason}")
                pytest.skip(reason)
            if private.exists() and manager.systemctl("show", "--property=SystemState", check=False).stdout.strip() in (
                    "SystemState=running", "SystemState=degraded"):
                return manager
            time.sleep(0.05)
        manager.stop()
        raise AssertionError(f"the user manager did not answer within {START_WAIT_S} s")

    def systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["systemctl", "--user", "--no-pager", *args], env=self.env, capture_output=True,
                              text=True, timeout=STEP_TIMEOUT_S)
        if check and done.returncode != 0:
            raise AssertionError(f"systemctl --user {' '.join(args)}: exit {done.returncode}: "
                                 f"{done.stderr.strip() or done.stdout.strip()}\n--- manager log ---\n{self.log()[-3000:]}")
        return done

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.systemctl("show", unit, *(f"--property={p}" for p in props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def prop(self, unit: str, name: str) -> str:
        return self.show(unit, name).get(name, "")

    def main_pid(self) -> int:
        return int(self.prop("lazyd.service", "MainPID") or 0)

    def log(self) -> str:
        """The manager's log so far (kmsg lines: `<level>systemd[pid]: message`)."""
        try:
            return (self.root / "manager.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def unit_dir(self) -> Path:
        return Path(self.env.get("XDG_CONFIG_HOME", Path(self.env["HOME"]) / ".config")) / "systemd" / "user"

    def drop_in(self, unit: str, text: str) -> None:
        """A drop-in for `unit` (then daemon-reload), as `systemctl --user edit` would write."""
        directory = self.unit_dir() / f"{unit}.d"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "test.conf").write_text(text)
        self.systemctl("daemon-reload")

    def cgroup_pids(self, unit: str) -> set[int]:
        """Every process in `unit`'s cgroup (as the manager tracks it), from the cgroup files."""
        path = self.prop(unit, "ControlGroup")
        if not path:
            return set()
        pids: set[int] = set()
        for base in self._hierarchies():
            # ControlGroup is relative to the hierarchy's root, and includes the manager's own cgroup.
            unit_dir = base.parent / path.lstrip("/")
            for procs in unit_dir.rglob("cgroup.procs") if unit_dir.is_dir() else []:
                pids.update(int(p) for p in procs.read_text().split())
        return pids

    def _hierarchies(self) -> list[Path]:
        try:
            joined = (self.root / "cgroups").read_text().split()
        except FileNotFoundError:
            return []
        return [Path(p) for p in joined]

    def stop(self) -> None:
        """Kill everything in the manager's cgroups, then the manager (tests assert what a stop
        does themselves; here only speed matters), and remove the cgroups. The manager goes last
        so that it reaps what was killed."""
        manager_pid = self.proc.pid if self.proc is not None and self.proc.poll() is None else None
        for base in self._hierarchies():
            for _ in range(50):
                pids = {int(p) for procs in base.rglob("cgroup.procs") for p in procs.read_text().split()}
                pids.discard(manager_pid or -1)
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.02)
        if manager_pid is not None:
            try:
                os.killpg(manager_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)  # type: ignore[union-attr]
        for base in self._hierarchies():
            for directory in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                try:
                    directory.rmdir()
                except OSError:
                    pass
            try:
                base.rmdir()
            except OSError:
                pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
