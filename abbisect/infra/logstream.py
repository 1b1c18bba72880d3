"""Server and build logs streamed to disk with a size cap, and scanned line by line while they stream.

A process's output is read from a pipe in chunks. The first half of the cap goes to the file as it
arrives; after that, the newest bytes are kept in a bounded ring and written after a marker line saying
how many bytes (and lines) were dropped, when the stream ends. The recipe's secrets are masked before
any of this (`CappedLog(mask=...)`, abbisect/infra/redact.py `StreamMask`). Each line is fed to a `Scanner`
(known signatures, the first exception, a ready pattern, the last line) as it passes, so nothing ever
holds the whole log: memory stays flat whatever the process prints.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from abbisect.infra.redact import StreamMask

# Per trial and per log: 4 MiB of head and 4 MiB of tail. ABBISECT_LOG_CAP_BYTES overrides (tests).
DEFAULT_CAP = 8 * 1024 * 1024
MAX_LINE = 64 * 1024  # longer lines are scanned by their first MAX_LINE bytes

def log_cap() -> int:
    return int(os.environ.get("ABBISECT_LOG_CAP_BYTES", DEFAULT_CAP))


class Scanner(Protocol):
    """What reads a log's lines as they stream by (abbisect/score/scanner.py's `LineScanner`)."""

    def feed(self, line: str) -> None: ...

    def feed_many(self, text: str, n_lines: int) -> None:
        """`n_lines` complete lines joined by newlines."""


class _Unread:
    """The scanner of a log nobody reads while it streams (a build log: its tail is read at the end)."""

    def feed(self, line: str) -> None:
        pass

    def feed_many(self, text: str, n_lines: int) -> None:
        pass


class CappedLog:
    """A log file that keeps its first cap/2 bytes and its last cap/2 bytes, the middle elided.

    With a `mask` (the recipe's secrets, abbisect/infra/redact.py) every byte is masked before anything else
    sees it: the file is clean from its first byte (a run killed at any moment leaves no secret on disk), the
    cap never keeps part of a secret, and the scanner's lines (signatures, the first exception, the last line)
    and the tail are clean too."""

    def __init__(self, path: Path, cap: int | None = None, scanner: Scanner | None = None,
                 append: bool = False, mask: StreamMask | None = None) -> None:
        self.path = path
        self.mask = mask
        self.cap = cap if cap is not None else log_cap()
        self.scanner: Scanner = scanner or _Unread()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = path.open("ab" if append else "wb")
        self.head_left = self.cap // 2
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_bytes = 0
        self.dropped = 0
        self.dropped_lines = 0
        self.total = 0
        self._partial = b""
        self.lock = threading.Lock()
        self.closed = False

    def write(self, chunk: bytes) -> None:
        with self.lock:
            if self.closed:
                return
            chunk = self.mask.feed(chunk) if self.mask is not None else chunk
            self._keep(chunk)
        self._scan(chunk)

    def _keep(self, chunk: bytes) -> None:
        """Head, then the ring of the tail (the lock held)."""
        data = chunk
        self.total += len(data)
        if self.head_left > 0 and data:
            head, data = data[: self.head_left], data[self.head_left:]
            self.fh.write(head)
            self.fh.flush()
            self.head_left -= len(head)
        if data:
            self.tail.append(data)
            self.tail_bytes += len(data)
            limit = self.cap - self.cap // 2
            while self.tail_bytes - len(self.tail[0]) >= limit:
                old = self.tail.popleft()
                self.tail_bytes -= len(old)
                self.dropped += len(old)
                self.dropped_lines += old.count(b"\n")

    def _scan(self, chunk: bytes) -> None:
        end = chunk.rfind(b"\n")
        if end < 0:
            if len(self._partial) < MAX_LINE:  # the rest of an overlong line is written, not scanned
                self._partial = (self._partial + chunk[:MAX_LINE])[:MAX_LINE]
            return
        first = chunk.find(b"\n")
        self.scanner.feed((self._partial + chunk[:first][:MAX_LINE])[:MAX_LINE].decode(errors="replace"))
        middle = chunk[first + 1:end]
        if end > first:
            self.scanner.feed_many(middle.decode(errors="replace"), middle.count(b"\n") + 1)
        self._partial = chunk[end + 1:][:MAX_LINE]

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            if self.mask is not None:  # what was held back in case it began a secret
                rest = self.mask.flush()
                self._keep(rest)
                self._scan(rest)
            if self._partial:
                self.scanner.feed(self._partial[:MAX_LINE].decode(errors="replace"))
                self._partial = b""
            tail = b"".join(self.tail)
            limit = self.cap - self.cap // 2
            if len(tail) > limit:  # the ring keeps whole chunks; trim its oldest bytes to the cap
                cut = len(tail) - limit
                self.dropped += cut
                self.dropped_lines += tail[:cut].count(b"\n")
                tail = tail[cut:]
            if self.dropped:
                self.fh.write(f"\n[abbisect] ... {self.dropped} bytes ({self.dropped_lines} lines) of this log "
                              f"elided: head and tail kept, cap {self.cap} bytes ...\n".encode())
            self.fh.write(tail)
            self.fh.close()

    def tail_lines(self, n: int) -> list[str]:
        """The last n lines written so far (from the ring while streaming, the file when it is small)."""
        with self.lock:
            data = b"".join(self.tail)[-(n * 400):] if self.tail else None
        if data is None:
            data = _read_end(self.path, n * 400)
        return data.decode(errors="replace").splitlines()[-n:]


def _read_end(path: Path, size: int) -> bytes:
    try:
        with path.open("rb") as fh:
            fh.seek(max(path.stat().st_size - size, 0))
            return fh.read()
    except OSError:
        return b""


def pump(fd: int, log: CappedLog, on_eof: Callable[[], None] | None = None, close: bool = True) -> threading.Thread:
    """Read `fd` (a pipe's read end) until EOF into `log`, in a daemon thread; closes fd, then the log
    (unless `close` is false: one build log spans several steps)."""
    def run() -> None:
        try:
            while chunk := os.read(fd, 1 << 16):
                log.write(chunk)
        except OSError:
            pass
        finally:
            os.close(fd)
            if close:
                log.close()
            if on_eof:
                on_eof()

    t = threading.Thread(target=run, name=f"log:{log.path.name}", daemon=True)
    t.start()
    return t
