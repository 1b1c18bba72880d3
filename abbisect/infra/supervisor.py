"""No orphaned server, ever: every server and build step runs as the child of a small supervisor process that
is a child subreaper, and ends its whole family.

Why a supervisor and not PR_SET_PDEATHSIG: the parent-death signal fires when the *thread* that forked the
child exits, not the process (a server launched from a prefetch or executor thread would die with that
thread), and it does not reach a server's own children. Why a subreaper: a child that forks, calls setsid,
forks again and clears its environment leaves the server's process group, its session and its environment
token behind, but it cannot leave the supervisor's tree — orphans are re-parented to the nearest subreaper,
so every process the server ever starts stays a descendant of the supervisor (`procfs.descendants`).

    abbisect ──pipe──▶ supervisor (python -m abbisect.infra.supervisor, stdlib only)
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

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from abbisect.infra import procfs
from abbisect.infra.cache import Cache

TOKEN_VAR = "ABBISECT_SERVER_TOKEN"  # every process of a launch carries it (found by the reaper too)
TICK_S = 0.1
_WATCHED = {signal.SIGTERM, signal.SIGINT}
_PR_SET_CHILD_SUBREAPER = 36
_OWN_GROUP = threading.Event()


def own_process_groups() -> None:
    """From now on each supervisor starts in a process group of its own. For a Ray worker (a cluster's trial):
    Ray ends a worker, and a cancelled or orphaned task's, by SIGKILL to the worker's whole process group,
    which would take the supervisor with it and leave its server running; in a group of its own the
    supervisor sees the worker's pipe close and ends the family, as after any other death of abbisect."""
    _OWN_GROUP.set()


@dataclass(frozen=True)
class Ended:
    """How a family was ended: "exited" (nothing was left), "SIGTERM" or "SIGKILL", and what survived."""

    how: str
    leftover: tuple[int, ...]


# -- abbisect's side ------------------------------------------------------------------------------------
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
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
        try:
            watchdog = subprocess.Popen([sys.executable, "-m", "abbisect.infra.supervisor"], stdin=subprocess.PIPE,
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
    _atomic(path, {"token": token, "owner_pid": me, "owner_start": procfs.start_time(me), **facts})
    return path


def _atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


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

    return _end(targets, grace)


def _end(targets, grace: float, reap=lambda: None) -> Ended:
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


# -- the supervisor process ---------------------------------------------------------------------------
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
            _atomic(self.record, data)
            self.written = family
        except (OSError, ValueError):
            pass

    def end(self, grace: float) -> Ended:
        return _end(self.family, grace, self.reap)

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
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _WATCHED)  # blocked since birth (spawn): handled from now on
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
