"""An accuracy verdict: each commit answers the recipe's eval set (abbisect/query/evals.py), items are paired
across commits by id, and two commits are compared as lm-evaluation-harness's paired comparison does
(abbisect/stats/proportions.py): exact McNemar on the items that changed answer, Wilson intervals, a paired
bootstrap interval of the difference, a minimum drop, and the A-vs-A's flips allowed for (`eval.flip_rate`).

Not sure → more items: a further launch asks the next part of the seeded sample (eval.n items), up to the set's
size; at temperature 0 the same items asked again would mostly answer the same, so more launches of the same
items would not help. A failed request is no answer: its item is left out, never scored wrong; a side whose
failed requests pass `eval.error_threshold`, or that does not serve, is untestable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from abbisect.assess.base import (
    Assessment,
    Comparison,
    Flips,
    Sample,
    Term,
    Worse,
    ends_told,
    more_launches,
    placed,
)
from abbisect.infra.serial import dump
from abbisect.query.evals import EvalRun, EvalSet, Pairing, pair
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome, Status
from abbisect.stats import PairedComparison, classify_paired, compare_paired
from abbisect.stats.decide import Call
from abbisect.stats.effects import Effect
from abbisect.stats.evidence import Items
from abbisect.trial.spec import TrialResult

# A trial of one of these statuses answered no item an accuracy can be told from.
_NO_ANSWERS = {Status.BUILD_FAILED, Status.FLAG_REJECTED, Status.CRASHED_AT_STARTUP, Status.TIMEOUT,
               Status.CRASHED_WHILE_SERVING, Status.INFRA_ERROR, Status.REQUEST_ERRORS}


def eval_run(sample: Sample) -> EvalRun | None:
    """Every item the commit's trials answered, the parts of its sample in the order they were asked."""
    runs = [t.extras.eval for t in sample if t.extras.eval is not None and t.verdict.status not in _NO_ANSWERS]
    if not runs:
        return None
    return replace(runs[0], items=tuple(i for r in runs for i in r.items))


def accuracy_text(run: EvalRun) -> str:
    acc = run.accuracy
    errors = f", {run.n_errors} failed request(s) left out" if run.n_errors else ""
    return (f"accuracy {acc:.3f} ({run.n_correct}/{run.n_graded}{errors})" if acc is not None
            else f"no item answered ({run.n_errors} failed request(s))")


