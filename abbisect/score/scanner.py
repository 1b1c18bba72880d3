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
