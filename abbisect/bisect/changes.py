"""Every change in the range (`bisect.changes: all`): a range often holds several — two regressions that add up,
a regression partly undone by a later fix — and a bisect that names one leaves the user with part of the
difference.

After the search of the whole range (abbisect/bisect/noisy.py) names and confirms a commit X, its effect (its
parent against it) is set beside the ends' (the old end against the new), on the verdict's additive scale with
intervals (abbisect/stats/effects.py). A change's effect is told on launches that did not choose it: its and its
parent's fresh ones (the confirmation's, and more launched after it until each has `FRESH`), as the search's
launches chose the pair that differed the most and tell its effect too large. What is left, the ends' effect minus
the changes', is judged on one interval, at 1 − alpha, the one the report tells: another change when it leaves 0
out and reaches the smallest effect that matters (`perf.min_effect`, `repeats.min_effect`, `eval.min_effect`),
surely small when it lies within ± that effect; a change a part's search then confirms below that size (on its
fresh launches) is not named. While what is left is not surely small, a part whose own ends the searches measured
as different (judged the same way) is searched even when the sum cannot say, and, for a verdict whose launches may
drift (performance), the open parts are searched when what is left is as large as a change that matters but too
wide to be sure (launches that drift widen it).
Then the parts of the range between the tested commits that bound the changes
found (the old end to X's parent, X to the new end) are searched, the part whose ends differ most first, each by
a posterior search of its own with its confirmation (labelled `change<k> …`, so a resumed bisect replays the
searches in order, each on the launches it had), until what is left is no change or `bisect.max_changes` are
named. A search of a part that names nothing narrows it at its likeliest commit. A change that moves the other
way (a fix inside a regression's range) is named with its sign. When the whole range's search ran to its cap
without naming one (two changes of one size blur one posterior) and the ends differ by room for two changes, the
range is cut where a fit of two steps over the tested commits says the difference grows, and both parts are
searched (abbisect/bisect/split.py); with less, its likeliest commit bounds the parts instead. An answer its
confirmation found not reproduced is one change of several when its fresh launches and its parent's differ by a
change that matters, the ends' way, and the ends leave room for two: neither it nor its parent then looks like an
end, the confirmation's question, so the range is cut at the parent and both parts searched (the part after the
parent holds the found commit, and its search's confirmation asks the question of that part's ends); any other
answer its confirmation could not confirm is left so, with no search of the parts. The searches spend at most the
bisect's budget (split.budget, which the report states): no part's search starts that what is left of it cannot
hold with its confirmation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

from abbisect.assess.accuracy import eval_run
from abbisect.bisect.findings import (
    Change,
    Changes,
    Confirmation,
    EffectShown,
    Ended,
    Level,
    PartSearched,
    PosteriorSummary,
)
from abbisect.bisect.launches import fresh, phase_of
from abbisect.bisect.noisy import NoisySearch
from abbisect.bisect.posterior import Posterior
from abbisect.bisect.split import Measured, between_steps, blurred, budget, room
from abbisect.stats.effects import Effect, Residual, residual
from abbisect.trial.spec import Label, Purpose, TrialResult

FRESH = 3  # launches of a change named and of its parent that did not choose it, at least, to tell its effect


@dataclass(frozen=True)
class Part:
    """The commits after `old` up to `new`, both tested: where a change may still be."""

    old: str
    new: str


def shown(e: Effect | None, whole: Effect | None = None) -> EffectShown | None:
    """An effect as bisect.json and the report carry it (its share of `whole`'s)."""
    if e is None:
        return None
    return EffectShown(e.value, e.lo, e.hi, e.confidence, e.unit, e.relative, e.describe(), e.regression,
                       e.share(whole) if whole is not None else None)


@dataclass(frozen=True)
class Named:
    """A change named: its parent, the search that named it, that search's confirmation and (a part's search) its
    posterior."""

    parent: str
    phase: int
    confirmation: Confirmation
    posterior: PosteriorSummary | None


@dataclass(frozen=True)
class Searched:
    """A part searched: its search's number, how it ended, its launches."""

    part: Part
    phase: int
    outcome: Ended
    launches: int


class ChangeSearch:
    """The search for every change of one bisect, over the whole range's search `main`."""

    def __init__(self, main: NoisySearch) -> None:
        self.main, self.run, self.a = main, main.run, main.oracle.assessor
        self.old, self.new = self.run.old.sha, self.run.new.sha
        self.cap = self.run.recipe.bisect.max_changes
        self.found: dict[str, Named] = {}  # each change named
        self.parts: list[Part] = []  # the range but the changes named, in parts between tested commits
        self.searched: list[Searched] = []  # each part searched
        self.cut: list[Part] = []  # parts of a range cut between two steps: searched whether or not their ends differ
        self.budget = budget(main.budget)  # launches in all, the whole range's search's included
        self.spent_all = False  # a part's search was left unstarted for want of budget

    # -- measurements -----------------------------------------------------------------------------------------
    def trials(self, sha: str, upto: int | None = None) -> list[TrialResult]:
        """`sha`'s launches, of the searches up to `upto` (None: all)."""
        step = self.run.step_of(sha)
        return [t for t in step.trials if upto is None or phase_of(t) <= upto] if step is not None else []

    def fresh_trials(self, sha: str, upto: int | None = None) -> list[TrialResult]:
        """`sha`'s launches that no search chose it by (a confirmation's, or those measuring a change named), of the
        searches up to `upto`, that are evidence."""
        return [t for t in self.trials(sha, upto) if fresh(t) and self.main.evidence.observes(t)]

    def effect(self, pairs: list[tuple[float, str, str]], upto: int | None = None,
               unchosen: frozenset[str] = frozenset()) -> Effect | None:
        """Σ weight × (after − before) over (weight, before, after) commits, on the scale every effect of the range
        shares (an accuracy over the ends' items); the commits in `unchosen` on their fresh launches only."""
        basis = (self.trials(self.old, upto), self.trials(self.new, upto))

        def of(sha: str) -> list[TrialResult]:
            return self.fresh_trials(sha, upto) if sha in unchosen else self.trials(sha, upto)

        return self.a.effect([(w, of(b), of(a)) for w, b, a in pairs], basis)

    def named(self, sha: str, parent: str, upto: int | None = None) -> Effect | None:
        """A change's effect, its parent against it, on the launches that did not choose it: the search named the
        pair whose launches differed the most, so those launches tell a change larger than it is (a winner's curse);
        the fresh ones, launched after it was named, do not."""
        return self.effect([(1.0, parent, sha)], upto, frozenset((sha, parent)))

    def measure(self, sha: str, parent: str, phase: int) -> None:
        """A change just named measured on launches that did not choose it: its parent and it launched fresh, a pair
        a round, in the `phase`-th search's name, until each has `FRESH` such launches (the recipe's first launches,
        if more): its confirmation's fresh launches count."""
        want = max(FRESH, self.a.first)
        need = {s: want - len(self.fresh_trials(s)) for s in (parent, sha)}
        if max(need.values()) <= 0:
            return
        meter = self.main.part(self.old, self.new, phase).labelled({parent: Label("parent", Purpose.MEASURE),
                                                                    sha: Label("found", Purpose.MEASURE)})
        self.main.say(f"measuring {sha[:10]} against its parent on fresh launches (the search's launches chose it, "
                      f"so they tell its effect too large): {max(need.values())} more of each at most")
        for k in range(max(need.values())):
            meter.launch_round([s for s in (parent, sha) if need[s] > k])

    def left(self, upto: int | None = None) -> tuple[Effect | None, Residual | None]:
        """The ends' effect, and what the changes named leave of it: the ends' effect minus theirs, as one sum (every
        launch of each: what is left is not chosen, and the sum keeps the commits' launches paired)."""
        ends = self.effect([(1.0, self.old, self.new)], upto)
        left = self.effect([(1.0, self.old, self.new), *((-1.0, c.parent, sha) for sha, c in self.found.items())],
                           upto)
        if ends is None or left is None:
            return None, None
        return ends, residual(left, ends, self.a.least, self.a.alpha)

    def settle(self, phase: int) -> tuple[Effect | None, Residual | None]:
        """What is left, measured until it is another change or surely small: while it is neither, the commits that
        bound it (the ends, each change named and its parent) are launched again in the `phase`-th search's name,
        those with the fewest launches first, one round at a time, as long as it could still be made sure at its
        present size by the time those at the fewest have twice the recipe's first launches more (the assessor's cap
        at most; its interval shrinking as one over the square root of the launches); what is left that the caps
        cannot make sure (a failure rate's, often) is said as it is, not measured."""
        z = float(stats.norm.ppf(1 - self.a.alpha / 2))
        while True:
            ends, left = self.left(upto=phase)
            if left is None or left.another or left.small:
                return ends, left
            bounds = list(dict.fromkeys([self.old, self.new, *(s for c, f in self.found.items()
                                                                 for s in (f.parent, c))]))
            counts = {sha: self.observed(sha, phase) for sha in bounds}
            fewest = min(counts.values())
            # the launches the fewest may get: twice the first launches more than before this search (a resumed
            # bisect counts the same)
            reach = min(self.a.cap, min(self.observed(sha, phase - 1) for sha in bounds) + 2 * self.a.first)
            shrink = math.sqrt(max(fewest, 1) / reach)
            size = abs(left.left.value)
            half, told = z * left.left.se * shrink, (left.left.hi - left.left.lo) / 2 * shrink
            if fewest >= reach or not (size > half or size + told < self.a.least) \
                    or self.spent() + len(bounds) > self.budget:
                return ends, left
            least_launched = [sha for sha in bounds if counts[sha] == fewest]
            measure = self.main.part(self.old, self.new, phase, self.telling())
            self.main.say(f"what is left of the ends' difference, {left.left.describe()}, is not sure yet: launching "
                          f"{len(least_launched)} commit(s) that bound it again")
            measure.launch_round(least_launched)

    def spent(self) -> int:
        """The bisect's launches so far (every search's)."""
        return sum(len(s.trials) for s in self.run.steps)

    def reserve(self) -> int:
        """The launches a part's search keeps beside its own budget: its confirmation's (the pair and an end fresh,
        then twice the cap as the posterior asks, a round over), and the fresh ones measuring what it names."""
        return 3 * self.run.recipe.repeats.launches + 2 * self.a.cap + 2 * max(FRESH, self.a.first) + 3

    def levels(self, upto: int) -> list[Measured]:
        """Each tested commit's measured difference from the old end, in the history's order, the old end first."""
        out = []
        for sha in (s for s in self.main.graph.order if self.tested(s)):
            e = self.effect([(1.0, self.old, sha)], upto)
            if e is not None:
                out.append(Measured(sha, e.value, e.se))
        return [Measured(self.old, 0.0, min((lv.se for lv in out), default=1.0)), *out]

    def observed(self, sha: str, upto: int) -> int:
        """`sha`'s launches that are evidence, of the searches up to `upto`."""
        return sum(1 for t in self.trials(sha, upto) if self.main.evidence.observes(t))

    def surely_matters(self, e: Effect | None) -> bool:
        """Whether an effect is a change that matters, judged as what is left is: its interval at 1 − alpha leaves 0
        out and reaches the smallest effect."""
        return e is not None and residual(e, e, self.a.least, self.a.alpha).another

    def differs(self, part: Part, upto: int) -> bool:
        """Whether the searches measured `part`'s ends as different by a change that matters (`surely_matters`)."""
        return self.surely_matters(self.effect([(1.0, part.old, part.new)], upto))

    def matters(self, confirmation: Confirmation) -> bool:
        """Whether a change a part's search confirmed is at least the smallest effect that matters on its fresh
        launches (a part is searched for what is left of the ends' difference, not for noise the posterior can
        still pin on a commit)."""
        e = self.named(confirmation.found.sha, confirmation.parent.sha)
        return e is not None and abs(e.value) >= self.a.least

    def one_of_several(self, said: Confirmation) -> bool:
        """Whether a whole range's answer its confirmation found not reproduced is one change of several: the found
        commit and its parent differ on their fresh launches by a change that matters (`surely_matters`), the way
        the ends differ, and the ends differ by room for two such changes — the confirmation asks whether
        the pair looks like the ends, and with two changes in the range neither does."""
        ends = self.effect([(1.0, self.old, self.new)], 1)
        pair = self.named(said.found.sha, said.parent.sha, 1)
        return (ends is not None and pair is not None and blurred(ends.value, self.a.least)
                and pair.value * ends.value > 0 and self.surely_matters(pair))

    def telling(self) -> tuple[str, ...] | None:
        """An accuracy's items a part's search asks at every launch: those the whole range's ends answered
        differently (a change inside the range moves only those, or the ends would agree on it), 20 at least;
        None for any other verdict."""
        if not self.main.asks_items:
            return None
        ra, rb = (eval_run(self.trials(sha, upto=1)) for sha in (self.old, self.new))
        if ra is None or rb is None:
            return None
        a, b = ({i.id: i.correct for i in r.items if i.correct is not None} for r in (ra, rb))
        both = sorted(set(a) & set(b))
        differ = [i for i in both if a[i] != b[i]]
        return tuple(differ + [i for i in both if i not in set(differ)][:max(0, 20 - len(differ))])

    def fill(self, phase: int) -> None:
        """An accuracy's effects count an item a commit was not asked as unchanged, so before the parts are weighed
        every commit that bounds one (or a change) answers the items telling the range's ends apart: one launch
        of those it lacks, in the `phase`-th search's name."""
        ask = self.telling()
        if not ask:
            return
        bounds = ({sha for p in self.parts for sha in (p.old, p.new)}
                  | {sha for c, found in self.found.items() for sha in (c, found.parent)})
        lacking = []
        for sha in sorted(bounds):
            run = eval_run(self.trials(sha, phase))
            have = {i.id for i in run.items if i.correct is not None} if run is not None else set()
            if not set(ask) <= have:
                lacking.append(sha)
        if lacking:
            filler = self.main.part(self.old, self.new, phase, ask)
            self.main.say(f"asking {len(lacking)} commit(s) that bound the parts the {len(ask)} items telling the "
                          "ends apart")
            filler.launch_round(lacking)

    # -- the parts ----------------------------------------------------------------------------------------------
    def tested(self, sha: str) -> bool:
        step = self.run.step_of(sha)
        return step is not None and any(self.main.evidence.observes(t) for t in step.trials)

    def bound_below(self, sha: str, floor: str) -> str:
        """The nearest tested ancestor of `sha` on the first-parent line, `floor` at the latest."""
        at = sha
        while at != floor:
            at = (self.main.graph.parents.get(at) or (floor,))[0]
            if self.tested(at):
                return at
        return floor

    def split(self, part: Part, at: str, parent: str | None) -> list[Part]:
        """`part` cut at a change `at` (its tested `parent`: the part ends there) or, with no parent, at a likeliest
        commit: before it, the step onto it, after it."""
        below = parent or self.bound_below(at, part.old)
        pieces = [Part(part.old, below), Part(at, part.new)] if parent else \
            [Part(part.old, below), Part(below, at), Part(at, part.new)]
        return [p for p in pieces if p.old != p.new and self.inside(p)]

    def replace(self, part: Part, pieces: list[Part]) -> None:
        """`part` in the range's parts becomes `pieces`, in its place (the parts stay in the history's order)."""
        at = self.parts.index(part)
        self.parts[at:at + 1] = pieces

    def inside(self, part: Part) -> bool:
        """Whether a part holds any commit to name."""
        return bool([s for s in self.main.driver.variable.graph(part.new, [part.old]).order])

    # -- the search -----------------------------------------------------------------------------------------
    def add(self, said: Confirmation, phase: int, post: Posterior | None, search: NoisySearch) -> str:
        sha, parent = said.found.sha, said.parent.sha
        self.measure(sha, parent, phase)
        self.found[sha] = Named(parent, phase, said, search.report(post, post.decide(search.threshold), sha)
                                if post is not None and phase > 1 else None)
        return parent

    def search(self, first: Posterior) -> Changes:
        run, main = self.run, self.main
        said = run.confirmation
        if said is not None and said.level is Level.CONFIRMED:
            found = said.found.sha
            parent = self.add(said, 1, None, main)
            self.parts = self.split(Part(self.old, self.new), found, parent)
        elif not first.decide(main.threshold).no_change and (not said or said.level is Level.NOT_SURE):
            # the search ran to its cap without naming one (two changes of one size blur a posterior of one): with
            # room for two changes between the ends, the range is cut between the two steps a fit of the tested
            # commits shows; else (and only when no confirmation ran) its likeliest commit bounds the parts. An
            # answer a confirmation found not reproduced is left so.
            ends = self.effect([(1.0, self.old, self.new)], 1)
            at = between_steps(self.levels(1)) if ends is not None and blurred(ends.value, self.a.least) else None
            likely = next((s for s, _ in first.decide(main.threshold).likely if s is not None), None)
            if at is not None:
                self.parts = [p for p in (Part(self.old, at), Part(at, self.new)) if self.inside(p)]
                self.cut = list(self.parts)
                main.say(f"the ends differ by {ends.describe() if ends else ''}, room for two changes that blur the "
                         f"whole range's search: cutting it at {at[:10]}, between the two steps a fit of the tested "
                         "commits shows, and searching both parts")
            elif not said and likely:
                self.parts = self.split(Part(self.old, self.new), likely, None)
        elif said is not None and said.level is Level.NOT_REPRODUCED and self.one_of_several(said):
            # cut at its parent: the part after it holds the found commit with its parent for the old end, where
            # its own search's confirmation asks what it can answer
            found, parent = said.found.sha, said.parent.sha
            self.parts = [p for p in (Part(self.old, parent), Part(parent, self.new)) if self.inside(p)]
            self.cut = [p for p in self.parts if p.old == parent]  # its fresh launches put a change there
            main.say(f"{found[:10]} and its parent {parent[:10]} differ on fresh launches, but not as the ends do: "
                     "with room for two changes between the ends it is one of several, so the range is cut at the "
                     "parent and both parts searched")
        drifts = main.evidence.model(()).drifts  # a verdict whose launches may drift with the host (performance)
        phase = 2
        while len(self.found) < self.cap and len(self.searched) < 3 * self.cap:
            self.fill(phase)
            ends, left = self.settle(phase)
            if left is None or left.small:
                break
            done = {s.part for s in self.searched}
            open_parts = [p for p in self.parts if p not in done]
            # a part whose ends the searches measured as different is searched even when what is left, as one
            # sum, cannot say (its interval too wide): it is evidence of a change the sum blurs
            differ = [p for p in open_parts if p in self.cut or self.differs(p, phase)]
            # what is left of a verdict whose launches may drift (performance), as large as a change that matters
            # but too wide to be sure: the open parts are searched, as for another change, rather than left
            # unsearched (a failure rate's wide interval is its rate's, said as it is: settle)
            large = (drifts and not left.another and not differ
                     and abs(left.left.value) >= self.a.least)
            if not open_parts or not (left.another or differ or large):
                break
            limit = room(self.budget - self.spent(), self.reserve())
            if limit < 2 * self.a.cap:  # not even a candidate's cap and an end's: stopped at the budget
                self.spent_all = True
                break
            part = max(open_parts if left.another or large else differ,
                       key=lambda p: abs(e.value) if (e := self.effect([(1.0, p.old, p.new)], phase)) else 0.0)
            main.say(f"the changes named leave {left.left.describe()} ({left.left.confidence:.0%} interval) of the "
                     f"ends' {ends.describe() if ends else ''}"
                     + ("" if left.another else ", not sure, but as large as a change that matters" if large else
                        f", not sure; but the ends of {part.old[:10]}..{part.new[:10]} differ")
                     + f": searching {part.old[:10]}..{part.new[:10]} for another change (search {phase})")
            sub = main.part(part.old, part.new, phase, self.telling(), budget=limit)
            post, confirmation = sub.settle()
            outcome = (Ended(confirmation.level) if confirmation is not None else
                       Ended.NO_CHANGE if post.decide(sub.threshold).no_change else Ended.NOT_SURE)
            launches = sub.launches()  # the part's search's, not the measuring of what it named
            if confirmation is not None and outcome is Ended.CONFIRMED:
                self.measure(confirmation.found.sha, confirmation.parent.sha, phase)
                if not self.matters(confirmation):
                    outcome = Ended.TOO_SMALL
            self.searched.append(Searched(part, phase, outcome, launches))
            if confirmation is not None and outcome is Ended.CONFIRMED:
                found = confirmation.found.sha
                parent = self.add(confirmation, phase, post, sub)
                self.replace(part, self.split(part, found, parent))
            elif outcome is not Ended.NO_CHANGE and len(sub.space.culprits) > 1:
                likely = next((s for s, _ in post.decide(sub.threshold).likely if s is not None), None)
                if likely is not None:
                    self.replace(part, self.split(part, likely, None))
            phase += 1
        return self.summary()

    def summary(self) -> Changes:
        """What bisect.json and bisect.md carry: every change named (in the history's order) with its effect and its
        share of the ends', what is left, and each part searched."""
        ends, left = self.left()
        order = {sha: i for i, sha in enumerate(self.main.graph.order)}
        rows = tuple(Change(sha, c.parent, c.phase, shown(self.named(sha, c.parent), ends), c.confirmation.level,
                            c.posterior, self.main.driver.variable.links(sha, c.parent))
                     for sha, c in sorted(self.found.items(), key=lambda f: order.get(f[0], -1)))
        # the answer: the change that moves the most (the oldest of equal ones), not the one the whole range's
        # search happened to converge on: with two changes of about one size that is either, run to run
        primary = max(reversed(rows), key=lambda r: abs(r.effect.value) if r.effect else 0.0, default=None)
        accounted = left is not None and not left.another
        share = left.share if left is not None else None
        if not rows:
            said = "no change was named" + (f" within the budget of {self.budget} launches" if self.spent_all else "")
        elif accounted and left is not None:
            n = f"{len(rows)} changes account" if len(rows) > 1 else "1 change accounts"
            level = f"{left.left.confidence:.0%} interval"
            said = (f"{n} for the ends' difference: what is left, {left.left.describe()} ({level}), is no change "
                    "that matters" if left.small else
                    f"what is left, {left.left.describe()} ({level}), holds 0, but is too wide to rule out another "
                    "change of the smallest size that matters")
        else:
            said = (f"about {abs(share or 0.0):.0%} of the ends' difference is not accounted for"
                    + (f" within the budget of {self.budget} launches" if self.spent_all else
                       " within the budget" if len(self.found) >= self.cap or len(self.searched) >= 3 * self.cap
                       else ": no part of the range left to search shows it"))
        return Changes(shown(ends), rows, shown(left.left, ends) if left else None, accounted,
                       bool(left is not None and (left.small or left.another)), said, self.cap, self.budget,
                       tuple(PartSearched(s.part.old, s.part.new, s.phase, s.outcome, s.launches)
                             for s in self.searched),
                       primary, self.found[primary.sha].confirmation if primary else None)


def every_change(main: NoisySearch, first: Posterior) -> Changes | None:
    """`bisect.changes: all` after the whole range's search (module docstring); None when there is nothing to weigh
    (a rule on one trial, ends on two branches, a host that changed under the confirmation)."""
    c = main.run.confirmation
    if main.run.merge_bases or (c is not None and c.level is Level.HOST_CHANGED):
        return None
    return ChangeSearch(main).search(first)
