"""The posterior of a statistical bisect (abbisect/bisect/noisy.py) in the report: a text picture for bisect.md
and an SVG beside it, both pure over `BisectRun.posterior` and the steps."""

from __future__ import annotations

from html import escape

from abbisect.bisect.bisection import BisectRun, Step
from abbisect.bisect.findings import PosteriorSummary
from abbisect.report.text import fence, plain

BAR = 32  # characters of the longest bar
ROWS = 40  # rows of the text picture at most


def _launches(step: Step | None) -> str:
    return f"{len(step.trials)} launch(es)" if step is not None else "not launched"


def rows(run: BisectRun, p: PosteriorSummary) -> list[tuple[str, float, Step | None]]:
    """(commit, mass, its step) for the commits worth a row, oldest first: every launched one, and every one
    holding at least 0.5 % of the mass."""
    out = [(sha, float(p.mass.get(sha, 0.0)), run.step_of(sha)) for sha in p.order]
    return [r for r in out if r[2] is not None or r[1] >= 0.005]


def picture(run: BisectRun, p: PosteriorSummary) -> str:
    """A bar a commit: its share of the posterior `p` (the whole range's, or a part's, which says where it
    starts), the answer marked, with each commit's launches and evidence; the old end first."""
    answer = p.marked
    lines = []
    old = run.step_of(p.old)
    lines.append(f"{p.old[:10]}  {'old end':<{BAR}}         {_launches(old)}"
                 + (f"  {plain(old.evidence.split(';')[0], 60)}" if old else ""))
    shown = rows(run, p)
    if len(shown) > ROWS:
        keep = sorted(shown, key=lambda r: -r[1])[:ROWS // 2]
        launched = [r for r in shown if r[2] is not None][: ROWS - len(keep)]
        marks = {r[0] for r in keep + launched}
        shown = [r for r in shown if r[0] in marks]
    for sha, m, step in shown:
        bar = "█" * round(m * BAR) or ("▏" if m > 0 else "")
        mark = " ◀" if sha == answer else "  "
        said = f"  {plain(step.evidence.split(';')[0], 60)}" if step is not None else ""
        lines.append(f"{sha[:10]}  {bar:<{BAR}} {m:6.1%}{mark} {_launches(step)}{said}")
    lines.append(f"{'no change':<10}  {'█' * round(p.no_change * BAR):<{BAR}} {p.no_change:6.1%}")
    return "\n".join(lines)


def block(run: BisectRun) -> list[str]:
    """bisect.md's section on the posterior ([] when the verdict was a rule: plain bisection)."""
    p = run.posterior
    if p is None:
        return []
    threshold = p.threshold
    if p.answer:
        head = (f"The change is at `{p.answer[:10]}`, holding **{p.answer_mass or 0.0:.1%}** of the posterior "
                f"(a commit is named at {threshold:.0%} or more)")
    elif run.mode.ending == "no-change":
        head = f"No change holds {p.no_change:.1%} of the posterior (at least {threshold:.0%})"
    else:
        likely = ", ".join(f"`{s[:10]}` {m:.1%}" if s else f"no change {m:.1%}" for s, m in p.likely[:4])
        head = f"**Not sure**: no commit holds {threshold:.0%} of the posterior; the likeliest are {likely}"
        if run.changes and run.changes.changes:
            head = ("The whole range's search, whose posterior assumes one change, named none (each change above "
                    f"was named by a search of its own part): no commit holds {threshold:.0%}; the likeliest are "
                    f"{likely}")
    lines = ["### Posterior", "",
             f"{head}, after {p.launches} launches in {p.rounds} rounds (at most {p.budget}) over "
             f"{p.culprits} candidate commits; {p.entropy_bits:.1f} bits left. Each launch's evidence updates "
             f"one posterior over where the change is ({p.kind}: " + _model(p.kind) + "); each round "
             "launches what is expected to reduce its entropy most per unit of cost.", "",
             f"Before the change: {p.states.before}; after it: {p.states.after}.", ""]
    if p.prior:
        names = ", ".join(f"`{s[:10]}`" for s in list(p.prior)[:8]) + (" …" if len(p.prior) > 8 else "")
        weight = next(iter(p.prior.values()))
        lines += [(f"Prior: {len(p.prior)} commit(s) touching only {', '.join(f'`{u}`' for u in p.unlikely)} "
                   f"weigh {weight:g} of the others a priori ({names}); every other commit alike."), ""]
    else:
        lines += ["Prior: every candidate commit alike.", ""]
    lines += [("Mass of each commit being the first after the change, oldest first (the answer ◀; the picture is "
              "`posterior.svg` beside this report):"), "", fence(picture(run, p)), ""]
    return lines


def _model(kind: str) -> str:
    return {"flaky": "a failure rate per launch before and after, both learnt",
            "batch": "a rate of bad outputs per output before and after, both learnt",
            "perf": "each launch's passes against both states' means, learnt, with a drift per round",
            "accuracy": "each item right or wrong before and after, paired across commits"}.get(kind, kind)


def svg(run: BisectRun) -> str:
    """posterior.svg: a bar a candidate commit, oldest first; the answer red, launched commits dotted, the
    threshold dashed."""
    p = run.posterior
    assert p is not None, "a statistical bisect's"
    order, mass, answer = p.order, p.mass, p.marked
    width, left, top, height = max(320, 60 + 12 * len(order)), 50, 30, 160
    out = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + height + 70}" '
           'font-family="sans-serif" font-size="11">'),
           f'<title>posterior over the first commit after the change: {escape(run.recipe.name)}</title>',
           (f'<text x="{left}" y="18">posterior mass per commit, oldest first ({escape(p.kind)}, '
           f'{p.launches} launches)</text>'),
           f'<line x1="{left}" y1="{top + height}" x2="{width - 10}" y2="{top + height}" stroke="#333"/>']
    level = top + height * (1 - p.threshold)
    out.append(f'<line x1="{left}" y1="{level:.1f}" x2="{width - 10}" y2="{level:.1f}" stroke="#999" '
               f'stroke-dasharray="4 3"/><text x="4" y="{level + 4:.1f}">{p.threshold:.0%}</text>')
    for i, sha in enumerate(order):
        m = float(mass.get(sha, 0.0))
        x = left + 12 * i
        h = max(height * m, 0.5 if m > 0 else 0)
        colour = "#c0392b" if sha == answer else "#4682b4"
        step = run.step_of(sha)
        out.append(f'<rect x="{x}" y="{top + height - h:.1f}" width="9" height="{h:.1f}" fill="{colour}">'
                   f'<title>{sha[:10]}: {m:.2%}{escape("; " + step.evidence) if step else ""}</title></rect>')
        if step is not None:
            out.append(f'<circle cx="{x + 4.5}" cy="{top + height + 8}" r="3" fill="#333"><title>{sha[:10]}: '
                       f'{len(step.trials)} launch(es)</title></circle>')
        if sha == answer or i % max(1, len(order) // 12) == 0:
            out.append(f'<text x="{x}" y="{top + height + 24}" transform="rotate(45 {x} {top + height + 24})">'
                       f'{sha[:8]}</text>')
    out.append(f'<text x="{left}" y="{top + height + 66}">● launched; red: '
               f'{escape((answer or "")[:10])}; no change {p.no_change:.1%}</text></svg>')
    return "\n".join(out) + "\n"
