"""Numerics, told: the sides' token log-probabilities compared (abbisect/stats/logprobs.py) as a report section —
the call with the effect, its interval and the noise floor, per text the largest and the first divergence with
both sides' top-k there, the continuations where the greedy picks part (vLLM's near-tie rule) — and numerics.svg,
the difference along the positions of every text. Pure: results in, text out.
"""

from __future__ import annotations

from html import escape

from abbisect.assess.base import Sample
from abbisect.assess.numerics import Numerics as Assessor
from abbisect.assess.numerics import merged
from abbisect.bisect.bisection import BisectRun
from abbisect.recipe.numerics import Numerics
from abbisect.report.text import cell, heading, table
from abbisect.stats.logprobs import Divergence, NumericsComparison, TextComparison, compare_runs

TOP = 3  # alternatives shown per side in a table's cell


def comparison(section: Numerics, alpha: float, a: Sample, b: Sample) -> NumericsComparison | None:
    ra, rb = merged(a), merged(b)
    return compare_runs(ra, rb, section.min_effect, alpha) if ra is not None and rb is not None else None


def _top(top: tuple[tuple[str, float], ...]) -> str:
    return ", ".join(f"`{t!r}` {lp:.3f}" for t, lp in top[:TOP]) or "—"


def _div(d: Divergence | None) -> str:
    if d is None:
        return "—"
    head = (f"{d.position}: `{d.token_a!r}` {d.logprob_a:.4f} → {d.logprob_b:.4f}" if d.token_a == d.token_b
            else f"{d.position}: A `{d.token_a!r}`, B `{d.token_b!r}`")
    return f"{head}<br>A top: {_top(d.top_a)}<br>B top: {_top(d.top_b)}"


def _text_row(t: TextComparison) -> list[str]:
    return [t.id, cell(t.prompt, 60), f"{t.mean_abs:.4f}", str(len(t.deltas)), _div(t.largest), _div(t.first)]


def _cont_row(t: TextComparison) -> list[str]:
    if t.split is None:
        where = "alike to the end"
    else:
        where = f"{t.split}: " + ("near tie (each pick in the other's top-k)" if t.near_tie
                                  else "beyond a near tie" if t.near_tie is False else "one side ended")
    return [t.id, cell(t.prompt, 60), where, f"{t.mean_abs:.4f}", _div(t.first)]


