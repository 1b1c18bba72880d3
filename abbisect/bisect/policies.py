"""How a bisection walks, as small policies over one `sha → verdict` function (`Oracle.step`, reached through
the `Driver`):

- the ends policy: `EndsFirst` (both ends tested before the search, the direction observed; ends on different
  branches test their merge base first) or `LazyEnds` (search from the labels at once, as `git bisect run`
  does, and test an end only when the answer rests on it);
- the round policy: `Sequential` (git's own midpoint, one commit at a time) or `Multisection` (k commits a
  round on k slots).

The direction (a regression or a fix, and which verdict is git's "old") is decided once, by `Direction`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Protocol

from abbisect.assess.base import against_ends
from abbisect.assess.differs import Differs, differing
from abbisect.assess.failure import sample_fingerprint
from abbisect.bisect.bisection import BisectRun, EndsMode, Mode, Role, Step
from abbisect.bisect.ends import judged_against_ends
from abbisect.bisect.findings import Round
from abbisect.bisect.kinds import VariableKind
from abbisect.bisect.multisect import fold_taken, pick, still_useful
from abbisect.bisect.oracle import Oracle, Sample
from abbisect.bisect.search import NEW, OLD, SKIP, Graph, Mark, SearchResult, SearchState, start
from abbisect.bisect.variables import Variable
from abbisect.checkout import Revision
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome
from abbisect.trial.judges import Judge
from abbisect.trial.slots import Slot

Ends = Mapping[str, Sample]  # {"good": …, "bad": …}: the ends' trials, for relative verdicts


class Walker(Protocol):
    """What the policies need of the driver (abbisect/bisect/driver.py): its oracle, and how a step is run,
    recorded and saved, and a run concluded."""

    oracle: Oracle
    variable: Variable
    recipe: Recipe
    judge: Judge | None
    rounds: RoundPolicy

    def say(self, message: str) -> None: ...

    def step(self, run: BisectRun, sha: str, role: Role, ends: Ends | None = None) -> Step: ...

    def slot_step(self, slot: Slot, run: BisectRun, sha: str, role: Role, ends: Ends | None) -> Step: ...

    def steps_at_once(self, run: BisectRun, items: list[tuple[str, Role]]) -> None: ...

    def save(self, run: BisectRun, state: SearchState | None = None) -> None: ...

    def conclude(self, run: BisectRun, result: SearchResult, graph: Graph) -> BisectRun: ...

    def finish(self, run: BisectRun) -> BisectRun: ...


@dataclass(frozen=True)
class Direction:
    """Which way the search goes: commits with the old end's verdict are git's "old", the other's "new"."""

    mode: Mode
    old: Outcome

    @classmethod
    def from_old(cls, old: Outcome) -> Direction:
        """The direction when the range's old end is (observed, or labelled) `old`."""
        return cls(Mode.REGRESSION if old == Outcome.GOOD else Mode.FIX, old)

    def mark(self, outcome: Outcome) -> Mark:
        """The search's mark for a commit's outcome: old, new, or skip."""
        if outcome == Outcome.SKIP:
            return SKIP
        return OLD if outcome == self.old else NEW


def mislabel_note(run: BisectRun, good: Step, bad: Step) -> str:
    """The named ends observed the other way round, said from what was observed ("" when the labels held)."""
    if good.outcome == Outcome.GOOD and bad.outcome == Outcome.BAD:
        return ""
    return f"--good {run.good.ref} is actually {good.outcome} and --bad {run.bad.ref} is {bad.outcome}"


def take(driver: Walker, state: SearchState, steps: list[Step], direction: Direction) -> SearchState:
    """Fold finished steps' verdicts in; one that other verdicts have already decided is not evidence
    (stopped, or finished after them)."""
    state, taken = fold_taken(state, [(s.sha, direction.mark(s.outcome)) for s in steps])
    for step in steps:
        if step.sha not in taken:
            driver.oracle.not_needed(step)
        step.remaining = len(state.remaining())
    return state


# -- round policies -------------------------------------------------------------------------------------
class RoundPolicy(Protocol):
    """How a plain bisect's commits are tested: one at a time, or rounds of several at once."""

    def ahead(self, driver: Walker, state: SearchState | None) -> tuple[str, ...]:
        """Commits to test while the two ends run (the slots the ends leave free)."""

    def search(self, driver: Walker, run: BisectRun, state: SearchState, direction: Direction,
               ends: Ends | None) -> SearchState:
        """Test commits until the search converges."""


