"""Accuracy, told: one paired comparison as a sentence, a console table and a report section, and the items
that flipped (with the failed requests apart) for outputs.md. Pure: results in, text out.

The reader sees the change first ("B is 4.2 points lower than A …: different"), then the evidence: each
side's accuracy with its Wilson interval, the discordant items behind exact McNemar, the paired bootstrap
interval of the difference and, where one was planned, the power to see the drop that matters.
"""

from __future__ import annotations

from collections.abc import Sequence

from abbisect.query.evals import EvalRun, ItemResult, Pairing, pair
from abbisect.recipe.eval import Eval
from abbisect.report.text import cell, heading, table
from abbisect.stats import PairedComparison, PowerPlan, compare_paired
from abbisect.stats.decide import p_text

MINUS = "\u2212"


def _signed(x: float) -> str:
    """Points with their sign, the minus a real one: "−4.2", "+0.8"."""
    return f"{x * 100:+.1f}".replace("-", MINUS)


def _pct(x: float) -> str:
    return f"{x * 100:.1f} %"


def _interval(ci: tuple[float, float]) -> str:
    return f"[{_signed(ci[0])}, {_signed(ci[1])}]"


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}" if n == 1 else f"{n:,} {what}s"


def headline(cmp: PairedComparison, a: str = "A", b: str = "B") -> str:
    """The comparison in one line, as it goes first on the console and in a report."""
    points = abs(cmp.difference) * 100
    if cmp.difference < 0:
        change = f"{b} is {points:.1f} points lower than {a}"
    elif cmp.difference > 0:
        change = f"{b} is {points:.1f} points higher than {a}"
    else:
        change = f"{b} and {a} are level"
    p = p_text(cmp.p).replace("p ", "McNemar p ", 1)
    return f"{change} {_interval(cmp.ci)}, {p} on {cmp.n:,} paired items: {cmp.call.text}"


def notes(cmp: PairedComparison, pairing: Pairing, names: tuple[str, str] = ("A", "B")) -> list[str]:
    """What the numbers rest on and leave out: items in one run only, failed requests, a small n, the
    A-vs-A padding, how many items would settle a call that is not sure."""
    a, b = names
    out = []
    if pairing.only_a or pairing.only_b:
        out.append(f"{_count(len(pairing.only_a), 'item')} only in {a} and {len(pairing.only_b):,} only in {b}: "
                   "not compared")
    if pairing.errors_a or pairing.errors_b:
        out.append(f"requests that failed: {len(pairing.errors_a):,} on {a}, {len(pairing.errors_b):,} on {b} "
                   "(counted apart, never as wrong answers; those items are not compared)")
    if cmp.padded:
        out.append(f"judged with the A-vs-A's {cmp.expected_flips:.0f} expected flips: {cmp.padded} added each "
                   f"way to the {cmp.lost + cmp.gained} observed")
    if cmp.needed_n:
        out.append(f"about {cmp.needed_n:,} paired items would settle it")
    if cmp.warning:
        out.append(cmp.warning)
    return out


