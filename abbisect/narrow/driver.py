"""Run a narrowing: the failing launch first (it must fail), then either delta debugging against a passing
launch or the feature switches the commit accepts, every probe a trial of the recipe's verdict — from the trial
cache when it holds that exact launch, else run now, at once on free slots when there are several."""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from abbisect.assess import assessor_for
from abbisect.checkout import Revision
from abbisect.infra.errors import UserError
from abbisect.infra.proc import scrubbed_env
from abbisect.launch.engines import adapter
from abbisect.launch.switches import Catalogue, accepted, applicable, catalogue_for, option_items
from abbisect.narrow.ddmin import Result, ddmin
from abbisect.narrow.deltas import Delta, Launch, apply, differences
from abbisect.narrow.narrowing import NarrowRun, Probe, ProbeKind
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome
from abbisect.trial.pipeline import run_trial
from abbisect.trial.slots import Executor, Slot
from abbisect.trial.spec import Progress, TrialResult, TrialSpec, trial_spec

Fetch = Callable[[TrialSpec, Progress, Callable[[TrialSpec, Progress], TrialResult]], TrialResult]
HELP_TIMEOUT_S = 300


def failing_launch(recipe: Recipe, pins: Sequence[str] = ()) -> Launch:
    return Launch(tuple(recipe.launch.flags), dict(recipe.env), tuple(pins))


def passing_launch(recipe: Recipe) -> Launch | None:
    p = recipe.narrow.passing
    if p is None:
        return None
    return Launch(tuple(recipe.launch.flags if p.flags is None else p.flags),
                  dict(recipe.env if p.env is None else p.env), tuple(p.pins))


