"""The pause: what a handed-off shim waits in, where it can run: 209 bytes of x86-64 code.

Once the daemon serves the client's pipes the shim only has to be there (shim/handoff.py): the
client watches its process, and it must take over when the daemon is lost. dash did the waiting:
1.6 MiB resident for a `read`, 1.2 MiB of it the pages of the C library it maps. This program does
the same wait with no library at all, in 16 KiB, as a container's pause process does:

- it blocks on the daemon's socket (descriptor 9) for a line; a whole line is the daemon's cue
  that the client left: exit 0;
- EOF or an error (the daemon is gone, or let the session go) execs its argv[1:], the waiting
  shell's own command line (shim/handoff.py's WAIT_SCRIPT in dash), whose `read` on the same
  socket finds that EOF at once and goes on as it always has: the resume slot, the quick resumer,
  the full recovery;
- SIGTERM and SIGHUP end it with 0, SIGINT with 130, the shim's own rules (shim/main.py);
- it names itself `lazyd-wait` (its process name would otherwise be the number of the descriptor
  it was run from).

It runs from a memfd (`os.execve` on the descriptor): no file is written for it, and the kernel
refuses writes to a file while it is being run. Only on x86-64 Linux; elsewhere, or where a memfd
cannot be run (`vm.memfd_noexec`), the shim waits in dash as before. SOURCE is the program, in
GNU as syntax; CODE is what `as` makes of it, position-independent, and IMAGE the smallest ELF
file that loads it: tests/unit/test_pause.py assembles SOURCE again and checks CODE against it.
Standard library only (errno, os, struct).
"""

from __future__ import annotations

import errno
import os
import struct

SOURCE = r"""
        .intel_syntax noprefix
        .text
        lea     rax, [rip + handler]    # struct sigaction below the stack pointer, read once
        mov     [rsp - 40], rax         #   sa_handler
        mov     qword ptr [rsp - 32], 0x04000000    # sa_flags: SA_RESTORER, which x86-64 requires
        mov     [rsp - 24], rax         #   sa_restorer: never called, the handler exits
        mov     qword ptr [rsp - 16], 0 #   sa_mask: nothing blocked
        lea     rsi, [rsp - 40]         # rt_sigaction(signal, &action, NULL, 8): HUP, INT, TERM
        xor     edx, edx
        mov     r10d, 8
        mov     edi, 1
        mov     eax, 13
        syscall
        mov     edi, 2
        mov     eax, 13
        syscall
        mov     edi, 15
        mov     eax, 13
        syscall
        mov     edi, 15                 # prctl(PR_SET_NAME, "lazyd-wait"): not the memfd's number
        lea     rsi, [rip + name]
        mov     eax, 157
        syscall
next:
        xor     eax, eax                # read(9, rsp - 8, 1)
        mov     edi, 9
        lea     rsi, [rsp - 8]
        mov     edx, 1
        syscall
        cmp     rax, -4                 # EINTR: read again
        je      next
        cmp     rax, 1
        jne     gone                    # EOF or an error
        cmp     byte ptr [rsp - 8], 10
        jne     next                    # a line is read to its end
        xor     edi, edi                # a whole line: the client left, exit 0
        jmp     leave
gone:
        mov     rdi, [rsp + 16]         # execve(argv[1], &argv[1], envp)
        lea     rsi, [rsp + 16]
        mov     rax, [rsp]
        lea     rdx, [rsp + 16 + rax * 8]
        mov     eax, 59
        syscall
        mov     edi, 127                # argv[1] could not be run
leave:
        mov     eax, 231                # exit_group(edi)
        syscall
handler:
        xor     eax, eax                # exit 130 for SIGINT (2), 0 for SIGHUP and SIGTERM
        cmp     edi, 2
        mov     edi, 130
        cmovne  edi, eax
        jmp     leave
name:
        .asciz  "lazyd-wait"
"""

CODE = bytes.fromhex(
    "488d05b000000048894424d848c74424e00000000448894424e848c74424f000000000488d7424d831d241ba08000000"
    "bf01000000b80d0000000f05bf02000000b80d0000000f05bf0f000000b80d0000000f05bf0f000000488d3566000000"
    "b89d0000000f0531c0bf09000000488d7424f8ba010000000f054883f8fc74e74883f801750b807c24f80a75da31ffeb"
    "1f488b7c2410488d742410488b0424488d54c410b83b0000000f05bf7f000000b8e70000000f0531c083ff02bf820000"
    "000f45f8ebea6c617a79642d7761697400"
)

BASE = 0x400000  # where the image is loaded (a fixed-address executable: no relocation needed)

MACHINE = "x86_64"  # os.uname().machine where CODE runs


def image() -> bytes:
    """A static ELF executable of CODE: the ELF header, two program headers (the code loaded
    read-and-execute; a stack that is not executable) and the code, its entry point."""
    header, entry = 64, 56
    start = header + 2 * entry
    size = start + len(CODE)
    ident = b"\x7fELF" + bytes((2, 1, 1, 0)) + bytes(8)  # 64-bit, little-endian, version 1, System V
    elf = struct.pack("<HHIQQQIHHHHHH", 2, 62, 1, BASE + start, header, 0, 0, header, entry, 2, 0, 0, 0)
    load = struct.pack("<IIQQQQQQ", 1, 5, 0, BASE, BASE, size, size, 0x1000)  # PT_LOAD, R+X
    stack = struct.pack("<IIQQQQQQ", 0x6474E551, 6, 0, 0, 0, 0, 0, 16)  # PT_GNU_STACK, R+W
    return ident + elf + load + stack + CODE


def runs_here() -> bool:
    return os.uname().machine == MACHINE


MFD_EXEC = 0x0010
# <linux/memfd.h>: a memfd that may be executed, asked for by name so that `vm.memfd_noexec=1`
# (which seals the others against exec) lets it run; Linux before 6.3 refuses the flag (EINVAL),
# and there every memfd may be executed anyway.


def memfd(data: bytes) -> int | None:
    """A memfd (close-on-exec) holding the image `data`, to run with `os.execve`; None where none
    can be made (no memfd; `vm.memfd_noexec=2`, which refuses an executable one)."""
    try:
        try:
            fd: int = os.memfd_create("lazyd-wait", os.MFD_CLOEXEC | MFD_EXEC)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            fd = os.memfd_create("lazyd-wait", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return None
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        os.close(fd)
        return None
    return fd
