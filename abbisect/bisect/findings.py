"""What a bisect's searches found, as values: a round of launches, the posterior a statistical search ended with,
a confirmation of the answer (how sure it is: `Level`), each change of the range and what they account for.

The searches (bisect/noisy.py, confirm_posterior.py, changes.py, confirm.py) make them, `BisectRun` carries them, the
reports read their attributes; `json()` writes each once, at the edge, as bisect.json has it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Self

from abbisect.assess.base import Comparison
from abbisect.bisect.gitlog import CommitLinks
from abbisect.infra.serial import dump
from abbisect.recipe.status import Outcome


class Level(StrEnum):
    """How sure a confirmation left the answer; `held`: the answer stands; `final`: no search goes on after it (the
    answer confirmed, or the host changed under the confirmation: nothing fresh can tell then)."""

    CONFIRMED = ("confirmed", True, True)
    NOT_SURE = ("not sure", False, False)
    NOT_REPRODUCED = ("not reproduced", False, False)
    HOST_CHANGED = ("host changed", False, True)

    held: bool
    final: bool

    def __new__(cls, value: str, held: bool, final: bool) -> Self:
        obj = str.__new__(cls, value)
        obj._value_ = value
        obj.held, obj.final = held, final
        return obj


class Ended(StrEnum):
    """How the search of a part of the range for another change ended: its confirmation's level, or before one."""

    CONFIRMED = Level.CONFIRMED.value
    NOT_SURE = Level.NOT_SURE.value
    NOT_REPRODUCED = Level.NOT_REPRODUCED.value
    HOST_CHANGED = Level.HOST_CHANGED.value
    NO_CHANGE = "no change"
    TOO_SMALL = "below the smallest effect that matters"  # confirmed, but smaller than any change that matters


@dataclass(frozen=True)
class Round:
    """One round of launches: its number, the commits it launched (a commit once a launch), its wall time, and the
    candidates left."""

    number: int
    commits: tuple[str, ...]
    seconds: float
    remaining: int

    def json(self) -> dict[str, Any]:
        return {"round": self.number, "commits": list(self.commits), "seconds": self.seconds,
                "remaining": self.remaining}


@dataclass(frozen=True)
class States:
    """What the states before and after the change are, in words."""

    before: str
    after: str


@dataclass(frozen=True)
class PosteriorSummary:
    """What the report shows of a search's posterior (gathered when the search ends: the renderers are pure)."""

    kind: str  # the assessor's kind: flaky, batch, perf, accuracy
    threshold: float  # `bisect.posterior`: the mass a commit is named at
    launches: int
    old: str  # the old end of the range searched
    rounds: int
    budget: int  # the launches the search may make
    culprits: int  # candidate commits
    order: tuple[str, ...]  # the commits shown, oldest first
    mass: dict[str, float]  # each shown commit's mass
    no_change: float
    entropy_bits: float
    answer: str | None  # the commit holding the threshold, if one does
    answer_mass: float | None
    likeliest: str
    likely: tuple[tuple[str | None, float], ...]  # (commit, mass), the likeliest first; None: no change
    prior: dict[str, float]  # the commits weighed down a priori (`bisect.prior.unlikely`), their weight
    unlikely: tuple[str, ...]
    states: States
    after: dict[str, float | None]  # each tested commit's probability of being after the change

    @property
    def marked(self) -> str | None:
        """The commit the pictures mark: the answer, else the likeliest."""
        return self.answer or self.likeliest

    def json(self) -> dict[str, Any]:
        return {"kind": self.kind, "threshold": self.threshold, "launches": self.launches, "old": self.old,
                "rounds": self.rounds, "budget": self.budget, "culprits": self.culprits, "order": list(self.order),
                "mass": dict(self.mass), "no_change": self.no_change, "entropy_bits": self.entropy_bits,
                "answer": self.answer, "answer_mass": self.answer_mass, "likeliest": self.likeliest,
                "likely": [[s, m] for s, m in self.likely], "prior": dict(self.prior), "unlikely": list(self.unlikely),
                "states": {"before": self.states.before, "after": self.states.after}, "after": dict(self.after)}


@dataclass(frozen=True)
class Judged:
    """One commit of the confirmed pair as the confirmation judged it."""

    sha: str
    outcome: Outcome
    evidence: str

    def json(self) -> dict[str, Any]:
        return {"sha": self.sha, "outcome": self.outcome, "evidence": self.evidence}


@dataclass(frozen=True)
class Masses:
    """The posterior's mass on the found commit, its parent and no change, every launch counted."""

    found: float
    parent: float
    no_change: float


@dataclass(frozen=True)
class Counted:
    """What a statistical search's confirmation counts beside its fresh launches (bisect/confirm_posterior.py)."""

    parent_launches: int  # fresh launches of the parent (the found commit's are `Confirmation.launches`)
    control_launches: int  # fresh launches of an end launched as a control
    counted: int  # the found commit's launches in the search that still count
    parent_counted: int
    rounds: int
    attempt: int  # which confirmation of the search this is (the search goes on after one not held)
    guard: dict[str, str | None]  # who → why its search launches no longer count (None: they do)
    mass: Masses


