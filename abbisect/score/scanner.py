"""A log read line by line as it streams: known signatures, the first exception, a ready pattern and the last
line, without ever holding the whole log (abbisect/infra/logstream.py feeds it)."""

from __future__ import annotations

import re
import re._constants as _const  # type: ignore[import-not-found]  # CPython-private: no stubs
import threading
from re import _parser  # type: ignore[attr-defined]  # CPython-private: no stubs

from abbisect.score.signatures import Signature, SignatureMatch, _compiled

# Signature matches kept per log, and per signature (one repeating a million times is one fact, and must
# not crowd out a different one that comes later).
MAX_MATCHES = 500
MAX_PER_SIGNATURE = 20

_TRACEBACK = "Traceback (most recent call last):"
# What a server raises when its client went away (closed or reset the connection): with abbisect's own client the
# only one on the loopback address, such a traceback is of our making, never the engine's.
CLIENT_GONE = ("ConnectionResetError", "BrokenPipeError", "ConnectionAbortedError")
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


class LineScanner:
    """Signatures, the first exception (the same rules as `score.signatures.first_exception`), a ready
    pattern and the last non-empty line, from lines fed one at a time. After `freeze()` lines are still
    counted but no longer evidence (what an engine logs while being killed is not about the engine).

    `own_client`: the log is a server's that only abbisect's client talks to. A traceback that ends in the
    client's going away (`CLIENT_GONE`: a connection it reset or closed, e.g. at the end of a load pass) is
    then not evidence: its header's matches (`python_traceback`) are taken back, it is not the first
    exception, and it is counted in `client_gone`."""

    def __init__(self, catalogue: list[Signature] | None = None, ready: str | None = None,
                 own_client: bool = False) -> None:
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
        self.own_client = own_client
        self.client_gone = 0  # tracebacks of the client's going away, not counted (own_client)
        self._exc: tuple[int, str] | None = None
        self._fallback: tuple[int, str] | None = None
        self._tb: tuple[int, str] | None = None  # the open traceback: (line of its header, its prefix)
        self._after_freeze = False  # the open traceback ended after the freeze, not the client's doing

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
        if self._tb is not None:  # an open traceback: its final line says what it was
            return not self.frozen or (self.own_client and not self._after_freeze)
        if self.frozen or (self._exc is not None and not self.own_client):
            return False
        return (_TRACEBACK in text
                or (self._exc is None and self._fallback is None and any(w in text for w in _EXCEPTION_WORDS)))

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
            if self._tb is not None and self.own_client and not self._after_freeze:
                self._exception(line)  # a traceback begun before the freeze may still be the client's going away
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
        if self._tb is None:
            if self.frozen or (self._exc is not None and not self.own_client):
                return
            at = line.find(_TRACEBACK)
            if at >= 0:
                self._tb = (self.line_no, line[:at])
            elif self._exc is None and self._fallback is None and (m := _EXCEPTION_LINE.search(line.strip())) \
                    and not (self.own_client and m.group(1).startswith(CLIENT_GONE)):
                self._fallback = (self.line_no, m.group(1)[:500])
            return
        header, prefix = self._tb
        body = line[len(prefix):] if prefix.strip() and line.startswith(prefix) else line
        if not body.strip() or body[:1].isspace() or body.startswith(_CHAINED) or body.startswith(_TRACEBACK):
            return
        if self.own_client and body.startswith(CLIENT_GONE):
            self._tb = None
            self._take_back(header)
        elif not self.frozen:  # after the freeze, a traceback begun before it stays without its final line
            self._tb = None
            if self._exc is None:
                self._exc = (self.line_no, body.strip()[:500])
        else:
            self._after_freeze = True

    def _take_back(self, header: int) -> None:
        """The traceback begun at line `header` was the client's going away: its header's matches go."""
        self.client_gone += 1
        gone = [m for m in self.matches if m.line_no == header and m.id == "python_traceback"]
        for m in gone:
            self.matches.remove(m)
            self._per_id[m.id] -= 1

    def freeze(self) -> None:
        self.frozen = True

    @property
    def first_exception(self) -> tuple[int, str] | None:
        if self._exc is not None:
            return self._exc
        if self._tb is not None:
            return self._tb[0], "traceback without a final exception line"
        return self._fallback