class Sequential:
    """One commit at a time, the one `git bisect` would test next."""

    def ahead(self, driver: Walker, state: SearchState | None) -> tuple[str, ...]:
        return ()

    def search(self, driver: Walker, run: BisectRun, state: SearchState, direction: Direction,
               ends: Ends | None) -> SearchState:
        """A commit this run already judged (a lazy run that turned out to need the other direction) gives its
        verdict again without a new trial."""
        judged = {s.sha: s for s in run.steps if s.role is Role.CANDIDATE and s.needed}
        while (sha := state.next_commit()) is not None:
            if sha in judged:
                state = state.record(sha, direction.mark(judged[sha].outcome))
                continue
            driver.oracle.prefetch_build(list(state.lookahead()))
            number = (len(run.steps) - 1 if run.ends_mode is EndsMode.FIRST
                      else 1 + sum(s.role is Role.CANDIDATE for s in run.steps))
            driver.say(f"step {number}: {len(state.remaining())} left, roughly {state.steps_left()} more after "
                       "this one")
            step = driver.step(run, sha, Role.CANDIDATE, ends)
            state = state.record(sha, direction.mark(step.outcome))
            step.remaining = len(state.remaining())
            driver.save(run, state)
        return state


class Multisection:
    """Rounds of k trials at once (k = the slots): k commits that split the range into k + 1 parts, all
    verdicts folded in; a skipped commit is replaced within the round while it can still help, and a trial
    whose verdict can no longer matter (the others decided it) is stopped."""

    def __init__(self, slots: list[Slot]) -> None:
        self.slots = slots

    def ahead(self, driver: Walker, state: SearchState | None) -> tuple[str, ...]:
        """With more than two slots, the commits to test while the ends run: they split the range as a round
        would, and their verdicts are read once the ends have shown the direction."""
        k = len(self.slots) - 2
        if (k < 1 or state is None or driver.variable.kind is not VariableKind.ENGINE_COMMITS
                or judged_against_ends(driver.recipe, driver.judge)):
            return ()
        return pick(state, k)

    def search(self, driver: Walker, run: BisectRun, state: SearchState, direction: Direction,
               ends: Ends | None) -> SearchState:
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
                        running[pool.submit(driver.slot_step, slot, run, sha, Role.CANDIDATE, ends)] = (
                            sha, slot)

                driver.say(f"round {number}: {len(state.remaining())} left; testing "
                           f"{min(k, len(state.remaining()))} commit(s) at once")
                launch(pick(state, k))
                while running:
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        sha, slot = running.pop(future)
                        free.append(slot)
                        step = future.result()
                        step.round = number
                        verdict = direction.mark(step.outcome)
                        useful = still_useful(state, sha)
                        state = take(driver, state, [step], direction)
                        driver.save(run, state)
                        if verdict == SKIP and useful and not state.done():
                            busy = [s for s, _ in running.values()]
                            launch([s for s in pick(state, len(free), busy) if s not in tested][:1])
                    for sha, _ in list(running.values()):
                        if not still_useful(state, sha) and driver.oracle.cancel(sha):
                            driver.say(f"round {number}: {sha[:10]} no longer matters; stopping its trial")
                run.rounds.append(Round(number, tuple(tested), round(time.monotonic() - t_round, 2),
                                        len(state.remaining())))
        return Sequential().search(driver, run, state, direction, ends)


