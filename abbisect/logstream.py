"""Server and build logs streamed to disk with a size cap, and scanned line by line while they stream.

A process's output is read from a pipe in chunks. The first half of the cap goes to the file as it
arrives; after that, the newest bytes are kept in a bounded ring and written after a marker line saying
how many bytes (and lines) were dropped, when the stream ends. The recipe's secrets are masked before
any of this (`CappedLog(mask=...)`, abbisect/redact.py `StreamMask`). Each line is fed to a `LineScanner`
(known signatures, the first exception, a ready pattern, the last line) as it passes, so nothing ever
holds the whole log: memory stays flat whatever the process prints.
"""

from __future__ import annotations

import collections
import os
import re
import re._constants as _const  # type: ignore[import-not-found]  # CPython-private: no stubs
import threading
from collections.abc import Callable
from pathlib import Path
from re import _parser  # type: ignore[attr-defined]  # CPython-private: no stubs

from abbisect.redact import StreamMask
from abbisect.score.signatures import Signature, SignatureMatch, _compiled

# Per trial and per log: 4 MiB of head and 4 MiB of tail. ABBISECT_LOG_CAP_BYTES overrides (tests).
DEFAULT_CAP = 8 * 1024 * 1024
MAX_LINE = 64 * 1024  # longer lines are scanned by their first MAX_LINE bytes
# Signature matches kept per log, and per signature (one repeating a million times is one fact, and must
# not crowd out a different one that comes later).
MAX_MATCHES = 500
MAX_PER_SIGNATURE = 20

_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Warning)\b.*)$")
_EXCEPTION_WORDS = ("Error", "Exception", "Exit", "Interrupt", "Failure", "Warning")
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


def _literals(pattern: str) -> list[str] | None:
    """The literal text each top-level alternative of `pattern` starts with (3+ characters), or None when
    some alternative has none (or flags make a literal test unsound): then the regex itself is searched."""
    try:
        parsed = _parser.parse(pattern)
    except re.error:
        return None
    if parsed.state.flags & (re.IGNORECASE | re.VERBOSE):
        return None
    items = list(parsed)
    branches = [list(b) for b in items[0][1][1]] if len(items) == 1 and items[0][0] is _const.BRANCH else [items]
    out = []
    for branch in branches:
        lit = []
        for op, av in branch:
            if op is not _const.LITERAL:
                break
            lit.append(chr(av))
        if len(lit) < 3:
            return None
        out.append("".join(lit))
    return out


def log_cap() -> int:
    return int(os.environ.get("ABBISECT_LOG_CAP_BYTES", DEFAULT_CAP))


class LineScanner:
    """Signatures, the first exception (the same rules as `score.signatures.first_exception`), a ready
    pattern and the last non-empty line, from lines fed one at a time. After `freeze()` lines are still
    counted but no longer evidence (what an engine logs while being killed is not about the engine)."""

    def __init__(self, catalogue: list[Signature] | None = None, ready: str | None = None) -> None:
        self.compiled = [(s, _compiled(s.pattern)) for s in (catalogue or [])]
        self.ready = re.compile(ready) if ready else None
        # Most chunks of a flooding log cannot matter and are only counted (a per-line, per-signature loop
        # costs microseconds a line).
        alternatives = [s.pattern for s in (catalogue or [])] + ([ready] if ready else [])
        # A chunk is searched for each pattern's literal prefix(es) with `in` (memchr speed); only a pattern
        # without one is searched as a regex. An alternation of all patterns would be ~100x slower.
        self._literals = [lit for a in alternatives for lit in (_literals(a) or ())]
        self._regexes = [re.compile(a, re.MULTILINE) for a in alternatives if _literals(a) is None]
        self.ready_seen = threading.Event()
        self.matches: list[SignatureMatch] = []
        self._per_id: dict[str, int] = {}
        self.line_no = 0
        self.last_line = ""
        self.frozen = False
        self._exc: tuple[int, str] | None = None
        self._fallback: tuple[int, str] | None = None
        self._tb: tuple[int, str] | None = None  # (line of the traceback header, its prefix)

    def feed_many(self, text: str, n_lines: int) -> None:
        """`n_lines` complete lines joined by newlines: fed one by one only if some line may matter."""
        if self._may_matter(text):
            for line in text.split("\n"):
                self.feed(line)
        else:
            self._skip(text, n_lines)

    def _may_matter(self, text: str) -> bool:
        if any(lit in text for lit in self._literals) or any(rx.search(text) for rx in self._regexes):
            return True  # a signature, or the ready line
        if self.frozen or self._exc is not None:
            return False
        return (self._tb is not None or _TRACEBACK in text
                or (self._fallback is None and any(w in text for w in _EXCEPTION_WORDS)))

    def _skip(self, text: str, n_lines: int) -> None:
        self.line_no += n_lines
        for line in reversed(text.rsplit("\n", 4)):
            if line.strip():
                self.last_line = line.strip()[:300]
                break

    def feed(self, line: str) -> None:
        self.line_no += 1
        if line.strip():
            self.last_line = line.strip()[:300]
        if self.ready is not None and not self.ready_seen.is_set() and self.ready.search(line):
            self.ready_seen.set()
        if self.frozen:
            return
        for sig, rx in self.compiled:
            if len(self.matches) >= MAX_MATCHES:
                break
            m = rx.search(line)
            if m is not None and self._per_id.get(sig.id, 0) < MAX_PER_SIGNATURE:
                self._per_id[sig.id] = self._per_id.get(sig.id, 0) + 1
                groups = tuple(g.strip() for g in m.groups() if g is not None)
                self.matches.append(SignatureMatch(sig.id, sig.severity, self.line_no, line.rstrip()[:2000],
                                                   groups, sig.meaning, sig.hint))
        self._exception(line)

    def _exception(self, line: str) -> None:
        if self._exc is not None:
            return
        if self._tb is None:
            at = line.find(_TRACEBACK)
            if at >= 0:
                self._tb = (self.line_no, line[:at])
            elif self._fallback is None and (m := _EXCEPTION_LINE.search(line.strip())):
                self._fallback = (self.line_no, m.group(1)[:500])
            return
        prefix = self._tb[1]
        body = line[len(prefix):] if prefix.strip() and line.startswith(prefix) else line
        if not body.strip() or body[:1].isspace() or body.startswith(_CHAINED) or body.startswith(_TRACEBACK):
            return
        self._exc = (self.line_no, body.strip()[:500])

    def freeze(self) -> None:
        self.frozen = True

    @property
    def first_exception(self) -> tuple[int, str] | None:
        if self._exc is not None:
            return self._exc
        if self._tb is not None:
            return self._tb[0], "traceback without a final exception line"
        return self._fallback


class CappedLog:
    """A log file that keeps its first cap/2 bytes and its last cap/2 bytes, the middle elided.

    With a `mask` (the recipe's secrets, abbisect/redact.py) every byte is masked before anything else sees
    it: the file is clean from its first byte (a run killed at any moment leaves no secret on disk), the cap
    never keeps part of a secret, and the scanner's lines (signatures, the first exception, the last line)
    and the tail are clean too."""

    def __init__(self, path: Path, cap: int | None = None, scanner: LineScanner | None = None,
                 append: bool = False, mask: StreamMask | None = None) -> None:
        self.path = path
        self.mask = mask
        self.cap = cap if cap is not None else log_cap()
        self.scanner = scanner or LineScanner()
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
