"""`verdict.bad_if: [differs_from_good]` in a bisect: any change of output is the signal. The named good end is the
reference; the other end is bad when some output differs from it, and a commit between them is judged by which
end its outputs resemble (abbisect/score/compare.py). Temperature 0 makes outputs comparable, but an engine may
still answer a prompt differently twice: the bisect runs the good end a second time first, and the prompts it
answers differently (`unstable`) are left out of every comparison.

One trial is the verdict, as with the rules (`Rules`, whose verdict a commit alone still gets: a crash is a
crash); it depends on no chance, but on the ends' trials, so they are tested first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from abbisect.assess.base import Assessment, Comparison, Sample, Worse
from abbisect.assess.one_trial import Rules
from abbisect.recipe.status import DIFFERS_FROM_GOOD, Outcome
from abbisect.score import resemblance
from abbisect.trial.spec import TrialResult


def differing(a: TrialResult, b: TrialResult, unstable: frozenset[str] = frozenset()) -> list[str]:
    """The prompts whose outputs differ between the two trials (one output per prompt, in the same order), in
    `b`'s order; those in `unstable` left out."""
    return [o.prompt_id for o, p in zip(b.outputs, a.outputs) if o.text != p.text and o.prompt_id not in unstable]


@dataclass(frozen=True)
class Differs(Rules):
    """A commit's one trial against the good end's outputs (`unstable`: the prompts left out)."""

    kind = DIFFERS_FROM_GOOD
    relative = True
    absolute = False  # a commit's outputs say nothing on their own, only against the good end's

    unstable: frozenset[str] = field(default_factory=frozenset)  # prompts the good end answers differently twice

    def texts(self, trial: TrialResult) -> list[str]:
        """A trial's output texts, the unstable prompts' left out."""
        return [o.text for o in trial.outputs if o.prompt_id not in self.unstable]

    def settle_ends(self, old: Sample, new: Sample, names: str = "the ends") -> tuple[Assessment, Assessment]:
        """The reference (the named good end, `old` here) against the other end: the reference good by
        definition, the other bad exactly when some output differs from it. An end that cannot be tested is told
        by the rules."""
        good, other = self.alone(old), self.alone(new)
        if Outcome.SKIP in (good.outcome, other.outcome):
            return good, other
        changed = differing(old[0], new[0], self.unstable)
        return (Assessment(Outcome.GOOD, "the named good end (reference outputs)"),
                Assessment(Outcome.BAD, f"outputs differ from the good end on {', '.join(changed)}") if changed
                else Assessment(Outcome.GOOD, "outputs identical to the good end"))

    def against(self, sample: Sample, good: Sample, bad: Sample) -> Assessment:
        """Like the end whose outputs it resembles; the rules' verdict when it cannot be tested, has no output,
        or resembles neither."""
        seen = self.alone(sample)
        if seen.outcome == Outcome.SKIP or not sample[0].outputs:
            return seen
        r = resemblance(*(self.texts(x) for x in (sample[0], good[0], bad[0])))
        if r.closer_to in ("good", "bad"):
            return Assessment(Outcome(r.closer_to), f"outputs resemble the {r.closer_to} end: {r.evidence}")
        return seen

    def compare(self, a: Sample, b: Sample) -> Comparison:
        """The first trials' outputs: different when some prompt (the unstable ones left out) is answered differently,
        the second side then the worse (it moved from the first)."""
        from abbisect.stats.decide import Call

        changed = tuple(differing(a[0], b[0], self.unstable))
        if changed:
            return Comparison(self.kind, f"outputs differ on {', '.join(changed)}", Call.DIFFERENT, Worse.B,
                              differing=changed)
        return Comparison(self.kind, "outputs identical", Call.SAME)
