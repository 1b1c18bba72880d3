"""Stage 3 — launch: the server as a real process under its supervisor, and its teardown.

Readiness is a log line and/or an HTTP path answering 200, whichever the engine needs; a process that exits
first is a crash at startup. The server's output goes through a pipe into a capped log file and a line scanner
(abbisect.infra.logstream), so a server printing gigabytes costs neither memory nor disk. The server is the
child of a small supervisor (abbisect.infra.supervisor) that is a child subreaper: every process the server
starts stays in the supervisor's tree, whatever it does (setsid, a double fork, an emptied environment), and
the whole family is ended at teardown — or by the supervisor itself when abbisect dies, even under SIGKILL.
Teardown reports honestly what survived.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from abbisect.infra import supervisor
from abbisect.infra.cache import Cache
from abbisect.infra.logstream import CappedLog, pump
from abbisect.infra.progress import Status
from abbisect.infra.redact import StreamMask
from abbisect.launch.engines.base import LaunchPlan
from abbisect.score.scanner import LineScanner

if TYPE_CHECKING:
    import httpx

STATUS_EVERY_S = 5.0


class Ready(StrEnum):
    """How the wait for a server ended."""

    READY = "ready"
    EXITED = "exited"  # the server's main process ended first: a crash at startup (or a rejected flag)
    TIMEOUT = "timeout"


@dataclass
class Server:
    proc: supervisor.Supervised
    base_url: str
    log_path: Path
    started: float
    log: CappedLog
    scanner: LineScanner
    reader: threading.Thread | None = None

    def alive(self) -> bool:
        """The main process still runs (a server whose main process is gone is dead, whatever is left)."""
        return self.proc.poll() is None


@dataclass(frozen=True)
class ReadyOutcome:
    status: Ready
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
          cache: Cache | Path | None = None, scanner: LineScanner | None = None,
          mask: StreamMask | None = None) -> Server:
    """Start the server under its supervisor (recorded in the cache first); its output goes to the log through
    `mask` (the recipe's secrets masked before any byte is written)."""
    scanner = scanner or LineScanner()
    log = CappedLog(log_path, scanner=scanner, mask=mask)
    read_end, write_end = os.pipe()
    try:
        proc = supervisor.spawn(plan.argv, env, cwd, write_end, cache, kind="server",
                                port=base_url.rsplit(":", 1)[-1], log=str(log_path))
    except BaseException:
        os.close(read_end)
        log.close()
        raise
    finally:
        os.close(write_end)
    server = Server(proc, base_url, log_path, time.monotonic(), log, scanner)
    try:
        server.reader = pump(read_end, log)
    except BaseException:  # the caller never gets the server to tear it down
        stop(server, 1.0)
        raise
    return server


def wait_ready(server: Server, plan: LaunchPlan, timeout: float, poll: float = 0.1,
               progress: Callable[[str], None] | None = None) -> ReadyOutcome:
    import httpx  # loaded when a server is waited for, not by every command that names a trial

    deadline = server.started + timeout
    scanner = server.scanner
    next_status = server.started + STATUS_EVERY_S
    with httpx.Client(timeout=2.0) as client:
        while True:
            now = time.monotonic()
            rc = server.proc.poll()
            if rc is not None:
                return ReadyOutcome(Ready.EXITED, now - server.started, rc)
            seen_line = plan.ready_log is None or scanner.ready_seen.is_set()
            if seen_line and (plan.ready_http is None or _http_ok(client, server.base_url + plan.ready_http)):
                return ReadyOutcome(Ready.READY, round(time.monotonic() - server.started, 3))
            if now > deadline:
                return ReadyOutcome(Ready.TIMEOUT, round(now - server.started, 3))
            if progress is not None and now >= next_status:
                progress(Status(f"waiting for ready ({now - server.started:.0f} s): {scanner.last_line[:160]}"))
                next_status = now + STATUS_EVERY_S
            time.sleep(poll)


def _http_ok(client: httpx.Client, url: str) -> bool:
    import httpx

    try:
        return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def stop(server: Server, grace: float = 10.0, main_first: bool = False) -> Teardown:
    """SIGTERM the server's whole family, SIGKILL what is left after `grace`; report anything that survived.
    `main_first` (the plan's stop_main_first): the main process gets SIGTERM alone first and up to `grace` to end
    its family itself; whatever is left then goes the same way."""
    t0 = time.monotonic()
    told = main_first and server.proc.signal_main(signal.SIGTERM)
    while told and server.alive() and time.monotonic() - t0 < grace:
        time.sleep(0.05)
    ended = server.proc.stop(max(grace - (time.monotonic() - t0), 1.0))
    if told and ended.how == "exited":  # our SIGTERM to the main process ended the family
        ended = supervisor.Ended("SIGTERM", ended.leftover)
    if server.reader is not None:
        server.reader.join(timeout=2.0)  # the pipe closes once the last writer is gone
    server.log.close()
    server.proc.release()
    return Teardown(round(time.monotonic() - t0, 3), ended.how, ended.leftover)
