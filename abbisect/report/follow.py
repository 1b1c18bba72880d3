"""The answer followed into a dependency in bisect.md (`bisect.follow`, abbisect/bisect/follow.py): the chain
engine commit → package version → the package's commit, which part is to blame, and each chained bisect with
its evidence and its folder. Pure over `run.follow`."""

from __future__ import annotations

from abbisect.bisect.bisection import BisectRun
from abbisect.bisect.followed import Followed
from abbisect.report.text import Notes, cell, table

_STEPS = {"parent-new-pins": "the parent, only the new pin", "answer-old-pins": "the answer, only the old pin",
          "versions": "versions", "commits": "the dependency's commits"}


def chain(run: BisectRun) -> str:
    """`engine 1a2b3c4d5e` → `toydep 1.2.0` → `toydep 9f8e7d6c5b` (its subject), as far as the chain went."""
    f = run.follow
    if not isinstance(f, Followed) or not run.result or not run.result.first_new:
        return ""
    parts = [f"engine `{run.result.first_new[:10]}`"]
    if f.version:
        parts.append(f"`{f.package} {f.version}`")
    if f.commit:
        parts.append(f"{f.package} `{f.commit[:10]}` ({cell(f.commit_subject, 100)})")
    return " → ".join(parts)


def block(run: BisectRun) -> list[str]:
    f = run.follow
    if f is None:
        return []
    lines = ["### Followed into the dependency", ""]
    if not isinstance(f, Followed):
        return [*lines, cell(f.said, 400), ""]
    lines += [cell(f.said, 500), ""]
    if said := chain(run):
        lines += [f"Chain: {said}.", ""]
    notes = Notes()
    rows = []
    for n, link in enumerate(f.links, 1):
        found = link.found
        named = (f"`{found[:10]}`" if link.subject else f"`{found}`") if found else "—"
        rows.append([str(n), _STEPS.get(link.step, link.step), cell(link.walked, 120, notes),
                     f"`{link.good}` / `{link.bad}`", named, cell(link.said, 200, notes),
                     cell(link.evidence, 240, notes), f"{link.tested} ({link.replayed} replayed)",
                     f"`{link.folder}/bisect.md`"])
    if rows:
        lines += [table(["#", "step", "walked", "good / bad", "named", "shows", "evidence", "tested", "report"],
                        rows, notes), ""]
    if f.stopped:
        lines += [f"The chain stops here: {cell(f.stopped, 400)}.", ""]
    return lines
