"""Drives a bisection with real trials: both ends first, direction observed, cache, prefetch, saved state.

The search itself (`search.py`) is pure; this module supplies its verdicts from trials and keeps the
record (`state.json` after every step) that a resumed run replays instead of re-testing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abbisect import checkout, judges
from abbisect.ab import trial_spec
from abbisect.bisect import history
from abbisect.bisect.multisect import fold_taken, pick, still_useful
from abbisect.bisect.search import NEW, OLD, SKIP, SearchResult, SearchState, start
from abbisect.cache import Cache
from abbisect.dependency import DependencyCommits, PackageVersions
from abbisect.environment import ensure_env, needs_source
from abbisect.environment.store import background
from abbisect.errors import UserError
from abbisect.executors import Executor, Slot
from abbisect.judges import Judge
from abbisect.locks import atomic_write
from abbisect.recipe import Recipe
from abbisect.redact import Redactor
from abbisect.score import resemblance
from abbisect.serial import dump, load
from abbisect.trial import Progress, TrialResult, TrialSpec, run_trial
from abbisect.trialcache import Runner, TrialCache


@dataclass
class Step:
    n: int
    sha: str
    role: str  # "good end", "bad end", "candidate", "parent"
    outcome: str  # good | bad | skip (after relative judgement and retries)
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

    @property
    def is_end(self) -> bool:
        """An end of the range (old/new, good/bad), not a commit between them."""
        return self.role.endswith(" end")


@dataclass
class BisectRun:
    recipe: Recipe
    repo: Path
    good: checkout.Revision  # as the user named them
    bad: checkout.Revision
    old: checkout.Revision  # the ancestor end
    new: checkout.Revision
    mode: str = ""  # "regression" | "fix" | "no-change" | "untestable-end"
    message: str = ""
    steps: list[Step] = field(default_factory=list)
    result: SearchResult | None = None
    found_parent: str | None = None
    launches: int = 0
    builds: int = 0
    wall_s: float = 0.0
    command: str = ""
    # Ends on different branches: their merge bases (tested before the search) and what was made of them.
    merge_bases: tuple[str, ...] = ()
    ends_note: str = ""
    excluded: tuple[str, ...] = ()  # further old ends of the searched range (the end sharing the base's verdict)
    releases: history.Releases | None = None
    # bisect.over: the candidates are a dependency's versions or commits (abbisect/dependency.py), not the
    # engine's commits; None walks the engine's history.
    variable: PackageVersions | DependencyCommits | None = None
    options: dict = field(default_factory=dict)  # command-line choices a resumed run must keep (no_cache, …)
    # Multisection: how many trials ran at once, where, and each round's commits and wall time.
    slots: int = 1
    executor: str = "sequential"
    rounds: list[dict] = field(default_factory=list)
    # bisect.ends: "first" (both ends tested before the search) or "lazy" (an end tested only when the answer
    # rests on it); ends_asked is what the recipe / --ends asked for, ends_fallback why lazy was not possible,
    # ends_lazy what lazy mode did with each end (tested or not, and why).
    ends_mode: str = "first"
    ends_asked: str = "first"
    ends_fallback: str = ""
    ends_lazy: list[str] = field(default_factory=list)


def order_ends(repo: Path, good: checkout.Revision,
               bad: checkout.Revision) -> tuple[checkout.Revision, checkout.Revision, tuple[str, ...]]:
    """(old, new, merge bases): the end that is an ancestor of the other is old, whichever name the user
    gave it, and there are no merge bases to test.  Ends on different branches (a release tag and main)
    come back as (good, bad, their merge bases): the driver tests the merge base first, as git does."""
    if good.sha == bad.sha:
        raise UserError(f"--good {good.ref} and --bad {bad.ref} are the same commit {good.short}")
    if history.is_ancestor(repo, good.sha, bad.sha):
        return good, bad, ()
    if history.is_ancestor(repo, bad.sha, good.sha):
        return bad, good, ()
    bases = tuple(history.merge_bases(repo, good.sha, bad.sha))
    if not bases:
        raise UserError(f"{good.ref} and {bad.ref} share no history (no merge base): nothing to bisect")
    return good, bad, bases


def judged_against_ends(recipe: Recipe, judge: Judge | None = None) -> str:
    """Why a commit's verdict needs the ends' trials ("" when it does not)."""
    if "differs_from_good" in recipe.verdict.bad_if:
        return "the verdict compares each commit with the good end (differs_from_good)"
    if judge is judges.interactive:
        return "the interactive judge shows each trial beside the ends' outputs"
    return ""


def ends_first_because(recipe: Recipe, judge: Judge | None = None, merge_bases: tuple[str, ...] = (),
                       over: bool = False, slots: int = 1) -> str:
    """Why the ends must be tested before the search ("" when `bisect.ends: lazy` can keep its guarantee)."""
    if why := judged_against_ends(recipe, judge):
        return why
    if merge_bases:
        return "the ends are on different branches (their merge base is judged against both ends)"
    if over:
        return "a dependency is the variable (bisect.over)"
    if slots > 1:
        return f"{slots} slots test the two ends at once anyway"
    return ""


class Driver:
    def __init__(self, recipe: Recipe, repo: Path, cache: Cache | Path, out: Path, trial_cache: TrialCache,
                 progress: Progress, runner: Runner = run_trial, retries: int = 0, prefetch: int = 2,
                 variable=None, judge: Judge | None = None, redact: Callable[[Any], Any] | None = None,
                 executor: Executor | None = None) -> None:
        self.recipe, self.repo, self.cache, self.out = recipe, repo, cache, out
        # Several slots: trials go to the executor, k at a time (multisection); one slot: as before.
        self.executor = executor
        self.slots = executor.slots if executor is not None else []
        self.local = threading.local()  # the slot the current thread's trial runs on
        self.trial_futures: dict[str, Future[TrialResult]] = {}
        self.t0 = time.monotonic()
        self.variable = variable  # what a candidate is when it is not an engine commit (bisect.over)
        self.trials, self.say, self.runner = trial_cache, progress, runner
        self.retries, self.prefetch, self.judge = retries, prefetch, judge
        self.recorded: dict[str, dict] = {}
        self.redact = redact
        self.pool = ThreadPoolExecutor(max_workers=max(prefetch, 1), thread_name_prefix="prefetch")
        self.prefetched: dict[str, Future] = {}
        self.results: dict[str, TrialResult] = {}
        self.launches = 0
        self.builds = 0
        self.count_lock = threading.Lock()
        self.save_lock = threading.Lock()
        if executor is not None:
            self.runner = self._on_slot

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

    # -- trials --------------------------------------------------------------------------------------
    def spec(self, sha: str, label: str) -> TrialSpec:
        if self.variable is not None:
            return self.variable.spec(sha, label, self.out / "trials")
        rev = checkout.Revision(label, sha, history.commit_info(self.repo, sha).subject)
        return trial_spec(self.recipe, self.repo, rev, label, self.cache, self.out / "trials")

    def prefetch_build(self, shas: list[str]) -> None:
        """Build venvs of the commits that may come next while the current trial's server runs."""
        if not self.prefetch:
            return
        for sha in shas[: self.prefetch]:
            if sha in self.prefetched or sha in self.recorded or self.trials.get(self.spec(sha, "prefetch")) is not None:
                continue
            self.prefetched[sha] = self.pool.submit(self._build, sha)

    def _build(self, sha: str):
        with background():  # yields the CPU to the trial running meanwhile
            env = self._build_now(sha)
        if not env.reused:
            with self.count_lock:  # background threads count builds too
                self.builds += 1
        return env

    def _build_now(self, sha: str):
        if self.variable is not None:
            env = self.variable.build(sha)
        else:
            source = checkout.worktree(self.repo, sha, self.cache, tuple(self.recipe.engine.sparse))
            env = ensure_env(source, sha, self.recipe.install, self.recipe.engine.subdir, self.cache,
                             self.recipe.timeouts.build, redactor=Redactor.from_recipe(self.recipe))
            if not needs_source(self.recipe.install):  # the trial checks it out again (a second or two)
                checkout.discard(self.repo, source)
        return env

    def trial(self, sha: str, label: str) -> tuple[TrialResult, bool]:
        result = self.trials.fetch(self.spec(sha, label), lambda msg: self.say(f"{label} {sha[:10]}: {msg}"),
                                   self.runner)
        if not result.cached:
            with self.count_lock:  # several slots report at once
                self.launches += 1 if result.launch else 0
                self.builds += 0 if (result.env is None or result.env.reused) else 1
        return result, result.cached

    def judged(self, sha: str, label: str, ends: dict[str, TrialResult] | None) -> tuple[str, TrialResult, bool, str]:
        """The trial's outcome, confirmed by retries and (if asked) by which end its outputs resemble."""
        result, cached = self.trial(sha, label)
        if self.judge is not None:
            result = judges.apply(self.judge, result, lambda: self._again(sha, f"{label} again"), ends)
        outcome, evidence = result.verdict.outcome, "; ".join(result.verdict.reasons[:2])
        relative = ends and "differs_from_good" in self.recipe.verdict.bad_if and self.judge is None
        if ends and relative and outcome != "skip" and result.outputs:
            r = resemblance([o.text for o in result.outputs], [o.text for o in ends["good"].outputs],
                            [o.text for o in ends["bad"].outputs])
            if r.closer_to in ("good", "bad"):
                outcome, evidence = r.closer_to, f"outputs resemble the {r.closer_to} end: {r.evidence}"
        for n in range(self.retries):
            again = self._again(sha, f"{label} retry {n + 1}")
            if self.judge is not None:
                again = judges.apply(self.judge, again, lambda: self._again(sha, f"{label} again"), ends)
            if again.verdict.outcome != result.verdict.outcome:
                return "skip", result, cached, (f"flaky: {result.verdict.status} then {again.verdict.status} "
                                                f"on retry {n + 1}")
        self.results[sha] = result
        return outcome, result, cached, evidence

    def _again(self, sha: str, label: str) -> TrialResult:
        """The trial once more, never from the cache (a retry, or a person asking to see it again)."""
        again = self.runner(self.spec(sha, label), lambda m: self.say(f"{label}: {m}"))
        with self.count_lock:
            self.launches += 1 if again.launch else 0
        return again

    # -- the search ----------------------------------------------------------------------------------
    def run(self, run: BisectRun, replay: dict[str, dict] | None = None) -> BisectRun:
        t0 = time.monotonic()
        recorded = self.recorded = replay or {}
        run.ends_asked = self.recipe.bisect.ends
        if run.ends_asked == "lazy":
            run.ends_fallback = self._lazy_impossible(run)
            if run.ends_fallback:
                self.say(f"bisect.ends lazy is not possible here: {run.ends_fallback}; testing both ends first")
            else:
                run.ends_mode = "lazy"
                return self._lazy(run, recorded, t0)
        state: SearchState | None = None
        graph = None
        if run.merge_bases:
            roles = ("good end", "bad end")
            self.say(f"{run.good.ref} and {run.bad.ref} are on different branches (neither contains the other): "
                     f"after the two ends, testing their merge base {run.merge_bases[0][:10]} first, as git bisect does")
            self.prefetch_build(list(run.merge_bases))
        else:
            roles = ("old end", "new end")
            graph = (self.variable.graph(run.old.sha, run.new.sha) if self.variable is not None else
                     history.candidate_graph(self.repo, run.new.sha, [run.old.sha],
                                             self.recipe.bisect.first_parent, self.recipe.bisect.pathspec or None))
            state = start(graph, run.new.sha, [run.old.sha])
            self.say(f"{len(state.remaining())} candidate commits between {run.old.ref} and {run.new.ref}; "
                     f"roughly {state.steps_left() + 1} steps after the two ends")
            # What the next steps test: the new end (while the old end's server loads), then the first midpoint.
            self.prefetch_build([s for s in (run.new.sha, state.next_commit()) if s])

        if self.parallel:  # both ends at once, one slot each; the other slots start on the range meanwhile
            ahead = self._between_ends(state)
            self._steps_at_once(run, [*((rev.sha, role) for rev, role in zip((run.old, run.new), roles, strict=True)),
                                      *((sha, "candidate") for sha in ahead)], recorded)
            for step in run.steps[2:]:
                step.round = 0  # tested with the ends
        else:
            for rev, role in zip((run.old, run.new), roles, strict=True):
                self._step(run, rev.sha, role, None, recorded)
        if "differs_from_good" in self.recipe.verdict.bad_if and self.judge is None:
            self._judge_ends_by_change(run)
            self.save(run)
        return self._from_ends(run, (run.steps[0], run.steps[1]), state, graph, recorded, t0)

    def _from_ends(self, run: BisectRun, ends: tuple[Step, Step], state: SearchState | None, graph,
                   recorded: dict, t0: float) -> BisectRun:
        """Both ends' verdicts known (old end, new end): stop on no change or an untestable end, else search
        in the direction they show (merge bases first when the ends are on different branches)."""
        o, n = ends[0].outcome, ends[1].outcome
        ahead = [s for s in run.steps if s.role == "candidate" and s.round == 0]  # tested with the ends
        if "skip" in (o, n) or o == n:
            for step in ahead:  # no search follows: not evidence
                self._not_needed(step)
        if "skip" in (o, n):
            bad_end = ends[0] if o == "skip" else ends[1]
            run.mode, run.message = "untestable-end", (f"the {bad_end.role} ({bad_end.sha[:10]}) is untestable: "
                                                       f"{bad_end.status} — {bad_end.evidence}")
            return self._finish(run, t0)
        if o == n:
            run.mode, run.message = "no-change", (f"both ends are {o} ({ends[0].status} / {ends[1].status}):"
                                                  " nothing to bisect — check the recipe's verdict rules or the refs")
            return self._finish(run, t0)
        rel = {s.outcome: s.result for s in ends if s.result}  # the good and the bad end's results
        if run.merge_bases:
            if not self._across_branches(run, rel, recorded):
                return self._finish(run, t0)
            graph = history.candidate_graph(self.repo, run.new.sha, [*run.merge_bases, *run.excluded],
                                            self.recipe.bisect.first_parent, self.recipe.bisect.pathspec or None,
                                            unrelated_olds=True)
            state = start(graph, run.new.sha, run.merge_bases)
            o, n = run.steps[2].outcome, run.steps[1 if run.new.sha == run.bad.sha else 0].outcome
            self.say(f"{len(state.remaining())} candidate commits between the merge base and {run.new.ref}; "
                     f"roughly {state.steps_left() + 1} more steps")
        assert state is not None and graph is not None  # one line of history: made with the ends
        for s in run.steps:  # the ends (and a merge base): the whole range is still open
            s.remaining = len(state.remaining()) if s.remaining is None else s.remaining
        run.mode = "regression" if o == "good" else "fix"
        named_good_is_old = run.good.sha == run.old.sha
        if not run.merge_bases and (o == "good") != named_good_is_old:
            self.say(f"--good {run.good.ref} is actually {'bad' if named_good_is_old else 'good'} and --bad "
                     f"{run.bad.ref} is {'good' if named_good_is_old else 'bad'}: searching for the commit that "
                     f"{'fixed' if run.mode == 'fix' else 'broke'} it")
        term = {o: OLD, n: NEW}
        if ahead:  # the commits tested with the ends, read now that the direction is known
            state = self._take(state, ahead, term)
        if self.parallel:
            state = self._multisect(run, state, term, rel, recorded)
        state = self._search(run, state, term, rel, recorded)
        return self._conclude(run, state, graph, t0)

    def _search(self, run: BisectRun, state: SearchState, term: dict[str, str], rel, recorded: dict) -> SearchState:
        """One commit at a time until the search converges. A commit this run already judged (a lazy run
        that turned out to need the other direction) gives its verdict again without a new trial."""
        judged = {s.sha: s for s in run.steps if s.role == "candidate"}
        while (sha := state.next_commit()) is not None:
            if sha in judged:
                state = state.record(sha, term.get(judged[sha].outcome, SKIP))
                continue
            self.prefetch_build(list(state.lookahead()))
            number = len(run.steps) - 1 if run.ends_mode == "first" else 1 + sum(s.role == "candidate" for s in run.steps)
            self.say(f"step {number}: {len(state.remaining())} left, roughly {state.steps_left()} more after this one")
            step = self._step(run, sha, "candidate", rel, recorded)
            state = state.record(sha, term.get(step.outcome, SKIP))
            step.remaining = len(state.remaining())
            self.save(run, state)
        return state

    def _conclude(self, run: BisectRun, state: SearchState, graph, t0: float) -> BisectRun:
        run.result = state.result()
        if run.result.first_new:
            parents = graph.parents.get(run.result.first_new) or (run.old.sha,)
            run.found_parent = next((p for p in parents if p in self.results), parents[0])
            if run.found_parent not in self.results:
                run.found_parent = run.old.sha
            try:  # package versions are not commits: no releases to look up
                if getattr(self.variable, "kind", "commits") == "commits":
                    run.releases = history.releases(self.repo, run.result.first_new)
            except RuntimeError as exc:  # a report without the releases beats no report
                self.say(f"could not look up releases and backports: {exc}")
        return self._finish(run, t0)

    # -- lazy ends -----------------------------------------------------------------------------------
    def _between_ends(self, state: SearchState | None) -> tuple[str, ...]:
        """With more than two slots, the commits to test while the ends run: they split the range as a round
        would, and their verdicts are read once the ends have shown the direction."""
        k = len(self.slots) - 2
        if k < 1 or state is None or self.variable is not None or judged_against_ends(self.recipe, self.judge):
            return ()
        return pick(state, k)

    def _lazy_impossible(self, run: BisectRun) -> str:
        return ends_first_because(self.recipe, self.judge, run.merge_bases, self.variable is not None,
                                  len(self.slots))

    def _lazy(self, run: BisectRun, recorded: dict, t0: float) -> BisectRun:
        """Search at once from the user's labels, as `git bisect run` does; afterwards test the ends the answer
        rests on (the found commit is the new end, or the old end is a parent of it), so that a commit is
        reported only when it was observed bad and its parents observed good, as in ends-first mode. An end
        that contradicts its label hands over to the ends-first logic (the other end tested too): the same
        no-change / untestable-end / mislabelled outcome and exit code, the search's verdicts reused."""
        old_label = "good" if run.old.sha == run.good.sha else "bad"
        labels = {run.old.sha: old_label, run.new.sha: "bad" if old_label == "good" else "good"}
        roles = {run.old.sha: "old end", run.new.sha: "new end"}
        graph = history.candidate_graph(self.repo, run.new.sha, [run.old.sha], self.recipe.bisect.first_parent,
                                        self.recipe.bisect.pathspec or None)
        state = start(graph, run.new.sha, [run.old.sha])
        for rev in (run.old, run.new):  # free ends: from the trial cache, or recorded before an interruption
            if rev.sha in recorded or self.trials.get(self.spec(rev.sha, roles[rev.sha])) is not None:
                self._step(run, rev.sha, roles[rev.sha], None, recorded)
                how = "recorded before the interruption" if rev.sha in recorded else "from the trial cache"
                run.ends_lazy.append(f"{roles[rev.sha]} `{rev.short}` ({labels[rev.sha]} by its label): {how}, "
                                     "free")
        if not self._ends_agree(run, labels):
            return self._lazy_to_first(run, roles, graph, recorded, t0)
        self.say(f"lazy ends: {len(state.remaining())} candidate commits between {run.old.ref} and {run.new.ref}, "
                 f"searched from the labels at once (roughly {state.steps_left() + 1} steps); an end is tested "
                 f"only if the answer rests on it")
        self.prefetch_build([s for s in (state.next_commit(),) if s])
        run.mode = "regression" if old_label == "good" else "fix"
        if old_label != "good":
            self.say(f"--good {run.good.ref} is a descendant of --bad {run.bad.ref}: searching for the commit that "
                     "fixed it")
        term = {labels[run.old.sha]: OLD, labels[run.new.sha]: NEW}
        state = self._search(run, state, term, None, recorded)
        tested = {s.sha for s in run.steps}
        needed = self._ends_needed(run, graph, state.result())
        for rev in (run.old, run.new):
            why = needed.get(rev.sha)
            if why and rev.sha not in tested:
                self.say(f"testing the {roles[rev.sha]} {rev.short}: {why}")
                self._step(run, rev.sha, roles[rev.sha], None, recorded)
                run.ends_lazy.append(f"{roles[rev.sha]} `{rev.short}` ({labels[rev.sha]} by its label): tested "
                                     f"after the search, because {why}")
            elif not why and rev.sha not in tested:
                run.ends_lazy.append(f"{roles[rev.sha]} `{rev.short}` ({labels[rev.sha]} by its label): not "
                                     "tested; the answer does not rest on it (commits between the ends were "
                                     "observed instead)")
        if not self._ends_agree(run, labels):
            return self._lazy_to_first(run, roles, graph, recorded, t0)
        for s in run.steps:
            s.remaining = len(state.remaining()) if s.remaining is None else s.remaining
        return self._conclude(run, state, graph, t0)

    def _ends_agree(self, run: BisectRun, labels: dict[str, str]) -> bool:
        return all(s.outcome == labels[s.sha] for s in run.steps if s.sha in labels and s.is_end)

    def _ends_needed(self, run: BisectRun, graph, result: SearchResult) -> dict[str, str]:
        """{end sha: why the answer rests on it}: the new end when it is the found commit (or among the
        commits left), the old end when a parent of the found commit (or of one left) lies outside the
        searched range, i.e. is old only because the old end is labelled so."""
        culprits = (result.first_new,) if result.outcome == "found" and result.first_new else result.candidates
        found = result.outcome == "found"
        needed = {}
        if run.new.sha in culprits:
            needed[run.new.sha] = ("the found commit is the new end itself" if found
                                   else "the new end is one of the commits left")
        for sha in culprits:
            parents = history.commit_info(self.repo, sha).parents
            parents = parents[:1] if self.recipe.bisect.first_parent else parents
            if any(p not in graph for p in parents):
                needed[run.old.sha] = (f"the old end is a parent of the found commit {sha[:10]}"
                                       if run.old.sha in parents else
                                       f"a parent of {sha[:10]} is old only by the old end's label")
                break
        return needed

    def _lazy_to_first(self, run: BisectRun, roles: dict[str, str], graph, recorded: dict, t0: float) -> BisectRun:
        """An end contradicts its label: test the other one too and go on as ends-first mode would."""
        contradicted = ", ".join(f"{s.role} {s.sha[:10]} is {s.outcome}" for s in run.steps if s.sha in roles
                                 and s.is_end)
        self.say(f"lazy ends: {contradicted}, against its label; testing the other end and going on as with "
                 "--ends first")
        for rev in (run.old, run.new):
            if rev.sha not in {s.sha for s in run.steps}:
                self._step(run, rev.sha, roles[rev.sha], None, recorded)
                run.ends_lazy.append(f"{roles[rev.sha]} `{rev.short}`: tested because the other end contradicted "
                                     "its label")
        run.ends_lazy.append(f"an end contradicted its label ({contradicted}): judged from both ends' verdicts "
                             "as ends-first mode does")
        by_sha = {s.sha: s for s in run.steps if s.sha in roles and s.is_end}
        return self._from_ends(run, (by_sha[run.old.sha], by_sha[run.new.sha]), start(graph, run.new.sha,
                               [run.old.sha]), graph, recorded, t0)

    # -- several slots -------------------------------------------------------------------------------
    def _slot_step(self, slot, run: BisectRun, sha: str, role: str, ends, recorded: dict) -> Step:
        self.local.slot = slot
        start_s = round(time.monotonic() - self.t0, 2)
        step = self._step(run, sha, role, ends, recorded)
        step.slot, step.start_s = slot.index, start_s
        return step

    def _steps_at_once(self, run: BisectRun, items: list[tuple[str, str]], recorded: dict) -> None:
        """Steps on separate slots at the same time, recorded in the order given (the ends: old, new)."""
        first = len(run.steps)
        with ThreadPoolExecutor(max_workers=len(items), thread_name_prefix="slot") as pool:
            futures = [pool.submit(self._slot_step, slot, run, sha, role, None, recorded)
                       for (sha, role), slot in zip(items, self.slots)]
            steps = [f.result() for f in futures]
        run.steps[first:] = steps
        for n, s in enumerate(run.steps):
            s.n = n
        self.save(run)

    def _multisect(self, run: BisectRun, state: SearchState, term: dict[str, str], rel, recorded: dict) -> SearchState:
        """Rounds of k trials at once (k = the slots): k commits that split the range into k + 1 parts, all
        verdicts folded in; a skipped commit is replaced within the round while it can still help, and a
        trial whose verdict can no longer matter (the others decided it) is stopped."""
        k = len(self.slots)
        with ThreadPoolExecutor(max_workers=k, thread_name_prefix="slot") as pool:
            while not state.done():
                t_round = time.monotonic()
                number = len(run.rounds) + 1
                tested: list[str] = []
                free = list(self.slots)
                running: dict[Future[Step], tuple[str, Slot]] = {}

                def launch(shas, running=running, free=free, tested=tested) -> None:
                    for sha in shas:
                        slot = free.pop(0)
                        tested.append(sha)
                        running[pool.submit(self._slot_step, slot, run, sha, "candidate", rel, recorded)] = (sha, slot)

                self.say(f"round {number}: {len(state.remaining())} left; testing {min(k, len(state.remaining()))} "
                         f"commit(s) at once")
                launch(pick(state, k))
                while running:
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        sha, slot = running.pop(future)
                        free.append(slot)
                        step = future.result()
                        step.round = number
                        verdict = term.get(step.outcome, SKIP)
                        useful = still_useful(state, sha)
                        state = self._take(state, [step], term)
                        self.save(run, state)
                        if verdict == SKIP and useful and not state.done():
                            busy = [s for s, _ in running.values()]
                            launch([s for s in pick(state, len(free), busy) if s not in tested][:1])
                    for sha, _ in list(running.values()):
                        if not still_useful(state, sha) and sha in self.trial_futures and self.executor:
                            self.say(f"round {number}: {sha[:10]} no longer matters; stopping its trial")
                            self.executor.cancel(self.trial_futures[sha])
                run.rounds.append({"round": number, "commits": tested, "seconds": round(time.monotonic() - t_round, 2),
                                   "remaining": len(state.remaining())})
        return state

    def _take(self, state: SearchState, steps: list[Step], term: dict[str, str]) -> SearchState:
        """Fold finished steps' verdicts in; one that other verdicts have already decided is not evidence
        (stopped, or finished after them)."""
        state, taken = fold_taken(state, [(s.sha, term.get(s.outcome, SKIP)) for s in steps])
        for step in steps:
            if step.sha not in taken:
                self._not_needed(step)
            step.remaining = len(state.remaining())
        return state

    def _not_needed(self, step: Step) -> None:
        step.role = "candidate (no longer needed)"
        self.results.pop(step.sha, None)

    def _across_branches(self, run: BisectRun, rel: dict[str, TrialResult], recorded: dict) -> bool:
        """Ends on different branches: test the merge base(s) and pick the range to search.

        The base shares one end's verdict: the change lies between the base and the other end, which
        becomes the new end (the shared end's ancestors are old too, as in git).  git only goes on when
        the base has the good end's verdict; when it has the bad end's, the change is on the good end's
        branch, and we search there instead of stopping.  A base with neither verdict stops the run.
        """
        named = {"good": run.steps[0], "bad": run.steps[1]}
        tested = [self._step(run, mb, "merge base", rel, recorded) for mb in run.merge_bases]
        outcomes = {s.outcome for s in tested}
        base = ", ".join(s.sha[:10] for s in tested)
        if "skip" in outcomes or len(outcomes) > 1:
            why = "; ".join(f"{s.sha[:10]}: {s.outcome} ({s.status}) {s.evidence}" for s in tested)
            run.mode = "untestable-merge-base"
            run.message = (f"{run.good.ref} and {run.bad.ref} are on different branches and their merge base {base} "
                           f"has neither end's verdict ({why}): no range can be chosen — test another pair of "
                           f"ends on one line (e.g. --good <an ancestor of {run.bad.ref}>)")
            run.ends_note = run.message
            return False
        verdict = outcomes.pop()
        same, other = ("good", "bad") if named["good"].outcome == verdict else ("bad", "good")
        same_rev, other_rev = (run.good, run.bad) if same == "good" else (run.bad, run.good)
        subject = history.commit_info(self.repo, tested[0].sha).subject
        run.old = checkout.Revision(f"merge base of {run.good.ref} and {run.bad.ref}", tested[0].sha, subject)
        run.new, run.excluded = other_rev, (same_rev.sha,)
        git_does = ("git bisect does the same" if same == "good" else
                    f"git bisect would stop here (\"the merge base is bad\"); abbisect searches the {other}-end "
                    f"side instead")
        run.ends_note = (f"{run.good.ref} and {run.bad.ref} are on different branches ({run.good.ref} tested "
                         f"{named['good'].outcome}, {run.bad.ref} {named['bad'].outcome}). Their merge base {base} was "
                         f"tested: {verdict}, like the named {same} end {same_rev.ref}, so the change lies between "
                         f"the merge base and {other_rev.ref}: searching merge-base..{other_rev.ref} "
                         f"({git_does}).")
        self.say(run.ends_note)
        return True

    def _judge_ends_by_change(self, run: BisectRun) -> None:
        """"Any change in output is the signal": the named good end is good by definition, the other end
        is bad exactly when some output differs from it (temperature 0 makes outputs comparable)."""
        good_step, other = ((run.steps[0], run.steps[1]) if run.steps[0].sha == run.good.sha
                            else (run.steps[1], run.steps[0]))
        if "skip" in (good_step.outcome, other.outcome) or other.result is None or good_step.result is None:
            return
        changed = [o.prompt_id for o, g in zip(other.result.outputs, good_step.result.outputs) if o.text != g.text]
        good_step.outcome, good_step.evidence = "good", "the named good end (reference outputs)"
        other.outcome = "bad" if changed else "good"
        other.evidence = (f"outputs differ from the good end on {', '.join(changed)}" if changed
                          else "outputs identical to the good end")

    def _step(self, run: BisectRun, sha: str, role: str, ends, recorded: dict) -> Step:
        t = time.monotonic()
        r = recorded.get(sha)
        if r is not None and r.get("result"):
            # The verdict an interrupted run recorded stands: replayed from state.json, never run again.
            result = load(TrialResult, r["result"])
            step = Step(len(run.steps), sha, role, r["outcome"], r["status"], r["evidence"], r["seconds"],
                        r["cached"], result, remaining=r.get("remaining"), replayed=True)
            self.results[sha] = result
        else:
            outcome, result, cached, evidence = self.judged(sha, role, ends)
            step = Step(len(run.steps), sha, role, outcome, result.verdict.status, evidence,
                        round(time.monotonic() - t, 2), cached, result)
        run.steps.append(step)
        self.say(f"{role} {sha[:10]}: [bold]{step.outcome}[/bold] ({step.status}) {step.evidence[:100]}"
                 + (" (recorded before the interruption)" if step.replayed else ""))
        self.save(run)
        return step

    def save(self, run: BisectRun, state: SearchState | None = None) -> None:
        """state.json: everything `--resume DIR` needs (recipe, ends, options, every finished trial)."""
        self.out.mkdir(parents=True, exist_ok=True)
        with self.save_lock:  # slots finish at the same time: one writer at a time
            atomic_write(self.out / "state.json", json.dumps(save_state(run, state, self.redact), indent=1,
                                                             default=str))

    def _finish(self, run: BisectRun, t0: float) -> BisectRun:
        self.pool.shutdown(wait=True, cancel_futures=True)
        if self.executor is not None:
            self.executor.shutdown()
            run.slots, run.executor = len(self.slots), self.executor.name
        run.launches, run.builds = self.launches, self.builds
        run.wall_s = round(time.monotonic() - t0, 2)
        return run


