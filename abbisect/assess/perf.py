"""A performance verdict: each commit is measured in passes (abbisect/query/measure.py), one value of the recipe's
`perf.metric` a pass, and its sample is compared with the other side's or the ends' as Chromium Pinpoint does
(abbisect/stats/samples.py): p = min(Kolmogorov–Smirnov, Mann–Whitney U), a bootstrap interval of the change
of medians and a minimum effect. Not sure → more launches, up to `perf.max_launches` → skipped with the reason.

Which end is bad is observed: the slower one (lower throughput, higher latency). Failed requests are evidence,
never a gap in the sample: a trial whose requests failed (a pass over `perf.error_threshold`, or the recipe's
prompts) is `request_errors` (or `crashed_while_serving`, when its server died serving them), and its commit
takes that trial's outcome (bad, or skip where the recipe says so) —
a commit that breaks streaming is the commit a bisect stops at, not one it steps around. A commit that serves
no pass for another reason (it does not build or start) cannot be timed: it is untestable, with that reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

import numpy as np

from abbisect.assess.base import Assessment, Comparison, Sample, Term, Worse, ends_told, more_launches, placed
from abbisect.infra.serial import dump
from abbisect.query.measure import PerfPass
from abbisect.recipe import Recipe
from abbisect.recipe.perf import better, unit
from abbisect.recipe.status import Outcome, Status
from abbisect.stats import SampleComparison, classify_sample, compare_samples
from abbisect.stats.decide import Call
from abbisect.stats.effects import Effect
from abbisect.stats.evidence import Samples
from abbisect.trial.spec import TrialResult


def passes_of(sample: Sample) -> list[PerfPass]:
    """Every perf pass of the commit's trials, in the order they ran."""
    return [p for trial in sample for p in trial.extras.passes]


def values_in(passes: Sequence[PerfPass], metric: str) -> list[float]:
    """The metric's value in every pass that is a measurement (a failed pass gives none: `PerfPass.is_failed`)."""
    found = []
    for p in passes:
        v = p.values.get(metric)
        if not p.is_failed and v is not None and v > 0:
            found.append(float(v))
    return found


def metric_values(sample: Sample, metric: str) -> list[float]:
    """The metric's value in every pass of the commit's trials that served (in the order they ran)."""
    return values_in(passes_of(sample), metric)


@dataclass(frozen=True)
class PassErrors:
    """The failed requests of a commit's passes: per pass (in the order they ran), the passes that failed, and
    the first error seen."""

    per_pass: tuple[int, ...]
    requests: int  # measured requests sent, over every pass
    failed_passes: int
    first: str | None

    @property
    def errors(self) -> int:
        return sum(self.per_pass)

    def describe(self, first: bool = True) -> str:
        """`0 of 120 in 5 passes`, or `18 of 96 in 4 passes (per pass: 6, 0, 6, 6; 3 failed); first: …`."""
        n = len(self.per_pass)
        said = f"{self.errors} of {self.requests} in {n} pass{'' if n == 1 else 'es'}"
        if not self.errors:
            return said
        shown = ", ".join(str(e) for e in self.per_pass[:20]) + (", …" if n > 20 else "")
        failed = f"; {self.failed_passes} failed" if self.failed_passes else ""
        return f"{said} (per pass: {shown}{failed})" + (f"; first: {' '.join((self.first or '?').split())[:200]}" if first else "")


def pass_errors(sample: Sample) -> PassErrors:
    return errors_in(passes_of(sample))


def errors_in(passes: Sequence[PerfPass]) -> PassErrors:
    return PassErrors(tuple(p.errors for p in passes), sum(p.completed + p.errors for p in passes),
                      sum(p.is_failed for p in passes), next((p.first_error for p in passes if p.first_error), None))


# A trial whose requests failed: some on a living server, or all after its server died serving them.
FAILED_SERVING = (Status.REQUEST_ERRORS, Status.CRASHED_WHILE_SERVING)


def failed_requests(sample: Sample) -> TrialResult | None:
    """The first trial of the commit whose requests failed (request_errors, crashed_while_serving), if any."""
    return next((t for t in sample if t.verdict.status in FAILED_SERVING), None)


