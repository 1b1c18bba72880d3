"""The confirmation of a posterior search's answer (issue 40's contract; a rule's answer is run again by
bisect/confirm.py): the found commit and its parent judged on
all their launches, the search's and fresh ones, the fresh ones a guard against drift and chance — a commit whose
fresh launches differ from its search launches keeps only its fresh ones while the confirmation runs, and a
control (the good end launched again, when the pair's good side did worse fresh) that no longer behaves as the
search saw that side says the host changed. It ends as soon as its answer is no longer the likeliest, so a wrong
answer handed over at half the mass costs a pair of launches or two, which the search that goes on counts.
"""

from __future__ import annotations

from collections.abc import Sequence

from abbisect.assess.base import Comparison, Worse
from abbisect.bisect.bisection import Role
from abbisect.bisect.findings import Confirmation as Confirmed
from abbisect.bisect.findings import Counted, Judged, Level, Masses
from abbisect.bisect.launches import fresh, phase_of
from abbisect.bisect.noisy import NoisySearch
from abbisect.bisect.posterior import Option, Posterior
from abbisect.recipe.status import Outcome
from abbisect.stats.decide import Call
from abbisect.stats.evidence import AFTER
from abbisect.trial.spec import Label, Purpose, TrialResult


def confirm(search: NoisySearch, found: str, post: Posterior, attempt: int) -> tuple[Confirmed, Posterior]:
    """The `attempt`-th confirmation of `search`'s answer `found` (its posterior `post`): what it says, and the
    posterior after it (`PosteriorConfirmation.run`)."""
    return PosteriorConfirmation(search, found, post, attempt).run()


