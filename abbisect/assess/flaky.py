"""A failure that happens only sometimes (one launch in three): each commit gets several launches (and passes),
and is judged by its failure rate against the ends' — Fisher's exact test with Wilson intervals, and a
minimum difference that matters, as Chromium Pinpoint's flaky-test mode does. Not sure → more launches, up to
the cap → skipped with the reason, never a guess.

An observation is one launch (`repeats.passes` > 1: one pass of a launch that served; a launch that failed
before serving is one failed observation). A trial that could not be tested at all (its build failed, a flag
was rejected, it never became ready) is no observation: a commit with none is untestable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from abbisect.assess.base import Assessment, Comparison, Sample, Term, Worse, more_launches, placed
from abbisect.infra.serial import dump
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome
from abbisect.stats import RateComparison, classify_rate, compare_rates, wilson
from abbisect.stats.decide import Call
from abbisect.stats.effects import Effect
from abbisect.stats.evidence import Rates
from abbisect.trial.spec import TrialResult


def observations(sample: Sample) -> tuple[int, int]:
    """(failures, observations) of a commit's trials."""
    failures = seen = 0
    for trial in sample:
        if trial.verdict.outcome == Outcome.SKIP:
            continue
        per_pass = trial.extras.pass_outcomes
        outcomes = list(per_pass) if per_pass and trial.launch and trial.launch.status == "ready" \
            else [trial.verdict.outcome]
        seen += len(outcomes)
        failures += sum(o == Outcome.BAD for o in outcomes)
    return failures, seen


def rate_text(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{k}/{n} failed ({k / n:.0%}, 95 % interval {lo:.0%}–{hi:.0%})" if n else "no observation"


class Flaky:
    kind = "flaky"
    relative = True
    statistical = True
    absolute = True
    unit = "launches"

    def observed(self, sample: Sample) -> tuple[int, int]:
        """(failures, observations) of a commit's trials: one a launch or pass (`observations`)."""
        return observations(sample)

    def __init__(self, recipe: Recipe) -> None:
        r = recipe.repeats
        self.first, self.cap = r.launches, r.cap
        self.search_cap = self.cap
        self.min_effect, self.alpha = r.min_effect, r.alpha
        self.least = self.min_effect

    def model(self) -> Rates:
        return Rates(self.min_effect, unit=self.unit)

    def observe(self, model: Rates, sha: str, round_no: int, trial: TrialResult) -> None:
        model.add(sha, *self.observed([trial]))

    def observes(self, trial: TrialResult) -> bool:
        return self.observed([trial])[1] > 0

    def unmeasured(self, sample: Sample) -> bool:
        return False  # failed requests are failures, counted

    def effect(self, terms: Sequence[Term], basis: tuple[Sample, Sample] | None = None) -> Effect | None:
        """Σ weight × (rate after − rate before), each commit's rate counted once, with a normal interval (each
        rate's variance from (k + ½)/(n + 1), Jeffreys's, so a commit that never failed still has one)."""
        weights: dict[str, float] = {}
        seen: dict[str, tuple[int, int]] = {}
        for w, before, after in terms:
            for sign, sample in ((-w, before), (w, after)):
                k, n = self.observed(sample)
                if not n:
                    return None
                key = sample[0].spec.sha
                weights[key], seen[key] = weights.get(key, 0.0) + sign, (k, n)
        value = sum(w * seen[c][0] / seen[c][1] for c, w in weights.items())
        var = sum(w * w * ((k + 0.5) / (n + 1)) * (1 - (k + 0.5) / (n + 1)) / n
                  for c, w in weights.items() for k, n in (seen[c],))
        half = 1.959964 * math.sqrt(var)
        return Effect(value, value - half, value + half, 0.95, f"share of {self.unit} failing")

    def _compare(self, a: tuple[int, int], b: tuple[int, int]) -> RateComparison:
        return compare_rates(*a, *b, min_difference=self.min_effect, alpha=self.alpha)

    def alone(self, sample: Sample) -> Assessment:
        k, n = self.observed(sample)
        if n == 0:
            why = "; ".join(sample[0].verdict.reasons[:1]) if sample else "no trial"
            return Assessment(Outcome.SKIP, f"untestable: {why}")
        return Assessment(Outcome.BAD if k else Outcome.GOOD, rate_text(k, n), {"failures": k, "observations": n})

    def settle_ends(self, old: Sample, new: Sample, names: str = "the ends") -> tuple[Assessment, Assessment]:
        a, b = self.alone(old), self.alone(new)
        if Outcome.SKIP in (a.outcome, b.outcome):
            return a, b
        (ko, no), (kn, nn) = self.observed(old), self.observed(new)
        cmp = self._compare((ko, no), (kn, nn))
        stats = {"ends": dump(cmp)}
        if cmp.call is Call.DIFFERENT:
            worse = Outcome.BAD if kn > ko else Outcome.GOOD
            return (Assessment(worse.inverted(), f"{rate_text(ko, no)}; {names} {cmp.describe()}", stats),
                    Assessment(worse, f"{rate_text(kn, nn)}; {names} {cmp.describe()}", stats))
        launches = min(len(old), len(new))
        # alike: settled, no change to search for
        wanted = 0 if cmp.call is Call.SAME else more_launches(self.first, self.cap, launches)
        same = Outcome.BAD if (ko or kn) else Outcome.GOOD
        why = f"{names} fail alike" if cmp.call is Call.SAME else (
            f"not sure {names} differ after {launches} launches")
        return (Assessment(same, f"{rate_text(ko, no)}; {why}: {cmp.describe()}", stats, wanted),
                Assessment(same, f"{rate_text(kn, nn)}; {why}: {cmp.describe()}", stats, wanted))

    def against(self, sample: Sample, good: Sample, bad: Sample) -> Assessment:
        k, n = self.observed(sample)
        if n == 0:
            return self.alone(sample)
        found = classify_rate(k, n, good=self.observed(good), bad=self.observed(bad),
                              min_difference=self.min_effect, alpha=self.alpha)
        stats = {"failures": k, "observations": n, "side": str(found.side), "vs_good": dump(found.vs_good),
                 "vs_bad": dump(found.vs_bad)}
        return placed(found, rate_text(k, n), stats, more_launches(self.first, self.cap, len(sample)),
                      f"not sure after {len(sample)} launches: {rate_text(k, n)}")

    def compare(self, a: Sample, b: Sample) -> Comparison:
        cmp = self._compare(self.observed(a), self.observed(b))
        worse = Worse.B if cmp.rate_b > cmp.rate_a else Worse.A if cmp.rate_a > cmp.rate_b else None
        return Comparison(self.kind, cmp.describe(), cmp.call, worse, dump(cmp))