class Narrower:
    def __init__(self, recipe: Recipe, repo: Path, rev: Revision, cache: Path, out: Path, fetch: Fetch,
                 progress: Progress, executor: Executor | None = None, command: str = "") -> None:
        self.recipe, self.repo, self.rev, self.cache, self.out = recipe, repo, rev, cache, out
        self.fetch, self.say, self.executor = fetch, progress, executor
        self.assessor = assessor_for(recipe)
        self.run = NarrowRun(recipe, repo, rev, failing_launch(recipe), passing_launch(recipe), command=command)
        self.lock = threading.Lock()
        self.t0 = time.monotonic()

    # -- probes ---------------------------------------------------------------------------------------
    def _spec(self, launch: Launch, n: int) -> TrialSpec:
        variant = self.recipe.model_copy(update={
            "launch": self.recipe.launch.model_copy(update={"flags": list(launch.flags)}),
            "env": dict(launch.env)})
        return trial_spec(variant, self.repo, self.rev, f"probe{n}", self.cache, self.out / "probes",
                          list(launch.pins))

    def probes(self, asked: list[tuple[ProbeKind, str, Launch, dict]]) -> list[Probe]:
        """Each (kind, label, launch, extra fields) tried; at once on the executor's slots, one a slot."""
        with self.lock:
            first = len(self.run.probes)
            numbered = [(first + k, *item) for k, item in enumerate(asked)]
            self.run.probes.extend([None] * len(asked))  # type: ignore[list-item]  # filled in below
        slots: list[Slot | None] = list(self.executor.slots) if self.executor is not None else [None]
        todo: queue.SimpleQueue = queue.SimpleQueue()
        for item in numbered:
            todo.put(item)

        def work(slot: Slot | None) -> None:
            while True:
                try:
                    n, kind, label, launch, extra = todo.get_nowait()
                except queue.Empty:
                    return
                self.run.probes[n] = self._probe(n, kind, label, launch, extra, slot)

        threads = [threading.Thread(target=work, args=(s,), name=f"probe-slot-{i}") for i, s in enumerate(slots)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return self.run.probes[first:]

    def _probe(self, n: int, kind: ProbeKind, label: str, launch: Launch, extra: dict, slot: Slot | None) -> Probe:
        spec = self._spec(launch, n)
        executor = self.executor

        def say(m: str) -> None:
            self.say(f"probe {n} ({label[:60]}): {m}")

        def runner(s: TrialSpec, p: Progress) -> TrialResult:
            if slot is None or executor is None:
                return run_trial(s, p)
            return executor.submit(s, slot, p).result()

        t = time.monotonic()
        trials = [self.fetch(spec.again(k), say, runner) for k in range(self.assessor.first)]
        with self.lock:
            self.run.launches += sum(1 for r in trials if not r.cached and r.launch is not None)
        seen = self.assessor.alone(trials)
        probe = Probe(n, kind, label, launch, seen.outcome, str(trials[0].verdict.status), seen.evidence,
                      round(time.monotonic() - t, 2), all(r.cached for r in trials), trials=tuple(trials), **extra)
        self.say(f"probe {n} ({label[:60]}): {probe.outcome} ({probe.status}) {probe.evidence[:100]}")
        return probe

    # -- the narrowing -------------------------------------------------------------------------------
    def narrow(self, use_switches: bool = True) -> NarrowRun:
        run = self.run
        if not self.assessor.absolute:
            raise UserError(f"abbisect narrow judges each probe alone; a {self.assessor.kind} verdict compares two "
                            "commits (narrow a recipe whose verdict is its own rules or repeats)")
        (base,) = self.probes([("failing", "the recipe's launch", run.failing, {})])
        if base.outcome != Outcome.BAD:
            run.message = (f"the recipe's launch does not fail at {self.rev.ref} ({base.status}: {base.evidence}): "
                           "nothing to narrow")
            return self.finish()
        if run.passing is not None:
            self.between(run.passing)
        if use_switches:
            self.switches(base)
        if not run.tried and not run.message:
            run.message = self.nothing_tried(use_switches)
        return self.finish()

    def nothing_tried(self, use_switches: bool) -> str:
        """Why no probe but the failing launch ran: what the commit did not accept, and what would give it more."""
        run = self.run
        if not use_switches:
            return "no switch tried (--no-switches) and no passing launch to narrow against"
        offered = len(run.not_accepted) + len(run.already)
        said = [f"{len(run.not_accepted)} not declared by this commit's `{run.help_source or '--help'}`"]
        if run.already:
            said.append(f"{len(run.already)} already in the launch")
        return (f"nothing to try at this commit: of the {offered} switch(es) for engine {self.recipe.engine.kind}, "
                f"{' and '.join(said)}; give narrow.passing (a launch that passes) or narrow.switches (flags this "
                "commit has)")

    def between(self, passing: Launch) -> None:
        """ddmin over the differences between the failing and the passing launch."""
        run = self.run
        run.deltas = differences(run.failing, passing)
        if not run.deltas:
            run.message = "the passing launch is the failing one: no difference to narrow"
            return
        (ok,) = self.probes([("passing", "narrow.passing", passing, {})])
        if ok.outcome != Outcome.GOOD:
            run.message = f"the launch given as passing does not pass ({ok.status}: {ok.evidence}): no narrowing"
            return
        everything = tuple(range(len(run.deltas)))
        seen = {everything: Result.FAIL, (): Result.PASS}

        def test(subsets: Sequence[tuple[int, ...]]) -> list[Result]:
            asked = [("differences", ", ".join(run.deltas[i].describe() for i in s) or "(none)",
                      apply(passing, [run.deltas[i] for i in s]), {"deltas": s}) for s in subsets]
            found = self.probes(asked)  # type: ignore[arg-type]
            return [Result.FAIL if p.outcome == Outcome.BAD else Result.PASS if p.outcome == Outcome.GOOD
                    else Result.UNRESOLVED for p in found]

        run.minimal = ddmin(everything, test, seen)
        self.say("the smallest failing difference: " + ", ".join(run.deltas[i].describe() for i in run.minimal))

    def switches(self, base: Probe) -> None:
        """Every switch the commit's --help accepts and the launch does not already have, one probe each."""
        run = self.run
        catalogue = catalogue_for(self.recipe)
        if not catalogue:
            return
        help_text, run.help_source = self.help_text(base.trials[0])
        known = accepted(Catalogue(switches=tuple(catalogue)), help_text, keep_env=True) if help_text else \
            [s for s in catalogue if not s.flag]
        run.not_accepted = [s.id for s in catalogue if s not in known]
        asked = []
        for s in known:
            variant = applicable(s, run.failing.flags, run.failing.env)
            if variant is None:
                run.already.append(s.id)
                continue
            change = ", ".join([*(f"− {' '.join(item)}" for item in option_items(variant.removed)),
                                *([f"+ {' '.join(s.flag)}"] if s.flag else []), *(f"+ {k}={v}" for k, v in s.env.items())])
            asked.append(("switch", s.id, Launch(variant.flags, variant.env, run.failing.pins),
                          {"switch": s.id, "feature": s.feature, "change": change or "(options removed)",
                           "breadth": s.breadth}))
        self.say(f"{len(asked)} switch(es) to try ({len(run.not_accepted)} not accepted by this commit, "
                 f"{len(run.already)} already in the launch)")
        self.probes(asked)  # type: ignore[arg-type]

    def help_text(self, trial: TrialResult) -> tuple[str, str]:
        """The commit's own option list, from its venv: (text, the command that printed it)."""
        if trial.env is None or not trial.env.ok:
            return "", ""
        for argv in adapter(self.recipe.engine.kind).help_argv(self.recipe, trial.env.python):
            try:
                done = subprocess.run(list(argv), capture_output=True, text=True, timeout=HELP_TIMEOUT_S,
                                      check=False, env=scrubbed_env({"COLUMNS": "200"}))
            except (OSError, subprocess.SubprocessError):
                continue
            text = done.stdout + done.stderr
            if done.returncode == 0 and "--" in text:
                return text, " ".join(Path(argv[0]).name if i == 0 else a for i, a in enumerate(argv))
        self.say("the engine's --help could not be read: only environment switches are tried")
        return "", ""

    def finish(self) -> NarrowRun:
        self.run.probes = [p for p in self.run.probes if p is not None]
        self.run.wall_s = round(time.monotonic() - self.t0, 2)
        if self.executor is not None:
            self.executor.shutdown()
        return self.run


def minimal_deltas(run: NarrowRun) -> list[Delta]:
    return [run.deltas[i] for i in run.minimal or ()]

