"""What one trial is, as data: `TrialSpec` in, `TrialResult` out (plain JSON-able dataclasses).

Nothing else is shared between the one who asks for a trial and the one who runs it, so an executor can run
it in this process, in another process, or on another machine of a cluster (abbisect/trial/executors.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Self

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from abbisect.checkout import Revision
from abbisect.environment import EnvResult
from abbisect.environment.inventory import Inventory
from abbisect.environment.pins import DependencyCommit
from abbisect.gpu.sharing import GpuCheck, SlotPlace
from abbisect.infra.cache import Cache
from abbisect.infra.serial import NoneLeftOut
from abbisect.launch.jit import JitCache
from abbisect.launch.server import Ready
from abbisect.query.chat import Completion
from abbisect.query.evals import EvalRun
from abbisect.query.measure import PerfPass, PerfRun
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome
from abbisect.score import AnswerCheck, OutputAnalysis, SignatureMatch
from abbisect.score.logprobs import NumericsRun
from abbisect.trial.provenance import CacheOrigin, Placement
from abbisect.verdict.rules import Verdict

Progress = Callable[[str], None]


class Purpose(Enum):
    """Why a commit is launched; a member carries the word its launches' labels start with and whether they are
    fresh (run now, never from the trial cache: a search's choice of them must not be what they measure)."""

    SEARCH = ("", False)  # a search chose it, or it is a side of an A/B, a check, a probe
    CONFIRM = ("confirm", True)  # a confirmation of a search's answer: the found commit, its parent, a control
    MEASURE = ("confirm-measure", True)  # a change just named, measured against its parent (bisect/changes.py)

    word: str
    fresh: bool

    def __init__(self, word: str, fresh: bool) -> None:
        self.word, self.fresh = word, fresh

    def named(self, confirmation: int = 1) -> str:
        """The word of its labels: "confirm", the second confirmation's "confirm2" ("" for a search's)."""
        return f"{self.word}{confirmation if confirmation > 1 else ''}"


class Label(str):
    """What a launch is, as the text logs, folders and reports name it ("candidate", "change2 confirm-found",
    "a"): its parts are attributes, the text made from them, so nothing reads them back from the text.

    `who`: the commit's part ("candidate", "old end", "parent", "a"); `purpose`; `part`: the number of a search
    of a part of the range for another change (its labels start `changeK `; a change just named is measured in
    the name of the search that named it, the first's too), None in the whole range's search; `confirmation`:
    which confirmation of that search; `then`: a launch again (" retry 1", " again").
    A spec is stored with the text alone (state.json, the trial cache, results.json keep the form they had), so
    the parts of a stored label are read from it once, where the spec is loaded (`stored`)."""

    who: str
    purpose: Purpose
    part: int | None
    confirmation: int
    then: str

    def __new__(cls, who: str, purpose: Purpose = Purpose.SEARCH, part: int | None = None, confirmation: int = 1,
                then: str = "") -> Self:
        head = f"{purpose.named(confirmation)}-" if purpose is not Purpose.SEARCH else ""
        label = str.__new__(cls, f"{f'change{part} ' if part is not None else ''}{head}{who}{then}")
        label.who, label.purpose, label.part, label.confirmation, label.then = who, purpose, part, confirmation, then
        return label

    def __reduce__(self) -> tuple[Any, ...]:  # pickled with its parts (an executor's process), not as a str
        return Label, (self.who, self.purpose, self.part, self.confirmation, self.then)

    @property
    def phase(self) -> int:
        """Which search of the bisect launched it: 1 the whole range's (a change it named is measured in a part's
        name, numbered 1), k ≥ 2 the k-th search, of a part of the range."""
        return self.part if self.part is not None else 1

    def again(self, then: str) -> Label:
        """The same launch run again (" retry 1", " again"): its purpose and search kept."""
        return Label(self.who, self.purpose, self.part, self.confirmation, self.then + then)

    def in_part(self, part: int | None) -> Label:
        """The same launch in the search of the `part`-th part of the range (None: the whole range's)."""
        return Label(self.who, self.purpose, part, self.confirmation, self.then)

    @classmethod
    def plain(cls, side: str) -> Label:
        """A label that is its text: a search's launch of the whole range (an A/B's "a", a role), a Label as it is."""
        return side if isinstance(side, Label) else cls(side)

    @classmethod
    def stored(cls, text: str) -> Label:
        """The label a stored spec holds, as it was written (the text alone): its parts read back from it, the
        text kept as it was. Only the loader reads a label."""
        m = _STORED.fullmatch(text)
        assert m is not None  # every text matches (all its parts are optional)
        phase, head, number, rest = m.group("phase"), m.group("head"), m.group("number"), m.group("rest")
        purpose = (Purpose.SEARCH if head is None and "confirm" not in rest else
                   Purpose.MEASURE if head == Purpose.MEASURE.word else Purpose.CONFIRM)
        label = cls(rest if head is not None else text.removeprefix(f"change{phase} " if phase else ""),
                    purpose, int(phase) if phase else None, int(number) if number else 1)
        if label != text:  # a text no abbisect made: kept as it is, its parts as read
            kept = str.__new__(cls, text)
            kept.who, kept.purpose, kept.part, kept.confirmation, kept.then = (
                label.who, label.purpose, label.part, label.confirmation, label.then)
            return kept
        return label

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        """Written as its text; read back with `stored`."""
        return core_schema.no_info_after_validator_function(
            cls.stored, core_schema.str_schema(), serialization=core_schema.plain_serializer_function_ser_schema(str))


# A stored label: `changeK ` (a part's search), then `confirm…-` or `confirm-measure-` (fresh launches), then the rest.
_STORED = re.compile(r"(?:change(?P<phase>\d+) )?(?:(?P<head>confirm-measure|confirm(?P<number>\d*))-)?(?P<rest>.*)",
                     re.DOTALL)


@dataclass(frozen=True)
class TrialSpec:
    recipe: Recipe  # validated once where it was read (the YAML file, or this spec's JSON), paths resolved
    side: Label  # "a", "b", or a bisect launch's label (a plain str is taken as `Label.plain`)
    ref: str
    sha: str
    subject: str
    repo: str  # local git directory holding the sha
    cache_dir: str
    out_dir: str  # where this trial's logs go
    # Installed after the engine (abbisect/environment/pins.py): a side's pins, a dependency's commit; part of the
    # env key.
    pins: list[str] = field(default_factory=list)
    dependency: DependencyCommit | None = None
    # Which launch of this commit it is (repeats: several per commit): each is a trial of its own, cached
    # under its own key and logged in its own folder.
    attempt: int = 0
    # A slot that shares its GPUs with other slots (the executor sets it): hygiene per slot, not per GPU
    # (abbisect/gpu/sharing.py). None: the trial's GPUs (recipe.gpus) are its own.
    slot: SlotPlace | None = None

    # Which part of an eval set this launch asks (an accuracy verdict asks more items while not sure: part k
    # is items k·n … (k+1)·n − 1 of the seeded sample); it follows the attempt but in an A-vs-A, where both
    # sides ask the same part in launches of their own.
    chunk: int = 0
    # Or these items of the eval set, by id (a bisect asks a candidate only the items that tell its ends apart).
    items: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "side", Label.plain(self.side))

    @property
    def purpose(self) -> Purpose:
        return self.side.purpose

    @property
    def phase(self) -> int:
        """Which search of a bisect launched it (1: the whole range's, or no bisect)."""
        return self.side.phase

    def again(self, attempt: int, chunk: int | None = None) -> TrialSpec:
        """The same trial's `attempt`-th launch (0: the first), its logs beside the first's."""
        out = self.out_dir if attempt == 0 else f"{self.out_dir}-{attempt + 1}"
        return replace(self, attempt=attempt, out_dir=out, chunk=attempt if chunk is None else chunk)


