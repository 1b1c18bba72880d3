"""A bisection of a verdict that depends on chance — a flaky failure (`repeats`), a bug that shows only in a batch
(`query.concurrency`), a performance or an accuracy verdict — as one posterior over where the change is
(abbisect/bisect/posterior.py), instead of settling each commit before moving on.

Round by round: both ends (and the merge base of ends on different branches) are launched first; then every
launch's evidence updates the posterior, and the next round holds the launches expected to reduce its entropy
most per unit of cost (k slots: k launches chosen jointly; a performance round may re-measure an end beside a
candidate, so a drift of the host is measured, not mistaken for a change). Once one commit holds half the mass
(on a host that may drift: `bisect.posterior`), the confirmation takes over (abbisect/bisect/confirm_posterior.py),
its fresh launches counted with the search's until the commit holds `bisect.posterior`; or the search stops when
"no change" does, or at the cap, "not sure" with the posterior shown. A part of the range is searched the same
way for a further change (`part`, driven by abbisect/bisect/changes.py). Each commit is one `Step` holding all its
launches (and the round each ran in), their specs saying which search made them (bisect/launches.py), so
`state.json` is enough to rebuild every posterior on `--resume`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TYPE_CHECKING

from abbisect.assess.base import Assessor
from abbisect.assess.failure import fingerprint
from abbisect.bisect.bisection import BisectRun, Mode, Role, Step, StepStats
from abbisect.bisect.findings import Change, Changes, PosteriorSummary, Round, States
from abbisect.bisect.findings import Confirmation as Confirmed
from abbisect.bisect.launches import Evidence, phase_of, prior_weights
from abbisect.bisect.oracle import Oracle
from abbisect.bisect.policies import EndsFirst, Walker
from abbisect.bisect.posterior import Decision, Option, Posterior, Space
from abbisect.bisect.search import NEW, OLD, SKIP, Graph, SearchResult, start
from abbisect.checkout import Revision
from abbisect.recipe.status import Outcome
from abbisect.stats.evidence import AFTER, BEFORE
from abbisect.trial.spec import Label, TrialResult

if TYPE_CHECKING:
    from abbisect.bisect.variables import Variable

NO_CHANGE_PRIOR = 0.5  # the ends were named good and bad, but whether they differ is for the evidence to say
CONFIRMATIONS = 6  # an answer not confirmed: search on with the fresh launches as evidence, at most this often
# The search hands its likeliest commit to the confirmation once it holds this much of the mass: the confirmation's
# launches of the commit and its parent count towards `bisect.posterior` (they are the launches that tell most
# there), so the search need not get there alone.
HANDOFF = 0.5


Confirm = Callable[["NoisySearch", str, Posterior, int], tuple[Confirmed, Posterior]]


@dataclass(frozen=True)
class Range:
    """The commits one search works on: their graph, its ends (sha → role), the prior's weights and the space of
    answers; `phase`: which search of the bisect it is (1: the whole range's), `part_number` the part its
    launches' labels name (a part's: its phase, even the first; None: the whole range's). Made once for the whole range (`whole`), from which each part's is
    made (`part`)."""

    graph: Graph
    ends: dict[str, Role]
    prior: dict[str, float]
    space: Space
    phase: int = 1
    part_number: int | None = None

    @classmethod
    def whole(cls, variable: Variable, run: BisectRun) -> Range:
        """The bisect's range: old end to new end, or both sides of the merge base of ends on two branches."""
        olds = list(run.merge_bases) or [run.old.sha]
        if run.merge_bases:  # the change lies on either side of the merge base: both sides are searched at once
            sides = [variable.graph(tip, olds, unrelated_olds=True) for tip in (run.good.sha, run.bad.sha)]
            walk = list(dict.fromkeys([*sides[0].walk, *sides[1].walk]))
            graph = Graph.from_parents({**sides[0].parents, **sides[1].parents}, walk,
                                       sides[0].treesame | sides[1].treesame)
            ends = {run.good.sha: Role.GOOD_END, run.bad.sha: Role.BAD_END,
                    **{b: Role.MERGE_BASE for b in run.merge_bases}}
        else:
            graph = variable.graph(run.new.sha, olds)
            ends = {run.old.sha: Role.OLD_END, run.new.sha: Role.NEW_END}
        unlikely = run.recipe.bisect.prior.unlikely
        weights = prior_weights(run.recipe, variable.touched(list(graph.order))) if unlikely else {}
        return cls(graph, ends, weights, Space.of(graph, weights, NO_CHANGE_PRIOR))

    def part(self, variable: Variable, old: str, new: str, phase: int) -> Range:
        """The commits after `old` up to `new` (two tested commits of this range), searched as the `phase`-th."""
        graph = variable.graph(new, [old])
        prior = {s: w for s, w in self.prior.items() if s in graph}
        return Range(graph, {old: Role.OLD_END, new: Role.NEW_END}, prior, Space.of(graph, prior, NO_CHANGE_PRIOR),
                     phase, phase)

    def budget(self, cap: int) -> int:
        """The launches a search of the range may make: `cap` a step of a bisection, and two steps more."""
        return cap * (math.ceil(math.log2(len(self.space.culprits) + 1)) + 2)


class NoisySearch:
    """The posterior search (module docstring) of a `Range` over an oracle's launches: `walk` searches a bisect's
    range (the driver saves and concludes it), `settle` searches and confirms (`confirm`, bisect/confirm_posterior.py),
    `part` makes the search of a part of it, `labelled` the same search launching fresh under a confirmation's
    labels."""

    def __init__(self, oracle: Oracle, driver: Walker, run: BisectRun, rng: Range, confirm: Confirm,
                 save: Callable[[BisectRun], None] = lambda run: None, *, evidence: Evidence | None = None,
                 labels: dict[str, Label] | None = None, ask: tuple[str, ...] | None = None,
                 budget: int | None = None) -> None:
        self.oracle, self.recipe, self.say, self.save = oracle, oracle.recipe, oracle.say, save
        self.driver, self.run, self.range, self.confirm = driver, run, rng, confirm
        a: Assessor = oracle.assessor
        self.threshold = self.recipe.bisect.posterior
        self.evidence = evidence if evidence is not None else Evidence(self.recipe, a, phase=rng.phase)
        self.cap = a.search_cap
        self.budget = min(rng.budget(self.cap), budget) if budget is not None else rng.budget(self.cap)
        self.graph, self.ends, self.space, self.prior = rng.graph, rng.ends, rng.space, rng.prior
        self.asks_items = self.evidence.model(()).asks_items  # a candidate is asked the items telling the ends apart
        self.labels = labels or {}  # a launch's label when not its role (a confirmation's)
        self.fresh = labels is not None  # never from the trial cache (a confirmation's launches)
        self.phase, self.part_number = rng.phase, rng.part_number  # a search of a part of the range: its number
        self.ask = ask  # the eval items its every launch asks (a part's search)

    def walk(self, search_changes: Callable[[NoisySearch, Posterior], Changes | None] | None = None) -> BisectRun:
        """Search the bisect's range and confirm the answer; `search_changes`: what to do next with the search and its
        posterior, before the answer is concluded (every other change of the range: abbisect/bisect/changes.py)."""
        oracle, run, a = self.oracle, self.run, self.oracle.assessor
        n = len(self.space.culprits)
        self.say(f"{n} candidate commits between {run.old.ref} and {run.new.ref}; a {a.kind} verdict depends on "
                 f"chance: searching by the posterior over where the change is, until one commit holds "
                 f"{self.threshold:.0%} of it")
        for sha, role in [*self.ends.items(), *((s, Role.CANDIDATE) for s in oracle.recorded)]:
            if sha not in {s.sha for s in run.steps} and (sha in self.ends or sha in self.graph):
                step = oracle.replayed(run, sha, role)
                if step is not None:
                    run.steps.append(step)
        first = [sha for sha in self.ends if not self.step_of(sha)]
        if first:
            self.launch_round(first)
        if not run.merge_bases and any(a.unmeasured(s.trials) for s in run.steps if s.is_end):
            return self.requests_fail()
        untestable = [s for s in run.steps if s.is_end and not any(self.evidence.observes(t) for t in s.trials)]
        if untestable:
            return self.untestable_end(untestable[0])
        post, run.confirmation = self.settle()
        primary = None
        if search_changes is not None:
            run.changes = search_changes(self, post)
            primary = run.changes.primary if run.changes is not None else None
            if run.changes is not None and primary is not None and (run.confirmation is None
                                                                    or run.confirmation.found.sha != primary.sha):
                run.confirmation = run.changes.primary_confirmation or run.confirmation  # named by a part's search
        return self.conclude(post, primary)

    def settle(self) -> tuple[Posterior, Confirmed | None]:
        """The search and its confirmation: the posterior after them, and what the confirmation says (None: none
        ran)."""
        recipe = self.recipe
        confirming = recipe.bisect.confirm != "never" or recipe.bisect.revert
        # A host that may drift (a performance verdict) is searched to the threshold first: a pair of fresh launches
        # can straddle a change of the host, and the search's rounds, each re-measuring an end, are what tell a
        # drift from the change.
        early = confirming and not self.evidence.model(()).drifts
        handoff = min(HANDOFF, self.threshold) if early else self.threshold
        said: Confirmed | None = None
        post = self.search(stop=handoff)
        for attempt in range(1, CONFIRMATIONS + 1):  # confirmed, or searched on with its launches as evidence
            decision = post.decide(handoff)
            if not decision.found or not confirming:
                break
            said, post = self.confirm(self, decision.found, post, attempt)
            if said.level.final or attempt == CONFIRMATIONS or self.launches() >= self.budget:
                break
            self.say(f"confirmation {attempt}: {said.sentence}; searching on with its launches as evidence")
            post = self.search(stop=handoff)
        return post, said

    def part(self, old: str, new: str, phase: int, ask: tuple[str, ...] | None = None,
             budget: int | None = None) -> NoisySearch:
        """A search of its own for another change between two tested commits of this one's range (`old` before
        `new`), the `phase`-th of the bisect: its launches labelled `change<phase> …`, its evidence what this
        part's commits showed in the searches up to it; `ask`: the eval items its every launch asks; `budget`: at
        most this many launches (what the bisect's budget leaves it), else its range's."""
        return NoisySearch(self.oracle, self.driver, self.run, self.range.part(self.driver.variable, old, new, phase),
                           self.confirm, self.save, ask=ask, budget=budget)

    def labelled(self, labels: dict[str, Label]) -> NoisySearch:
        """This search launching fresh (never from the trial cache), each commit under its label in `labels` (a
        confirmation's, which may add to them as it goes), its evidence this search's."""
        return NoisySearch(self.oracle, self.driver, self.run, self.range, self.confirm, self.save,
                           evidence=self.evidence, labels=labels, ask=self.ask)

    def search(self, options: Callable[[], list[Option]] | None = None, stop: float | None = None,
               limit: int | None = None, until: Callable[[Posterior], bool] | None = None) -> Posterior:
        """Rounds until one commit holds `stop` of the mass (default: the threshold), "no change" holds the
        threshold, `until` says so, the launches reach `limit` (default: the search's budget), or no launch would
        tell more."""
        post = self.posterior()
        limit = self.budget if limit is None else limit
        while True:
            decision = post.decide(self.threshold if stop is None else stop)
            if decision.found or post.decide(self.threshold).no_change or (until is not None and until(post)):
                return post
            if self.launches() >= limit:
                self.say(f"the cap of {limit} launches is reached: not sure where the change is")
                return post
            plan = post.plan((options or self.options)(), max(len(self.oracle.slots), 1),
                             reference=self.must_reference(post))
            if not plan:
                self.say("no launch is expected to tell more: not sure where the change is")
                return post
            top = ", ".join(f"{(s or 'no change')[:10]} {m:.0%}" for s, m in decision.likely[:3])
            self.say(f"round {self.next_round()}: {post.entropy():.1f} bits left (most likely: {top}); launching "
                     + ", ".join(f"{s[:10]} ({self.label(s)})" for s in plan))
            self.oracle.prefetch_build([s for s in plan if not self.oracle.warm(s)])
            self.launch_round(list(plan))
            post = self.posterior()

    def must_reference(self, post: Posterior) -> bool:
        """Whether the next round must measure an end again beside its candidates: how much the host drifts is
        learnt only that way, so at least every third round; and every round once the rounds are seen to drift
        by more than a third of the smallest change that matters."""
        if not post.model.drifts or len(self.run.rounds) < 2:
            return False
        if not {sha for r in self.run.rounds[-2:] for sha in r.commits} & set(self.ends):
            return True
        return self.drift(post) is not None

    def drift(self, post: Posterior) -> str | None:
        """The host's drift check: the rounds of a performance search are seen to drift by more than a third of
        the smallest change that matters (what, in words), else None."""
        drift = post.model.drift(post.z, post.mass, post.target(next(iter(self.ends))))
        if drift is None:
            return None
        least = self.recipe.perf.min_effect if self.recipe.perf else 0.03
        return (f"the host's rounds drift by ± {drift:.1%}, more than a third of perf.min_effect ({least:.0%})"
                if drift >= least / 3 else None)

    # -- evidence -------------------------------------------------------------------------------------------
    def step_of(self, sha: str) -> Step | None:
        return self.run.step_of(sha)

    def role(self, sha: str) -> Role:
        return self.ends.get(sha, Role.CANDIDATE)

    def label(self, sha: str) -> Label:
        return (self.labels.get(sha) or Label(str(self.role(sha)))).in_part(self.part_number)

    def launches(self) -> int:
        """Launches of this search, its confirmations' included (a search of a part: its own)."""
        return sum(1 for s in self.run.steps for t in s.trials if phase_of(t) == self.phase)

    def rounds_run(self) -> int:
        """Rounds of this search, its confirmations' included (a search of a part: its own), counted from its
        launches: a resumed bisect, or a finished one rendered again, says what the uninterrupted one said."""
        return len({r for s in self.run.steps for t, r in zip(s.trials, s.trial_rounds) if phase_of(t) == self.phase})

    def steps(self) -> list[Step]:
        """The steps this search's posterior reads: every commit of its range launched, and its ends."""
        return [s for s in self.run.steps if s.trials and (s.sha in self.ends or s.sha in self.graph)]

    def posterior(self) -> Posterior:
        """The posterior from every launch so far (rebuilt each round: cheap, and the same after a resume)."""
        steps = self.steps()
        self.evidence.failure = self.worse_failure(steps)
        model = self.evidence.model(steps)
        post = Posterior(self.space, model)
        model.focus(post.z, post.mass, self.items_per_launch(), list(self.ends))  # an accuracy's next items
        return post

    def worse_failure(self, steps: Sequence[Step]) -> str:
        """How the end that fails more often fails (its commonest fingerprint), "" before either failed."""
        if not self.oracle.assessor.absolute or not self.recipe.verdict.same_failure:  # a failure is its evidence
            return ""
        warn = self.recipe.scoring.warn_severity
        failing = {s.sha: [fingerprint(t, warn) for t in s.trials if t.verdict.outcome == Outcome.BAD]
                   for s in steps if s.sha in self.ends}
        worst = max(failing.values(), key=lambda f: len(f), default=[])
        return max(set(worst), key=worst.count) if worst else ""

    def items_per_launch(self) -> int:
        section = self.recipe.eval
        return section.n if section is not None and section.n else 400

    def options(self) -> list[Option]:
        """Every commit a launch may go to: the ends and the counted commits of the range, each within its cap;
        a commit none of whose launches could be tested is left out."""
        options = []
        beta = 0.5  # a build costs about half a launch more (prefetched ones cost nothing)
        for sha in dict.fromkeys([*self.ends, *self.space.culprits]):
            step = self.step_of(sha)
            done = len(step.trials) if step else 0
            if step and done and not any(self.evidence.observes(t) for t in step.trials):
                continue  # untestable: more launches cannot help
            cost = 1.0 if self.oracle.warm(sha) else 1.0 + beta
            # an end has the assessor's own cap (an accuracy's asks the next part of its set, as many as it has),
            # a candidate the search's (`search_cap`)
            cap = self.oracle.assessor.cap if sha in self.ends else self.cap
            options.append(Option(sha, cost, sha in self.ends, cap - done))
        return options

    def next_round(self) -> int:
        """The number the next round of launches gets: one after every round so far, a resumed bisect's and every
        search's (each round records a launch)."""
        return max((r for s in self.run.steps for r in s.trial_rounds), default=-1) + 1

    def launch_round(self, shas: list[str]) -> None:
        """One round: the launches at once on the slots (one slot: one after the other), each recorded in its
        commit's step as it finishes, state.json saved after each."""
        oracle, run, number = self.oracle, self.run, self.next_round()
        t_round = time.monotonic()
        jobs: list[tuple[str, int]] = []
        for sha in shas:
            step = self.step_of(sha)
            jobs.append((sha, (len(step.trials) if step else 0) + sum(1 for s, _ in jobs if s == sha)))
        slots = oracle.slots

        def one(k: int, sha: str, attempt: int) -> tuple[str, TrialResult, float]:
            t = time.monotonic()
            result = oracle.launch(sha, self.label(sha), attempt, slots[k % len(slots)] if len(slots) > 1 else None,
                                   self.items_for(sha), fresh=self.fresh)
            return sha, result, time.monotonic() - t

        if len(slots) > 1 and len(jobs) > 1:
            with ThreadPoolExecutor(max_workers=min(len(slots), len(jobs)), thread_name_prefix="slot") as pool:
                futures = [pool.submit(one, k, sha, attempt) for k, (sha, attempt) in enumerate(jobs)]
                for future in as_completed(futures):
                    self.record(*future.result(), number)
        else:
            for k, (sha, attempt) in enumerate(jobs):
                self.record(*one(k, sha, attempt), number)
        run.rounds.append(Round(number, tuple(s for s, _ in jobs), round(time.monotonic() - t_round, 2),
                                len(self.space.culprits)))

    def items_for(self, sha: str) -> tuple[str, ...] | None:
        """The eval items a candidate's launch asks: those telling the states apart, once there are any; an end
        (and every launch before then) asks the next part of the set."""
        if self.ask is not None:  # a search of a part: every launch asks the items telling the whole range's ends apart
            return self.ask
        if not self.asks_items or sha in self.ends:
            return None
        model = self.evidence.model(self.steps())
        post = Posterior(self.space, model)
        return model.focus(post.z, post.mass, self.items_per_launch(), list(self.ends)) or None

    def record(self, sha: str, result: TrialResult, seconds: float, number: int) -> None:
        step = self.step_of(sha)
        if step is None:
            step = Step(len(self.run.steps), sha, self.role(sha), Outcome.SKIP, str(result.verdict.status), "",
                        round(seconds, 2), result.cached, result, round=number, trial_rounds=(number,))
            self.run.steps.append(step)
        else:
            step.more += (result,)
            step.trial_rounds = (*step.trial_rounds, number)
            step.seconds = round(step.seconds + seconds, 2)
            step.cached = step.cached and result.cached
        self.save(self.run)  # before the line: a launch said to be done is in state.json
        self.say(f"{self.label(sha)} {sha[:10]}: launch {len(step.trials)}: {result.verdict.status}")

    def requests_fail(self) -> BisectRun:
        """An end whose requests failed (a performance verdict): whether a commit's requests fail is no chance,
        so the range is bisected plainly from the ends' verdicts — one launch a commit, a commit that answers
        good, one that fails its requests bad (the Perf assessor's rule) — and the commit that breaks serving
        is the answer, not a commit stepped around."""
        run = self.run
        run.steps = [s for s in run.steps if s.is_end]  # a resumed run's candidates are replayed by the search below
        old, new = (next(s for s in run.steps if s.sha == end.sha) for end in (run.old, run.new))
        for step in (old, new):
            seen = self.oracle.assessor.alone(step.trials)
            step.outcome, step.evidence = seen.outcome, seen.evidence
        self.say("an end's requests failed: bisecting by whether a commit's requests fail, one launch a commit")
        return EndsFirst().from_ends(self.driver, run, (old, new), start(self.graph, run.new.sha, [run.old.sha]),
                                     self.graph)

    # -- the answer -----------------------------------------------------------------------------------------
    def untestable_end(self, step: Step) -> BisectRun:
        run = self.run
        seen = self.oracle.assessor.alone(step.trials)
        step.outcome, step.evidence = Outcome.SKIP, seen.evidence
        run.mode, run.message = Mode.UNTESTABLE_END, (f"the {step.role} ({step.sha[:10]}) is untestable: "
                                                      f"{step.status} — {seen.evidence}")
        return self.driver.finish(run)

    def state_values(self, post: Posterior, culprit: str) -> dict[int, tuple[float, float]]:
        """Each state's (value, spread) if `culprit` is the answer: a failure rate (its sd), a metric's mean (the
        rounds' drift), or the share of the items asked that were right (0)."""
        return {s: post.model.value(post.z, *post.under(culprit, s), s) for s in (BEFORE, AFTER)}

    def worse_state(self, post: Posterior, culprit: str) -> int:
        """Which state is worse if `culprit` is the answer: AFTER (a regression) or BEFORE (a fix)."""
        values = self.state_values(post, culprit)
        return post.model.worse(values[BEFORE][0], values[AFTER][0])

    def states_said(self, post: Posterior, culprit: str) -> dict[str, str]:
        """What the two states are, in words, if `culprit` is the answer."""
        values = self.state_values(post, culprit)
        return {name: post.model.said(state, *values[state]) for name, state in (("before", BEFORE), ("after", AFTER))}

    def conclude(self, post: Posterior, primary: Change | None = None) -> BisectRun:
        """The answer: the commit the posterior names, or `primary`, the change that accounts for most of the ends'
        difference when every change was searched for (`run.changes`)."""
        run, driver = self.run, self.driver
        decision = post.decide(self.threshold)
        likeliest = primary.sha if primary else next((s for s, _ in decision.likely if s is not None),
                                                     self.space.culprits[-1])
        worse = self.worse_state(post, likeliest)
        run.mode = Mode.REGRESSION if worse == AFTER else Mode.FIX
        if primary is not None:
            run.mode = Mode.REGRESSION if primary.effect is not None and primary.effect.regression else Mode.FIX
        bad_state = worse
        for step in run.steps:
            q = post.after(step.sha) if step.sha in self.graph else 0.0
            seen = driver.oracle.assessor.alone(step.trials)
            observed = any(self.evidence.observes(t) for t in step.trials)
            step.stats = StepStats(seen.stats, round(q, 4), len(step.trials),
                                   round(post.culprit_mass().get(step.sha, 0.0), 4) if step.sha in self.graph else None)
            if not observed:
                step.outcome, step.evidence = Outcome.SKIP, seen.evidence
                continue
            if q >= self.threshold:
                step.outcome = Outcome.BAD if bad_state == AFTER else Outcome.GOOD
            elif q <= 1 - self.threshold:
                step.outcome = Outcome.GOOD if bad_state == AFTER else Outcome.BAD
            else:
                step.outcome = Outcome.SKIP
            step.evidence = f"{seen.evidence}; after the change with probability {q:.1%}" + \
                ("" if step.outcome != Outcome.SKIP else " (not sure)")
            if step.sha in self.ends and self.ends[step.sha] is not Role.MERGE_BASE and step.outcome == Outcome.SKIP:
                step.outcome = Outcome.BAD if (q >= 0.5) == (bad_state == AFTER) else Outcome.GOOD
        run.failure = driver.oracle.failure = self.evidence.failure
        run.posterior = self.report(post, decision, likeliest)
        if decision.no_change and primary is None:
            for step in run.steps:
                if step.is_end:
                    step.outcome = driver.oracle.assessor.alone(step.trials).outcome
            run.mode = Mode.NO_CHANGE
            run.message = (f"the ends do not differ: no change holds {post.no_change:.1%} of the posterior after "
                           f"{self.launches()} launches — check the recipe's verdict rules or the refs")
            return driver.finish(run)
        marks = tuple((s.sha, {Outcome.SKIP: SKIP}.get(s.outcome, NEW if (s.outcome == Outcome.BAD) ==
                                                     (run.mode is Mode.REGRESSION) else OLD))
                      for s in run.steps if s.sha in self.graph)
        found = primary.sha if primary else decision.found
        if found:
            named = (tuple(c.sha for c in run.changes.changes) if run.changes else ()) or (found,)
            result = SearchResult("found", found, named, 0, marks)
            if run.merge_bases:
                self.pick_side(found)
        else:
            result = SearchResult("ambiguous", None, post.candidates(self.threshold)[:12], 0, marks)
        return driver.conclude(run, result, self.graph)

    def pick_side(self, found: str) -> None:
        """Ends on different branches: the side the found commit is on is the searched range (its tip the new
        end, the other tip excluded), as git's merge-base rule would have it."""
        run = self.run
        on_bad = found in self.graph.ancestors(run.bad.sha)
        tip, other = (run.bad, run.good) if on_bad else (run.good, run.bad)
        run.old = Revision(f"merge base of {run.good.ref} and {run.bad.ref}", run.merge_bases[0],
                           self.oracle.variable.info(run.merge_bases[0]).subject)
        run.new, run.excluded = tip, (other.sha,)
        run.ends_note = (f"{run.good.ref} and {run.bad.ref} are on different branches; both sides of their merge "
                         f"base {run.merge_bases[0][:10]} were searched at once, and the change is on "
                         f"{tip.ref}'s side.")

    def report(self, post: Posterior, decision: Decision, likeliest: str) -> PosteriorSummary:
        """What bisect.md and bisect.json show of the posterior (gathered now: the renderers are pure)."""
        mass = post.culprit_mass()
        tested = {s.sha for s in self.run.steps}
        shown = {sha: round(m, 6) for sha, m in mass.items() if m >= 1e-4 or sha in tested}
        states = self.states_said(post, likeliest)
        return PosteriorSummary(
            kind=self.oracle.assessor.kind, threshold=self.threshold, launches=self.launches(),
            old=next(iter(self.ends)), rounds=self.rounds_run(), budget=self.budget,
            culprits=len(self.space.culprits), order=tuple(s for s in self.space.culprits if s in shown), mass=shown,
            no_change=round(post.no_change, 6), entropy_bits=round(post.entropy(), 3), answer=decision.found,
            answer_mass=round(mass.get(decision.found, 0.0), 6) if decision.found else None, likeliest=likeliest,
            likely=tuple((s, round(m, 6)) for s, m in decision.likely), prior=dict(self.prior),
            unlikely=tuple(self.recipe.bisect.prior.unlikely), states=States(states["before"], states["after"]),
            # a step's chance of being after the change, once the whole range's search concluded it
            after={s.sha: s.stats.p_after for s in self.run.steps if s.sha in self.graph})
