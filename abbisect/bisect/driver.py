"""Drives a bisection with real trials: the ends policy, then the round policy (abbisect/bisect/policies.py) —
or, for a verdict that depends on chance, the posterior search (abbisect/bisect/noisy.py) — then the answer
gathered for the report, with `state.json` saved after every step so that a resumed run replays instead of
re-testing.

The search itself (`search.py`, `multisect.py`) is pure; every verdict comes from the `Oracle`, the one
`sha → verdict` function a test can replace.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from abbisect.bisect import confirm as rerun
from abbisect.bisect.bisection import BisectRun, EndsMode, Role, Step
from abbisect.bisect.changes import every_change
from abbisect.bisect.confirm_posterior import confirm
from abbisect.bisect.ends import ends_first_because
from abbisect.bisect.kinds import VariableKind
from abbisect.bisect.noisy import NoisySearch, Range
from abbisect.bisect.oracle import Oracle, Sample
from abbisect.bisect.pinchange import PinDiff, pin_diff
from abbisect.bisect.policies import EndsFirst, LazyEnds, Multisection, RoundPolicy, Sequential
from abbisect.bisect.search import Graph, SearchResult, SearchState
from abbisect.bisect.state import write_state
from abbisect.trial.judges import Judge
from abbisect.trial.slots import Slot
from abbisect.trial.spec import Progress


class Driver:
    def __init__(self, oracle: Oracle, progress: Progress, judge: Judge | None = None,
                 redact: Callable[[Any], Any] | None = None) -> None:
        self.oracle, self.say, self.judge, self.redact = oracle, progress, judge, redact
        self.recipe, self.variable = oracle.recipe, oracle.variable
        self.rounds: RoundPolicy = Multisection(oracle.slots) if oracle.parallel else Sequential()
        self.save_lock = threading.Lock()
        self.t0 = time.monotonic()

    def run(self, run: BisectRun, replay: dict[str, dict] | None = None) -> BisectRun:
        self.t0 = time.monotonic()
        self.oracle.recorded = replay or {}
        # Before the ends are tested, with a resumed run's recorded steps kept: an interrupt or a crash at any
        # moment leaves a folder that resumes without running a recorded launch again.
        self.save(run)
        run.ends_asked = EndsMode(self.recipe.bisect.ends)
        if run.ends_asked is EndsMode.LAZY:
            run.ends_fallback = ends_first_because(self.recipe, self.judge, run.merge_bases, self.variable.kind,
                                                   len(self.oracle.slots))
            if not run.ends_fallback:
                run.ends_mode = EndsMode.LAZY
                return LazyEnds().walk(self, run)
            self.say(f"bisect.ends lazy is not possible here: {run.ends_fallback}; testing both ends first")
        if self.oracle.assessor.statistical:  # a verdict that depends on chance: one posterior over the range
            search_changes = every_change if run.recipe.bisect.changes == "all" else None  # every change in the range
            whole = Range.whole(self.variable, run)
            return NoisySearch(self.oracle, self, run, whole, confirm, self.save).walk(search_changes)
        return EndsFirst().walk(self, run)

    # -- what the policies call ----------------------------------------------------------------------
    def step(self, run: BisectRun, sha: str, role: Role, ends: Mapping[str, Sample] | None = None) -> Step:
        step = self.oracle.step(run, sha, role, ends)
        self.save(run)
        self.oracle.announce(step)
        return step

    def slot_step(self, slot: Slot, run: BisectRun, sha: str, role: Role,
                  ends: Mapping[str, Sample] | None) -> Step:
        step = self.oracle.slot_step(slot, run, sha, role, ends)
        self.save(run)
        self.oracle.announce(step)
        return step

    def steps_at_once(self, run: BisectRun, items: list[tuple[str, Role]]) -> None:
        """Steps on separate slots at the same time, recorded in the order given (the ends: old, new)."""
        first = len(run.steps)
        with ThreadPoolExecutor(max_workers=len(items), thread_name_prefix="slot") as pool:
            futures = [pool.submit(self.slot_step, slot, run, sha, role, None)
                       for (sha, role), slot in zip(items, self.oracle.slots)]
            steps = [f.result() for f in futures]
        run.steps[first:] = steps
        for n, s in enumerate(run.steps):
            s.n = n
        self.save(run)

    def save(self, run: BisectRun, state: SearchState | None = None) -> None:
        """state.json: everything `--resume DIR` needs (recipe, ends, options, the cost, every finished trial — those
        an interrupted run recorded and this one has not replayed yet included)."""
        with self.save_lock:  # slots finish at the same time: one writer at a time
            self.spent(run)
            write_state(self.oracle.out, run, state, self.redact, self.oracle.recorded)

    def spent(self, run: BisectRun) -> None:
        """The whole bisect's cost so far: the runs before this one (a resumed bisect's) and this one's."""
        run.launches, run.builds = run.before.launches + self.oracle.launches, run.before.builds + self.oracle.builds
        run.wall_s = round(run.before.wall_s + time.monotonic() - self.t0, 2)

    def conclude(self, run: BisectRun, result: SearchResult, graph: Graph) -> BisectRun:
        """The answer, its parent (for the decisive A/B) and what the report says about them, gathered now so
        that rendering needs no git."""
        run.result = result
        tested = {s.sha for s in run.steps}
        inside = [sha for sha in graph.order if sha in tested and sha not in (run.old.sha, run.new.sha)]
        run.order = (run.old.sha, *inside, run.new.sha)
        found = run.result.first_new
        if found:
            parents = graph.parents.get(found) or (run.old.sha,)
            run.found_parent = next((p for p in parents if p in self.oracle.results), parents[0])
            if run.found_parent not in self.oracle.results:
                run.found_parent = run.old.sha
            try:
                run.releases = self.variable.releases(found)
            except RuntimeError as exc:  # a report without the releases beats no report
                self.say(f"could not look up releases and backports: {exc}")
            run.links = replace(self.variable.links(found, run.found_parent),
                                parent=self.variable.links(run.found_parent, None).commit)
            if rerun.wanted(run, self.oracle.assessor.statistical):
                rerun.confirm(self.oracle, run)
                self.save(run)
        return self.finish(run)

    def finish(self, run: BisectRun) -> BisectRun:
        self.oracle.shutdown()
        if self.oracle.executor is not None:
            run.slots, run.executor = len(self.oracle.slots), self.oracle.executor.name
        self.spent(run)
        shas = {s.sha for s in run.steps} | {run.old.sha, run.new.sha, *(run.result.candidates if run.result else ())}
        run.commits = {sha: self.variable.info(sha) for sha in sorted(shas)}
        engines = {s.result.spec.sha for s in run.steps if s.result is not None}
        run.engine_commits = {sha: self.variable.engine_commit(sha) for sha in sorted(engines)}
        run.pins = named_pins(run)
        return run


def named_pins(run: BisectRun) -> dict[str, PinDiff]:
    """What the answer and every change named change in their dependencies' pins, against the parent each was
    compared with ({} when the candidates are not commits, or no commit was named)."""
    if run.variable.kind.noun != "commit" or run.result is None or not run.result.first_new:
        return {}
    subdir = run.recipe.engine.subdir if run.variable.kind is VariableKind.ENGINE_COMMITS else ""
    parents = {run.result.first_new: run.found_parent}
    for change in run.changes.changes if run.changes else ():
        info = run.commits.get(change.sha)
        parents.setdefault(change.sha, info.parents[0] if info and info.parents else None)
    out = {}
    for sha, parent in parents.items():
        try:
            if parent:
                out[sha] = pin_diff(run.repo, parent, sha, subdir or "")
        except RuntimeError:  # a commit git cannot show (a stand-in history): the report goes without its pins
            continue
    return out
