"""`abbisect cache list` and `abbisect cache gc`: what the cache holds, and a disk budget for it."""

from __future__ import annotations

import time
from collections import defaultdict

import click

from abbisect.commands.common import open_cache
from abbisect.commands.endings import exit_help
from abbisect.commands.options import cache_dir_option, dry_run_option, json_option, verbosity_options
from abbisect.infra.cache import EVICTABLE, LAYOUT, entries, gc, human, parse_age, parse_size


@click.group("cache", epilog=exit_help("cache"))
def cache() -> None:
    """List and clean the cache (worktrees, venvs, models, trial results, clones, JIT caches).

    Nothing in use by a running abbisect is ever removed. Set ABBISECT_CACHE_MAX_SIZE (e.g. 50G) to have
    every run, bisect and check evict the least recently used worktrees, venvs and JIT caches over that budget.
    """


@cache.command("list", epilog=exit_help("cache"))
@cache_dir_option("the cache folder")
@click.option("--all", "show_all", is_flag=True, help="one line per entry, not only totals per kind")
@json_option("print the entries as JSON")
@verbosity_options
def list_(cache_dir: str | None, show_all: bool, as_json: bool) -> None:
    """Sizes by kind (hard links counted once) and, with --all, every entry by last use."""
    root = open_cache(cache_dir, budget=False).root
    found = entries(root)
    if as_json:
        from abbisect.infra.envelope import dumps

        click.echo(dumps("cache", {"cache": str(root), "entries": [
            {"kind": e.kind, "path": str(e.path.relative_to(root)), "bytes": e.size,
             "last_used": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(e.last_used))} for e in found]}))
        return
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in found:
        totals[e.kind][0] += 1
        totals[e.kind][1] += e.size
    click.echo(f"cache: {root}")
    for kind in LAYOUT:
        n, size = totals.get(kind, (0, 0))
        click.echo(f"  {kind:<10} {n:>5} entr{'y' if n == 1 else 'ies'}  {human(size):>10}")
    click.echo(f"  {'total':<10} {len(found):>5}          {human(sum(e.size for e in found)):>10}")
    if show_all:
        for e in found:
            age = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used))
            click.echo(f"{age}  {e.kind:<10} {human(e.size):>10}  {e.path.relative_to(root)}")


@cache.command("gc", epilog=exit_help("cache"))
@cache_dir_option("the cache folder")
@click.option("--max-size", help="remove least recently used entries until the cache fits, e.g. 50G")
@click.option("--older-than", help="remove entries unused for longer than this, e.g. 14d, 12h")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(list(LAYOUT)),
              help=f"what may be removed (repeatable; default: {', '.join(EVICTABLE)})")
@dry_run_option("print what would be removed and remove nothing")
@verbosity_options
def gc_(cache_dir: str | None, max_size: str | None, older_than: str | None, kinds: tuple[str, ...],
        dry_run: bool) -> None:
    """Remove unused entries: least recently used first, never one a running abbisect holds."""
    from abbisect.infra.errors import UserError

    if max_size is None and older_than is None:
        raise UserError("say what to remove: --max-size SIZE (e.g. 50G) and/or --older-than AGE (e.g. 14d)")
    root = open_cache(cache_dir, budget=False).root
    plan = gc(root, parse_size(max_size) if max_size else None, parse_age(older_than) if older_than else None,
              dry_run, kinds or EVICTABLE)
    verb = "would remove" if dry_run else "removed"
    for e in plan.remove:
        click.echo(f"{verb} {e.kind:<10} {human(e.size):>10}  {e.path.relative_to(root)}")
    for e in plan.kept_in_use:
        click.echo(f"kept (in use) {e.kind:<10} {human(e.size):>10}  {e.path.relative_to(root)}")
    click.echo(f"{verb} {len(plan.remove)} entr{'y' if len(plan.remove) == 1 else 'ies'}, {human(plan.freed)}; "
               f"cache was {human(plan.total_before)}, now {human(plan.total_before - (0 if dry_run else plan.freed))}")
