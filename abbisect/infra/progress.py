"""What a person sees while a long run goes on (on stderr).

Ordinary messages are timestamped lines. A `Status` is a transient update of a long wait (build, lock,
server start): on a terminal it is one live line (rich's live display), rewritten in place with the wait's
elapsed time and cleared by the next ordinary line; otherwise (a log, CI) a plain timestamped line, at most one
per `THROTTLE_S` per kind so a log stays readable. `-q` (QUIET) shows errors and the final lines only; `-v`
(VERBOSE) shows every step, status updates unthrottled.

The command makes one `Reporter` at the level its options asked for and passes it (as a `Progress` callable)
to whatever talks to the user; nothing here is global. rich is imported only for a terminal.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Self, TextIO

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live

QUIET, NORMAL, VERBOSE = 0, 1, 2
THROTTLE_S = 10.0

Say = Callable[[str], None]  # what a stage is handed to tell the user something: the command's `Reporter`


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


class _LiveLine:
    """The terminal's side: one live line through rich (cropped to the terminal's width, so rewriting it never
    leaves a wrapped half behind), and ordinary lines printed as they are (no markup, no highlighting)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live: Live | None = None

    @classmethod
    def on(cls, stream: TextIO) -> _LiveLine | None:
        """The live line of a terminal that can rewrite a line; None elsewhere (a file, a pipe, TERM=dumb)."""
        if not stream.isatty():
            return None
        from rich.console import Console

        console = Console(file=stream, markup=False, highlight=False, emoji=False, soft_wrap=True)
        return None if console.is_dumb_terminal else cls(console)

    def show(self, text: str) -> None:
        from rich.live import Live
        from rich.text import Text

        line = Text(text, no_wrap=True, overflow="ellipsis")
        if self.live is None:
            self.live = Live(line, console=self.console, auto_refresh=False, transient=True,
                             redirect_stdout=False, redirect_stderr=False)
            self.live.start(refresh=True)
        else:
            self.live.update(line, refresh=True)

    def clear(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def line(self, text: str) -> None:
        from rich.text import Text

        self.clear()
        self.console.print(Text(text))


class Reporter:
    """The `Progress` callable of a command: `reporter(message)`; a `Status` is a live line on a terminal, a
    `Final` survives `-q`. `close()` clears a live line (the command's end calls it)."""

    def __init__(self, stream: TextIO | None = None, level: int = NORMAL) -> None:
        self.stream = stream or sys.stderr
        self.level = level
        self.t0 = time.monotonic()
        self._terminal = _LiveLine.on(self.stream)
        self._wait: tuple[str, float] | None = None  # (kind, since) of the current wait
        self._last: dict[str, float] = {}  # kind → when a plain status line was last written
        self._lock = threading.Lock()  # trials, builds and lock waits report from several threads

    def _stamp(self) -> str:
        return f"{time.monotonic() - self.t0:7.1f}s"

    def _write(self, text: str) -> None:
        if self._terminal is not None:
            self._terminal.line(text)
            return
        self.stream.write(text + "\n")
        self.stream.flush()

    def __call__(self, message: str) -> None:
        with self._lock:
            if isinstance(message, Status):
                self._status(message)
                return
            self._wait = None
            if self.level >= NORMAL:
                self._write(f"{self._stamp()} {message}")
            elif isinstance(message, Final):
                self._write(message)

    def _status(self, message: Status) -> None:
        now = time.monotonic()
        if self._wait is None or self._wait[0] != message.kind:
            self._wait = (message.kind, now)
        waited = now - self._wait[1]
        if self.level == QUIET:
            return
        line = f"{self._stamp()} {message} ({waited:.0f} s)"
        if self._terminal is not None:
            self._terminal.show(line)
            return
        if self.level < VERBOSE and now - self._last.get(message.kind, -THROTTLE_S) < THROTTLE_S:
            return
        self._last[message.kind] = now
        self._write(line)

    def close(self) -> None:
        with self._lock:
            if self._terminal is not None:
                self._terminal.clear()


def warn(message: str, say: Say | None = None) -> None:
    """A warning a person must see, even with `-q`: one line through the command's reporter where it is passed
    (a live status line is cleared first), else on stderr."""
    line = f"abbisect: warning: {message}"
    if say is not None:
        say(Final(line))
    else:
        print(line, file=sys.stderr, flush=True)
