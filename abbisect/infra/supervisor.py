"""No orphaned server, ever: every server and build step runs as the child of a small supervisor process that
is a child subreaper, and ends its whole family.

Why a supervisor and not PR_SET_PDEATHSIG: the parent-death signal fires when the *thread* that forked the
child exits, not the process (a server launched from a prefetch or executor thread would die with that
thread), and it does not reach a server's own children. Why a subreaper: a child that forks, calls setsid,
forks again and clears its environment leaves the server's process group, its session and its environment
token behind, but it cannot leave the supervisor's tree — orphans are re-parented to the nearest subreaper,
so every process the server ever starts stays a descendant of the supervisor (`procfs.descendants`).

    abbisect ──pipe──▶ supervisor (python -m abbisect.infra.supervisor_main, stdlib only)
                          └── server (its own session; output into abbisect's log pipe)
                                └── …every descendant, setsid'd and env-cleared ones included

The supervisor reads one JSON line (argv, cwd, env, …), starts the child and answers `pid N START`; then it
takes `stop GRACE` (SIGTERM the family, SIGKILL after GRACE; answers `stopped HOW LEFTOVER`), `kill` (the
family at once) and `release` (done). It reports `exit RC` when the child exits. When the pipe closes without
`release` (abbisect died, even by SIGKILL) or it gets SIGTERM, it ends the family and exits. It also keeps the
family, as (pid, start time) pairs, in the launch's record `<cache>/servers/<token>.json`, so if the
supervisor dies with abbisect (`kill -9` of the whole process group) the next abbisect invocation ends what
the record names (`reap_orphans`), never an unrelated process that reused a PID.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from abbisect.infra import procfs
from abbisect.infra.cache import Cache
from abbisect.infra.locks import atomic_write
from abbisect.infra.supervisor_main import TOKEN_VAR, WATCHED, Ended, end_processes

_OWN_GROUP = threading.Event()


def own_process_groups() -> None:
    """From now on each supervisor starts in a process group of its own. For a Ray worker (a cluster's trial):
    Ray ends a worker, and a cancelled or orphaned task's, by SIGKILL to the worker's whole process group,
    which would take the supervisor with it and leave its server running; in a group of its own the
    supervisor sees the worker's pipe close and ends the family, as after any other death of abbisect."""
    _OWN_GROUP.set()


# -- a child under its supervisor ---------------------------------------------------------------------
class Supervised:
    """A child running under its supervisor, with the part of `subprocess.Popen`'s interface abbisect uses:
    `pid`, `poll()`, `wait()`, `returncode`; `stop()` and `kill()` end its whole family."""

    def __init__(self, watchdog: subprocess.Popen[str], argv: list[str], token: str, record: Path | None) -> None:
        self.watchdog, self.argv, self.token, self.record = watchdog, argv, token, record
        self.pid = 0
        self.start: int | None = None
        self.returncode: int | None = None
        self.error: str | None = None
        self._started, self._exited, self._gone = threading.Event(), threading.Event(), threading.Event()
        self._replies: list[str] = []
        self._reply = threading.Condition()
        self._write = threading.Lock()
        threading.Thread(target=self._read, name="supervisor", daemon=True).start()

    def _read(self) -> None:
        assert self.watchdog.stdout is not None  # started with stdout=PIPE
        for line in self.watchdog.stdout:
            word, _, rest = line.strip().partition(" ")
            if word == "pid":
                pid, start = rest.split()
                self.pid, self.start = int(pid), int(start)
                self._started.set()
            elif word == "error":
                self.error = rest
                self._started.set()
            elif word == "exit":
                self.returncode = int(rest)
                self._exited.set()
            else:
                with self._reply:
                    self._replies.append(line.strip())
                    self._reply.notify_all()
        self._gone.set()
        self._started.set()
        with self._reply:
            self._reply.notify_all()

    def _send(self, line: str) -> bool:
        stdin = self.watchdog.stdin
        try:
            with self._write:
                assert stdin is not None  # started with stdin=PIPE
                stdin.write(line + "\n")
                stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    def _ask(self, line: str, timeout: float) -> str | None:
        with self._reply:
            seen = len(self._replies)
            if not self._send(line):
                return None
            self._reply.wait_for(lambda: len(self._replies) > seen or self._gone.is_set(), timeout)
            return self._replies[seen] if len(self._replies) > seen else None

    def poll(self) -> int | None:
        if self.returncode is None and self._gone.is_set() and not procfs.alive(self.pid, self.start):
            self.returncode = -1  # the supervisor was killed and the child is gone: its status is lost
        return self.returncode

    def alive(self) -> bool:
        return self.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.argv, timeout or 0.0)
            self._exited.wait(min(left, 0.2) if left is not None else 0.2)
        assert self.returncode is not None
        return self.returncode

    def signal_main(self, sig: int) -> bool:
        """Send `sig` to the started process alone (never a pid reused since); whether it was sent."""
        if not self.pid or not procfs.alive(self.pid, self.start):
            return False
        try:
            os.kill(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def stop(self, grace: float) -> Ended:
        """SIGTERM the whole family, SIGKILL what is left after `grace`; what survived."""
        reply = self._ask(f"stop {grace}", grace + 15.0)
        if reply is None:  # the supervisor is gone: end what it was known to watch ourselves
            return end_family(self.token, grace, self._known())
        how, _, left = reply.removeprefix("stopped ").partition(" ")
        return Ended(how, tuple(int(p) for p in left.split(",") if p))

    def kill(self) -> None:
        """SIGKILL the whole family at once (abbisect is stopping; a build timed out)."""
        if self._ask("kill", 10.0) is None:
            end_family(self.token, 0.0, self._known())

    def terminate(self) -> None:
        """Ask the supervisor to end the family and exit, waiting for nothing (safe in a signal handler)."""
        try:
            self.watchdog.send_signal(signal.SIGTERM)
        except OSError:
            pass

    def _known(self) -> tuple[tuple[int, int], ...]:
        pairs = [(self.pid, self.start)] if self.pid and self.start is not None else []
        return tuple(pairs) + tuple(read_family(self.record))

    def release(self) -> None:
        """The launch ended in order: the supervisor exits without killing anything, the record goes."""
        self._send("release")
        try:
            if self.watchdog.stdin is not None:
                self.watchdog.stdin.close()
        except OSError:
            pass
        try:
            self.watchdog.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.watchdog.kill()
            self.watchdog.wait()
        if self.record is not None:
            self.record.unlink(missing_ok=True)

    def abandon(self) -> None:
        """Whoever started it will not stop it (an exception in between): the supervisor ends the family."""
        try:
            if self.watchdog.stdin is not None:
                self.watchdog.stdin.close()
        except OSError:
            pass


def spawn(argv: list[str] | tuple[str, ...], env: dict[str, str], cwd: str | Path, stdout: int,
          cache: Cache | Path | None = None, kind: str = "server", **facts: object) -> Supervised:
    """Start `argv` under a supervisor, its output into the file descriptor `stdout`; recorded in the cache
    (when given) before anything starts. Raises OSError when the program cannot be started."""
    from abbisect.infra.proc import abbisect_path, deliver, scrubbed_env, signals_held

    token = uuid.uuid4().hex
    record = None
    if cache is not None:
        try:
            record = write_record(cache, token, argv=list(argv), kind=kind, **facts)
        except OSError:
            record = None  # an unwritable cache fails elsewhere with a clear message; the supervisor still runs
    spec = {"argv": list(argv), "cwd": str(cwd), "env": {**env, TOKEN_VAR: token}, "record": str(record or ""),
            "fd": stdout}
    with signals_held() as pending:  # a Ctrl-C inside Popen would leave a supervisor no one talks to
        # Born with SIGTERM and SIGINT blocked (the mask is inherited): a signal that comes while its
        # interpreter starts waits until its handlers are in place (a stopped trial's group is signalled at once).
        held = signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
        try:
            watchdog = subprocess.Popen([sys.executable, "-m", "abbisect.infra.supervisor_main"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                        pass_fds=(stdout,), env=scrubbed_env({"PYTHONPATH": abbisect_path()}),
                                        process_group=0 if _OWN_GROUP.is_set() else None)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        child = Supervised(watchdog, list(argv), token, record)
        try:
            if not child._send(json.dumps(spec)):
                raise OSError(f"the supervisor of {argv[0]} exited at start")
            child._started.wait(60.0)
            if child.error is not None or not child.pid:
                why = child.error or "the supervisor did not start it"
                child.release()
                raise OSError(why)
        except BaseException:
            child.abandon()
            raise
    try:
        deliver(pending)
    except BaseException:
        child.kill()
        child.release()
        raise
    return child


# -- the record of each launch, and the reaper ----------------------------------------------------------
def record_dir(cache: Cache | Path) -> Path:
    return Cache.at(cache).servers


def write_record(cache: Cache | Path, token: str, **facts: object) -> Path:
    path = record_dir(cache) / f"{token}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    me = os.getpid()
    atomic_write(path, json.dumps({"token": token, "owner_pid": me, "owner_start": procfs.start_time(me), **facts}))
    return path


def read_family(record: Path | None) -> list[tuple[int, int]]:
    """The (pid, start time) pairs a supervisor last wrote into its record."""
    if record is None:
        return []
    try:
        return [(int(p), int(s)) for p, s in json.loads(record.read_text()).get("family", [])]
    except (OSError, ValueError, TypeError):
        return []


def end_family(token: str, grace: float, known: tuple[tuple[int, int], ...] = ()) -> Ended:
    """Without a living supervisor: SIGTERM every process carrying the token and every known (pid, start) that
    is still the same process, SIGKILL what is left after `grace`."""
    def targets() -> set[int]:
        procs = procfs.table()
        named = {pid for pid, start in known if pid in procs and procs[pid].start == start}
        return (procfs.carrying(TOKEN_VAR, token, procs) | named) - {os.getpid()}

    return end_processes(targets, grace)


def reap_orphans(cache: Cache | Path) -> list[str]:
    """End the families of abbisect processes that are gone; one line per reaped record."""
    lines: list[str] = []
    folder = record_dir(cache)
    if not folder.is_dir():
        return lines
    for path in sorted(folder.glob("*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        owner, started = rec.get("owner_pid"), rec.get("owner_start")
        if owner and started is not None and procfs.alive(int(owner), int(started)):
            continue  # its abbisect still runs
        token = str(rec.get("token", path.stem))
        known = tuple((int(p), int(s)) for p, s in rec.get("family", []))
        procs = procfs.table()
        found = sorted((procfs.carrying(TOKEN_VAR, token, procs)
                        | {p for p, s in known if p in procs and procs[p].start == s}) - {os.getpid()})
        left = end_family(token, 2.0, known).leftover if found else ()
        path.unlink(missing_ok=True)
        if found:
            argv = " ".join(rec.get("argv", []))[:160]
            still = f", still alive: {list(left)}" if left else ""
            port = f"; port {rec['port']}" if rec.get("port") else ""
            lines.append(f"abbisect: reaped an orphaned {rec.get('kind', 'server')} of a dead abbisect (pid {owner}):"
                         f" killed PIDs {', '.join(map(str, found))}{still}{port}; {argv}")
    return lines
