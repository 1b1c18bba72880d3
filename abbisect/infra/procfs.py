"""The one place abbisect reads /proc: which processes exist, who their parents are, their session and process
group, when they started and what their environment says.

A process is named by (pid, start time): the start time (clock ticks since boot, field 22 of
/proc/<pid>/stat) survives PID reuse, so a record written by one abbisect can be acted on by the next one
without killing an unrelated process that got the same PID. Standard library only: the supervisor imports
this module while a server waits to start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Stat:
    pid: int
    state: str  # R, S, D, Z (zombie), T, …
    ppid: int
    pgrp: int
    session: int
    start: int  # clock ticks since boot

    @property
    def alive(self) -> bool:
        return self.state != "Z"  # a zombie is dead and only waits for its parent


def stat(pid: int) -> Stat | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the command name (in parentheses) may hold spaces
    return Stat(pid, fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]))


def pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def table() -> dict[int, Stat]:
    """Every live process now (zombies left out)."""
    out = {}
    for pid in pids():
        s = stat(pid)
        if s is not None and s.alive:
            out[pid] = s
    return out


def start_time(pid: int) -> int | None:
    s = stat(pid)
    return s.start if s is not None else None


def alive(pid: int, start: int | None = None) -> bool:
    """The process runs (not a zombie) and, when `start` is given, is still the same process."""
    s = stat(pid)
    return s is not None and s.alive and (start is None or s.start == start)


def descendants(root: int, procs: dict[int, Stat] | None = None) -> set[int]:
    """Every live process below `root` in the process tree (orphans re-parented to a subreaper count for it)."""
    procs = table() if procs is None else procs
    children: dict[int, list[int]] = {}
    for s in procs.values():
        children.setdefault(s.ppid, []).append(s.pid)
    found: set[int] = set()
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, ())
    return found


def env_value(pid: int, name: str) -> str | None:
    """The value of NAME in a process's environment (None: not set, gone, or another user's)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = name.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode(errors="replace")
    return None


def carrying(name: str, value: str, procs: dict[int, Stat] | None = None) -> set[int]:
    """Live processes whose environment holds NAME=value (readable for this user's own processes)."""
    needle = f"{name}={value}".encode()
    me = os.getpid()
    found = set()
    for pid in (table() if procs is None else procs):
        if pid == me:
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.add(pid)
    return found


def in_sessions(sessions: set[int], procs: dict[int, Stat] | None = None) -> set[int]:
    """Live processes of these sessions (a server that called setsid leads its own)."""
    return {s.pid for s in (table() if procs is None else procs).values() if s.session in sessions}


def load_average() -> float | None:
    """The host's 1-minute load average (what else runs here: a measurement's first suspect)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def cpu_mhz() -> float | None:
    """The mean current CPU frequency in MHz where the kernel says it (cpufreq, else /proc/cpuinfo)."""
    freqs = []
    for path in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_cur_freq"):
        try:
            freqs.append(int(path.read_text()) / 1000)
        except (OSError, ValueError):
            continue
    if not freqs:
        try:
            freqs = [float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("cpu MHz")]
        except (OSError, ValueError, IndexError):
            return None
    return round(sum(freqs) / len(freqs), 1) if freqs else None