def unmeasured(sample: Sample, metric: str) -> str:
    """Why a commit has no value of the metric: its first trial's reason, unless passes ran (then what they
    lacked)."""
    if not sample:
        return "no trial"
    ran = passes_of(sample)
    if ran:
        return f"{metric} has no value in its {len(ran)} pass(es)"
    return "; ".join(sample[0].verdict.reasons[:1])


def fmt(value: float, metric: str) -> str:
    return f"{value:,.4g} {unit(metric)}"


def worse_side(cmp: SampleComparison, metric: str) -> Worse | None:
    """The side whose median is worse for `metric`; None when they are equal."""
    if cmp.median_a == cmp.median_b:
        return None
    b_higher = cmp.median_b > cmp.median_a
    return (Worse.A if b_higher else Worse.B) if better(metric) else (Worse.B if b_higher else Worse.A)


def _two_stage_medians(launches: list[np.ndarray], rng: np.random.Generator, n: int) -> np.ndarray:
    """`n` bootstrap medians of one commit's passes: its launches resampled, then each one's passes; the spread
    widened by √(L / (L − 1)) for L launches, the bootstrap's own shortfall with few of them (two launches resampled
    vary half as much as two new ones would)."""
    if len({v.size for v in launches}) == 1:  # the usual case, every launch the same passes: at once
        arr = np.stack(launches)
        chosen = arr[rng.integers(0, arr.shape[0], size=(n, arr.shape[0]))]
        picked = np.take_along_axis(chosen, rng.integers(0, arr.shape[1], size=chosen.shape), axis=2)
        out = np.median(picked.reshape(n, -1), axis=1)
    else:
        out = np.empty(n)
        for b in range(n):
            some = [launches[k] for k in rng.integers(0, len(launches), size=len(launches))]
            out[b] = np.median(np.concatenate([v[rng.integers(0, v.size, size=v.size)] for v in some]))
    widen = math.sqrt(len(launches) / (len(launches) - 1)) if len(launches) > 1 else 1.0
    return out.mean() + (out - out.mean()) * widen


