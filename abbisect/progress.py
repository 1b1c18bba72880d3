"""What a person sees while a long run goes on: one line per stage with the elapsed time (on stderr)."""

from __future__ import annotations

import time

from rich.console import Console


class Status(str):
    """A transient status update of a long wait (build, lock, server start): shown as a live line with the
    elapsed time on a terminal and as throttled plain lines otherwise. Emit with `progress(Status("…"))`
    through the same `Progress` callable as ordinary messages."""


class Reporter:
    def __init__(self, quiet: bool = False) -> None:
        self.console = Console(stderr=True, highlight=False)
        self.t0 = time.monotonic()
        self.quiet = quiet

    def __call__(self, message: str) -> None:
        if not self.quiet:
            self.console.print(f"[dim]{time.monotonic() - self.t0:7.1f}s[/dim] {message}", markup=True,
                               soft_wrap=True)

    def note(self, message: str) -> None:
        self.console.print(message)
