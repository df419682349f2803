"""Hundreds of sessions at once, the installed product against direct, in one run.

    python -m tests.benchmarks.bench_scale [--sessions 1000] [--servers 30] [--starts 15] [--venv DIR]

The product as users install it: a venv built from this checkout (`pip install .`, not editable),
its daemon started with soft descriptor limit 1024 (a systemd user service's default), its shims
started by raw stdio clients under the same limit, against the stdlib echo server
(tests/benchmarks/echo_server.py), `--servers` registrations of it. Printed, each beside direct:

1. sessions served by the daemon (`lazyctl status`: attached clients, refusals, shims that ran
   their server directly) out of `--sessions`;
2. the daemon's descriptors per idle session, by kind;
3. warm session start p50 (spawn, `initialize` and `tools/list` answered) with none open and with
   all open, beside `python -c pass` of the venv's interpreter and a direct echo server's start;
   and the daemon's part of a start (no Python started) with none open, with the shims open, and
   with as many raw sessions open that this process holds (no waiting process resident);
4. memory per session: the daemon's growth plus the waiters' PSS, against one direct echo
   server's PSS;
5. the daemon's CPU while the sessions idle;
6. 1 MiB echo round trips, lazyd against direct;
7. a kill -9 of the daemon with every session open: the time until every session has answered a
   `tools/call` again, and the most Python shims running at once meanwhile (the waiters resume
   as Python shims); with `--only-kill --systemd`, under a real `systemd --user` running the
   installed units instead, where the sessions wait in the fd store and no waiter resumes;
8. the fixed cost: Σ RSS and Σ PSS of 4 clients of server-everything (daemon + server + waiting
   shims) against 4 direct servers, from a daemon of its own, and with `--mcp-mux PATH` (a built
   mcp-mux binary) against mcp-mux's shims, daemon and server in the same run, and the floor
   beside them: the same sum with lazyd's daemon replaced by a bare interpreter that imported
   trio (tests/benchmarks/fixed_cost.py; `--only-everything` runs this row alone).
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from shim import slots
from tests.benchmarks.common import LineClient, cpu_seconds, median, rss_kib, time_calls
from tests.benchmarks.fixed_cost import fixed_cost
from tests.benchmarks.scale_support import (
    HandedOff,
    close_all,
    fd_kinds,
    installed_venv,
    interpreter,
    kill_daemon,
    lazyctl_status,
    open_sessions,
    pss_kib,
    raw_start,
    SOFT_NOFILE,
    row,
    python_shims,
    scale_env,
    served_count,
    servers,
    shim_client,
    socket_of,
    soft_limit,
    start_daemon,
)

SETTLE_S = 1.0  # after opening sessions: the last shims exec their waiters
IDLE_S = 10.0  # the daemon's CPU is read over this long with every session open
SAMPLE_S = 0.1
# How often the kill -9 measurement counts the Python processes: the slots keep them at their
# bound for most of the resume, so ten looks a second see it without taking the herd's CPU.

RESUME_BOUND_S = 180.0  # after a kill -9: give up waiting for the sessions after this long


def starts(venv: Path, env: dict[str, str], server: list[str], runs: int) -> tuple[list[float], list[float], list[float]]:
    """Warm starts through the shim, `python -c pass` and direct starts, interleaved. `python -c
    pass` is spawned as `shim_client` spawns the shim (a fork that sets the clients' soft limit),
    so that the ratio the target reads does not charge the shim for how it was started."""
    bare, warm, direct = [], [], []
    python = str(venv / "bin" / "python")
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run([python, "-c", "pass"], check=True, preexec_fn=soft_limit(SOFT_NOFILE))
        bare.append(time.perf_counter() - began)
        began = time.perf_counter()
        client = shim_client(venv, env, server)
        client.handshake()
        client.request("tools/list")
        warm.append(time.perf_counter() - began)
        client.close()
        began = time.perf_counter()
        client = LineClient(server, env)
        client.handshake()
        client.request("tools/list")
        direct.append(time.perf_counter() - began)
        client.close()
    return bare, warm, direct


def ms(samples: list[float]) -> str:
    return f"{median(samples) * 1e3:.1f} ms"


def resume_after_kill(venv: Path, env: dict[str, str], kill: Callable[[], None],
                      clients: list[LineClient]) -> tuple[float, int, int, float, tuple[float, int], float]:
    """kill -9 the daemon; (seconds until every session answered a call, most Python shims at
    once, sessions that never answered within the bound, CPU seconds the sessions' own processes
    spent taking their sessions back: each waiter, the Python shim it execs and the waiter
    that one execs again are one process, so its CPU clock counts the whole recovery, and the new
    daemon's CPU seconds and RSS in KiB once every session answered, and the CPU seconds of the
    count of Python processes)."""
    most = 0
    done = threading.Event()

    pids = [client.proc.pid for client in clients]
    sampled = 0.0  # the sampler's own CPU, printed: it shares the cores with the herd

    def sample() -> None:
        nonlocal most, sampled
        while not done.is_set():
            began = time.thread_time()
            most = max(most, python_shims(venv, pids))
            sampled += time.thread_time() - began
            time.sleep(SAMPLE_S)

    before = [cpu_seconds(client.proc.pid) for client in clients]
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    began = time.perf_counter()
    kill()
    for client in clients:
        client.send("tools/call", {"name": "echo", "arguments": {"text": "again"}})
    unanswered = 0
    for client in clients:
        client.stdout.flush()
        remaining = RESUME_BOUND_S - (time.perf_counter() - began)
        if remaining <= 0 or not _answer_within(client, remaining):
            unanswered += 1
    took = time.perf_counter() - began
    done.set()
    sampler.join()
    used = sum(cpu_seconds(client.proc.pid) - was for client, was in zip(clients, before))
    successor = int(lazyctl_status(venv, env).get("daemon_pid") or 0)
    return took, most, unanswered, used, (cpu_seconds(successor), rss_kib(successor)), sampled


def kill_row(sessions: int, took: float, most: int, unanswered: int, used: float,
             successor: tuple[float, int], sampled: float) -> None:
    cores = os.cpu_count() or 1
    row(f"kill -9 with {sessions} waiters: until every session answers", "-", f"{took:.1f} s",
        f"{unanswered} never answered within {RESUME_BOUND_S:.0f} s; most Python processes at once "
        f"(recovering shims): {most} "
        f"({slots.count()} resume slots; counting them took {sampled:.2f} s of CPU)")
    row("  CPU floor of that: the recoveries' CPU / cores", "-", f"{used / cores:.1f} s",
        f"{used:.1f} s of CPU in the sessions' processes ({used / sessions * 1e3:.0f} ms each) / {cores} cores")
    row("  the floor with the new daemon's CPU: both / cores", "-", f"{(used + successor[0]) / cores:.1f} s",
        f"what a herd that kept every core busy would take: each session resumes in a Python of its own "
        f"and the daemon takes it back")
    row("  the new daemon: CPU since its start, RSS", "-", f"{successor[0]:.1f} s",
        f"{successor[0] / sessions * 1e3:.1f} ms per session taken back (one core); RSS {successor[1] / 1024:.1f} MiB")


def _answer_within(client: LineClient, timeout_s: float) -> bool:
    import select

    deadline = time.monotonic() + timeout_s
    poller = select.poll()  # not select(): a thousand clients' descriptors are past FD_SETSIZE
    poller.register(client.stdout, select.POLLIN)
    while time.monotonic() < deadline:
        if not poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
            return False
        line = client.stdout.readline()
        if not line:
            return False
        if b'"result"' in line and b"again" in line:
            return True
    return False


def big_echo(venv: Path, env: dict[str, str], server: list[str], calls: int) -> None:
    big = "y" * (1024 * 1024)
    sides = {"direct": LineClient(server, env), "lazyd": shim_client(venv, env, server)}
    for client in sides.values():
        client.handshake()
        time_calls(client, 2, big)
    rates: dict[str, list[float]] = {"direct": [], "lazyd": []}
    for _ in range(calls):
        for side in ("direct", "lazyd", "lazyd", "direct"):
            samples = time_calls(sides[side], 1, big)
            rates[side].append(2 / samples[0])
    close_all(list(sides.values()))
    d, z = median(rates["direct"]), median(rates["lazyd"])
    row("1 MiB echo, MiB/s both ways (median)", f"{d:.0f}", f"{z:.0f}", f"{z / d:.2f}x of direct")


def raw_with_sessions_open(env: dict[str, str], registrations: list[list[str]], probe: list[str], sessions: int,
                           samples: int) -> list[float]:
    """The daemon's part of a start (`raw_start`) with `sessions` raw hand-off sessions open: held
    by this process, so that no waiter or shim is resident. Beside the same with the shims
    open, it tells what grows with the sessions in the daemon from what the machine's thousand
    other processes cost every start (`python -c pass` slows too)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # three descriptors per session, here
    held = [HandedOff(socket_of(env), env, registrations[n % len(registrations)]) for n in range(sessions)]
    try:
        time.sleep(SETTLE_S)
        return [raw_start(socket_of(env), env, probe) for _ in range(samples)]
    finally:
        for session in held:
            session.close()
        time.sleep(SETTLE_S)


def only_kill(venv: Path, sessions: int, count: int) -> None:
    print(f"the product's python {interpreter(venv)}, load average {os.getloadavg()[0]:.2f} at start; {sessions} sessions "
          f"over {count} echo servers; the kill -9 alone; installed product: {venv}")
    with scale_env(venv) as env:
        daemon = start_daemon(venv, env)
        try:
            clients = _opened(venv, env, count, sessions)
            kill_row(sessions, *resume_after_kill(venv, env, partial(kill_daemon, daemon), clients))
            print(f"load average {os.getloadavg()[0]:.2f} after the kill -9")
            close_all(clients)
            subprocess.run([str(venv / "bin" / "lazyctl"), "stop"], env=env, capture_output=True, timeout=60)
        finally:
            if daemon.poll() is None:
                daemon.terminate()
                daemon.wait(timeout=30)


def _opened(venv: Path, env: dict[str, str], count: int, sessions: int) -> list[LineClient]:
    registrations = servers(venv, count)
    began = time.perf_counter()
    clients = open_sessions(venv, env, registrations, sessions)
    print(f"opened in {time.perf_counter() - began:.0f} s; load average {os.getloadavg()[0]:.2f}")
    for client in clients[:count]:  # every server running
        client.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
    time.sleep(SETTLE_S)
    return clients


def only_kill_systemd(venv: Path, sessions: int, count: int) -> None:
    """The kill -9 under a real `systemd --user` (tests/e2e/systemd_manager.py) running the units
    `lazyctl systemd install` writes: the sessions wait in the fd store (lazyd/daemon/handoff/stored_sessions.py)."""
    from tests.e2e.systemd_manager import UserManager

    print(f"the product's python {interpreter(venv)}, load average {os.getloadavg()[0]:.2f} at start; {sessions} sessions "
          f"over {count} echo servers; the kill -9 alone, under systemd --user; installed product: {venv}")
    with scale_env(venv) as env:
        root = Path(env["HOME"]).parent
        manager = UserManager.start(root, env)
        try:
            installed = subprocess.run([str(venv / "bin" / "lazyctl"), "systemd", "install"], env=env,
                                       capture_output=True, text=True, timeout=60)
            assert installed.returncode == 0, installed.stderr
            manager.systemctl("daemon-reload")
            manager.systemctl("enable", "lazyd")
            manager.systemctl("start", "lazyd.socket")
            clients = _opened(venv, env, count, sessions)
            stored = manager.prop("lazyd.service", "NFileDescriptorStore")
            restart = manager.prop("lazyd.service", "RestartUSec")
            print(f"the fd store holds {stored} descriptors; systemd restarts lazyd after {restart}")

            def kill() -> None:
                os.kill(manager.main_pid(), signal.SIGKILL)

            kill_row(sessions, *resume_after_kill(venv, env, kill, clients))
            print(f"load average {os.getloadavg()[0]:.2f} after the kill -9; "
                  f"the new daemon's log: {_kept_lines(Path(env['XDG_STATE_HOME']) / 'lazyd' / 'lazyd.log')}")
            close_all(clients)
            manager.systemctl("stop", "lazyd.socket", "lazyd.service", check=False)
        finally:
            manager.stop()


def _kept_lines(log: Path) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    kept = text.count("kept by systemd across the crash")
    resumed = text.count("its daemon was lost or let it go")
    return f"{kept} sessions taken back from the fd store, {resumed} through their shims"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--servers", type=int, default=30)
    parser.add_argument("--starts", type=int, default=15, help="warm starts per measurement")
    parser.add_argument("--venv", type=Path, default=Path("/tmp/lazyd-bench-venv"),
                        help="where the installed product is built (reused when it exists)")
    parser.add_argument("--no-kill", action="store_true", help="skip the kill -9 measurement")
    parser.add_argument("--no-everything", action="store_true", help="skip the server-everything figures")
    parser.add_argument("--mcp-mux", type=Path, metavar="PATH",
                        help="a built mcp-mux binary: the server-everything figures beside it too")
    parser.add_argument("--only-kill", action="store_true",
                        help="open the sessions and measure the kill -9 alone (none of the other figures)")
    parser.add_argument("--systemd", action="store_true",
                        help="with --only-kill: the daemon runs under a real systemd --user, as `lazyctl systemd install` sets it up")
    parser.add_argument("--reinstall", action="store_true", help="install this checkout into an existing --venv again")
    parser.add_argument("--only-everything", action="store_true", help="the server-everything figures alone")
    parser.add_argument("--everything-clients", type=int, default=4, metavar="N",
                        help="clients of server-everything in those figures (default 4)")
    args = parser.parse_args()
    if args.everything_clients < 1:
        parser.error("--everything-clients: at least 1")
    if args.mcp_mux is not None and not os.access(args.mcp_mux, os.X_OK):
        parser.error(f"--mcp-mux {args.mcp_mux}: not an executable file")
    venv = installed_venv(args.venv, refresh=args.reinstall)
    if args.only_everything:
        print(f"the product's python {interpreter(venv)}, load average {os.getloadavg()[0]:.2f} at start; installed product: {venv}")
        fixed_cost(venv, args.mcp_mux, args.everything_clients)
        print(f"load average {os.getloadavg()[0]:.2f} at the end")
        return
    if args.only_kill:
        (only_kill_systemd if args.systemd else only_kill)(venv, args.sessions, args.servers)
        return
    print(f"the product's python {interpreter(venv)}, load average {os.getloadavg()[0]:.2f} at start; "
          f"{args.sessions} sessions over {args.servers} echo servers; daemon and clients at soft "
          f"RLIMIT_NOFILE 1024; installed product: {venv}")
    row("", "direct", "lazyd")
    with scale_env(venv) as env:
        daemon = start_daemon(venv, env)
        try:
            registrations = servers(venv, args.servers)
            probe = servers(venv, args.servers + 1)[-1]  # a registration of its own, warm
            close_all(open_sessions(venv, env, [*registrations, probe], args.servers + 1, batch=args.servers + 1))
            time.sleep(SETTLE_S)
            base_fds = fd_kinds(daemon.pid)
            base_rss = rss_kib(daemon.pid)
            bare0, warm0, direct0 = starts(venv, env, probe, args.starts)
            raw0 = [raw_start(socket_of(env), env, probe) for _ in range(3 * args.starts)]
            rawn = raw_with_sessions_open(env, registrations, probe, args.sessions, 3 * args.starts)
            began = time.perf_counter()
            clients = open_sessions(venv, env, registrations, args.sessions)
            opened_s = time.perf_counter() - began
            for client in clients[: args.servers]:  # every server running
                client.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
            time.sleep(SETTLE_S)
            status = lazyctl_status(venv, env)
            fds = fd_kinds(daemon.pid)
            grown = rss_kib(daemon.pid) - base_rss
            waiters = sum(pss_kib(c.proc.pid) for c in clients)
            direct_pss = []
            for server in registrations[:5]:
                one = LineClient(server, env)
                one.handshake()
                direct_pss.append(pss_kib(one.proc.pid))
                one.close()
            served = served_count(status)
            row("sessions served by the daemon", f"{args.sessions}", f"{served}",
                f"refused {status.get('refused') or 0}, run directly {status.get('fallbacks') or 0}; "
                f"opened in {opened_s:.0f} s")
            per_fd = (sum(fds.values()) - sum(base_fds.values())) / args.sessions
            kinds = ", ".join(f"{k} {(fds[k] - base_fds[k]) / args.sessions:.2f}" for k in sorted(fds) if fds[k] != base_fds[k])
            # Before Python 3.13 the region's mmap keeps a descriptor of its own (lazyd/daemon/handoff/ledger.py).
            target = 3 if sys.version_info >= (3, 13) else 4
            row(f"daemon descriptors per idle session (target <= {target})", "-", f"{per_fd:.2f}", kinds)
            bare1, warm1, direct1 = starts(venv, env, probe, args.starts)
            raw1 = [raw_start(socket_of(env), env, probe) for _ in range(3 * args.starts)]
            row("the daemon's part: hello to initialize answered, no Python start", "-",
                f"{ms(raw0)} / {ms(raw1)}", f"none / {args.sessions} open: {median(raw1) / median(raw0):.2f}x")
            row(f"the same with {args.sessions} raw sessions open instead (no waiting processes)", "-",
                f"{ms(raw0)} / {ms(rawn)}", f"{median(rawn) / median(raw0):.2f}x: the daemon's own part, without "
                "what the machine's other processes cost")
            row("python -c pass of the venv's interpreter (none / all open)", ms(bare0), ms(bare1))
            row("warm session start p50, none open", ms(direct0), ms(warm0),
                f"{median(warm0) / median(bare0):.2f}x python -c pass (target <= 1.5)")
            row(f"warm session start p50, {args.sessions} open", ms(direct1), ms(warm1),
                f"{median(warm1) / median(warm0):.2f}x none open (target <= 1.2); "
                f"{median(warm1) / median(bare1):.2f}x python -c pass, so "
                f"{(median(warm1) / median(bare1)) / (median(warm0) / median(bare0)):.2f}x none open "
                f"beside what the machine itself slowed (direct: {median(direct1) / median(direct0):.2f}x)")
            per_session = (grown + waiters) / args.sessions / 1024
            row("memory per session: daemon growth + waiter PSS, MiB", f"{statistics.mean(direct_pss) / 1024:.2f}",
                f"{per_session:.2f}", f"daemon +{grown / 1024:.1f} MiB, waiters {waiters / 1024:.1f} MiB in all")
            before = cpu_seconds(daemon.pid)
            time.sleep(IDLE_S)
            row(f"daemon CPU while {args.sessions} sessions idle", "-",
                f"{(cpu_seconds(daemon.pid) - before) / IDLE_S * 100:.2f} %")
            big_echo(venv, env, registrations[0], 5)
            if args.no_kill:
                close_all(clients)
            else:
                kill_row(args.sessions, *resume_after_kill(venv, env, partial(kill_daemon, daemon), clients))
                close_all(clients)
                subprocess.run([str(venv / "bin" / "lazyctl"), "stop"], env=env, capture_output=True, timeout=60)
        finally:
            if daemon.poll() is None:
                daemon.terminate()
                daemon.wait(timeout=30)
    if not args.no_everything:
        fixed_cost(venv, args.mcp_mux, args.everything_clients)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
