"""Stage 3 — launch: the server as a real subprocess in its own process group, and its teardown.

Readiness is a log line and/or an HTTP path answering 200, whichever the engine needs; a process that
exits first is a crash at startup. The server's output goes through a pipe into a capped log file and a
line scanner (abbisect.logstream), so a server printing gigabytes costs neither memory nor disk. Every
process of the server carries a per-launch token in its environment and is watched by a small supervisor
(abbisect.supervisor, which explains why not a parent-death signal): the server dies with abbisect, even
under SIGKILL. Teardown signals the group, every token-carrying process and every descendant seen, and
reports honestly what survived.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from abbisect import supervisor
from abbisect.cache import Cache
from abbisect.engines.base import LaunchPlan
from abbisect.logstream import CappedLog, LineScanner, pump
from abbisect.proc import deliver, signals_held
from abbisect.progress import Status
from abbisect.redact import StreamMask

STATUS_EVERY_S = 5.0


@dataclass
class Server:
    proc: subprocess.Popen
    pgid: int
    base_url: str
    log_path: Path
    started: float
    token: str = ""
    log: CappedLog | None = None
    reader: threading.Thread | None = None
    watchdog: subprocess.Popen | None = None
    record: Path | None = None
    family: dict[int, float] = field(default_factory=dict)  # descendants seen: pid -> create time

    @property
    def scanner(self) -> LineScanner:
        assert self.log is not None
        return self.log.scanner

    def alive(self) -> bool:
        """The main process still runs (a server whose main process is gone is dead, whatever is left)."""
        return self.proc.poll() is None

    def track(self) -> None:
        """Remember the server's descendants while they are still in its tree: a child that calls setsid
        and forks again leaves both the group and the tree, but not this list."""
        import psutil

        try:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                self.family.setdefault(child.pid, child.create_time())
        except psutil.Error:
            pass


@dataclass(frozen=True)
class ReadyOutcome:
    status: str  # "ready" | "exited" | "timeout"
    seconds: float
    returncode: int | None = None


@dataclass(frozen=True)
class Teardown:
    seconds: float
    signal: str  # what ended it: "exited", "SIGTERM" or "SIGKILL"
    leftover_pids: tuple[int, ...]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start(plan: LaunchPlan, env: dict[str, str], log_path: Path, cwd: Path, base_url: str,
          cache: Cache | Path | None = None, scanner: LineScanner | None = None, grace: float = 10.0,
          mask: StreamMask | None = None) -> Server:
    """Start the watchdog, record the launch in the cache, then start the server in its own session; its
    output goes to the log through `mask` (the recipe's secrets masked before any byte is written)."""
    token = uuid.uuid4().hex
    record = (supervisor.write_record(cache, token, argv=list(plan.argv), port=base_url.rsplit(":", 1)[-1],
                                      log=str(log_path)) if cache is not None else None)
    watchdog = supervisor.watch(token, grace)
    log = CappedLog(log_path, scanner=scanner, mask=mask)
    read_end, write_end = os.pipe()
    with signals_held() as pending:  # a Ctrl-C now would leave a server that no one holds
        try:
            proc = subprocess.Popen(plan.argv, stdout=write_end, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=cwd, env={**env, supervisor.TOKEN_VAR: token}, start_new_session=True)
        except BaseException as exc:
            os.close(read_end)
            log.close()
            if isinstance(exc, OSError):  # the exec failed: there is no child
                supervisor.release(watchdog, record)
            else:  # an exception after the fork may have left one: the watchdog kills it
                supervisor.abandon(watchdog)
            raise
        finally:
            os.close(write_end)
        server = Server(proc, proc.pid, base_url, log_path, time.monotonic(), token, log, None, watchdog, record)
    try:
        server.reader = pump(read_end, log)
        deliver(pending)
    except BaseException:  # the caller never gets the server to tear it down
        stop(server, 1.0)
        raise
    return server


def wait_ready(server: Server, plan: LaunchPlan, timeout: float, poll: float = 0.1,
               progress: Callable[[str], None] | None = None) -> ReadyOutcome:
    deadline = server.started + timeout
    scanner = server.scanner
    next_status = server.started + STATUS_EVERY_S
    next_track = 0.0
    with httpx.Client(timeout=2.0) as client:
        while True:
            now = time.monotonic()
            rc = server.proc.poll()
            if rc is not None:
                return ReadyOutcome("exited", now - server.started, rc)
            if now >= next_track:
                server.track()
                next_track = now + 1.0
            seen_line = plan.ready_log is None or scanner.ready_seen.is_set()
            if seen_line and (plan.ready_http is None or _http_ok(client, server.base_url + plan.ready_http)):
                return ReadyOutcome("ready", round(time.monotonic() - server.started, 3))
            if now > deadline:
                return ReadyOutcome("timeout", round(now - server.started, 3))
            if progress is not None and now >= next_status:
                progress(Status(f"waiting for ready ({now - server.started:.0f} s): {scanner.last_line[:160]}"))
                next_status = now + STATUS_EVERY_S
            time.sleep(poll)


def _http_ok(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def group_pids(pgid: int) -> list[int]:
    """Processes still in the group (read from /proc: works for children that re-parented)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        # fields: state ppid pgrp ...; zombies are already dead and only wait to be reaped
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def _family(server: Server) -> list[int]:
    """Everything of this server still alive: its group, every process carrying its token, and every
    descendant seen earlier that is still the same process (same create time: no PID reuse)."""
    import psutil

    pids = set(group_pids(server.pgid)) | (set(supervisor.token_pids(server.token)) if server.token else set())
    for pid, created in server.family.items():
        try:
            p = psutil.Process(pid)
            if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                pids.add(pid)
        except psutil.Error:
            pass
    return sorted(pids)


def stop(server: Server, grace: float = 10.0) -> Teardown:
    """SIGTERM the server's family, wait up to `grace`, then SIGKILL; report anything that survived."""
    t0 = time.monotonic()
    how = "exited"
    if server.alive():
        server.track()
    if pids := _family(server):
        how = "SIGTERM"
        _signal(server, pids, signal.SIGTERM)
        if not _wait_gone(server, grace):
            # An engine with a request in flight can keep its API process alive for a minute.
            how = "SIGKILL"
            _signal(server, _family(server), signal.SIGKILL)
            _wait_gone(server, 5.0)
    try:
        server.proc.wait(timeout=1)
    except subprocess.TimeoutExpired:
        pass
    left = tuple(_family(server))
    if server.reader is not None:
        server.reader.join(timeout=2.0)  # the pipe closes once the last writer is gone
    if server.log is not None:
        server.log.close()
    supervisor.release(server.watchdog, server.record)
    return Teardown(round(time.monotonic() - t0, 3), how, left)


def _signal(server: Server, pids: list[int], sig: int) -> None:
    # PIDs, not killpg: once the leader is reaped its group id may be reused by an unrelated process.
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_gone(server: Server, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        server.proc.poll()  # reap the leader so it does not linger as a zombie
        if not _family(server):
            return True
        time.sleep(0.1)
    return not _family(server)