class Perf:
    kind = "perf"
    relative = True
    statistical = True
    absolute = False  # a commit's speed says nothing on its own
    unit = "passes"

    def __init__(self, recipe: Recipe) -> None:
        assert recipe.perf is not None  # chosen by assessor_for only for a recipe with a perf section
        self.perf = recipe.perf
        self.metric = recipe.perf.metric
        self.first, self.cap = recipe.perf.launches, recipe.perf.max_launches
        self.search_cap = self.cap
        self.least, self.alpha = math.log1p(recipe.perf.min_effect), recipe.perf.alpha

    def model(self) -> Samples:
        return Samples(passes=self.perf.passes, metric=self.metric, higher_is_better=better(self.metric))

    def observe(self, model: Samples, sha: str, round_no: int, trial: TrialResult) -> None:
        model.add(sha, round_no, metric_values([trial], self.metric))

    def observes(self, trial: TrialResult) -> bool:
        return bool(metric_values([trial], self.metric))

    def unmeasured(self, sample: Sample) -> bool:
        return failed_requests(sample) is not None

    def effect(self, terms: Sequence[Term], basis: tuple[Sample, Sample] | None = None) -> Effect | None:
        """Σ weight × log(median after / median before) of the metric — log ratios add up along a range, relative
        changes do not — each commit's median counted once, with a seeded two-stage bootstrap interval: a commit's
        launches resampled, then the passes of each (one launch's passes share its start, its placement and the
        host of its moment, so they are not as many independent looks as they are passes)."""
        weights: dict[str, float] = {}
        launches: dict[str, list[np.ndarray]] = {}
        for w, before, after in terms:
            for sign, sample in ((-w, before), (w, after)):
                per = [np.log(np.asarray(v, dtype=float)) for t in sample if (v := metric_values([t], self.metric))]
                if sum(len(v) for v in per) < 3:
                    return None
                key = sample[0].spec.sha
                weights[key], launches[key] = weights.get(key, 0.0) + sign, per
        value = sum(w * float(np.median(np.concatenate(launches[c]))) for c, w in weights.items())
        rng, boot = np.random.default_rng(0), np.zeros(2_000)
        for c, w in sorted(weights.items()):
            if not w:
                continue
            boot += w * _two_stage_medians(launches[c], rng, boot.size)
        lo, hi = np.quantile(boot, [0.025, 0.975])
        return Effect(value, float(lo), float(hi), 0.95, self.metric, relative=True, worse_up=not better(self.metric))

    def _compare(self, a: list[float], b: list[float]) -> SampleComparison:
        return compare_samples(a, b, min_effect=self.perf.min_effect, alpha=self.perf.alpha)

    def _said(self, values: list[float]) -> str:
        med = median(values)
        return f"{self.metric} {fmt(med, self.metric)} over {len(values)} passes"

    def alone(self, sample: Sample) -> Assessment:
        """Measured: good, with what it measured (`passes`: how many, for the comparisons to come). Its requests
        failed: its failing trial's outcome (bad, or skip where the recipe moved the status there). Else untestable."""
        failed = failed_requests(sample)
        if failed is not None:
            return Assessment(failed.verdict.outcome, f"{failed.verdict.status}: " + "; ".join(
                failed.verdict.reasons[:2]), {"errors": pass_errors(sample).errors})
        values = metric_values(sample, self.metric)
        if not values:
            return Assessment(Outcome.SKIP, f"untestable: no pass was measured ({unmeasured(sample, self.metric)})")
        return Assessment(Outcome.GOOD, self._said(values), {"passes": len(values)})

    def settle_ends(self, old: Sample, new: Sample, names: str = "the ends") -> tuple[Assessment, Assessment]:
        a, b = self.alone(old), self.alone(new)
        if "passes" not in a.stats or "passes" not in b.stats:  # an end that failed its requests, or untestable
            return a, b
        va, vb = metric_values(old, self.metric), metric_values(new, self.metric)
        cmp = self._compare(va, vb)
        stats = {"ends": dump(cmp), "metric": self.metric, "passes": min(len(va), len(vb))}
        wanted = 0 if cmp.call.settled else more_launches(self.first, self.cap, min(len(old), len(new)))
        why = f"{names} perform alike" if cmp.call is Call.SAME else f"not sure {names} differ"
        return ends_told(cmp.call is Call.DIFFERENT, worse_side(cmp, self.metric) is Worse.A,
                         (self._said(va), self._said(vb)), f"{names}: {self.metric} {cmp.describe()}",
                         f"{why}: {cmp.describe()}", stats, wanted)

    def against(self, sample: Sample, good: Sample, bad: Sample) -> Assessment:
        seen = self.alone(sample)
        if "passes" not in seen.stats:
            return seen
        values = metric_values(sample, self.metric)
        if failed_requests(bad) is not None:  # what the bisect looks for is the commit whose requests fail
            return Assessment(Outcome.GOOD, f"{self._said(values)}: its requests answered (the bad end's failed)",
                              {"passes": len(values), "metric": self.metric})
        found = classify_sample(values, good=metric_values(good, self.metric), bad=metric_values(bad, self.metric),
                                min_effect=self.perf.min_effect, alpha=self.perf.alpha)
        stats = {"passes": len(values), "metric": self.metric, "side": str(found.side),
                 "vs_good": dump(found.vs_good), "vs_bad": dump(found.vs_bad)}
        said = self._said(values)
        return placed(found, said, stats, more_launches(self.first, self.cap, len(sample)),
                      f"not sure after {len(values)} passes: {said}")

    def compare(self, a: Sample, b: Sample) -> Comparison:
        failed = {side: t for side, t in ((Worse.A, failed_requests(a)), (Worse.B, failed_requests(b)))
                  if t is not None}
        if failed:  # one side failing its requests differs from one that answers; both failing, they are alike
            text = "; ".join(f"{side.label}'s requests failed ({t.verdict.reasons[0]})" for side, t in failed.items())
            call = Call.DIFFERENT if len(failed) == 1 else Call.SAME
            return Comparison(self.kind, text, call, next(iter(failed)) if call is Call.DIFFERENT else None,
                              {"call": call.value, "reason": "request_errors"}, self.metric)
        va, vb = metric_values(a, self.metric), metric_values(b, self.metric)
        if not va or not vb:
            return Comparison(self.kind, "a side has no measured pass", metric=self.metric)
        cmp = self._compare(va, vb)
        return Comparison(self.kind, f"{self.metric} {cmp.describe()}", cmp.call,
                          worse_side(cmp, self.metric) if cmp.call is Call.DIFFERENT else None, dump(cmp), self.metric)