@dataclass(frozen=True)
class LaunchInfo:
    argv: tuple[str, ...]
    env: dict[str, str]
    status: Ready
    ready_s: float
    returncode: int | None
    log_path: str
    log_tail: tuple[str, ...]
    teardown: dict
    facts: dict
    # The main process exited after ready: its exit code and the prompt in flight (or the last answered).
    crashed_while_serving: bool = False
    crash_exit_code: int | None = None
    crash_prompt: str | None = None
    crash_after: str | None = None
    # Tracebacks in the log that end in abbisect's own client going away (a connection it closed or reset):
    # not evidence (score/scanner.py, own_client), counted here so the report can say so.
    client_gone: int = 0
    # Where its JIT and compile caches were and whether they started cold or warm (launch.jit_cache); None in a
    # result from before abbisect kept them apart.
    jit: JitCache | None = None


@dataclass(frozen=True)
class Extras(NoneLeftOut):
    """What the optional stages of a trial add to its result, each None where that stage did not run. Written as
    results.json's and the trial cache's `"extras"` object, a key per field that is not None (an old dump, with
    fewer keys, reads back with the others None).

    The typed ones are read by the assessors; the others are JSON reports made elsewhere, kept as they came."""

    fingerprint: dict | None = None  # the venv's torch, triton, engine version, its GPU (gpu/fingerprint.py)
    packages: Inventory | None = None  # the venv's full package list (environment/inventory.py)
    probe: dict | None = None  # a kernel probe's result (trial/probe_trial.py), instead of a launch
    gpu_before: GpuCheck | None = None  # same-GPU hygiene's checks around the launch (gpu/sharing.py)
    server_times: dict | None = None  # wall clock: launched, ready, stopped
    gpu_during: GpuCheck | None = None
    eval: EvalRun | None = None  # the eval set's part this launch asked (query/evals.py)
    perf: PerfRun | None = None  # the performance passes (query/measure.py)
    numerics: NumericsRun | None = None  # the texts' token log-probabilities (query/logprobs.py)
    gpu_after: GpuCheck | None = None
    pass_outcomes: tuple[Outcome, ...] | None = None  # each pass's outcome (repeats.passes > 1)
    placement: Placement | None = None  # where and when it ran (trial/slots.py `placed`, an executor's node)
    cache: CacheOrigin | None = None  # a trial cache hit's origin: when stored, its logs (trial/trial_cache.py)
    judge: dict | None = None  # an external judge's decision and the built-in verdict it replaced (trial/judges.py)
    executor_error: str | None = None  # why the executor could not carry the trial out (trial/slots.py)

    @property
    def passes(self) -> tuple[PerfPass, ...]:
        """The performance passes, in the order they ran (none without a perf stage)."""
        return self.perf.passes if self.perf is not None else ()


