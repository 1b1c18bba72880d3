"""What every command that runs trials does first: open its cache.

Opening the cache is where side effects belong: the folder is created and checked, servers that a killed
abbisect left running are reaped (said once on stderr), and the disk budget is enforced. A path lookup
(`cache_path`, what a dry run uses) does none of that.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from abbisect.commands.options import verbosity
from abbisect.infra.cache import Cache, create, enforce_budget
from abbisect.infra.progress import Reporter
from abbisect.infra.supervisor import reap_orphans

if TYPE_CHECKING:
    from abbisect.gpu.preflight import GpuCheck

META_KEY = "abbisect.cache"  # where the CLI's crash handler finds the cache a command opened


def open_cache(override: str | Path | None, say: Callable[[str], None] | None = None,
               budget: bool = True) -> Cache:
    """The command's cache: created and writable, orphans reaped, over-budget entries evicted (`budget`)."""
    cache = create(override)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta[META_KEY] = cache.root
    try:
        lines = reap_orphans(cache)
    except OSError as exc:  # an unreadable record folder must not stop the command
        lines = [f"abbisect: could not check for orphaned servers: {exc}"]
    for line in lines:
        click.echo(line, err=True)
    if budget:
        enforce_budget(cache.root, say)
    return cache


def open_reporter() -> Reporter:
    """The command's reporter at the level -q / -v asked for. Its live line (on a terminal) is cleared when the
    command ends, however it ends: click closes the command's context before the CLI prints an error."""
    ctx = click.get_current_context(silent=True)
    reporter = Reporter(level=verbosity(ctx))
    if ctx is not None:
        ctx.call_on_close(reporter.close)
    return reporter


HINT_KEY = "abbisect.interrupted"  # what the CLI says after "interrupted" (how to resume, what is left where)


def interrupted_hint(text: str) -> None:
    """What to tell the user if this command is interrupted from now on (printed once, by the CLI)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta[HINT_KEY] = text


def gpu_lines(check: GpuCheck) -> list[str]:
    """The GPU slots as a dry run states them, and what this machine lacks to run them."""
    lines = list(check.lines) + [f"note: {n}" for n in check.notes]
    if check.machine_error:
        lines.append(f"on this machine a run stops here (exit 2): {check.machine_error}")
    return lines