# -- ends policies --------------------------------------------------------------------------------------
class EndsFirst:
    """Both ends tested before the search: the direction is observed, not assumed, and a no-change or an
    untestable end stops the run after two trials."""

    def walk(self, driver: Walker, run: BisectRun) -> BisectRun:
        state: SearchState | None = None
        graph: Graph | None = None
        if run.merge_bases:
            roles = (Role.GOOD_END, Role.BAD_END)
            driver.say(f"{run.good.ref} and {run.bad.ref} are on different branches (neither contains the other): "
                       f"after the two ends, testing their merge base {run.merge_bases[0][:10]} first, as git bisect "
                       "does")
            driver.oracle.prefetch_build(list(run.merge_bases))
        else:
            roles = (Role.OLD_END, Role.NEW_END)
            graph = driver.variable.graph(run.new.sha, [run.old.sha])
            state = start(graph, run.new.sha, [run.old.sha])
            driver.say(f"{len(state.remaining())} candidate commits between {run.old.ref} and {run.new.ref}; "
                       f"roughly {state.steps_left() + 1} steps after the two ends")
            # What the next steps test: the new end (while the old end's server loads), then the first midpoint.
            driver.oracle.prefetch_build([s for s in (run.new.sha, state.next_commit()) if s])
        ends = [(rev.sha, role) for rev, role in zip((run.old, run.new), roles, strict=True)]
        if driver.oracle.parallel:  # both ends at once, one slot each; the other slots start on the range meanwhile
            ahead = driver.rounds.ahead(driver, state)
            driver.steps_at_once(run, [*ends, *((sha, Role.CANDIDATE) for sha in ahead)])
            for step in run.steps[2:]:
                step.round = 0  # tested with the ends
        else:
            for sha, role in ends:
                driver.step(run, sha, role)
        if driver.judge is None and against_ends(driver.oracle.assessor):  # one trial against the ends'
            noise_baseline(driver, run)
            settle_ends(driver, run)
            driver.save(run)
        remember_failure(driver, run, run.steps[0], run.steps[1])
        return self.from_ends(driver, run, (run.steps[0], run.steps[1]), state, graph)

    def from_ends(self, driver: Walker, run: BisectRun, ends: tuple[Step, Step], state: SearchState | None,
                  graph: Graph | None) -> BisectRun:
        """Both ends' verdicts known (old end, new end): stop on no change or an untestable end, else search
        in the direction they show (merge bases first when the ends are on different branches)."""
        o, n = ends[0].outcome, ends[1].outcome
        ahead = [s for s in run.steps if s.role is Role.CANDIDATE and s.round == 0]  # tested with the ends
        if Outcome.SKIP in (o, n) or o == n:
            for step in ahead:  # no search follows: not evidence
                driver.oracle.not_needed(step)
        if Outcome.SKIP in (o, n):
            bad_end = ends[0] if o == Outcome.SKIP else ends[1]
            run.mode, run.message = Mode.UNTESTABLE_END, (f"the {bad_end.role} ({bad_end.sha[:10]}) is untestable: "
                                                          f"{bad_end.status} — {bad_end.evidence}")
            return driver.finish(run)
        if o == n:
            run.mode, run.message = Mode.NO_CHANGE, (f"both ends are {o} ({ends[0].status} / {ends[1].status}):"
                                                     " nothing to bisect — check the recipe's verdict rules or the refs")
            return driver.finish(run)
        rel = {str(s.outcome): s.trials for s in ends if s.result}  # the good and the bad end's trials
        if run.merge_bases:
            if not across_branches(driver, run, rel):
                return driver.finish(run)
            graph = driver.variable.graph(run.new.sha, [*run.merge_bases, *run.excluded], unrelated_olds=True)
            state = start(graph, run.new.sha, run.merge_bases)
            o = run.steps[2].outcome  # the merge base: the searched range's old end
            driver.say(f"{len(state.remaining())} candidate commits between the merge base and {run.new.ref}; "
                       f"roughly {state.steps_left() + 1} more steps")
        assert state is not None and graph is not None  # one line of history: made with the ends
        for s in run.steps:  # the ends (and a merge base): the whole range is still open
            s.remaining = len(state.remaining()) if s.remaining is None else s.remaining
        direction = Direction.from_old(o)
        run.mode = direction.mode
        if not run.merge_bases:
            good, bad = (run.step_of(run.good.sha), run.step_of(run.bad.sha))
            assert good is not None and bad is not None  # both ends were just tested
            run.mislabelled = mislabel_note(run, good, bad)
            if run.mislabelled:
                driver.say(f"{run.mislabelled}: searching for the commit that {run.mode.word} it")
        if ahead:  # the commits tested with the ends, read now that the direction is known
            state = take(driver, state, ahead, direction)
        state = driver.rounds.search(driver, run, state, direction, rel)
        return driver.conclude(run, state.result(), graph)


