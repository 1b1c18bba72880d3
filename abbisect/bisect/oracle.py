"""The bisect's one `sha → verdict` function: a commit's trial (from the trial cache, a replayed state, or run
now, on a slot when there are several), judged, retried and compared with the ends when the recipe asks, as a
`Step`. Everything the search policies need from trials goes through `Oracle.step`; a verdict that depends on
chance is searched by the posterior instead (abbisect/bisect/noisy.py), which asks `Oracle.launch` for one
launch at a time.

Venvs of the commits that may come next are built in the background (prefetch) while a trial's server runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from abbisect.assess import assessor_for
from abbisect.assess.base import Assessor, against_ends
from abbisect.assess.failure import sample_fingerprint
from abbisect.bisect.bisection import BisectRun, Role, Step, StepStats
from abbisect.bisect.state import recorded_step
from abbisect.bisect.variables import Variable
from abbisect.environment import EnvResult
from abbisect.environment.store import background
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome
from abbisect.trial import judges
from abbisect.trial.judges import Judge
from abbisect.trial.pipeline import run_trial
from abbisect.trial.slots import Executor, Slot
from abbisect.trial.spec import Label, Progress, TrialResult, TrialSpec

Runner = Callable[[TrialSpec, Progress], TrialResult]
Sample = Sequence[TrialResult]
# How a trial is fetched: from the trial cache when it holds it, else run with `Runner` (TrialCache.fetch).
Fetch = Callable[[TrialSpec, Progress, Runner], TrialResult]
# Whether the trial cache holds a spec's result (a prefetch is pointless then).
Cached = Callable[[TrialSpec], bool]


class Oracle:
    def __init__(self, recipe: Recipe, variable: Variable, out: Path, fetch: Fetch, cached: Cached,
                 progress: Progress, runner: Runner = run_trial,
                 retries: int = 0, prefetch: int = 2, judge: Judge | None = None,
                 executor: Executor | None = None, slots: list[Slot] | None = None) -> None:
        self.recipe, self.variable, self.out = recipe, variable, out
        self.fetch, self.cached, self.say = fetch, cached, progress
        self.retries, self.prefetch, self.judge = retries, prefetch, judge
        # Several slots: each trial goes to the slot its thread was given (multisection); one: this thread.
        self.executor = executor
        self.slots = slots if slots is not None else (executor.slots if executor is not None else [Slot(0, None)])
        self.runner = self._on_slot if executor is not None else runner
        self.local = threading.local()
        self.trial_futures: dict[str, Future[TrialResult]] = {}
        self.recorded: dict[str, dict] = {}  # steps an interrupted run finished: replayed, never run again
        self.assessor: Assessor = assessor_for(recipe, bisect=True)
        self.failure = ""  # how the bad end fails, once known (verdict.same_failure)
        self.results: dict[str, TrialResult] = {}  # the trials whose verdicts the search took
        self.pool = ThreadPoolExecutor(max_workers=max(prefetch, 1), thread_name_prefix="prefetch")
        self.prefetched: dict[str, Future[EnvResult]] = {}
        self.launches = 0
        self.builds = 0
        self.count_lock = threading.Lock()
        self.t0 = time.monotonic()

    @property
    def parallel(self) -> bool:
        return len(self.slots) > 1

    def _on_slot(self, spec: TrialSpec, progress: Progress) -> TrialResult:
        """The runner with an executor: the trial goes to the slot this thread was given."""
        slot = getattr(self.local, "slot", self.slots[0])  # one slot: the main thread runs every trial
        assert self.executor is not None  # this runner is used only with an executor
        future = self.executor.submit(spec, slot, progress)
        self.trial_futures[spec.sha] = future
        return future.result()

    def cancel(self, sha: str) -> bool:
        """Stop the running trial of `sha` (its verdict can no longer matter); False when none can be stopped."""
        if self.executor is None or sha not in self.trial_futures:
            return False
        self.executor.cancel(self.trial_futures[sha])
        return True

    def spec(self, sha: str, label: str, attempt: int = 0, items: tuple[str, ...] | None = None) -> TrialSpec:
        """The trial of `sha` (its `attempt`-th launch), asking `items` of an eval set when given; `label`: what
        the launch is (a `Label`, or a role's text: a search's launch)."""
        spec = self.variable.spec(sha, Label.plain(label), self.out / "trials").again(attempt)
        return replace(spec, items=items) if items is not None else spec

    # -- prefetch ------------------------------------------------------------------------------------
    def prefetch_build(self, shas: list[str]) -> None:
        """Build venvs of the commits that may come next while the current trial's server runs."""
        if not self.prefetch:
            return
        for sha in shas[: self.prefetch]:
            if sha in self.prefetched or sha in self.recorded or self.cached(self.spec(sha, "prefetch")):
                continue
            self.prefetched[sha] = self.pool.submit(self._build, sha)

    def _build(self, sha: str) -> EnvResult:
        with background():  # yields the CPU to the trial running meanwhile
            env = self.variable.build(sha)
        if not env.reused:
            with self.count_lock:  # background threads count builds too
                self.builds += 1
        return env

    # -- one commit's verdict ------------------------------------------------------------------------
    def _trial(self, sha: str, label: str, attempt: int = 0,
               ends: Mapping[str, TrialResult] | None = None, items: tuple[str, ...] | None = None) -> TrialResult:
        """One launch of `sha` (its `attempt`-th: repeats give a commit several), from the cache or run, and
        judged when the recipe has a judge (which may see the ends' trials); `items`: the eval items it asks."""
        named = Label.plain(label)
        spec = self.spec(sha, named, attempt, items)
        result = self.fetch(spec, lambda msg: self.say(f"{label} {sha[:10]}: {msg}"), self.runner)
        if not result.cached:
            with self.count_lock:  # several slots report at once
                self.launches += 1 if result.launch else 0
                self.builds += 0 if (result.env is None or result.env.reused) else 1
        if self.judge is not None:
            result = judges.apply(self.judge, result, lambda: self.again(sha, named.again(" again"), attempt), ends)
        return result

    def again(self, sha: str, label: str, attempt: int = 0, items: tuple[str, ...] | None = None) -> TrialResult:
        """The trial once more, never from the cache (a retry, a confirmation, or a person asking to see it again);
        `items`: the eval items it asks."""
        again = self.runner(self.spec(sha, label, attempt, items), lambda m: self.say(f"{label}: {m}"))
        with self.count_lock:
            self.launches += 1 if again.launch else 0
        return again

    def _judged(self, sha: str, label: str,
                ends: Mapping[str, Sample] | None) -> tuple[Outcome, TrialResult, str]:
        """One trial's outcome by the rules (or by the judge), confirmed by retries; a verdict of one trial
        against the ends' (differs from the good end) asks the assessor which end it resembles."""
        first = {k: v[0] for k, v in (ends or {}).items() if v}
        named = Label.plain(label)
        result = self._trial(sha, named, 0, first)
        outcome, evidence = result.verdict.outcome, "; ".join(result.verdict.reasons[:2])
        if ends and first and self.judge is None and against_ends(self.assessor):
            seen = self.assessor.against([result], ends["good"], ends["bad"])
            outcome, evidence = seen.outcome, seen.evidence
        for n in range(self.retries):
            again = self.again(sha, named.again(f" retry {n + 1}"))
            if self.judge is not None:
                again = judges.apply(self.judge, again, lambda: self.again(sha, named.again(" again")), first)
            if again.verdict.outcome != result.verdict.outcome:
                return Outcome.SKIP, result, (f"flaky: {result.verdict.status} then {again.verdict.status} "
                                              f"on retry {n + 1}")
        self.results[sha] = result
        return outcome, result, evidence

    def launch(self, sha: str, label: str, attempt: int, slot: Slot | None = None,
               items: tuple[str, ...] | None = None, fresh: bool = False) -> TrialResult:
        """One launch of a commit for the posterior search (its `attempt`-th), on `slot` when several run at
        once, asking `items` of an eval set when given; `fresh`: never from the trial cache (a confirmation)."""
        if slot is not None:
            self.local.slot = slot
        if fresh:
            return self.again(sha, label, attempt, items)
        result = self._trial(sha, label, attempt, items=items)
        self.results.setdefault(sha, result)
        return result

    def warm(self, sha: str) -> bool:
        """Whether a launch of `sha` costs only the launch: its venv was built by a trial or a prefetch."""
        done = self.prefetched.get(sha)
        return sha in self.results or (done is not None and done.done())

    def replayed(self, run: BisectRun, sha: str, role: Role) -> Step | None:
        """The step an interrupted run recorded for `sha` (every trial of it), or None."""
        r = self.recorded.get(sha)
        step = recorded_step(r, len(run.steps), role) if r is not None else None  # checked when the state was read
        if step is None or step.result is None:
            return None
        self.results[sha] = step.result
        return replace(step, round=None, slot=None, start_s=None, needed=True)

    def step(self, run: BisectRun, sha: str, role: Role, ends: Mapping[str, Sample] | None = None) -> Step:
        """Test `sha` (or replay the verdict an interrupted run recorded for it) and record the step (`announce`
        says it, once saved)."""
        t = time.monotonic()
        step = self.replayed(run, sha, role)
        if step is None:
            outcome, result, evidence = self._judged(sha, role, ends)
            outcome, evidence, other = self._same_failure(role, [result], outcome, evidence)
            step = Step(len(run.steps), sha, role, outcome, result.verdict.status, evidence,
                        round(time.monotonic() - t, 2), result.cached, result, stats=StepStats(other_failure=other))
        run.steps.append(step)
        return step

    def announce(self, step: Step) -> None:
        """A step's verdict, said once it is saved: what an interrupt after the line finds in state.json."""
        self.say(f"{step.role} {step.sha[:10]}: {step.outcome} ({step.status}) {step.evidence[:100]}"
                 + (" (recorded before the interruption)" if step.replayed else ""))

    def _same_failure(self, role: Role, trials: list[TrialResult], outcome: Outcome,
                      evidence: str) -> tuple[Outcome, str, str | None]:
        """A candidate that fails, but not the way the bad end does, is another bug: skipped, and said (with how it
        fails; None when it is not another failure)."""
        if outcome != Outcome.BAD or role.is_end or not self.failure or not self.recipe.verdict.same_failure:
            return outcome, evidence, None
        mine = sample_fingerprint(trials, self.recipe.scoring.warn_severity)
        if mine is None or mine == self.failure:
            return outcome, evidence, None
        return Outcome.SKIP, f"another failure: {mine} (the bad end fails as: {self.failure})", mine

    def slot_step(self, slot: Slot, run: BisectRun, sha: str, role: Role,
                  ends: Mapping[str, Sample] | None) -> Step:
        """`step` on a given slot (a thread of a multisection round)."""
        self.local.slot = slot
        start_s = round(time.monotonic() - self.t0, 2)
        step = self.step(run, sha, role, ends)
        step.slot, step.start_s = slot.index, start_s
        return step

    def not_needed(self, step: Step) -> None:
        """Other verdicts decided the range before this one: it is shown, but not evidence."""
        step.needed = False
        self.results.pop(step.sha, None)

    def shutdown(self, wait: bool = True) -> None:
        self.pool.shutdown(wait=wait, cancel_futures=True)
        if self.executor is not None:
            self.executor.shutdown()