@dataclass(frozen=True)
class Confirmation:
    """The answer run again: the found commit and its parent, fresh, and how sure that leaves the answer. A rule on
    one trial is confirmed by one launch of each (bisect/confirm.py); a statistical search's confirmation counts
    the search's launches too (`counted`, bisect/confirm_posterior.py)."""

    level: Level
    sentence: str
    parent: Judged
    found: Judged
    launches: int  # fresh launches of the found commit
    compared: Comparison | None  # the assessor's comparison of the pair (None: it compared nothing)
    counted: Counted | None = None
    revert: dict[str, Any] | None = None  # `bisect.revert`: the far end with the found commit reverted, tested

    @property
    def held(self) -> bool:
        return self.level.held

    @property
    def parent_launches(self) -> int:
        return self.counted.parent_launches if self.counted is not None else self.launches

    def _compared(self) -> dict[str, Any]:
        return self.compared.to_dict() if self.compared is not None else {}

    def json(self) -> dict[str, Any]:
        pair = {"parent": self.parent.json(), "found": self.found.json()}
        revert = {"revert": self.revert} if self.revert is not None else {}
        c = self.counted
        if c is None:
            return {"launches": self.launches, "level": str(self.level), "held": self.held,
                    "compared": self._compared(), "sentence": self.sentence, **pair, **revert}
        return {"launches": self.launches, "parent_launches": c.parent_launches,
                "control_launches": c.control_launches, "counted": c.counted, "parent_counted": c.parent_counted,
                "rounds": c.rounds, "attempt": c.attempt, "level": str(self.level), "held": self.held,
                "sentence": self.sentence, "compared": self._compared(), "guard": dict(c.guard),
                "mass": {"found": c.mass.found, "parent": c.mass.parent, "no_change": c.mass.no_change},
                **pair, **revert}


@dataclass(frozen=True)
class EffectShown:
    """An effect (stats/effects.py) as the report tells it: its interval, in words, and its share of the ends'."""

    value: float
    lo: float
    hi: float
    confidence: float
    unit: str
    relative: bool
    told: str
    regression: bool
    share: float | None

    @property
    def sign(self) -> str:
        return "regression" if self.regression else "fix"

    @property
    def headline(self) -> str:
        """The effect without its interval: `+6.1 %`."""
        return self.told.split(" [")[0]

    def json(self) -> dict[str, Any]:
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "confidence": self.confidence, "unit": self.unit,
                "relative": self.relative, "told": self.told, "sign": self.sign, "share": self.share}


@dataclass(frozen=True)
class Change:
    """A change named in the range: the commit, the parent its effect is measured against, the search that named
    it (1: the whole range's), its effect, and the posterior of the part's search that named it (None: the whole
    range's, shown on its own)."""

    sha: str
    parent: str
    phase: int
    effect: EffectShown | None
    level: Level
    posterior: PosteriorSummary | None
    links: CommitLinks

    def json(self) -> dict[str, Any]:
        return {"sha": self.sha, "parent": self.parent, "phase": self.phase,
                "effect": self.effect.json() if self.effect else None, "level": str(self.level),
                "posterior": self.posterior.json() if self.posterior else None, "links": dump(self.links)}


@dataclass(frozen=True)
class PartSearched:
    """A part of the range searched for another change: its ends, the search's number, how it ended."""

    old: str
    new: str
    phase: int
    outcome: Ended
    launches: int

    def json(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new, "phase": self.phase, "outcome": str(self.outcome),
                "launches": self.launches}


@dataclass(frozen=True)
class Changes:
    """Every change named in the range (`bisect.changes: all`, bisect/changes.py), in the history's order, what
    they leave of the ends' difference, and each part searched. `primary`: the change with the largest effect,
    the bisect's answer."""

    ends: EffectShown | None
    changes: tuple[Change, ...]
    left: EffectShown | None
    accounted: bool  # what is left is no other change
    sure: bool  # what is left is surely small, or surely another change
    said: str
    max_changes: int
    budget: int  # launches in all the searches may spend, the whole range's included (bisect/split.py)
    parts: tuple[PartSearched, ...]
    primary: Change | None
    primary_confirmation: Confirmation | None

    def json(self) -> dict[str, Any]:
        p = self.primary
        return {"ends": self.ends.json() if self.ends else None, "changes": [c.json() for c in self.changes],
                "left": self.left.json() if self.left else None, "accounted": self.accounted, "sure": self.sure,
                "said": self.said, "max_changes": self.max_changes, "budget": self.budget, "parts": [s.json() for s in self.parts],
                "primary": p.sha if p else None,
                "primary_confirmation": self.primary_confirmation.json() if self.primary_confirmation else None,
                "primary_sign": (p.effect.sign if p.effect else None) if p else None}
