"""One trial, judged by the recipe's rules (abbisect/verdict/rules.py): what abbisect always did."""

from __future__ import annotations

from collections.abc import Sequence

from abbisect.assess.base import Assessment, Comparison, Sample, Term
from abbisect.recipe.status import Outcome
from abbisect.stats.effects import Effect
from abbisect.stats.evidence import Model
from abbisect.trial.spec import TrialResult


def said(sample: Sample) -> str:
    """The first trial's reasons, shortened: what a step's evidence says."""
    return "; ".join(sample[0].verdict.reasons[:2]) if sample else "no trial"


class Rules:
    kind = "rules"
    relative = False
    statistical = False
    absolute = True
    unit = "launches"
    first = cap = search_cap = 1
    least, alpha = 0.0, 1.0  # one trial is the verdict: no effect to weigh

    def alone(self, sample: Sample) -> Assessment:
        return Assessment(sample[0].verdict.outcome, said(sample))

    def settle_ends(self, old: Sample, new: Sample, names: str = "the ends") -> tuple[Assessment, Assessment]:
        return self.alone(old), self.alone(new)

    def against(self, sample: Sample, good: Sample, bad: Sample) -> Assessment:
        return self.alone(sample)

    def compare(self, a: Sample, b: Sample) -> Comparison:
        return Comparison(self.kind, "one trial a side: each one's verdict says it all")

    def model(self) -> Model | None:
        return None  # one trial is the verdict: nothing to weigh

    def observe(self, model: Model, sha: str, round_no: int, trial: TrialResult) -> None:
        raise TypeError("a rule on one trial has no evidence model: bisect it plainly")

    def observes(self, trial: TrialResult) -> bool:
        return trial.verdict.outcome != Outcome.SKIP

    def unmeasured(self, sample: Sample) -> bool:
        return False

    def effect(self, terms: Sequence[Term], basis: tuple[Sample, Sample] | None = None) -> Effect | None:
        return None  # a rule keeps one answer, as git does