class Accuracy:
    kind = "accuracy"
    relative = True
    statistical = True
    absolute = False  # an accuracy says nothing on its own: only against another commit's answers
    unit = "items"
    first = 1

    def __init__(self, recipe: Recipe) -> None:
        assert recipe.eval is not None  # chosen by assessor_for only for a recipe with an eval
        self.section = recipe.eval
        size = len(EvalSet.of(recipe.eval).items)
        self.cap = max(1, math.ceil(size / self.section.items_asked(size)))  # parts of the sample
        # the posterior search asks a candidate only the items that tell the ends apart, a launch at a time, so a
        # candidate may get more launches than the sample has parts (at least 4)
        self.search_cap = max(self.cap, 4)
        self.least, self.alpha = self.section.min_effect, self.section.alpha

    def model(self) -> Items:
        return Items()

    def observe(self, model: Items, sha: str, round_no: int, trial: TrialResult) -> None:
        run = eval_run([trial])
        if run is not None:
            model.add(sha, {i.id: bool(i.correct) for i in run.items if i.correct is not None})

    def observes(self, trial: TrialResult) -> bool:
        run = eval_run([trial])
        return run is not None and run.n_graded > 0

    def unmeasured(self, sample: Sample) -> bool:
        return False  # a failed request is no answer: its item is left out

    def effect(self, terms: Sequence[Term], basis: tuple[Sample, Sample] | None = None) -> Effect | None:
        """Σ weight × (accuracy after − accuracy before) over the items both commits of `basis` answered (default:
        the first term's), item by item: a term whose two commits did not both answer an item counts it as
        unchanged (a bisect asks a candidate only the items that tell the ends apart: the others answer alike),
        with a seeded paired bootstrap interval (95 %)."""
        runs = [(w, eval_run(before), eval_run(after)) for w, before, after in terms]
        over = [eval_run(s) for s in basis] if basis is not None else [runs[0][1], runs[0][2]] if runs else []
        if not runs or any(a is None or b is None for _, a, b in runs) or any(r is None for r in over):
            return None

        def graded(run: EvalRun | None) -> dict[str, bool]:
            return {i.id: bool(i.correct) for i in run.items if i.correct is not None} if run is not None else {}

        ids = sorted(set(graded(over[0])) & set(graded(over[1])))
        if not ids:
            return None
        d = np.zeros(len(ids))
        for w, before, after in runs:
            a, b = graded(before), graded(after)
            d += w * np.array([float(b[i]) - float(a[i]) if i in a and i in b else 0.0 for i in ids])
        rng = np.random.default_rng(0)
        means = d[rng.integers(0, d.size, size=(10_000, d.size))].mean(axis=1)
        lo, hi = np.quantile(means, [0.025, 0.975])
        return Effect(float(d.mean()), float(lo), float(hi), 0.95, "accuracy", worse_up=False)

    def _compare(self, p: Pairing) -> PairedComparison:
        return compare_paired(p.a, p.b, min_change=self.section.min_effect, alpha=self.section.alpha,
                              baseline_flip_rate=self.section.flip_rate)

    def alone(self, sample: Sample) -> Assessment:
        run = eval_run(sample)
        if run is None or not run.n_graded:
            why = "; ".join(sample[0].verdict.reasons[:1]) if sample else "no trial"
            return Assessment(Outcome.SKIP, f"untestable: no eval item answered ({why})")
        return Assessment(Outcome.GOOD, accuracy_text(run), {"items": run.n_graded, "accuracy": run.accuracy})

    def settle_ends(self, old: Sample, new: Sample, names: str = "the ends") -> tuple[Assessment, Assessment]:
        a, b = self.alone(old), self.alone(new)
        ra, rb = eval_run(old), eval_run(new)
        if Outcome.SKIP in (a.outcome, b.outcome) or ra is None or rb is None:
            return a, b
        p = pair(ra, rb)
        if not p.n:
            return (Assessment(Outcome.SKIP, f"{a.evidence}: no item answered on both sides"),
                    Assessment(Outcome.SKIP, f"{b.evidence}: no item answered on both sides"))
        cmp = self._compare(p)
        stats = {"ends": dump(cmp), "items": p.n}
        wanted = 0 if cmp.call.settled else more_launches(self.first, self.cap, min(len(old), len(new)))
        why = f"{names} answer alike" if cmp.call is Call.SAME else f"not sure {names} differ"
        return ends_told(cmp.call is Call.DIFFERENT, cmp.difference > 0, (accuracy_text(ra), accuracy_text(rb)),
                         f"{names}: {cmp.describe()}", f"{why}: {cmp.describe()}", stats, wanted)

    def against(self, sample: Sample, good: Sample, bad: Sample) -> Assessment:
        mine, g, b = eval_run(sample), eval_run(good), eval_run(bad)
        if mine is None or g is None or b is None or not mine.n_graded:
            return self.alone(sample)
        # the items every one of the three answered, in the candidate's order
        gi, bi = g.by_id(), b.by_id()
        ids = [i.id for i in mine.items if i.correct is not None and gi.get(i.id) and bi.get(i.id)
               and gi[i.id].correct is not None and bi[i.id].correct is not None]
        if not ids:
            return Assessment(Outcome.SKIP, f"{accuracy_text(mine)}: no item answered by it and both ends")
        mi = mine.by_id()
        found = classify_paired([bool(mi[i].correct) for i in ids], good=[bool(gi[i].correct) for i in ids],
                                bad=[bool(bi[i].correct) for i in ids], min_change=self.section.min_effect,
                                alpha=self.section.alpha, baseline_flip_rate=self.section.flip_rate)
        stats = {"items": len(ids), "side": str(found.side), "vs_good": dump(found.vs_good),
                 "vs_bad": dump(found.vs_bad)}
        said = f"{accuracy_text(mine)} on {len(ids)} items"
        return placed(found, said, stats, more_launches(self.first, self.cap, len(sample)),
                      f"not sure with every item of the set: {said}")

    def compare(self, a: Sample, b: Sample) -> Comparison:
        ra, rb = eval_run(a), eval_run(b)
        if ra is None or rb is None or not (p := pair(ra, rb)).n:
            return Comparison(self.kind, "no item answered on both sides")
        cmp = self._compare(p)
        worse = (Worse.B if cmp.difference < 0 else Worse.A) if cmp.call is Call.DIFFERENT else None
        return Comparison(self.kind, cmp.describe(), cmp.call, worse, dump(cmp), flips=Flips(p.lost, p.gained, p.n))
