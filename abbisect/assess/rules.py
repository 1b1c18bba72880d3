"""One trial, judged by the recipe's rules (abbisect/verdict/rules.py): what abbisect always did."""

from __future__ import annotations

from abbisect.assess.base import Assessment, Sample


def said(sample: Sample) -> str:
    """The first trial's reasons, shortened: what a step's evidence says."""
    return "; ".join(sample[0].verdict.reasons[:2]) if sample else "no trial"


class Rules:
    kind = "rules"
    relative = False
    statistical = False
    first = 1
    cap = 1

    def alone(self, sample: Sample) -> Assessment:
        return Assessment(sample[0].verdict.outcome, said(sample))

    def settle_ends(self, old: Sample, new: Sample, names: str = "the ends") -> tuple[Assessment, Assessment]:
        return self.alone(old), self.alone(new)

    def against(self, sample: Sample, good: Sample, bad: Sample) -> Assessment:
        return self.alone(sample)

    def compare(self, a: Sample, b: Sample) -> dict:
        return {}
