"""Every change of a statistical bisect's range in bisect.md (`bisect.changes: all`, abbisect/bisect/changes.py):
the changes table — each commit, its subject and PR, its effect with its interval, its share of the ends'
difference — what is left unexplained, the parts searched, and each part's posterior. Pure over `run.changes`."""

from __future__ import annotations

from abbisect.bisect.bisection import BisectRun
from abbisect.bisect.split import BUDGET
from abbisect.report.posterior import picture
from abbisect.report.text import Notes, cell, details, fence, table


def _share(share: float | None) -> str:
    return f"{share:.0%}" if share is not None else "—"


def headline(run: BisectRun) -> str | None:
    """`2 changes account for the ends' difference: `c020` (+6.1 %), `c040` (+5.8 %)`, with two or more named."""
    c = run.changes
    if c is None or len(c.changes) < 2:
        return None
    said = ", ".join(f"`{r.sha[:10]}` ({r.effect.headline})" for r in c.changes if r.effect)
    n = len(c.changes)
    return f"{n} changes account for the ends' difference: {said}" if c.accounted and c.sure else \
        f"{n} changes: {said}; {c.said}"


def budget_said(run: BisectRun) -> str:
    """What the searches may spend and spent: ` Every search together spends at most 168 launches …`."""
    if run.changes is None:
        return ""
    budget = run.changes.budget
    return (f" Every search together, the whole range's and its parts', spends at most {budget} launches (the "
            f"bisect's budget: {BUDGET} times the whole range's search's); this bisect launched {run.launches}.")


def block(run: BisectRun) -> list[str]:
    """The changes section ([] unless every change was searched for)."""
    c = run.changes
    if c is None or c.ends is None:
        return []
    ends, notes = c.ends, Notes()
    rows = []
    for n, r in enumerate(c.changes, 1):
        info = run.commits.get(r.sha)
        links = r.links
        commit = f"[`{r.sha[:10]}`]({links.commit})" if links.commit else f"`{r.sha[:10]}`"
        pr = (f"[#{info.pr}]({links.pr})" if info and info.pr and links.pr else
              f"#{info.pr}" if info and info.pr else "—")
        e = r.effect
        rows.append([str(n), commit, cell(info.subject if info else "", 80, notes), pr, e.sign if e else "—",
                     e.told if e else "—", _share(e.share if e else None)])
    left = c.left
    told = (left.told + (f" ({left.confidence:.0%})" if left.confidence != 0.95 else "")) if left else "—"
    rows.append(["", "**not accounted for**", "", "", "", told, _share(left.share if left else None)])
    lines = ["### Changes", "",
             (f"The ends differ by {ends.told} ({ends.unit}"
              + (", a log ratio told as a change" if ends.relative else "") + f"); {c.said}."), "",
             table(["#", "commit", "subject", "PR", "kind", "effect [95 % interval]", "share"], rows, notes), "",
             ("Each effect is its parent against it; the share is of the ends' difference (a fix inside a "
              "regression's range counts against it); each change is measured on its and its parent's fresh launches "
              "(those that did not choose it: the search's tell a chosen change too large); what is not accounted for "
              "is the ends' difference minus the changes', measured as one sum and judged on the interval told "
              f"beside it (at most {c.max_changes} changes are named, `bisect.max_changes`)."
              + (f" The found commit below, whose kind the exit code tells, is `{c.primary.sha[:10]}`: of the changes "
                 "named, the one with the largest effect." if len(rows) > 2 and c.primary else "")
              + budget_said(run)),
             ""]
    pinned = [f"- `{r.sha[:10]}` {cell(d.told(), 300)}" for r in c.changes
              if (d := run.pins.get(r.sha)) and d.changes]
    lines += [*pinned, ""] if pinned else []
    if c.parts:
        shown = table(["search", "part of the range", "ended", "launches"],
                      [[str(p.phase), f"`{p.old[:10]}`..`{p.new[:10]}`", p.outcome, str(p.launches)]
                       for p in c.parts])
        lines += [details("The parts searched for another change", shown), ""]
    for r in c.changes:
        if r.posterior:
            lines += [details(f"Posterior of search {r.phase}, which named `{r.sha[:10]}`",
                              fence(picture(run, r.posterior))), ""]
    return lines
