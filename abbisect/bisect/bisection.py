"""A bisection as data: what each tested commit was for (`Role`), how the run ended (`Mode`), each step, and
the run itself. The driver fills a `BisectRun` in; the reports render it; `state.json` saves it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, cast

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from abbisect import checkout
from abbisect.bisect import gitlog
from abbisect.bisect.findings import Changes, Confirmation, PosteriorSummary, Round
from abbisect.bisect.followed import Followed, NotFollowed
from abbisect.bisect.pinchange import PinDiff
from abbisect.bisect.search import SearchResult
from abbisect.narrow.narrowing import NarrowRun
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome
from abbisect.trial.spec import TrialResult

if TYPE_CHECKING:
    from abbisect.bisect.variables import Variable


class Role(StrEnum):
    """What a tested commit is for the search; the value is how reports name it."""

    OLD_END = ("old end", True)
    NEW_END = ("new end", True)
    GOOD_END = ("good end", True)  # ends on different branches: named by their labels, not by which is older
    BAD_END = ("bad end", True)
    MERGE_BASE = ("merge base", False)
    CANDIDATE = ("candidate", False)

    is_end: bool

    def __new__(cls, value: str, is_end: bool) -> Self:
        obj = str.__new__(cls, value)
        obj._value_ = value
        obj.is_end = is_end
        return obj


class Mode(StrEnum):
    """How a bisection ended; `stopped`: no search ran (what stopped it is each tested commit's own verdict);
    `ending`: its row of the exit-code table (abbisect.commands.endings.EXIT_CODES) when it did not find a commit."""

    REGRESSION = ("regression", False, "")
    FIX = ("fix", False, "")
    NO_CHANGE = ("no-change", True, "no-change")
    UNTESTABLE_END = ("untestable-end", True, "untestable-end")
    UNTESTABLE_MERGE_BASE = ("untestable-merge-base", True, "untestable-end")  # the base stands in for an end
    UNFINISHED = ("", False, "")

    stopped: bool
    ending: str

    def __new__(cls, value: str, stopped: bool, ending: str) -> Self:
        obj = str.__new__(cls, value)
        obj._value_ = value
        obj.stopped, obj.ending = stopped, ending
        return obj

    @property
    def word(self) -> str:
        """What the found commit did: "fixed" it or "broke" it."""
        return "fixed" if self is Mode.FIX else "broke"


class EndsMode(StrEnum):
    """`bisect.ends`: both ends tested before the search, or only when the answer rests on them."""

    FIRST = "first"
    LAZY = "lazy"


@dataclass(frozen=True)
class StepStats:
    """The numbers behind a step's outcome: what its assessor said of the commit's trials (abbisect/assess, kept as
    it wrote them) and what the bisect adds: a statistical search's chance that the commit is after the change, the
    launches that chance rests on and the commit's share of the culprit mass (bisect/noisy.py), or how a candidate
    fails when not as the bad end does (bisect/oracle.py). Written as one object, the assessor's keys first, then
    the bisect's that are not None (state.json's and bisect.json's "stats", as the dict it replaced had them)."""

    assessed: Mapping[str, Any] = field(default_factory=dict)
    p_after: float | None = None
    launches: int | None = None
    mass: float | None = None
    other_failure: str | None = None

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        own = ("p_after", "launches", "mass", "other_failure")

        def read(value: Any) -> Any:  # the one object written: the bisect's keys apart, the rest the assessor's
            if not isinstance(value, Mapping):
                return value
            return {"assessed": {k: v for k, v in value.items() if k not in own},
                    **{k: value[k] for k in own if k in value}}

        def write(value: Any, inner: core_schema.SerializerFunctionWrapHandler) -> dict[str, Any]:
            fields = inner(value)
            return {**fields["assessed"], **{k: fields[k] for k in own if fields[k] is not None}}

        written = core_schema.wrap_serializer_function_ser_schema(write)
        return core_schema.no_info_before_validator_function(
            read, cast(core_schema.CoreSchema, {**handler(source), "serialization": written}))


@dataclass
class Step:
    n: int
    sha: str
    role: Role
    outcome: Outcome  # after relative judgement and retries
    status: str
    evidence: str
    seconds: float
    cached: bool
    result: TrialResult | None = field(default=None, repr=False)
    remaining: int | None = None  # candidates left after this step (the range shrinking, for the pictures)
    replayed: bool = False  # taken from the saved state of an interrupted run, not run again
    round: int | None = None  # with several slots: the multisection round, and where and when it ran
    slot: int | None = None
    start_s: float | None = None  # seconds since the bisect began
    needed: bool = True  # False: other verdicts decided the range first, so this one is not evidence
    more: tuple[TrialResult, ...] = field(default=(), repr=False)  # the commit's further trials (repeats)
    stats: StepStats = field(default_factory=StepStats)  # the numbers behind its outcome (the assessor's, the bisect's)
    trial_rounds: tuple[int, ...] = ()  # a statistical search: the round each of `trials` ran in (drift)

    @property
    def trials(self) -> tuple[TrialResult, ...]:
        """Every trial of the commit, the first one first."""
        return ((self.result,) if self.result is not None else ()) + self.more

    @property
    def is_end(self) -> bool:
        """An end of the range (old/new, good/bad), not a commit between them."""
        return self.role.is_end


@dataclass(frozen=True)
class Spent:
    """What a bisect has cost: server launches, venv builds, wall time."""

    launches: int = 0
    builds: int = 0
    wall_s: float = 0.0


@dataclass
class BisectRun:
    recipe: Recipe
    repo: Path
    good: checkout.Revision  # as the user named them
    bad: checkout.Revision
    old: checkout.Revision  # the ancestor end
    new: checkout.Revision
    variable: Variable  # what the candidates are (abbisect/bisect/variables.py)
    mode: Mode = Mode.UNFINISHED
    message: str = ""
    steps: list[Step] = field(default_factory=list)
    result: SearchResult | None = None
    found_parent: str | None = None
    # The whole bisect's cost, a resumed one's every run included: `before` what the runs before this one spent
    # (state.json), `launches`, `builds` and `wall_s` the totals, kept current as it goes.
    launches: int = 0
    builds: int = 0
    wall_s: float = 0.0
    before: Spent = Spent()
    command: str = ""
    # Ends on different branches: their merge bases (tested before the search) and what was made of them.
    merge_bases: tuple[str, ...] = ()
    ends_note: str = ""
    mislabelled: str = ""  # the named ends observed the other way round, in words ("" when they were not)
    excluded: tuple[str, ...] = ()  # further old ends of the searched range (the end sharing the base's verdict)
    releases: gitlog.Releases | None = None
    options: dict = field(default_factory=dict)  # command-line choices a resumed run must keep (no_cache, …)
    # Multisection: how many trials ran at once, where, and each round's commits and wall time.
    slots: int = 1
    executor: str = "sequential"
    rounds: list[Round] = field(default_factory=list)
    # bisect.ends: what ran, what the recipe / --ends asked for, why lazy was not possible, and what lazy mode
    # did with each end (tested or not, and why).
    ends_mode: EndsMode = EndsMode.FIRST
    ends_asked: EndsMode = EndsMode.FIRST
    ends_fallback: str = ""
    ends_lazy: list[str] = field(default_factory=list)
    failure: str = ""  # how the bad end fails (verdict.same_failure): another failure is skipped, not blamed
    unstable: tuple[str, ...] = ()  # prompts the good end answers differently twice (differs_from_good's noise)
    # the answer run again, and the revert (bisect/confirm.py; a statistical search's: bisect/confirm_posterior.py)
    confirmation: Confirmation | None = None
    posterior: PosteriorSummary | None = None  # a statistical search's posterior, for the report (bisect/noisy.py)
    # bisect.changes: all — every change named in the range and what is left of the ends' difference (bisect/changes.py)
    changes: Changes | None = None
    order: tuple[str, ...] = ()  # the tested commits in the history's order, oldest first (for the report)
    narrowing: NarrowRun | None = field(default=None, repr=False)  # bisect.then_narrow: abbisect narrow at the answer
    # Gathered once the search is over, so the reports render without asking git (renderers are pure).
    commits: dict[str, gitlog.CommitInfo] = field(default_factory=dict)
    links: gitlog.CommitLinks = field(default_factory=gitlog.CommitLinks)  # the answer's (and its parent's) links
    engine_commits: dict[str, gitlog.CommitInfo] = field(default_factory=dict)  # each trial's engine commit
    # What the answer (and every change named) changes in its dependencies' pins (abbisect/bisect/pinchange.py).
    pins: dict[str, PinDiff] = field(default_factory=dict)
    # bisect.follow: the answer followed into the dependency whose pin it changes (abbisect/bisect/follow.py).
    follow: Followed | NotFollowed | None = None

    def step_of(self, sha: str) -> Step | None:
        return next((s for s in self.steps if s.sha == sha), None)

    def subject(self, sha: str) -> str:
        info = self.commits.get(sha)
        return info.subject if info else ""