class LazyEnds:
    """Search at once from the user's labels, as `git bisect run` does; afterwards test the ends the answer
    rests on (the found commit is the new end, or the old end is a parent of it), so that a commit is reported
    only when it was observed bad and its parents observed good, as in ends-first mode. An end that
    contradicts its label hands over to `EndsFirst` (the other end tested too): the same no-change /
    untestable-end / mislabelled outcome and exit code, the search's verdicts reused."""

    def walk(self, driver: Walker, run: BisectRun) -> BisectRun:
        old_label = Outcome.GOOD if run.old.sha == run.good.sha else Outcome.BAD
        labels = {run.old.sha: old_label, run.new.sha: old_label.inverted()}
        roles = {run.old.sha: Role.OLD_END, run.new.sha: Role.NEW_END}
        graph = driver.variable.graph(run.new.sha, [run.old.sha])
        state = start(graph, run.new.sha, [run.old.sha])
        for rev in (run.old, run.new):  # free ends: from the trial cache, or recorded before an interruption
            if rev.sha in driver.oracle.recorded or driver.oracle.cached(driver.oracle.spec(rev.sha, roles[rev.sha])):
                driver.step(run, rev.sha, roles[rev.sha])
                how = "recorded before the interruption" if rev.sha in driver.oracle.recorded else "from the trial cache"
                run.ends_lazy.append(f"{roles[rev.sha]} `{rev.short}` ({labels[rev.sha]} by its label): {how}, free")
        if not ends_agree(run, labels):
            return self.to_first(driver, run, roles, graph)
        driver.say(f"lazy ends: {len(state.remaining())} candidate commits between {run.old.ref} and {run.new.ref}, "
                   f"searched from the labels at once (roughly {state.steps_left() + 1} steps); an end is tested "
                   f"only if the answer rests on it")
        driver.oracle.prefetch_build([s for s in (state.next_commit(),) if s])
        direction = Direction.from_old(old_label)
        run.mode = direction.mode
        if old_label != Outcome.GOOD:
            driver.say(f"--good {run.good.ref} is a descendant of --bad {run.bad.ref}: searching for the commit "
                       "that fixed it")
        state = Sequential().search(driver, run, state, direction, None)
        tested = {s.sha for s in run.steps}
        needed = ends_needed(driver, run, graph, state)
        for rev in (run.old, run.new):
            why = needed.get(rev.sha)
            if why and rev.sha not in tested:
                driver.say(f"testing the {roles[rev.sha]} {rev.short}: {why}")
                driver.step(run, rev.sha, roles[rev.sha])
                run.ends_lazy.append(f"{roles[rev.sha]} `{rev.short}` ({labels[rev.sha]} by its label): tested "
                                     f"after the search, because {why}")
            elif not why and rev.sha not in tested:
                run.ends_lazy.append(f"{roles[rev.sha]} `{rev.short}` ({labels[rev.sha]} by its label): not "
                                     "tested; the answer does not rest on it (commits between the ends were "
                                     "observed instead)")
        if not ends_agree(run, labels):
            return self.to_first(driver, run, roles, graph)
        for s in run.steps:
            s.remaining = len(state.remaining()) if s.remaining is None else s.remaining
        return driver.conclude(run, state.result(), graph)

    def to_first(self, driver: Walker, run: BisectRun, roles: dict[str, Role], graph: Graph) -> BisectRun:
        """An end contradicts its label: test the other one too and go on as ends-first mode would."""
        contradicted = ", ".join(f"{s.role} {s.sha[:10]} is {s.outcome}" for s in run.steps if s.sha in roles
                                 and s.is_end)
        driver.say(f"lazy ends: {contradicted}, against its label; testing the other end and going on as with "
                   "--ends first")
        for rev in (run.old, run.new):
            if rev.sha not in {s.sha for s in run.steps}:
                driver.step(run, rev.sha, roles[rev.sha])
                run.ends_lazy.append(f"{roles[rev.sha]} `{rev.short}`: tested because the other end contradicted "
                                     "its label")
        run.ends_lazy.append(f"an end contradicted its label ({contradicted}): judged from both ends' verdicts "
                             "as ends-first mode does")
        by_sha = {s.sha: s for s in run.steps if s.sha in roles and s.is_end}
        return EndsFirst().from_ends(driver, run, (by_sha[run.old.sha], by_sha[run.new.sha]),
                                     start(graph, run.new.sha, [run.old.sha]), graph)


def ends_agree(run: BisectRun, labels: dict[str, Outcome]) -> bool:
    return all(s.outcome == labels[s.sha] for s in run.steps if s.sha in labels and s.is_end)


def ends_needed(driver: Walker, run: BisectRun, graph: Graph, state: SearchState) -> dict[str, str]:
    """{end sha: why the answer rests on it}: the new end when it is the found commit (or among the commits
    left), the old end when a parent of the found commit (or of one left) lies outside the searched range,
    i.e. is old only because the old end is labelled so."""
    result = state.result()
    culprits = (result.first_new,) if result.outcome == "found" and result.first_new else result.candidates
    found = result.outcome == "found"
    needed = {}
    if run.new.sha in culprits:
        needed[run.new.sha] = ("the found commit is the new end itself" if found
                               else "the new end is one of the commits left")
    for sha in culprits:
        parents = driver.variable.info(sha).parents
        parents = parents[:1] if driver.recipe.bisect.first_parent else parents
        if any(p not in graph for p in parents):
            needed[run.old.sha] = (f"the old end is a parent of the found commit {sha[:10]}"
                                   if run.old.sha in parents else
                                   f"a parent of {sha[:10]} is old only by the old end's label")
            break
    return needed


