"""The supervisor program (`python -m abbisect.infra.supervisor_main`): a child subreaper that starts one child
and ends its whole family. abbisect's side, which starts it and speaks to it, is abbisect/infra/supervisor.py
(its docstring says why there is a supervisor and what the protocol is).

It reads one JSON line (argv, cwd, env, record, fd), starts the child and answers `pid N START` (or `error WHY`);
then it takes `stop GRACE`, `kill` and `release`, reports `exit RC` when the child exits, and ends the family
when the pipe closes without `release` or it gets SIGTERM. It imports only the standard library and abbisect's
/proc reader and atomic write, so it starts fast for every server and build step.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from abbisect.infra import procfs
from abbisect.infra.locks import atomic_write

TOKEN_VAR = "ABBISECT_SERVER_TOKEN"  # every process of a launch carries it (found by the reaper too)
TICK_S = 0.1
WATCHED = {signal.SIGTERM, signal.SIGINT}  # blocked from spawn until the supervisor's handlers are in place
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Ended:
    """How a family was ended: "exited" (nothing was left), "SIGTERM" or "SIGKILL", and what survived."""

    how: str
    leftover: tuple[int, ...]


def end_processes(targets: Callable[[], set[int]], grace: float, reap: Callable[[], None] = lambda: None) -> Ended:
    """SIGTERM what `targets()` names, SIGKILL what it still names after `grace`; `reap` collects exited children
    between two looks (the supervisor's own)."""
    pids = targets()
    if not pids:
        return Ended("exited", ())
    how = "SIGTERM"
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        how = "SIGTERM" if sig == signal.SIGTERM else "SIGKILL"
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while True:
            reap()
            pids = targets()
            if not pids or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        if not pids:
            break
    return Ended(how, tuple(sorted(pids)))


class _Supervisor:
    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.token = spec["env"][TOKEN_VAR]
        self.record = Path(spec["record"]) if spec.get("record") else None
        self.child: subprocess.Popen[bytes] | None = None
        self.me = os.getpid()
        self.written: list[tuple[int, int]] = []

    def say(self, line: str) -> None:
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except (OSError, ValueError):
            pass  # abbisect is gone: nobody reads; the family is ended all the same

    def family(self) -> set[int]:
        procs = procfs.table()
        return (procfs.descendants(self.me, procs) | procfs.carrying(TOKEN_VAR, self.token, procs)) - {self.me}

    def reap(self) -> None:
        """Collect every exited child (the server, and orphans re-parented to us); report the server's exit."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.child is not None and pid == self.child.pid:
                self.child.returncode = os.waitstatus_to_exitcode(status)
                self.say(f"exit {self.child.returncode}")

    def note_family(self) -> None:
        """Keep the family in the record, for a reaper that outlives us."""
        if self.record is None:
            return
        procs = procfs.table()
        family = sorted((pid, procs[pid].start) for pid in procfs.descendants(self.me, procs) if pid in procs)
        if family == self.written:
            return
        try:
            data = json.loads(self.record.read_text())
            data["family"] = family
            atomic_write(self.record, json.dumps(data))
            self.written = family
        except (OSError, ValueError):
            pass

    def end(self, grace: float) -> Ended:
        return end_processes(self.family, grace, self.reap)

    def start(self) -> bool:
        spec = self.spec
        try:
            self.child = subprocess.Popen(spec["argv"], stdout=spec["fd"], stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, cwd=spec["cwd"], env=spec["env"],
                                          start_new_session=True)
        except OSError as exc:
            self.say(f"error {exc}")
            return False
        finally:
            os.close(spec["fd"])
        self.say(f"pid {self.child.pid} {procfs.start_time(self.child.pid)}")
        return True


def _subreaper() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the environment token and the record still find the family


class _Lines:
    """Lines from a file descriptor without read-ahead hiding them from select (sys.stdin buffers)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf, self.eof = fd, b"", False

    def ready(self, timeout: float | None) -> bool:
        if b"\n" in self.buf or self.eof:
            return True
        readable, _, _ = select.select([self.fd], [], [], timeout)
        if readable:
            chunk = os.read(self.fd, 65536)
            self.buf += chunk
            self.eof = not chunk
        return b"\n" in self.buf or self.eof

    def line(self) -> str:
        """The next line ("" at the end of the stream)."""
        while b"\n" not in self.buf and not self.eof:
            self.ready(None)
        if b"\n" in self.buf:
            head, self.buf = self.buf.split(b"\n", 1)
            return head.decode() + "\n"
        head, self.buf = self.buf, b""
        return head.decode()


NOTE_EVERY = 10  # ticks between two looks at the family for the record (a /proc scan each)


def main() -> int:
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    # Ctrl-C reaches abbisect too, which tears down in order; a Python handler (not SIG_IGN) so the child does
    # not inherit an ignored SIGINT.
    signal.signal(signal.SIGINT, lambda *_: None)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, WATCHED)  # blocked since birth (spawn): handled from now on
    commands = _Lines(sys.stdin.fileno())
    line = commands.line()
    if not line or stopping.is_set():
        return 0
    _subreaper()
    sup = _Supervisor(json.loads(line))
    if not sup.start():
        return 0
    released = False
    tick = 0
    while True:
        ready = commands.ready(TICK_S)
        sup.reap()
        if stopping.is_set():
            break
        if ready:
            raw = commands.line()
            command = raw.strip()
            if not raw:  # the pipe closed: abbisect is gone
                break
            if command == "release":
                released = True
                break
            if command.startswith("stop"):
                ended = sup.end(float(command.split()[1]))
                sup.say(f"stopped {ended.how} {','.join(map(str, ended.leftover))}")
            elif command == "kill":
                ended = sup.end(0.0)
                sup.say(f"stopped {ended.how} {','.join(map(str, ended.leftover))}")
        tick += 1
        if tick % NOTE_EVERY == 1:
            sup.note_family()
    if not released:
        sup.end(2.0)
        if sup.record is not None:  # nothing left for a reaper to find
            sup.record.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
