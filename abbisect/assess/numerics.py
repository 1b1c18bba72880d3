"""A numerics verdict: each commit's token log-probabilities (abbisect/query/logprobs.py) set against the other
side's, or a bisect candidate's against both ends' (abbisect/stats/logprobs.py).

A deterministic engine (`numerics.deterministic`, the default) is decided in one launch a side: the same commit
gives the same log-probabilities, which an A-vs-A shows. A non-deterministic one is launched again while not sure,
up to `numerics.max_launches`, and its bisect is the posterior search (abbisect/bisect/noisy.py) over each launch's
per-text distance to the first launch of the search (an end's): the launches of that end's side sit near 0, the
other side's near the ends' difference.

Which side is bad cannot be read from log-probabilities alone (a fix moves them as much as a bug): in an A/B the
newer side (B) is the one that moved; in a bisect the ends are as labelled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from abbisect.assess.base import Assessment, Comparison, Sample, Term, Worse, ends_told, more_launches, placed
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome, Status
from abbisect.score.logprobs import NumericsRun, Scored, Token
from abbisect.stats.decide import Call
from abbisect.stats.effects import NATS, Effect
from abbisect.stats.evidence import Samples
from abbisect.stats.logprobs import (
    NumericsComparison,
    compare_runs,
    compare_text,
    interval,
    paired,
    resemblance,
)
from abbisect.trial.spec import TrialResult

_NOTHING = {Status.BUILD_FAILED, Status.FLAG_REJECTED, Status.CRASHED_AT_STARTUP, Status.TIMEOUT,
            Status.CRASHED_WHILE_SERVING, Status.INFRA_ERROR}
ALPHA = 0.05  # when the recipe names none (verdict.alpha)


def runs_of(sample: Sample) -> list[NumericsRun]:
    return [t.extras.numerics for t in sample
            if t.extras.numerics is not None and t.verdict.status not in _NOTHING
            and any(s.error is None for s in t.extras.numerics.texts)]


def merged(sample: Sample) -> NumericsRun | None:
    """A commit's launches as one run: each text's log-probabilities averaged position by position over the
    launches (a deterministic engine's launches are alike; a noisy one's average is its best estimate)."""
    runs = runs_of(sample)
    if not runs:
        return None
    if len(runs) == 1:
        return runs[0]

    def mean_of(parts: list[tuple[Scored, ...]]) -> tuple[Scored, ...]:
        """Each text of the first launch, averaged over the launches that scored it into the same tokens (the
        first that scored it at all stands for it)."""
        out = []
        for first in parts[0]:
            ok = [s for p in parts for s in p if s.id == first.id and s.error is None]
            if not ok:
                out.append(first)
                continue
            same = [s for s in ok if [t.text for t in s.tokens] == [t.text for t in ok[0].tokens]]
            toks = tuple(Token(t.text, float(np.mean([s.tokens[i].logprob or 0.0 for s in same])), t.top)
                         for i, t in enumerate(ok[0].tokens))
            out.append(replace(ok[0], tokens=toks))
        return tuple(out)

    return NumericsRun(mean_of([r.texts for r in runs]), mean_of([r.batched for r in runs]), runs[0].continuations)


def run_text(run: NumericsRun) -> str:
    ok = [s for s in run.texts if s.error is None]
    n = sum(len(s.tokens) for s in ok)
    lp = sum(t.logprob or 0.0 for s in ok for t in s.tokens)
    errors = f", {run.n_errors} failed request(s)" if run.n_errors else ""
    return f"{len(ok)} text(s), {n} tokens, mean log p {lp / max(n, 1):.4f}{errors}"


class Distances(Samples):
    """The posterior search's evidence of a noisy numerics verdict: a launch's per-text mean absolute difference
    from the first launch added (an end's, launched first), as passes of a metric whose log is that difference."""

    def __init__(self, texts: int) -> None:
        super().__init__(passes=max(texts, 1), noise_guess=0.005)
        self.reference: NumericsRun | None = None

    def add_run(self, sha: str, round_no: int, run: NumericsRun, tol: float) -> None:
        if self.reference is None:
            self.reference = run
        values = [math.exp(compare_text(x, y, tol).mean_abs) for x, y in paired(self.reference.texts, run.texts)]
        self.add(sha, round_no, values)


class Numerics:
    kind = "numerics"
    relative = True
    statistical = True  # a comparison, told with its interval (one launch settles a deterministic engine)
    absolute = False  # log-probabilities say nothing on their own
    unit = "launches"
    first = 1

    def __init__(self, recipe: Recipe) -> None:
        assert recipe.numerics is not None  # chosen by assessor_for only for a recipe with a numerics section
        self.section = recipe.numerics
        self.least = self.section.min_effect
        # the recipe's one significance level (verdict.alpha) where the recipe has it, else the default
        self.alpha = recipe.verdict.alpha or ALPHA
        self.cap = 1 if self.section.deterministic else self.section.max_launches
        self.search_cap = 2 if self.section.deterministic else max(self.cap, 4)

    def model(self) -> Distances:
        return Distances(len(self.section.texts))

    def observe(self, model: Distances, sha: str, round_no: int, trial: TrialResult) -> None:
        runs = runs_of([trial])
        if runs:
            model.add_run(sha, round_no, runs[0], self.least)

    def observes(self, trial: TrialResult) -> bool:
        return bool(runs_of([trial]))

    def unmeasured(self, sample: Sample) -> bool:
        return False  # a failed request is no score: its text is left out

    def effect(self, terms: Sequence[Term], basis: tuple[Sample, Sample] | None = None) -> Effect | None:
        """Σ weight × the mean absolute difference between each term's commits (nats a token), with the t interval
        over texts of the weighted per-text differences. Absolute differences do not add up along a range as
        signed effects do: the sum bounds the ends' difference from above."""
        per_text: dict[str, float] = {}
        for w, before, after in terms:
            a, b = merged(before), merged(after)
            if a is None or b is None:
                return None
            for x, y in paired(a.texts, b.texts):
                per_text[x.id] = per_text.get(x.id, 0.0) + w * compare_text(x, y, self.least).mean_abs
        if not per_text:
            return None
        m, lo, hi, _ = interval(np.array(list(per_text.values())), 0.05)
        return Effect(m, lo if math.isfinite(lo) else m, hi if math.isfinite(hi) else m, 0.95, NATS)

    def _compare(self, a: NumericsRun, b: NumericsRun) -> NumericsComparison:
        return compare_runs(a, b, self.least, self.alpha)

    def alone(self, sample: Sample) -> Assessment:
        run = merged(sample)
        if run is None:
            why = "; ".join(sample[0].verdict.reasons[:1]) if sample else "no trial"
            return Assessment(Outcome.SKIP, f"untestable: no text scored ({why})")
        return Assessment(Outcome.GOOD, run_text(run), {"texts": sum(s.error is None for s in run.texts)})

    def settle_ends(self, old: Sample, new: Sample, names: str = "the ends") -> tuple[Assessment, Assessment]:
        a, b = self.alone(old), self.alone(new)
        ra, rb = merged(old), merged(new)
        if Outcome.SKIP in (a.outcome, b.outcome) or ra is None or rb is None:
            return a, b
        cmp = self._compare(ra, rb)
        stats = {"ends": _summary(cmp)}
        wanted = 0 if cmp.call.settled else more_launches(self.first, self.cap, min(len(old), len(new)))
        why = f"{names} score alike" if cmp.call is Call.SAME else f"not sure {names} differ"
        # the newer side moved: it is the one called bad (a fix moves the numbers as much as a bug)
        return ends_told(cmp.call is Call.DIFFERENT, False, (run_text(ra), run_text(rb)),
                         f"{names}: {cmp.describe()}", f"{why}: {cmp.describe()}", stats, wanted)

    def against(self, sample: Sample, good: Sample, bad: Sample) -> Assessment:
        mine, g, b = merged(sample), merged(good), merged(bad)
        if mine is None or g is None or b is None:
            return self.alone(sample)
        found = resemblance(mine, g, b, self.least, self.alpha)
        stats = {"side": str(found.side), "vs_good": _summary(found.vs_good), "vs_bad": _summary(found.vs_bad)}
        return placed(found, run_text(mine), stats, more_launches(self.first, self.cap, len(sample)),
                      f"not sure after {len(sample)} launch(es): {run_text(mine)}")

    def compare(self, a: Sample, b: Sample) -> Comparison:
        ra, rb = merged(a), merged(b)
        if ra is None or rb is None:
            return Comparison(self.kind, "no text scored on both sides")
        cmp = self._compare(ra, rb)
        # the newer side moved: it is the worse one (a fix moves the numbers as much as a bug)
        return Comparison(self.kind, cmp.describe(), cmp.call, Worse.B if cmp.call is Call.DIFFERENT else None,
                          _summary(cmp), numerics=cmp)


def _summary(cmp: NumericsComparison) -> dict:
    """The comparison's numbers (without the per-position detail, which `Comparison.numerics` keeps)."""
    return {"call": str(cmp.call), "effect": cmp.effect, "lo": cmp.lo, "hi": cmp.hi, "floor": cmp.floor, "p": cmp.p,
            "alpha": cmp.alpha, "least": cmp.least, "texts": len(cmp.texts), "continuations": len(cmp.continuations),
            "parted": cmp.parted, "far": cmp.far}
