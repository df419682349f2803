"""The quick resumer: after its daemon is lost, a waiting shell has the next daemon take its session back.

A `kill -9` of the daemon wakes every waiting shell (shim/handoff.py) at once. Each once exec'd
the whole Python shim to take its session back (shim/recover.py): ~65 ms of CPU per session, 32 s
of both cores for 1,000. Now, holding its resume slot (shim/slots.py), the shell execs the
shim's interpreter with `-I -S` on QUICK_SCRIPT, a few lines with no import beyond `_socket`,
`_signal` and `os`. It:

1. connects to the daemon's socket and checks that the peer is of our uid;
2. sends the **adopting hello** (`adopt` = the region's layout, docs/protocol.md, "Adoption"),
   encoded by the shim when it handed off and kept in a memfd the shell inherits (`hello_memfd`:
   the hello carries the environment, so it is never in argv or a file), with the client's stdin,
   stdout (pipes reopened through /proc/self/fd with O_NONBLOCK, as shim/handoff.py's `offer`
   does; sockets as they are) and the region as the lost daemon left it (SCM_RIGHTS);
3. reads the reply: exactly ADOPTED's bytes (never a refusal's or a welcome's) mean the daemon
   took the session back in place (lazyd/daemon/handoff/adopt.py): the socket becomes the
   shell's descriptor 9, the slot is freed, and the same waiting shell is exec'd again;
4. anything else (no daemon, another uid, a refusal, EOF, a daemon that does not know `adopt`)
   execs the full shim recovery as before, still holding the slot: it autostarts a daemon and
   does the recovery itself. Once the descriptors were sent, only the daemon closing the socket
   says it holds nothing of the session: a reply that does not come within HELLO_WAIT_S frees the
   slot, shuts our side and waits for that close, so that the region and the client's stdin
   never have two owners.
"""

from __future__ import annotations

import os

from lazyd.frames import MAX_FRAME_BYTES, Adopted, Hello
from lazyd.smallpack import frame as encode

from .connect import HELLO_WAIT_S as HELLO_WAIT_S
from .slots import SLOT_ENV, SLOT_FD

ADOPTED = encode(Adopted().to_map(), MAX_FRAME_BYTES)
# The bytes of lazyd/daemon/handoff/adopt.py's ADOPTED, made without msgpack (lazyd/smallpack.py):
# a shim's start imports this module, and msgpack is not loaded on that path.

