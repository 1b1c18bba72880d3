"""What a person sees while a long run goes on (on stderr).

Ordinary messages are timestamped lines. A `Status` is a transient update of a long wait (build, lock,
server start): on a terminal it is one live line, rewritten in place with the wait's elapsed time; otherwise
(a log, CI) a plain timestamped line, at most one per `THROTTLE_S` per kind so a log stays readable.
`-q` shows errors and the final lines only; `-v` shows every step, status updates unthrottled.
"""

from __future__ import annotations

import sys
import time
from typing import Self, TextIO

QUIET, NORMAL, VERBOSE = 0, 1, 2
THROTTLE_S = 10.0

level = NORMAL  # set once by the CLI's -q / -v


class Status(str):
    """A transient status update of a long wait (build, lock, server start): shown as a live line with the
    elapsed time on a terminal and as throttled plain lines otherwise. Emit with `progress(Status("…"))`
    through the same `Progress` callable as ordinary messages; `kind` groups updates of one wait
    (default: the text before the first colon)."""

    kind: str

    def __new__(cls, text: str, kind: str | None = None) -> Self:
        obj = super().__new__(cls, text)
        obj.kind = kind or text.split(":", 1)[0]
        return obj


class Final(str):
    """A final line of a command (its verdicts, where the report is): shown even with `-q`."""


def _plain(markup: str) -> str:
    """Drop rich-style [bold]/[/bold] tags for plain output."""
    import re

    return re.sub(r"\[/?(bold|dim|red|green|yellow)\]", "", markup)


class Reporter:
    """The `Progress` callable of the CLI: `reporter(message)`; a `Status` is a live line, a `Final` survives `-q`."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.t0 = time.monotonic()
        self._status_line = False  # a live line is on screen (terminal only)
        self._wait: tuple[str, float] | None = None  # (kind, since) of the current wait
        self._last: dict[str, float] = {}  # kind → when a plain status line was last written
        global ambient_reporter
        ambient_reporter = self

    def _stamp(self) -> str:
        return f"{time.monotonic() - self.t0:7.1f}s"

    def _write(self, text: str) -> None:
        if self._status_line:
            self.stream.write("\r\x1b[K")
            self._status_line = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def __call__(self, message: str) -> None:
        if isinstance(message, Status):
            self.status(message)
            return
        self._wait = None
        if level >= NORMAL:
            self._write(f"{self._stamp()} {_plain(message)}")
        elif isinstance(message, Final):
            self._write(_plain(message))

    def status(self, message: Status) -> None:
        now = time.monotonic()
        if self._wait is None or self._wait[0] != message.kind:
            self._wait = (message.kind, now)
        waited = now - self._wait[1]
        if level == QUIET:
            return
        if self.live:
            self.stream.write(f"\r\x1b[K{self._stamp()} {_plain(message)} ({waited:.0f} s)")
            self.stream.flush()
            self._status_line = True
            return
        if level < VERBOSE and now - self._last.get(message.kind, -THROTTLE_S) < THROTTLE_S:
            return
        self._last[message.kind] = now
        self._write(f"{self._stamp()} {_plain(message)} ({waited:.0f} s)")


ambient_reporter: Reporter | None = None


def ambient(message: str) -> None:
    """Report through the CLI's reporter where no `Progress` callable reaches (a lock wait deep in a stage)."""
    if ambient_reporter is not None:
        ambient_reporter(message)


def warn(message: str) -> None:
    """A warning a person must see, even with `-q`: one line through the CLI's reporter where there is one
    (it keeps a live status line intact), else on stderr."""
    line = f"abbisect: warning: {message}"
    if ambient_reporter is not None:
        ambient_reporter(Final(line))
    else:
        print(line, file=sys.stderr, flush=True)