def text_table(cmp: PairedComparison, pairing: Pairing, labels: tuple[str, str],
               names: tuple[str, str] = ("A", "B")) -> str:
    """The console's small table under the headline: each side, then the test and the call."""
    level = f"{cmp.confidence * 100:g} %"
    rows = [("side", "source", "accuracy", f"{level} interval", "right", "errors")]
    for name, label, acc, ci, right, errors in (
            (names[0], labels[0], cmp.accuracy_a, cmp.ci_a, round(cmp.accuracy_a * cmp.n), pairing.errors_a),
            (names[1], labels[1], cmp.accuracy_b, cmp.ci_b, round(cmp.accuracy_b * cmp.n), pairing.errors_b)):
        rows.append((name, label, _pct(acc), f"{_pct(ci[0])} – {_pct(ci[1])}", f"{right:,}/{cmp.n:,}",
                     f"{len(errors):,}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    lines.append(f"discordant: {cmp.lost:,} lost (right on {names[0]}, wrong on {names[1]}), {cmp.gained:,} gained; "
                 f"exact McNemar {p_text(cmp.p_mcnemar)} (unpaired test {p_text(cmp.p_unpaired)})")
    lines.append(f"difference {names[1]} − {names[0]}: {_signed(cmp.difference)} points {_interval(cmp.ci)} "
                 f"({level} paired bootstrap)")
    lines.append(f"call: {cmp.call.text} — {cmp.reason}")
    lines += [f"note: {n}" for n in notes(cmp, pairing, names)]
    return "\n".join(lines)


def accuracy_section(cmp: PairedComparison, pairing: Pairing, plan: PowerPlan | None = None,
                     names: tuple[str, str] = ("A", "B"), level: int = 3, title: str = "Accuracy") -> str:
    """report.md's accuracy section: accuracy per side with intervals, the difference with its interval and
    p, the call, the power."""
    a, b = names
    conf = f"{cmp.confidence * 100:g} %"
    rows = [[a, _pct(cmp.accuracy_a), f"{_pct(cmp.ci_a[0])} – {_pct(cmp.ci_a[1])}",
             f"{round(cmp.accuracy_a * cmp.n):,}/{cmp.n:,}", f"{len(pairing.errors_a):,}"],
            [b, _pct(cmp.accuracy_b), f"{_pct(cmp.ci_b[0])} – {_pct(cmp.ci_b[1])}",
             f"{round(cmp.accuracy_b * cmp.n):,}/{cmp.n:,}", f"{len(pairing.errors_b):,}"]]
    lines = [heading(level, title), "", f"**{cell(headline(cmp, a, b), 400)}**", "",
             table(["side", "accuracy", f"{conf} interval (Wilson)", "right", "failed requests"], rows), "",
             (f"- difference {b} − {a}: **{_signed(cmp.difference)} points** {_interval(cmp.ci)} ({conf} paired "
              f"bootstrap); {cmp.lost:,} items lost, {cmp.gained:,} gained; exact McNemar {p_text(cmp.p_mcnemar)} "
              f"(the unpaired test would say {p_text(cmp.p_unpaired)})"),
             (f"- call: **{cmp.call.text}** — {cell(cmp.reason, 300)} (a change matters from "
              f"±{cmp.min_change * 100:g} points, alpha {cmp.alpha:g})")]
    if plan is not None:
        lines.append(f"- power: {plan.describe().removeprefix('power plan: ')}")
    lines += [f"- {cell(n, 400)}" for n in notes(cmp, pairing, names)]
    return "\n".join(lines)


def _answer_cell(item: ItemResult | None, limit: int) -> str:
    if item is None:
        return "—"
    read = f" (read: {item.extracted})" if item.extracted is not None else " (nothing read)"
    return cell(item.answer, limit) + cell(read, 60)


def flipped_items(a: EvalRun, b: EvalRun, pairing: Pairing, names: tuple[str, str] = ("A", "B"),
                  limit: int = 2000, level: int = 3) -> str:
    """outputs.md's accuracy part: the items that flipped (question, both answers, the reference), lost
    first, then the failed requests of each side, listed apart because they are no answers."""
    a_items, b_items = a.by_id(), b.by_id()
    out = [heading(level, f"Flipped items ({names[1]} against {names[0]})")]
    for title, ids in ((f"Lost: right on {names[0]}, wrong on {names[1]}", pairing.lost),
                       (f"Gained: wrong on {names[0]}, right on {names[1]}", pairing.gained)):
        out += ["", heading(level + 1, f"{title} ({len(ids):,})")]
        if not ids:
            out += ["", "none"]
            continue
        rows = [[cell(i, 60), cell(a_items[i].prompt, limit), cell(a_items[i].reference, 200),
                 _answer_cell(a_items.get(i), limit), _answer_cell(b_items.get(i), limit)] for i in ids]
        out += ["", table(["item", "question", "reference", f"{names[0]} answered", f"{names[1]} answered"], rows)]
    out += ["", failed_requests([(names[0], a), (names[1], b)], limit, level)]
    return "\n".join(out)


def failed_requests(runs: Sequence[tuple[str, EvalRun]], limit: int = 2000, level: int = 3) -> str:
    """The requests that failed, per side: never scored, so never among the flipped items."""
    rows = [[name, cell(i.id, 60), cell(i.error, limit)] for name, run in runs for i in run.errors()]
    out = [heading(level + 1, f"Failed requests, not scored ({len(rows):,})"), ""]
    return "\n".join(out + ([table(["side", "item", "error"], rows)] if rows else ["none"]))


def ab_accuracy(section: Eval, a: EvalRun, b: EvalRun, same_commit: bool, level: int = 3,
                title: str = "Accuracy") -> str:
    """An A/B's accuracy section, from every item each side answered: the paired comparison, the power plan
    at the observed accuracy, and for an A-vs-A the items that flipped between two runs of one commit."""
    p = pair(a, b)
    if not p.n:
        return f"{heading(level, title)}\n\nNo item was answered on both sides."
    cmp = compare_paired(p.a, p.b, min_change=section.min_effect, alpha=section.alpha,
                         baseline_flip_rate=section.flip_rate)
    plan = None
    if section.power:  # the plan at A's observed accuracy (within what a flip rate allows: at 100 % none is lost)
        try:
            plan = section.plan(a.size or p.n, accuracy=min(max(cmp.accuracy_a, section.min_effect + section.flip_rate),
                                                            1 - section.flip_rate / 2))
        except ValueError:
            plan = None
    text = accuracy_section(cmp, p, plan, level=level, title=title)
    if same_commit:
        flips = len(p.lost) + len(p.gained)
        text += (f"\n- A-vs-A: {flips} of {p.n:,} items flipped between two runs of the same commit "
                 f"({flips / p.n:.1%}; the recipe allows for eval.flip_rate {section.flip_rate:.1%})")
    return text


def accuracy_along(rows: Sequence[tuple[str, str, str, EvalRun]]) -> str:
    """Accuracy per tested commit of a bisect, oldest first: (label, sha, verdict, its answers) each."""
    lines = [[f"`{sha[:10]}`", label, f"**{verdict}**", _pct(run.accuracy) if run.accuracy is not None else "—",
              f"{run.n_correct:,}/{run.n_graded:,}", f"{run.n_errors:,}"] for label, sha, verdict, run in rows]
    return table(["commit", "role", "verdict", "accuracy", "right", "failed requests"], lines)
