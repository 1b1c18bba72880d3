"""`abbisect bisect --dry-run`: what a bisection would test and build, computed from git alone.

Nothing is built or launched: the ends' plans come from `abbisect.trial.dryrun` (the commits' own trees), the
candidate counts and midpoints from the same pure search the real run uses.
"""

from __future__ import annotations

from pathlib import Path

from abbisect import checkout
from abbisect.bisect import gitlog
from abbisect.bisect.ends import ends_first_because, judged_against_ends
from abbisect.bisect.gitlog import order_ends
from abbisect.bisect.search import NEW, OLD, start
from abbisect.infra.cache import Cache
from abbisect.recipe import Recipe
from abbisect.trial.dryrun import render_env, render_plan
from abbisect.trial.slots import slots_for


def _label(repo: Path, sha: str) -> str:
    return f"{sha[:10]} {gitlog.commit_info(repo, sha).subject}"


def search_lines(repo: Path, label: str, new: str, olds: list[str], first_parent: bool,
                 pathspec: list[str] | None) -> tuple[list[str], list[str]]:
    """(lines, the first midpoint and its two successors) for one range: candidate counts with and without
    --first-parent (the walk the run would use marked) and the commits tested first."""
    counts, states = {}, {}
    for fp in (False, True):
        graph = gitlog.candidate_graph(repo, new, olds, fp, pathspec, unrelated_olds=True)
        states[fp] = start(graph, new, olds)
        counts[fp] = len(states[fp].remaining())
    used = states[first_parent]
    mark = {first_parent: " ← this run"}
    lines = [(f"  candidates {label}: {counts[False]} in the full history{mark.get(False, '')}, "
              f"{counts[True]} with --first-parent{mark.get(True, '')}")]
    first = used.next_commit()
    if first is None:
        return [*lines, "  nothing to test between the ends"], []
    lines[0] += f"; roughly {used.steps_left() + 1} steps"
    lines.append(f"  first midpoint: {_label(repo, first)}")
    after = {v: used.record(first, v).next_commit() for v in (OLD, NEW)}
    for verdict, word in ((OLD, "is like the range's old end"), (NEW, "is like the range's new end")):
        nxt = after[verdict]
        lines.append(f"    then, if it {word}: {_label(repo, nxt) if nxt else 'done'}")
    return lines, [first, *(s for s in after.values() if s)]


def ends_line(recipe: Recipe, bases: tuple[str, ...] = ()) -> str:
    """How the run will treat the ends (bisect.ends, and the slots)."""
    slots = len(slots_for(recipe.gpu_slots, recipe.bisect.slots))
    first = ("both ends are tested first; the direction (regression or fix) is observed, not assumed"
             + (f"; {slots} slots: the ends at once" if slots > 1 else "")
             + (f", with {slots - 2} commit(s) splitting the range beside them" if slots > 2 and not bases
                and not judged_against_ends(recipe) else ""))
    if recipe.bisect.ends == "first":
        return first
    why = ends_first_because(recipe, merge_bases=bases, slots=slots)
    if why:
        return f"bisect.ends lazy is not possible here ({why}): {first}"
    return ("ends lazy: the search starts from --good/--bad at once, as git bisect run does; an end is tested "
            "only if the answer rests on it")


def render_bisect_plan(recipe: Recipe, repo: Path, good: checkout.Revision, bad: checkout.Revision,
                       cache: Cache | Path) -> str:
    first_parent = recipe.bisect.first_parent
    pathspec = recipe.bisect.pathspec or None
    old, new, bases = order_ends(repo, good, bad)
    lines = [f"bisect plan for {recipe.name} (dry run: nothing is built or launched)",
             f"good end: {good.ref} → {good.sha} {good.subject}", f"bad end:  {bad.ref} → {bad.sha} {bad.subject}",
             ends_line(recipe, bases)]
    extra: list[tuple[str, str]] = []
    if not bases:
        lines.append(f"ends: {old.ref} is an ancestor of {new.ref}: the range is {old.ref}..{new.ref}")
        more, mids = search_lines(repo, f"{old.ref}..{new.ref}", new.sha, [old.sha], first_parent, pathspec)
        lines += more
    else:
        lines += [(f"ends: {good.ref} and {bad.ref} are on different branches; their merge base "
                  f"{', '.join(_label(repo, b) for b in bases)} is tested after the two ends:"),
                  f"  if it has {good.ref}'s verdict, merge-base..{bad.ref} is searched (as git bisect does)",
                  f"  if it has {bad.ref}'s verdict, merge-base..{good.ref} is searched (git bisect would stop)",
                  "  if it is untestable (or the bases disagree), the run stops with its evidence"]
        mids = []
        for end, other in ((bad, good), (good, bad)):
            more, found = search_lines(repo, f"merge-base..{end.ref}", end.sha, [*bases, other.sha],
                                       first_parent, pathspec)
            lines += more
            mids += found
        extra += [(f"merge base {b[:10]}", b) for b in bases]
    extra += [(f"first midpoint {mids[0][:10]}", mids[0])] if mids else []
    # Planned by sha: an end's ref may be a label (a date end reads "2026-07-20 → 8905cbd42f").
    plans = render_plan(recipe, (good.sha, bad.sha), cache, labels=(good.ref, bad.ref))
    lines += ["", "plans (side A = the good end, side B = the bad end):", plans]
    for label, sha in extra:
        lines.append(f"{label}:")
        lines += render_env(recipe, repo, sha, sha, cache)
    return "\n".join(lines)
