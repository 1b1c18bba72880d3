"""Stage 3 — launch: the server as a real subprocess in its own process group, and its teardown.

Readiness is a log line and/or an HTTP path answering 200, whichever the engine needs; a process that
exits first is a crash at startup. Teardown signals the whole group and checks that nothing is left.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from abbisect.engines.base import LaunchPlan


@dataclass
class Server:
    proc: subprocess.Popen
    pgid: int
    base_url: str
    log_path: Path
    started: float


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


def start(plan: LaunchPlan, env: dict[str, str], log_path: Path, cwd: Path, base_url: str) -> Server:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(plan.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=cwd, env=env, start_new_session=True)
    return Server(proc, proc.pid, base_url, log_path, time.monotonic())


def wait_ready(server: Server, plan: LaunchPlan, timeout: float, poll: float = 0.1) -> ReadyOutcome:
    line = re.compile(plan.ready_log) if plan.ready_log else None
    deadline = server.started + timeout
    seen_line = line is None
    with httpx.Client(timeout=2.0) as client:
        while True:
            rc = server.proc.poll()
            if rc is not None:
                return ReadyOutcome("exited", time.monotonic() - server.started, rc)
            if not seen_line:
                seen_line = bool(line.search(server.log_path.read_text(errors="replace")))
            if seen_line and (plan.ready_http is None or _http_ok(client, server.base_url + plan.ready_http)):
                return ReadyOutcome("ready", round(time.monotonic() - server.started, 3))
            if time.monotonic() > deadline:
                return ReadyOutcome("timeout", round(time.monotonic() - server.started, 3))
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


def stop(server: Server, grace: float = 10.0) -> Teardown:
    """SIGTERM the group, wait up to `grace`, then SIGKILL; report anything that survived."""
    t0 = time.monotonic()
    how = "exited"
    if group_pids(server.pgid):
        how = "SIGTERM"
        _signal_group(server.pgid, signal.SIGTERM)
        if not _wait_gone(server, grace):
            # An engine with a request in flight can keep its API process alive for a minute.
            how = "SIGKILL"
            _signal_group(server.pgid, signal.SIGKILL)
            _wait_gone(server, 5.0)
    try:
        server.proc.wait(timeout=1)
    except subprocess.TimeoutExpired:
        pass
    return Teardown(round(time.monotonic() - t0, 3), how, tuple(group_pids(server.pgid)))


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(server: Server, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        server.proc.poll()  # reap the leader so it does not linger as a zombie
        if not group_pids(server.pgid):
            return True
        time.sleep(0.05)
    return not group_pids(server.pgid)
