"""A performance verdict: each commit is measured in passes (abbisect/query/measure.py), one value of the recipe's
`perf.metric` a pass, and its sample is compared with the other side's or the ends' as Chromium Pinpoint does
(abbisect/stats/samples.py): p = min(Kolmogorov–Smirnov, Mann–Whitney U), a bootstrap interval of the change
of medians and a minimum effect. Not sure → more launches, up to `perf.max_passes` → skipped with the reason.

Which end is bad is observed: the slower one (lower throughput, higher latency). A commit that serves no pass
(it does not build, start or answer) cannot be timed: it is untestable.
"""

from __future__ import annotations

from statistics import median

from abbisect.assess.base import Assessment, Sample, ends_told, placed
from abbisect.infra.serial import dump
from abbisect.recipe import Recipe
from abbisect.recipe.perf import better, unit
from abbisect.stats import SampleComparison, classify_sample, compare_samples
from abbisect.stats.decide import Call
from abbisect.verdict.status import Outcome


def metric_values(sample: Sample, metric: str) -> list[float]:
    """The metric's value in every pass of the commit's trials that served (in the order they ran)."""
    found = []
    for trial in sample:
        for p in (trial.extras.get("perf") or {}).get("passes", ()):
            v = (p.get("values") or {}).get(metric)
            if p.get("completed") and v is not None and v > 0:
                found.append(float(v))
    return found


def fmt(value: float, metric: str) -> str:
    return f"{value:,.4g} {unit(metric)}"


def worse_side(cmp: SampleComparison, metric: str) -> str | None:
    """"a" or "b": the side whose median is worse for `metric`; None when they are equal."""
    if cmp.median_a == cmp.median_b:
        return None
    b_higher = cmp.median_b > cmp.median_a
    return ("a" if b_higher else "b") if better(metric) else ("b" if b_higher else "a")


class Perf:
    kind = "perf"
    relative = True
    statistical = True

    def __init__(self, recipe: Recipe) -> None:
        assert recipe.perf is not None  # chosen by assessor_for only for a recipe with a perf section
        self.perf = recipe.perf
        self.metric = recipe.perf.metric
        self.first, self.cap = recipe.perf.launches, recipe.perf.max_launches

    def _compare(self, a: list[float], b: list[float]) -> SampleComparison:
        return compare_samples(a, b, min_effect=self.perf.min_effect, alpha=self.perf.alpha)

    def _more(self, launches: int) -> int:
        """More launches while not sure: `perf.launches` at a time, within the cap."""
        return max(0, min(self.first, self.cap - launches))

    def _said(self, values: list[float]) -> str:
        med = median(values)
        return f"{self.metric} {fmt(med, self.metric)} over {len(values)} passes"

    def alone(self, sample: Sample) -> Assessment:
        values = metric_values(sample, self.metric)
        if not values:
            why = "; ".join(sample[0].verdict.reasons[:1]) if sample else "no trial"
            return Assessment(Outcome.SKIP, f"untestable: no pass was measured ({why})")
        return Assessment(Outcome.GOOD, self._said(values), {"runs": len(values)})

    def settle_ends(self, old: Sample, new: Sample, names: str = "the ends") -> tuple[Assessment, Assessment]:
        a, b = self.alone(old), self.alone(new)
        if Outcome.SKIP in (a.outcome, b.outcome):
            return a, b
        va, vb = metric_values(old, self.metric), metric_values(new, self.metric)
        cmp = self._compare(va, vb)
        stats = {"ends": dump(cmp), "metric": self.metric, "runs": min(len(va), len(vb))}
        more = 0 if cmp.call.settled else self._more(min(len(old), len(new)))
        why = f"{names} perform alike" if cmp.call is Call.SAME else f"not sure {names} differ"
        return ends_told(cmp.call is Call.DIFFERENT, worse_side(cmp, self.metric) == "a",
                         (self._said(va), self._said(vb)), f"{names}: {self.metric} {cmp.describe()}",
                         f"{why}: {cmp.describe()}", stats, more)

    def against(self, sample: Sample, good: Sample, bad: Sample) -> Assessment:
        values = metric_values(sample, self.metric)
        if not values:
            return self.alone(sample)
        found = classify_sample(values, good=metric_values(good, self.metric), bad=metric_values(bad, self.metric),
                                min_effect=self.perf.min_effect, alpha=self.perf.alpha)
        stats = {"runs": len(values), "metric": self.metric, "side": str(found.side),
                 "vs_good": dump(found.vs_good), "vs_bad": dump(found.vs_bad)}
        said = self._said(values)
        return placed(found, said, stats, self._more(len(sample)), f"not sure after {len(values)} passes: {said}")

    def compare(self, a: Sample, b: Sample) -> dict:
        va, vb = metric_values(a, self.metric), metric_values(b, self.metric)
        if not va or not vb:
            return {"kind": self.kind, "metric": self.metric, "text": "a side has no measured pass", "worse": None}
        cmp = self._compare(va, vb)
        return {"kind": self.kind, "metric": self.metric, "comparison": dump(cmp),
                "text": f"{self.metric} {cmp.describe()}",
                "worse": worse_side(cmp, self.metric) if cmp.call is Call.DIFFERENT else None}
