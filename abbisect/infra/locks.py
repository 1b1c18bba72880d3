"""Inter-process file locks (the environment store and worktrees are shared by concurrent runs)."""

from __future__ import annotations

import fcntl
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from abbisect.infra.errors import InfraError
from abbisect.infra.progress import Status

# How long to wait for another abbisect holding a lock (a build of the same commit, a model conversion)
# before giving up as an infrastructure fault; ABBISECT_LOCK_TIMEOUT overrides it (seconds).
DEFAULT_TIMEOUT = 3 * 3600.0
_POLL = 0.2
# Who holds an exclusive lock is written into its file ("pid process-token thread"), so a wait can say whether
# it waits for another abbisect or for this run's own background build; the token tells apart two processes
# of one pid (containers sharing a cache).
_TOKEN = uuid.uuid4().hex[:12]


def lock_timeout() -> float:
    raw = os.environ.get("ABBISECT_LOCK_TIMEOUT")
    try:
        return float(raw) if raw else DEFAULT_TIMEOUT
    except ValueError:
        return DEFAULT_TIMEOUT


def locked_open(path: Path, how: int, timeout: float | None = None,
                say: Callable[[str], None] | None = None) -> int:
    """Open and flock `path`; returns the descriptor. Lock files may be removed by `abbisect cache gc`
    while someone waits on them: a lock taken on a file that is no longer at `path` is taken again.
    While another process holds it, tell `say` (a `Status`, when given); after `timeout` (default
    `lock_timeout()`) an `InfraError`."""
    start = time.monotonic()
    limit = lock_timeout() if timeout is None else timeout
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _flock(fd, how, path, start, limit, say)
        except BaseException:
            os.close(fd)
            raise
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                if how == fcntl.LOCK_EX:
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, f"{os.getpid()} {_TOKEN} {threading.current_thread().name}\n".encode(), 0)
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _flock(fd: int, how: int, path: Path, start: float, timeout: float, say: Callable[[str], None] | None) -> None:
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            waited = time.monotonic() - start
            if waited >= timeout:
                raise InfraError(f"gave up after {waited:.0f} s {waiting_for(path)} (lock {path}); let it finish, "
                                 "or raise ABBISECT_LOCK_TIMEOUT (seconds)") from None
            if say is not None:
                say(Status(waiting_for(path), kind="lock"))
            time.sleep(_POLL)


def waiting_for(path: Path) -> str:
    """What a wait for the lock at `path` waits for, from the holder its file names."""
    try:
        pid, token, thread = path.read_text().split(maxsplit=2)
    except (OSError, ValueError):  # not written (yet), or by an abbisect that did not write it
        return f"waiting for another abbisect building {path.stem}"
    if token != _TOKEN:
        return f"waiting for another abbisect building {path.stem} (pid {pid})"
    thread = thread.strip()
    if thread.startswith("prefetch"):  # the bisect driver's background builds (abbisect/bisect/driver.py)
        return f"waiting for this run's background build of {path.stem}"
    return f"waiting for this run's build of {path.stem} in its thread {thread}"


@contextmanager
def file_lock(path: Path, timeout: float | None = None, say: Callable[[str], None] | None = None) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = locked_open(path, fcntl.LOCK_EX, timeout, say)
    try:
        yield
    finally:
        os.ftruncate(fd, 0)  # no holder named once it is free
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def atomic_write(path: Path, text: str) -> None:
    """Write-then-rename, so a reader never sees half a file and a crash never leaves one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