class PosteriorConfirmation:
    """One confirmation of `search`'s answer `found`: `run` launches (through the search, under the
    confirmation's labels: `launcher`) and judges, and says what it found."""

    def __init__(self, search: NoisySearch, found: str, post: Posterior, attempt: int) -> None:
        self.search, self.found, self.post, self.attempt = search, found, post, attempt
        self.parent = (search.graph.parents.get(found) or (next(iter(search.ends)),))[0]
        self.name = Purpose.CONFIRM.named(attempt)
        # who each launched commit is, in its label and in what the report says: the pair, and a control or the ends
        self.who = {self.parent: "parent", found: "found"}
        self.labels = {sha: Label(who, Purpose.CONFIRM, confirmation=attempt) for sha, who in self.who.items()}
        self.launcher = search.labelled(self.labels)

    def run(self) -> tuple[Confirmed, Posterior]:
        """The found commit and its parent judged on all their launches, the search's and fresh ones: fresh
        launches of both, a pair a round (at once where slots allow), until each has `repeats.launches` of them,
        then more of either as the posterior asks, until the found commit holds `bisect.posterior` of the mass or
        each has its cap of fresh launches; the confirmation ends as soon as the found commit is no longer the
        likeliest answer (its fresh launches stay evidence for the search that goes on). The fresh launches guard
        against drift and chance (`guard`), and a control tells a host that changed from a wrong answer
        (`control`). Everything else stays as the search has it: the rates learnt, "no change" a hypothesis, no
        commit named below the threshold. Returns what the report says (BisectRun.confirmation) and the posterior
        after it."""
        s, v, found, parent, post, label = self.search, self.launcher, self.found, self.parent, self.post, self.name
        a = s.oracle.assessor
        regression = s.worse_state(post, found) == AFTER
        pair = [parent, found]
        if post.model.drifts:  # the old end launched beside them each round pins its offset, and the ends may be
            # measured again: a drift of the host is measured, not mistaken for the change
            self.label_ends({e: str(role) for e, role in s.ends.items() if e not in self.labels})
            pair += [e for e in s.ends if e not in pair][:1]
        start, counted = s.next_round(), {sha: self.search_launches(sha) for sha in (parent, found)}
        least = s.recipe.repeats.launches
        s.say(f"{label}: {found[:10]} holds {post.culprit_mass().get(found, 0.0):.0%}; launching it and its parent "
              f"{parent[:10]} at least {least} time(s) each, fresh, beside their {counted[parent]} and "
              f"{counted[found]} launch(es) in the search")
        leading = True
        width = max(len(s.oracle.slots), len(pair))  # a round fills the slots
        while leading and (need := {sha: n for sha in pair if (n := least - self.fresh_launches(sha)) > 0}):
            cycle = [sha for k in range(max(need.values())) for sha in pair if need.get(sha, 0) > k]
            v.launch_round(cycle[:width])
            leading = s.posterior().decide(0.0).found == found
        # on a host that may drift the ends beside them pin each round's offset: the drift model measures it
        guarded = self.guard((parent, found))
        for sha, why in guarded.items():
            s.say(f"{label}: the {self.who[sha]}'s search launches no longer count: {why}")
        changed = None if post.model.drifts else self.control(parent, found, regression, label)
        if changed:  # the host, not the commits: nothing fresh can confirm or refute the answer now
            level, post = Level.HOST_CHANGED, s.posterior()
        else:
            if leading or guarded:  # more as the posterior asks; it stops once the found commit is no longer the
                # likeliest answer, unless the guard took evidence away on a host that may drift: then only the
                # fresh launches can say
                post = v.search(self.confirm_options, limit=s.launches() + 2 * a.cap,
                                until=None if guarded and post.model.drifts else
                                lambda p: p.decide(0.0).found != found)
            else:
                post = s.posterior()
            decision = post.decide(s.threshold)
            as_found = (s.worse_state(post, found) == AFTER) == regression
            level = (Level.CONFIRMED if decision.found == found and as_found else
                     Level.NOT_REPRODUCED if decision.found or decision.no_change or not as_found
                     or post.decide(0.0).found != found else Level.NOT_SURE)
        summary = self.summary(post, parent, found, regression, level, changed, self.attempt,
                               s.next_round() - start)
        if not level.held:  # searched on with every launch counting: its rounds measure the host again
            s.evidence.unguard()
            post = s.posterior()
        return summary, post

    def label_ends(self, whos: dict[str, str]) -> None:
        """Launch these ends (or a control) too, each under the confirmation's label for it."""
        self.who.update(whos)
        self.labels.update({sha: Label(who, Purpose.CONFIRM, confirmation=self.attempt) for sha, who in whos.items()})

    def control(self, parent: str, found: str, regression: bool, label: str) -> str | None:
        """Whether the host changed since the search (a machine turned busy that now crashes a good commit too),
        rather than the answer being wrong: why, in words, or None. When the one of the pair that should look like
        the good state (the parent of a regression, the found commit of a fix) did worse in its fresh launches than
        the commits in that state whichever of the two is the change did in the search, the good end is launched
        again, fresh, as often as the suspect was (up to three times `repeats.launches` while it does worse and the
        test is not sure), as a control; its fresh launches unlike those commits' search
        launches (the assessor's comparison at its alpha) mean the host changed. (A host that may drift is the drift
        model's to measure: the ends are launched beside the pair every round.)"""
        s, v = self.search, self.launcher
        a = s.oracle.assessor
        suspect, who = (parent, "parent") if regression else (found, "found commit")
        if regression:  # before the parent, the old end too
            surely = [e for e, role in s.ends.items() if role is not Role.NEW_END and e not in (parent, found)]
            surely += [sha for sha in s.graph.ancestors(parent) if sha != parent] if parent in s.graph else []
        else:  # after the found commit, the new end too
            surely = [sha for sha in s.graph.order if sha != found and found in s.graph.ancestors(sha)]
        control = next((e for e in s.ends if e in surely), None)
        reference = [t for sha in surely if (step := s.step_of(sha)) is not None for t in step.trials
                     if not fresh(t) and s.evidence.observes(t) and phase_of(t) <= s.phase]
        new = [t for t in self.fresh_trials(suspect) if s.evidence.observes(t)]
        if control is None or not reference or not new or a.compare(reference, new).worse is not Worse.B:
            return None
        state = "before the change" if regression else "after it"
        self.label_ends({control: str(s.role(control))})
        s.say(f"{label}: the {who} did worse in its fresh launches than the commits {state} in the search: "
              f"launching the {s.role(control)} {control[:10]} again, as a control")
        # as many launches as the suspect's fresh ones (`repeats.launches` at most), and up to three times
        # `repeats.launches` while it does worse and the test is not sure
        least, width = min(max(len(new), 2), s.recipe.repeats.launches), max(len(s.oracle.slots), 1)
        cmp: Comparison | None = None
        while True:
            n = self.fresh_launches(control)
            cmp = a.compare(reference, [t for t in self.fresh_trials(control) if s.evidence.observes(t)]) if n else None
            unsure = cmp is not None and cmp.call is Call.UNSURE and cmp.worse is Worse.B
            if n >= 3 * s.recipe.repeats.launches or (n >= least and not unsure):
                break
            v.launch_round([control] * min(max(least - n, 1), width))
        text = cmp.text if cmp is not None else ""
        if cmp is None or cmp.call is not Call.DIFFERENT:
            s.say(f"{label}: the control behaves as the commits {state} did in the search ({text}): "
                  "the host did not change")
            return None
        return (f"the {s.role(control)}, launched again, no longer behaves as the commits {state} did in the search "
                f"({text})")

    def summary(self, post: Posterior, parent: str, found: str, regression: bool, level: Level, changed: str | None,
                attempt: int, rounds: int) -> Confirmed:
        """What the report says of this confirmation (BisectRun.confirmation)."""
        s = self.search
        a = s.oracle.assessor
        mass = post.culprit_mass()
        new = {sha: self.fresh_launches(sha) for sha in (parent, found)}
        counts = {sha: sum(1 for t in step.trials if not fresh(t) and s.evidence.kept(sha, t))
                  if (step := s.step_of(sha)) is not None else 0 for sha in (parent, found)}
        said = (f"{new[found]} fresh launches of the found commit and {new[parent]} of its parent beside "
                f"{counts[found]} and {counts[parent]} of the search")
        sentence = {Level.CONFIRMED: f"the found commit holds {mass[found]:.1%} of the posterior, {said}: its parent "
                                     "is like the old end and it is like the new end",
                    Level.NOT_SURE: f"the found commit holds only {mass[found]:.1%} of the posterior, {said}, each at "
                                    "its cap: the answer is not sure",
                    Level.NOT_REPRODUCED: f"{said}, the found commit holds {mass[found]:.1%}: it and its parent do "
                                          "not differ as the ends do, so the answer is not reproduced",
                    Level.HOST_CHANGED: f"{changed}: the host changed between the search and the confirmation, so "
                                        "the answer is not confirmed; run the bisect again on a quiet host"}[level]
        trials = {sha: [t for t in step.trials if s.evidence.kept(sha, t)] if (step := s.step_of(sha)) else []
                  for sha in (parent, found)}
        seen = {sha: a.alone(ts) for sha, ts in trials.items()}
        bad = Outcome.BAD if regression else Outcome.GOOD
        side = {sha: post.after(sha) for sha in (parent, found)}
        control = next((sha for sha in self.labels if sha not in (parent, found)), None)
        judged = {sha: Judged(sha, bad if side[sha] >= 0.5 else bad.inverted(),
                              f"{seen[sha].evidence}; after the change with probability {side[sha]:.1%}")
                  for sha in (parent, found)}
        counted = Counted(
            parent_launches=new[parent],
            control_launches=sum(self.fresh_launches(e) for e in s.ends if e in self.labels and e not in side),
            counted=counts[found], parent_counted=counts[parent], rounds=rounds, attempt=attempt,
            guard={who: s.evidence.dropped.get(sha) or s.evidence.drifted or None
                   for who, sha in (("parent", parent), ("found", found))}
            | ({str(s.role(control)): changed} if control is not None and changed else {}),
            mass=Masses(round(mass.get(found, 0.0), 6), round(mass.get(parent, 0.0), 6), round(post.no_change, 6)))
        return Confirmed(level, sentence, judged[parent], judged[found], new[found],
                         a.compare(trials[parent], trials[found]), counted)

    def search_launches(self, sha: str) -> int:
        s = self.search
        step = s.step_of(sha)
        return sum(1 for t in step.trials if not fresh(t) and phase_of(t) <= s.phase) if step is not None else 0

    def fresh_trials(self, sha: str) -> list[TrialResult]:
        """`sha`'s launches under its label of this confirmation (a resumed one finds those it already made)."""
        s = self.search
        step = s.step_of(sha)
        return [t for t in step.trials if t.spec.side == self.launcher.label(sha)] if step is not None else []

    def fresh_launches(self, sha: str) -> int:
        return len(self.fresh_trials(sha))

    def guard(self, shas: Sequence[str]) -> dict[str, str]:
        """The confirmation's guard: a commit whose fresh launches differ from its launches in the search (the
        assessor's own comparison at its alpha: Fisher's exact test for a rate, min(KS, Mann–Whitney U) for a
        metric, McNemar for eval items) keeps only its fresh launches as evidence while the confirmation runs;
        when the host's drift check fires, no commit's search launches count then but the ends'. {sha: why} of the
        commits whose search launches were dropped now."""
        s = self.search
        a, dropped = s.oracle.assessor, {}
        drift = s.drift(s.posterior())
        for sha in shas:
            step = s.step_of(sha)
            if step is None or sha in s.evidence.dropped:
                continue
            trials = [t for t in step.trials if s.evidence.observes(t) and phase_of(t) <= s.phase]
            searched, new = [t for t in trials if not fresh(t)], [t for t in trials if fresh(t)]
            if not searched or not new:
                continue
            cmp = a.compare(searched, new)
            if cmp.call is Call.DIFFERENT:
                dropped[sha] = (f"its {len(new)} fresh launch(es) differ from its {len(searched)} in the search "
                                f"({cmp.text})")
        s.evidence.drop(dropped)
        if drift is not None:
            why = f"{drift}: only the ends' launches in the search count, beside the fresh ones"
            s.evidence.drift(why, frozenset(s.ends))
            dropped.update({sha: why for sha in shas if sha not in dropped})
        return dropped

    def confirm_options(self) -> list[Option]:
        """The parent, the found commit and the control (the ends, when the host may drift), each within its cap of
        fresh launches."""
        s = self.search
        cap = s.oracle.assessor.cap
        return [Option(sha, 1.0, sha in s.ends, cap - self.fresh_launches(sha)) for sha in self.labels]