QUICK_SCRIPT = r"""
import os, sys
a = sys.argv
def full():
    try:
        os.close(int(a[8]))
    except (OSError, ValueError):
        pass
    os.execv(a[9], a[9:])
try:
    import _signal
    for n, c in ((_signal.SIGTERM, 0), (_signal.SIGHUP, 0), (_signal.SIGINT, 130)):
        _signal.signal(n, lambda *_, c=c: os._exit(c))
    import _socket as S
    region = int(next(x for x in a[9:] if x.startswith("--resume-handoff="))[17:])
    hello = os.pread(int(a[8]), os.fstat(int(a[8])).st_size, 0)
    s = S.socket(S.AF_UNIX, S.SOCK_STREAM | S.SOCK_CLOEXEC)
    s.settimeout(HELLO_WAIT)
    s.connect(a[7])
    if int.from_bytes(s.getsockopt(S.SOL_SOCKET, S.SO_PEERCRED, 12)[4:8], sys.byteorder) != os.getuid():
        full()
    fds, own = [], []
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY)):
        if os.fstat(fd).st_mode & 0o170000 == 0o140000:
            fds.append(fd)
        else:
            own.append(os.open(f"/proc/self/fd/{fd}", flags | os.O_NONBLOCK | os.O_CLOEXEC))
            fds.append(own[-1])
    fds.append(region)
except Exception:
    full()
got = b""
try:
    sent = s.sendmsg([hello], [(S.SOL_SOCKET, S.SCM_RIGHTS, b"".join(f.to_bytes(4, sys.byteorder) for f in fds))])
    for fd in own:
        os.close(fd)
    if sent < len(hello):
        s.sendall(hello[sent:])
    while len(got) < len(ADOPTED):
        part = s.recv(len(ADOPTED) - len(got))
        if not part:
            break
        got += part
except Exception as exc:
    if not isinstance(exc, (ConnectionError, FileNotFoundError)):
        if os.environ.get(SLOT_ENV):
            os.close(SLOT_FD)
        try:
            s.settimeout(None)
            s.shutdown(S.SHUT_WR)
            while s.recv(4096):
                pass
        except OSError:
            pass
    got = b""
if got != ADOPTED:
    s.close()
    full()
s.settimeout(None)  # blocking again: the shell's `read` on a non-blocking socket fails at once
os.dup2(s.fileno(), WAIT_FD)
os.set_inheritable(WAIT_FD, True)  # dup2 onto itself (the socket got WAIT_FD) keeps close-on-exec
env = dict(os.environb)
if env.pop(SLOT_ENV.encode(), None) is not None:
    os.close(SLOT_FD)
try:
    if PAUSE:
        try:
            p = os.memfd_create("lazyd-wait", os.MFD_CLOEXEC | 16)  # MFD_EXEC, as shim/pause.py
        except OSError:
            p = os.memfd_create("lazyd-wait", os.MFD_CLOEXEC)
        if os.write(p, PAUSE) == len(PAUSE):
            os.execve(p, ["lazyd-wait", SHELL, "-c", WAIT_SCRIPT, *a[1:]], env)
except (AttributeError, OSError):
    pass
try:
    os.execve(SHELL, [SHELL, "-c", WAIT_SCRIPT, *a[1:]], env)
except OSError:
    pass
if os.read(WAIT_FD, 1):
    os._exit(0)
os.close(WAIT_FD)
full()
"""
# Its arguments are the waiting shell's (shim/handoff.py's WAIT_SCRIPT): the shell's name, the
# pause, flock(1)'s path, the slot's lock file, ORPHAN_SCRIPT, this script, the daemon's socket,
# the hello's memfd, then the full shim's command line. `script` fills in its constants. A session
# taken back waits again as it did at its start: in the pause (PAUSE, shim/pause.py's image, empty
# where it cannot run), else in the shell; where neither can be exec'd it waits itself (a line:
# the client left; EOF: recover again).


def script(shell: str, wait_script: str, wait_fd: int, pause: bytes = b"") -> str:
    """QUICK_SCRIPT with its constants: the waiting shell, its script, its socket descriptor and
    the pause's image to wait in first (shim/pause.py; empty: the shell waits)."""
    # WAIT_SCRIPT last: no name is looked for in what is put in its place.
    values = {"HELLO_WAIT": repr(HELLO_WAIT_S), "ADOPTED": repr(ADOPTED), "SLOT_ENV": repr(SLOT_ENV),
              "SLOT_FD": str(SLOT_FD), "WAIT_FD": str(wait_fd), "SHELL": repr(shell), "PAUSE": repr(pause),
              "WAIT_SCRIPT": repr(wait_script)}
    text = QUICK_SCRIPT
    for name, value in values.items():
        text = text.replace(name, value)
    return text


def hello_memfd(hello: Hello) -> int | None:
    """A memfd (close-on-exec) holding the adopting hello made from the session's `hello`: no
    `resume` (the daemon takes the handshake from the region), `adopt` instead of `handoff`.
    None where none can be made (the waiting shell then runs the full recovery, as before)."""
    from lazyd.handoff.region import LAYOUT, pwrite_all

    adopting = Hello(hello.role, hello.pid, hello.argv, hello.cwd, hello.env, hello.opts, hello.server, [],
                     hello.env_raw, None, None, LAYOUT)
    try:
        frame = encode(adopting.to_map(), MAX_FRAME_BYTES)  # as wire.encode would, without msgpack
        fd: int = os.memfd_create("lazyd-adopt", os.MFD_CLOEXEC)
    except (AttributeError, OSError, ValueError, TypeError):
        return None
    try:
        pwrite_all(fd, frame, 0)
    except OSError:
        os.close(fd)
        return None
    return fd