def numerics_section(section: Numerics, alpha: float, a: Sample, b: Sample, same_commit: bool, level: int) -> list[str]:
    cmp = comparison(section, alpha, a, b)
    lines = [heading(level, "Numerics: token log-probabilities"), ""]
    if cmp is None:
        return [*lines, "No text was scored on both sides.", ""]
    lines += [f"**{cmp.describe()}**", "",
              (f"The effect is the mean over texts of each text's mean absolute difference of its tokens' "
               f"log-probabilities (B − A, teacher-forced), in nats a token; its interval is over texts "
               f"(t, {(1 - alpha) * 100:g} %) of the excess over the noise floor — the difference between each "
               f"launch's texts asked one at a time and {section.concurrency} at once, averaged over the sides. "
               + ("A and B are the same commit: this is the A-vs-A, the floor between launches. " if same_commit
                  else "")
               + "The first divergence is the first position past the smallest difference that matters "
               f"({section.min_effect:g}) or where the tokens differ; `numerics.svg` beside this report draws "
               "the difference along the positions."), ""]
    failed = [(side, r) for side, r in (("A", merged(a)), ("B", merged(b))) if r is not None and r.n_errors]
    for side, r in failed:
        first = next(s for s in (*r.texts, *r.batched, *r.continuations) if s.error is not None)
        lines += [(f"{side}: {r.n_errors} failed request(s), their texts left out (the first: {first.id}, "
                   f"{cell(first.error, 200)})."), ""]
    lines += ["| text | words | mean \\|Δ\\| | tokens | largest divergence | first divergence |",
              "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in map(_text_row, cmp.texts)]
    lines += [""]
    if cmp.continuations:
        lines += [(f"Greedy continuations of the prompts ({cmp.parted} of {len(cmp.continuations)} part; vLLM's "
                   "rule: where the picks first differ, each must be among the other side's top-k, "
                   f"{cmp.far} are not):"), "",
                  table(["prompt", "words", "where the picks part", "mean abs Δ before", "first divergence"],
                        [_cont_row(t) for t in cmp.continuations]), ""]
    return lines


def svg(section: Numerics, alpha: float, a: Sample, b: Sample) -> str:
    """numerics.svg: Δ log p (B − A) along the positions, a line a text (continuations dashed, up to where they
    part); the smallest difference that matters dotted either side of 0."""
    cmp = comparison(section, alpha, a, b)
    if cmp is None:
        return ""
    rows = [*cmp.texts, *cmp.continuations]
    longest = max((len(t.deltas) for t in rows), default=0)
    peak = max([abs(d) for t in rows for d in t.deltas] + [section.min_effect * 1.5])
    width, left, top, height = min(max(640, 80 + 20 * longest), 2400), 60, 30, 200
    step = (width - left - 20) / max(longest - 1, 1)

    def y(v: float) -> float:
        return top + height / 2 - (v / peak) * (height / 2)

    out = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + height + 50}" '
            'font-family="sans-serif" font-size="11">'),
           "<title>token log-probability difference (B − A) along the positions</title>",
           (f'<text x="{left}" y="18">Δ log p (B − A) per position, nats; {escape(cmp.call.text)}, mean |Δ| '
            f'{cmp.effect:.4f}</text>'),
           f'<line x1="{left}" y1="{y(0):.1f}" x2="{width - 10}" y2="{y(0):.1f}" stroke="#333"/>']
    for v in (section.min_effect, -section.min_effect):
        out.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{width - 10}" y2="{y(v):.1f}" stroke="#999" '
                   'stroke-dasharray="2 3"/>')
    out.append(f'<text x="4" y="{y(peak) + 4:.1f}">{peak:+.3f}</text><text x="4" y="{y(-peak) + 4:.1f}">'
               f'{-peak:+.3f}</text>')
    colours = ["#4682b4", "#c0392b", "#27ae60", "#8e44ad", "#d35400", "#16a085", "#2c3e50", "#b7950b"]
    for i, t in enumerate(rows):
        if not t.deltas:
            continue
        pts = " ".join(f"{left + step * k:.1f},{y(d):.1f}" for k, d in enumerate(t.deltas))
        dash = ' stroke-dasharray="5 3"' if t.kind == "continuation" else ""
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colours[i % len(colours)]}"{dash}>'
                   f'<title>{escape(t.id)}: {escape(t.prompt[:80])} (mean |Δ| {t.mean_abs:.4f})</title></polyline>')
    for k in range(0, longest, max(1, longest // 10)):
        out.append(f'<text x="{left + step * k:.1f}" y="{top + height + 14}" text-anchor="middle">{k}</text>')
    out.append(f'<text x="{left}" y="{top + height + 32}">position (token) →; solid: texts, dashed: continuations up '
               'to where they part; dotted: ± numerics.min_effect</text></svg>')
    return "\n".join(out) + "\n"


def _parent_and_found(run: BisectRun) -> tuple[Sample, Sample] | None:
    """The trials of the found commit's parent and of the found commit (None: no answer, or not both tested)."""
    by_sha = {s.sha: s for s in run.steps}
    found = run.result.first_new if run.result else None
    if run.recipe.numerics is None or found not in by_sha or run.found_parent not in by_sha:
        return None
    return by_sha[run.found_parent].trials, by_sha[found].trials


def numerics_block(run: BisectRun) -> list[str]:
    """A numerics bisect: the found commit's log-probabilities against its parent's, as an A/B's section."""
    pair = _parent_and_found(run)
    if pair is None or run.recipe.numerics is None:
        return []
    lines = numerics_section(run.recipe.numerics, Assessor(run.recipe).alpha, pair[0], pair[1], False, 3)
    lines[0] = "### Numerics: parent (A) vs the found commit (B)"
    return lines


def numerics_picture(run: BisectRun) -> str:
    """numerics.svg of a bisect: the parent (A) against the found commit (B)."""
    pair = _parent_and_found(run)
    if pair is None or run.recipe.numerics is None:
        return ""
    return svg(run.recipe.numerics, Assessor(run.recipe).alpha, pair[0], pair[1])
