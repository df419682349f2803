"""The daemon's single-instance lock and listening socket, made safe.

The socket side of "only this user reaches this daemon" (the runtime directory itself is made
private by ``lazyd.host.privatefiles.ensure_private_dir``):

- ``acquire_instance_lock``: one daemon per socket, by ``flock`` on a 0600 file opened with
  ``O_NOFOLLOW``; the kernel drops it when the holder dies, even by SIGKILL.
- ``bind_unix_socket``: a stale socket is replaced only on ECONNREFUSED (EAGAIN is a live daemon
  with a full backlog), and the socket is 0600 from birth. Only under the instance lock, or two
  starting daemons could unlink each other's socket.
- ``take_activated_socket``: systemd socket activation (fd 3), never bound, never unlinked.

Errors: ``SetupError`` (mode, owner, path length: one readable line) and ``AlreadyRunning`` (exit
0). Abstract-namespace sockets are never used: they carry no permissions at all.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import socket
import stat
import struct
from collections.abc import Mapping
from pathlib import Path

from lazyd.errors import AlreadyRunning, SetupError

log = logging.getLogger("lazyd.runtime")

# sun_path is 108 bytes on Linux including the terminating NUL; a 108-byte path would bind
# without a NUL (non-portable) and anything longer is truncated or refused by the kernel.
MAX_SUN_PATH_BYTES = 108
# Owner read/write only: the directory already protects the socket, this is the second wall.
SOCKET_MODE = 0o600
LOCK_ATTEMPTS = 10  # each retry means another daemon exited in between: rare
LOCK_MODE = 0o600
# umask during bind(): masks everything but owner rw, so the socket never exists with wider bits.
BIND_UMASK = 0o177
# sd_listen_fds(3): activated sockets start at this fd.
SD_LISTEN_FDS_START = 3
# struct ucred from <sys/socket.h>: pid_t, uid_t, gid_t.
_UCRED = struct.Struct("3i")


def acquire_instance_lock(path: Path) -> int:
    """Take the single-instance lock; its fd stays open for the daemon's life. The file is 0600,
    never through a symlink, and holds the owner's pid. Raises AlreadyRunning or SetupError. The
    daemon removes the file at exit, so a lock on a file removed between our open and our flock is no
    lock: the path is checked to still name the locked file, and opened again if not."""
    for _ in range(LOCK_ATTEMPTS):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, LOCK_MODE)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise SetupError(f"refusing lock file {path}: it is a symlink") from None
            raise SetupError(f"cannot open lock file {path}: {error.strerror}") from None
        try:
            _check_lock_file(path, fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                detail = f" (pid {holder})" if holder.isdigit() else ""
                raise AlreadyRunning(f"lazyd is already running{detail}: lock {path} is held") from None
            if not _names(path, fd):
                os.close(fd)
                continue  # the holder removed it as it exited: lock the file the path names now
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except BaseException:
            os.close(fd)
            raise
        return fd
    raise SetupError(f"cannot take the lock {path}: it keeps being removed")


def release_instance_lock(path: Path, fd: int) -> None:
    """Remove the lock file (while still holding it, and only if the path names it) and close it:
    a daemon that stopped leaves nothing in the runtime dir."""
    try:
        if _names(path, fd):
            os.unlink(path)
    except OSError:
        pass
    finally:
        os.close(fd)


def _names(path: Path, fd: int) -> bool:
    """Whether `path` is the file open on `fd`."""
    try:
        here, held = os.stat(path, follow_symlinks=False), os.fstat(fd)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)


def _check_lock_file(path: Path, fd: int) -> None:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise SetupError(f"refusing lock file {path}: it is not a regular file")
    if info.st_uid != os.getuid():
        raise SetupError(f"refusing lock file {path}: owned by uid {info.st_uid}, not {os.getuid()}")
    # The file is ours (same uid), so narrowing a mode left by an older version is safe.
    if stat.S_IMODE(info.st_mode) != LOCK_MODE:
        os.fchmod(fd, LOCK_MODE)


def bind_unix_socket(path: Path, backlog: int = 128) -> socket.socket:
    """Bind and listen on ``path``: mode 0600 from birth, non-blocking, close-on-exec. An existing
    socket is probed with connect(): ECONNREFUSED proves it stale (replaced); success or EAGAIN is a
    live daemon (AlreadyRunning). SetupError for a path too long, relative, or not a socket. The
    umask is process-wide: call this before starting threads that create files."""
    raw = os.fsencode(path)
    if not raw or b"\0" in raw or not os.path.isabs(raw):
        raise SetupError(f"refusing socket path {str(path)!r}: it must be an absolute filesystem path")
    if len(raw) >= MAX_SUN_PATH_BYTES:
        raise SetupError(
            f"socket path {path} is {len(raw)} bytes, the limit is {MAX_SUN_PATH_BYTES - 1}:"
            " set LAZYD_SOCKET to a shorter path, or use a shorter XDG_RUNTIME_DIR"
        )
    _clear_stale_socket(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old_umask = os.umask(BIND_UMASK)
        try:
            sock.bind(raw)
        finally:
            os.umask(old_umask)
        # The umask already made it 0600; this pins the mode even if a caller's umask handling
        # ever changes. By path, because fchmod on a socket fd would not reach the file.
        os.chmod(path, SOCKET_MODE)
        sock.listen(backlog)
        sock.setblocking(False)
        sock.set_inheritable(False)
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise AlreadyRunning(f"lazyd is already running: {path} was bound by another process") from None
        raise SetupError(f"cannot listen on {path}: {error.strerror}") from None
    return sock


def _clear_stale_socket(path: Path) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as error:
        raise SetupError(f"cannot inspect socket path {path}: {error.strerror}") from None
    if not stat.S_ISSOCK(info.st_mode):
        raise SetupError(f"refusing socket path {path}: something that is not a socket is there")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Non-blocking: a blocking connect to a live daemon with a full backlog would hang here.
    probe.setblocking(False)
    try:
        probe.connect(os.fsencode(path))
    except ConnectionRefusedError:
        pass  # the only proof of staleness; falls through to unlink
    except BlockingIOError:
        raise AlreadyRunning(f"lazyd is already running: {path} is alive (backlog full)") from None
    except FileNotFoundError:
        return  # removed since the lstat, nothing to clear
    except OSError as error:
        raise SetupError(f"cannot probe existing socket {path}: {error.strerror}") from None
    else:
        raise AlreadyRunning(f"lazyd is already running: {path} accepts connections")
    finally:
        probe.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def take_activated_socket(env: Mapping[str, str], pid: int) -> socket.socket | None:
    """The listening socket systemd passed as fd 3, or None when not socket-activated. A
    ``LISTEN_PID`` not ours means inherited variables: ignored, with a warning (to stderr even before
    logging is set up). The fd must be a listening AF_UNIX stream socket, else SetupError; it is made
    non-blocking and close-on-exec, never unlinked, and extra fds are marked close-on-exec too."""
    listen_pid = env.get("LISTEN_PID")
    listen_fds = env.get("LISTEN_FDS")
    if not listen_pid or not listen_fds:
        return None
    try:
        claimed_pid = int(listen_pid)
        count = int(listen_fds)
    except ValueError:
        raise SetupError(
            f"invalid socket activation variables LISTEN_PID={listen_pid!r} LISTEN_FDS={listen_fds!r}"
        ) from None
    if claimed_pid != pid or count < 1:
        why = f"LISTEN_PID={claimed_pid} is not our pid {pid}" if claimed_pid != pid else f"LISTEN_FDS={count}"
        log.warning("ignoring socket activation variables (%s): binding our own socket instead", why)
        return None
    for extra in range(SD_LISTEN_FDS_START + 1, SD_LISTEN_FDS_START + count):
        with contextlib.suppress(OSError):  # already closed: nothing a child could inherit
            os.set_inheritable(extra, False)
    try:
        sock = socket.socket(fileno=SD_LISTEN_FDS_START)
    except OSError as error:
        raise SetupError(f"socket activation: fd {SD_LISTEN_FDS_START} is not a socket ({error.strerror})") from None
    try:
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
            raise SetupError(
                f"socket activation: fd {SD_LISTEN_FDS_START} is {sock.family.name}/{sock.type.name},"
                " expected AF_UNIX/SOCK_STREAM"
            )
        if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            raise SetupError(f"socket activation: fd {SD_LISTEN_FDS_START} is not listening")
        sock.setblocking(False)
        sock.set_inheritable(False)
    except BaseException:
        # Leave the fd itself alone on refusal: it belongs to systemd's unit, not to us.
        sock.detach()
        raise
    return sock


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process that connected ``sock``, as the kernel recorded it."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return pid, uid, gid


def socket_identity(path: Path) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the socket file at ``path``; None if it is gone or not a socket: the
    ownership watch compares it with the one taken right after bind."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISSOCK(info.st_mode):
        return None
    return info.st_dev, info.st_ino