@dataclass(frozen=True)
class Timings(NoneLeftOut):
    """The seconds each stage of a trial took, in the order they run; None for a stage that did not run (results.json
    and the trial cache leave its key out). `total`: the whole trial; `overhead`: what no stage accounts for."""

    checkout: float | None = None
    build: float | None = None
    probe: float | None = None  # a kernel probe instead of a launch (trial/probe_trial.py)
    ready: float | None = None
    query: float | None = None
    eval: float | None = None
    numerics: float | None = None
    perf: float | None = None
    teardown: float | None = None
    score: float | None = None
    total: float | None = None
    overhead: float | None = None


@dataclass(frozen=True)
class TrialResult:
    spec: TrialSpec
    env: EnvResult | None
    launch: LaunchInfo | None
    outputs: tuple[Completion, ...]
    analyses: tuple[OutputAnalysis, ...]
    answers: tuple[AnswerCheck | None, ...]
    signatures: tuple[SignatureMatch, ...]
    first_exception: tuple[int, str] | None
    verdict: Verdict
    timings: Timings
    extras: Extras = field(default_factory=Extras)  # what the optional stages add (eval, perf, hygiene, …)
    cached: bool = False

    @property
    def label(self) -> str:
        return f"{self.spec.side} {self.spec.ref} ({self.spec.sha[:10]})"


def trial_spec(recipe: Recipe, repo: Path, rev: Revision, side: str | Label, cache: Cache | Path, out: Path,
               pins: tuple[str, ...] | list[str] = ()) -> TrialSpec:
    """The spec of one engine commit's trial, its logs in `out/<side>-<short sha>`."""
    return TrialSpec(recipe, Label.plain(side), rev.ref, rev.sha, rev.subject, str(repo), str(cache),
                     str(out / f"{side}-{rev.short}"), list(pins))