def across_branches(driver: Walker, run: BisectRun, rel: Ends) -> bool:
    """Ends on different branches: test the merge base(s) and pick the range to search.

    The base shares one end's verdict: the change lies between the base and the other end, which becomes
    the new end (the shared end's ancestors are old too, as in git). git only goes on when the base has the
    good end's verdict; when it has the bad end's, the change is on the good end's branch, and we search there
    instead of stopping. A base with neither verdict stops the run.
    """
    named = {"good": run.steps[0], "bad": run.steps[1]}
    tested = [driver.step(run, mb, Role.MERGE_BASE, rel) for mb in run.merge_bases]
    outcomes = {s.outcome for s in tested}
    base = ", ".join(s.sha[:10] for s in tested)
    if Outcome.SKIP in outcomes or len(outcomes) > 1:
        why = "; ".join(f"{s.sha[:10]}: {s.outcome} ({s.status}) {s.evidence}" for s in tested)
        run.mode = Mode.UNTESTABLE_MERGE_BASE
        run.message = (f"{run.good.ref} and {run.bad.ref} are on different branches and their merge base {base} "
                       f"has neither end's verdict ({why}): no range can be chosen — test another pair of "
                       f"ends on one line (e.g. --good <an ancestor of {run.bad.ref}>)")
        run.ends_note = run.message
        return False
    verdict = outcomes.pop()
    same, other = ("good", "bad") if named["good"].outcome == verdict else ("bad", "good")
    same_rev, other_rev = (run.good, run.bad) if same == "good" else (run.bad, run.good)
    run.old = Revision(f"merge base of {run.good.ref} and {run.bad.ref}", tested[0].sha,
                       driver.variable.info(tested[0].sha).subject)
    run.new, run.excluded = other_rev, (same_rev.sha,)
    git_does = ("git bisect does the same" if same == "good" else
                f"git bisect would stop here (\"the merge base is bad\"); abbisect searches the {other}-end "
                f"side instead")
    run.ends_note = (f"{run.good.ref} and {run.bad.ref} are on different branches ({run.good.ref} tested "
                     f"{named['good'].outcome}, {run.bad.ref} {named['bad'].outcome}). Their merge base {base} was "
                     f"tested: {verdict}, like the named {same} end {same_rev.ref}, so the change lies between "
                     f"the merge base and {other_rev.ref}: searching merge-base..{other_rev.ref} "
                     f"({git_does}).")
    driver.say(run.ends_note)
    return True


def remember_failure(driver: Walker, run: BisectRun, old: Step, new: Step) -> None:
    """How the bad end fails (verdict.same_failure): a candidate failing another way is skipped, not blamed."""
    bad = old if old.outcome == Outcome.BAD else new if new.outcome == Outcome.BAD else None
    if bad is not None and driver.recipe.verdict.same_failure:
        run.failure = driver.oracle.failure = sample_fingerprint(bad.trials, driver.recipe.scoring.warn_severity) or ""


def noise_baseline(driver: Walker, run: BisectRun) -> None:
    """A verdict by change of output (differs from the good end): the good end runs a second time, fresh; a
    prompt it answers differently is noise of the engine, not a change of a commit, and is left out of every
    comparison (the oracle's assessor knows it from now on)."""
    good = run.step_of(run.good.sha)
    if good is None or good.result is None or good.outcome == Outcome.SKIP:
        return
    if good.more:  # replayed from an interrupted run's state: its second run is known
        again = good.more[0]
    else:
        again = driver.oracle.again(run.good.sha, "good-end-again")
        good.more += (again,)
    unstable = tuple(sorted(set(differing(again, good.result))))
    run.unstable = unstable
    driver.oracle.assessor = Differs(frozenset(unstable))
    if unstable:
        driver.say(f"the good end answers {len(unstable)} prompt(s) differently when run again "
                   f"({', '.join(unstable[:5])}): left out of every comparison")


def settle_ends(driver: Walker, run: BisectRun) -> None:
    """The two ends judged against each other by the assessor, the named good end first (the reference of a
    verdict by change of output), unless either was untestable."""
    good_step, other = ((run.steps[0], run.steps[1]) if run.steps[0].sha == run.good.sha
                        else (run.steps[1], run.steps[0]))
    if Outcome.SKIP in (good_step.outcome, other.outcome) or other.result is None or good_step.result is None:
        return
    seen = driver.oracle.assessor.settle_ends(good_step.trials, other.trials)
    for step, told in zip((good_step, other), seen, strict=True):
        step.outcome, step.evidence = told.outcome, told.evidence
