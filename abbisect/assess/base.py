"""The interface every way of judging a commit from its trials implements, and the choice of one per recipe."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from abbisect.infra.serial import dump, load
from abbisect.recipe.status import Outcome
from abbisect.trial.spec import TrialResult

if TYPE_CHECKING:  # the statistics load with the assessors that use them, not with the rules
    from abbisect.stats.decide import Call, Classification
    from abbisect.stats.effects import Effect
    from abbisect.stats.evidence import Model
    from abbisect.stats.logprobs import NumericsComparison

Sample = Sequence[TrialResult]  # every trial of one commit, in the order they ran
Term = tuple[float, Sample, Sample]  # weight, before, after: one difference in a sum of them (Assessor.effect)
M = TypeVar("M", bound="Model")  # the kind of evidence model an assessor makes and fills (Assessor.model)


@dataclass(frozen=True)
class Assessment:
    """What a commit's trials say: its outcome, in words, the numbers behind it (JSON for the report), and how
    many more trials would likely settle it, `wanted` (0: settled, or nothing more can help)."""

    outcome: Outcome
    evidence: str
    stats: dict = field(default_factory=dict)
    wanted: int = 0


class Worse(StrEnum):
    """The side of a comparison that did worse: the first one compared (A of an A/B, the parent of a found commit,
    a commit's launches in the search) or the second (B, the found commit, its fresh launches)."""

    A = ("a", "A")
    B = ("b", "B")

    label: str

    def __new__(cls, value: str, label: str) -> Self:
        obj = str.__new__(cls, value)
        obj._value_, obj.label = value, label
        return obj


@dataclass(frozen=True)
class Flips:
    """A paired comparison's items that changed answer: right on A and wrong on B (`lost`), the other way
    (`gained`), of the `n` items answered on both sides."""

    lost: tuple[str, ...]
    gained: tuple[str, ...]
    n: int


@dataclass(frozen=True)
class Comparison:
    """Two sides compared by an assessor (`Assessor.compare`): its call (None when it compared nothing: a side
    measured nothing, or one trial a side says it all), the side that did worse (None: neither, or no difference
    it can call), and the comparison in words. `numbers`: the statistic's own numbers (its call among them), JSON
    for the report; the rest is what one kind of verdict adds: the metric a performance verdict compares, the
    items an accuracy's sides answered differently, the log-probabilities' comparison position by position, the
    prompts whose outputs differ."""

    kind: str
    text: str
    call: Call | None = None
    worse: Worse | None = None
    numbers: Mapping[str, Any] | None = None
    metric: str | None = None
    flips: Flips | None = None
    numerics: NumericsComparison | None = None
    differing: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """As results.json and bisect.json carry it: "kind", "text", "worse", and those of "metric", "comparison"
        (the numbers), "flips", "numerics" and "differing" it has."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.metric is not None:
            out["metric"] = self.metric
        if self.numbers is not None:
            out["comparison"] = dict(self.numbers)
        out |= {"text": self.text, "worse": None if self.worse is None else self.worse.value}
        if self.flips is not None:
            out["flips"] = dump(self.flips)
        if self.numerics is not None:
            out["numerics"] = dump(self.numerics)
        if self.differing:
            out["differing"] = list(self.differing)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        """Read back from what `to_dict` wrote (results.json's "assessment"; {} from an abbisect that wrote none):
        the call is what its numbers say, as the file carries it nowhere else (None where they say none)."""
        from abbisect.stats import decide, logprobs

        numbers = data.get("comparison")
        call = numbers.get("call") if isinstance(numbers, Mapping) else None
        return cls(data.get("kind", ""), data.get("text", ""), load(decide.Call, call) if call else None,
                   load(Worse, data["worse"]) if data.get("worse") else None, numbers, data.get("metric"),
                   load(Flips, data["flips"]) if data.get("flips") is not None else None,
                   load(logprobs.NumericsComparison, data["numerics"]) if data.get("numerics") is not None else None,
                   tuple(data.get("differing", ())))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        """A result that holds a comparison (an A/B's `LaunchesAssessed`) writes it as `to_dict` does, and reads it
        back with `from_dict`."""
        return core_schema.no_info_plain_validator_function(
            lambda value: value if isinstance(value, Comparison) else cls.from_dict(value),
            serialization=core_schema.plain_serializer_function_ser_schema(lambda value: value.to_dict(), info_arg=False))


def ends_told(different: bool, a_worse: bool, texts: tuple[str, str], said: str, alike: str, stats: dict,
              wanted: int) -> tuple[Assessment, Assessment]:
    """Two ends (or sides) after a statistical comparison: when `different`, the worse one bad (`a_worse`) and
    the other good, each told with `said`; else both good, told with `alike` (or why it is not sure), with
    `wanted` trials more each while not sure. `texts`: what each side measured."""
    if different:
        oa, ob = (Outcome.BAD, Outcome.GOOD) if a_worse else (Outcome.GOOD, Outcome.BAD)
        return (Assessment(oa, f"{texts[0]}; {said}", stats), Assessment(ob, f"{texts[1]}; {said}", stats))
    return (Assessment(Outcome.GOOD, f"{texts[0]}; {alike}", stats, wanted),
            Assessment(Outcome.GOOD, f"{texts[1]}; {alike}", stats, wanted))


def more_launches(first: int, cap: int, launches: int) -> int:
    """More launches of a commit not settled yet: `first` at a time (as Pinpoint adds attempts in fixed steps),
    within the cap — launches counted against launches (a launch may be several observations, passes or eval
    items). The sample size a comparison says would settle it is shown, not followed: it is an even chance, and
    jumping to it overshoots as often as not. An accuracy's launch is the next part of its eval sample."""
    return max(0, min(first, cap - launches))


def placed(found: Classification, said: str, stats: dict, wanted: int, exhausted: str) -> Assessment:
    """A candidate's assessment from where it stands between the ends: like the bad end → bad, like the good end
    → good, else skipped for now with `wanted` trials more to run, or (no more can be run) skipped for good with
    `exhausted` saying why. `said`: what the candidate measured."""
    from abbisect.stats.decide import Resemblance

    if found.side is Resemblance.LIKE_BAD:
        return Assessment(Outcome.BAD, f"{said}: like the bad end ({found.evidence})", stats)
    if found.side is Resemblance.LIKE_GOOD:
        return Assessment(Outcome.GOOD, f"{said}: like the good end ({found.evidence})", stats)
    if wanted:
        return Assessment(Outcome.SKIP, f"{said}: not sure yet ({found.evidence})", stats, wanted)
    return Assessment(Outcome.SKIP, f"{exhausted} ({found.evidence})", stats)


class Assessor(Protocol[M]):
    """How a commit is judged from its trials. The A/B, the bisect (both its searches) and narrow ask every verdict
    the same things, never which kind it is: `kind` only names it in reports."""

    kind: str  # "rules", "flaky", …: what the report calls this way of judging
    relative: bool  # a candidate is judged against the ends' trials (so the ends are tested first)
    statistical: bool  # one look is not enough to be sure (an A/B runs more; confirm reruns the answer)
    absolute: bool  # one commit's trials alone can call it bad (a failure, a failure rate), so narrow can use it
    unit: str  # what one observation of its evidence is, in a report's words: "launches", "outputs", …
    first: int  # launches a commit gets at first
    cap: int  # launches a commit gets at most while its verdict is not sure
    search_cap: int  # launches a candidate may get in the posterior search (bisect/noisy.py)

    def alone(self, sample: Sample) -> Assessment:
        """One commit on its own (a side of an A/B, `check`, a commit before the ends are settled)."""

    def settle_ends(self, old: Sample, new: Sample, names: str = "the ends") -> tuple[Assessment, Assessment]:
        """The two ends (or the sides of an A/B: `names`) against each other: each one's outcome, or `wanted` > 0
        to run more of both."""

    def against(self, sample: Sample, good: Sample, bad: Sample) -> Assessment:
        """Which end the candidate's trials resemble (good or bad), or `wanted` > 0, or skip when nothing can tell."""

    def compare(self, a: Sample, b: Sample) -> Comparison:
        """The two sides compared: the call (same, different, not sure; None when nothing could be compared or
        one trial a side says it all), the worse side, the words and the numbers behind them."""

    def model(self) -> M | None:
        """An empty model of this verdict's evidence for the posterior search (abbisect/stats/evidence.py); None
        for a rule on one trial, which depends on no chance."""

    def observe(self, model: M, sha: str, round_no: int, trial: TrialResult) -> None:
        """One launch of `sha`, run in round `round_no`, added to `model` (one this assessor made)."""

    def observes(self, trial: TrialResult) -> bool:
        """Whether a launch is evidence at all: it built, started, and measured or answered something."""

    def unmeasured(self, sample: Sample) -> bool:
        """The commit's requests failed, so its trials measure nothing this verdict compares (a performance
        verdict: its bisect then looks for the commit whose requests fail)."""

    def effect(self, terms: Sequence[Term], basis: tuple[Sample, Sample] | None = None) -> Effect | None:
        """Σ weight × (after − before) over `terms` on the verdict's additive scale (abbisect/stats/effects.py),
        with its interval (95 %): one term is a change's effect, the ends' minus the changes' is what they leave;
        `basis`: the two commits whose common items an accuracy is counted over (the ends'), so every effect of a
        range is on one scale. None for a rule on one trial, or when a commit measured nothing."""

    @property
    def least(self) -> float:
        """The smallest effect that matters, on the scale of `effect` (perf.min_effect, repeats.min_effect,
        eval.min_effect)."""

    @property
    def alpha(self) -> float:
        """The significance level its comparisons use."""


def against_ends(assessor: Assessor) -> bool:
    """Whether one trial of a commit is judged against the ends' trials, not alone: a relative verdict that
    depends on no chance (differs from the good end). A statistical verdict is relative too, but its search weighs
    every launch in a posterior instead (abbisect/bisect/noisy.py)."""
    return assessor.relative and not assessor.statistical