STATE_VERSION = 1


def save_state(run: BisectRun, state: SearchState | None = None, redact: Callable[[Any], Any] | None = None) -> dict:
    """The record a resumed run starts from. With secrets in the recipe, they are masked here (never
    written), and `masked` tells a resumed run to read the recipe file again (its fingerprint checked)."""
    data = {"version": STATE_VERSION, "command": run.command, "recipe": run.recipe.model_dump(mode="json"),
            "fingerprint": run.recipe.fingerprint(), "masked": False,
            "good": {"ref": run.good.ref, "sha": run.good.sha}, "bad": {"ref": run.bad.ref, "sha": run.bad.sha},
            "options": run.options,
            "steps": [dump(s) for s in run.steps],
            "remaining": state.remaining() if state else None}
    if redact is None:
        return data
    masked = redact(data)
    return {**masked, "masked": masked["recipe"] != data["recipe"]}


def load_state(out: Path) -> dict:
    path = out / "state.json"
    if not path.is_file():
        raise UserError(f"--resume {out}: no state.json there (give the folder an interrupted bisect printed)")
    try:
        state = json.loads(path.read_text())
    except ValueError as exc:
        raise UserError(f"--resume {out}: state.json is not readable JSON ({exc})") from None
    if state.get("version") != STATE_VERSION:
        raise UserError(f"--resume {out}: state.json was written by another abbisect version "
                        f"(format {state.get('version')}, this one reads {STATE_VERSION}); start the bisect again")
    return state
