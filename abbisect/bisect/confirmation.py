"""The confirmation of a posterior search's answer (issue 40's contract): the found commit and its parent judged on
all their launches, the search's and fresh ones, the fresh ones a guard against drift and chance — a commit whose
fresh launches differ from its search launches keeps only its fresh ones while the confirmation runs, and a
control (the good end launched again, when the pair's good side did worse fresh) that no longer behaves as the
search saw that side says the host changed. It ends as soon as its answer is no longer the likeliest, so a wrong
answer handed over at half the mass costs a pair of launches or two, which the search that goes on counts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from abbisect.bisect.bisection import BisectRun, Role, Step
from abbisect.bisect.launches import Evidence, fresh, phase_of
from abbisect.bisect.oracle import Oracle
from abbisect.bisect.posterior import Option, Posterior
from abbisect.bisect.search import Graph
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome
from abbisect.stats.decide import Call
from abbisect.stats.evidence import AFTER
from abbisect.trial.spec import Label, Purpose, TrialResult


def call_of(compared: dict) -> str | None:
    """The call of an assessor's comparison (`Assessor.compare`: same, different or unsure, as `Call` values);
    None when it compared nothing."""
    return (compared.get("comparison") or {}).get("call")


class Searching(Protocol):
    """What a confirmation asks of the search whose answer it confirms (bisect/noisy.py's NoisySearch)."""

    run: BisectRun
    oracle: Oracle
    recipe: Recipe
    evidence: Evidence
    graph: Graph
    ends: dict[str, Role]
    labels: dict[str, Label]
    fresh: bool
    rounds: int
    phase: int
    threshold: float
    say: Callable[[str], None]

    def step_of(self, sha: str) -> Step | None: ...
    def role(self, sha: str) -> Role: ...
    def label(self, sha: str) -> Label: ...
    def launches(self) -> int: ...
    def launch_round(self, shas: list[str]) -> None: ...
    def posterior(self) -> Posterior: ...
    def drift(self, post: Posterior) -> str | None: ...
    def worse_state(self, post: Posterior, culprit: str) -> int: ...

    def search(self, options: Callable[[], list[Option]] | None = None, stop: float | None = None,
               limit: int | None = None, until: Callable[[Posterior], bool] | None = None) -> Posterior: ...


class Confirmation:
    """One confirmation of `search`'s answer: `run` launches and judges, and says what it found."""

    def __init__(self, search: Searching) -> None:
        self.search = search

    def run(self, found: str, post: Posterior, attempt: int) -> tuple[dict, Posterior]:
        """The found commit and its parent judged on all their launches, the search's and fresh ones: fresh
        launches of both, a pair a round (at once where slots allow), until each has `repeats.launches` of them,
        then more of either as the posterior asks, until the found commit holds `bisect.posterior` of the mass or
        each has its cap of fresh launches; the confirmation ends as soon as the found commit is no longer the
        likeliest answer (its fresh launches stay evidence for the search that goes on). The fresh launches guard
        against drift and chance (`guard`), and a control tells a host that changed from a wrong answer
        (`control`). Everything else stays as the search has it: the rates learnt, "no change" a hypothesis, no
        commit named below the threshold. Returns what the report says (BisectRun.confirmation) and the posterior
        after it."""
        s = self.search
        a = s.oracle.assessor
        parent = (s.graph.parents.get(found) or (next(iter(s.ends)),))[0]
        regression = s.worse_state(post, found) == AFTER
        label = Purpose.CONFIRM.named(attempt)
        s.labels, s.fresh = {parent: Label("parent", Purpose.CONFIRM, confirmation=attempt),
                             found: Label("found", Purpose.CONFIRM, confirmation=attempt)}, True
        pair = [parent, found]
        if post.model.drifts:  # the old end launched beside them each round pins its offset, and the ends may be
            # measured again: a drift of the host is measured, not mistaken for the change
            s.labels.update({e: Label(str(role), Purpose.CONFIRM, confirmation=attempt)
                             for e, role in s.ends.items() if e not in s.labels})
            pair += [e for e in s.ends if e not in pair][:1]
        start, counted = s.rounds, {sha: self.search_launches(sha) for sha in (parent, found)}
        least = s.recipe.repeats.launches
        s.say(f"{label}: {found[:10]} holds {post.culprit_mass().get(found, 0.0):.0%}; launching it and its parent "
              f"{parent[:10]} at least {least} time(s) each, fresh, beside their {counted[parent]} and "
              f"{counted[found]} launch(es) in the search")
        leading = True
        width = max(len(s.oracle.slots), len(pair))  # a round fills the slots
        while leading and (need := {sha: n for sha in pair if (n := least - self.fresh_launches(sha)) > 0}):
            cycle = [sha for k in range(max(need.values())) for sha in pair if need.get(sha, 0) > k]
            s.launch_round(cycle[:width])
            leading = s.posterior().decide(0.0).found == found
        # on a host that may drift the ends beside them pin each round's offset: the drift model measures it
        guarded = self.guard((parent, found))
        for sha, why in guarded.items():
            s.say(f"{label}: the {s.labels[sha].who}'s search launches no longer count: {why}")
        changed = None if post.model.drifts else self.control(parent, found, regression, attempt)
        if changed:  # the host, not the commits: nothing fresh can confirm or refute the answer now
            level, post = "host changed", s.posterior()
        else:
            if leading or guarded:  # more as the posterior asks; it stops once the found commit is no longer the
                # likeliest answer, unless the guard took evidence away on a host that may drift: then only the
                # fresh launches can say
                post = s.search(self.confirm_options, limit=s.launches() + 2 * a.cap,
                                until=None if guarded and post.model.drifts else
                                lambda p: p.decide(0.0).found != found)
            else:
                post = s.posterior()
            decision = post.decide(s.threshold)
            as_found = (s.worse_state(post, found) == AFTER) == regression
            level = ("confirmed" if decision.found == found and as_found else
                     "not reproduced" if decision.found or decision.no_change or not as_found
                     or post.decide(0.0).found != found else "not sure")
        summary = self.summary(post, parent, found, regression, level, changed, attempt, s.rounds - start)
        s.labels, s.fresh = {}, False
        if level != "confirmed":  # searched on with every launch counting: its rounds measure the host again
            s.evidence.dropped, s.evidence.drifted = {}, ""
            post = s.posterior()
        return summary, post

    def control(self, parent: str, found: str, regression: bool, attempt: int) -> str | None:
        """Whether the host changed since the search (a machine turned busy that now crashes a good commit too),
        rather than the answer being wrong: why, in words, or None. When the one of the pair that should look like
        the good state (the parent of a regression, the found commit of a fix) did worse in its fresh launches than
        the commits in that state whichever of the two is the change did in the search, the good end is launched
        again, fresh, as often as the suspect was (up to three times `repeats.launches` while it does worse and the
        test is not sure), as a control; its fresh launches unlike those commits' search
        launches (the assessor's comparison at its alpha) mean the host changed. (A host that may drift is the drift
        model's to measure: the ends are launched beside the pair every round.)"""
        s = self.search
        a = s.oracle.assessor
        label = Purpose.CONFIRM.named(attempt)
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
        if control is None or not reference or not new or a.compare(reference, new).get("worse") != "b":
            return None
        state = "before the change" if regression else "after it"
        s.labels[control] = Label(str(s.role(control)), Purpose.CONFIRM, confirmation=attempt)
        s.say(f"{label}: the {who} did worse in its fresh launches than the commits {state} in the search: "
              f"launching the {s.role(control)} {control[:10]} again, as a control")
        # as many launches as the suspect's fresh ones (`repeats.launches` at most), and up to three times
        # `repeats.launches` while it does worse and the test is not sure
        least, width = min(max(len(new), 2), s.recipe.repeats.launches), max(len(s.oracle.slots), 1)
        while True:
            n = self.fresh_launches(control)
            cmp = a.compare(reference, [t for t in self.fresh_trials(control) if s.evidence.observes(t)]) if n else {}
            unsure = call_of(cmp) == Call.UNSURE and cmp.get("worse") == "b"
            if n >= 3 * s.recipe.repeats.launches or (n >= least and not unsure):
                break
            s.launch_round([control] * min(max(least - n, 1), width))
        if call_of(cmp) != Call.DIFFERENT:
            s.say(f"{label}: the control behaves as the commits {state} did in the search ({cmp.get('text', '')}): "
                  "the host did not change")
            return None
        return (f"the {s.role(control)}, launched again, no longer behaves as the commits {state} did in the search "
                f"({cmp.get('text', '')})")

    def summary(self, post: Posterior, parent: str, found: str, regression: bool, level: str, changed: str | None,
                attempt: int, rounds: int) -> dict:
        """What the report says of this confirmation (BisectRun.confirmation)."""
        s = self.search
        a = s.oracle.assessor
        mass = post.culprit_mass()
        new = {sha: self.fresh_launches(sha) for sha in (parent, found)}
        counts = {sha: sum(1 for t in step.trials if not fresh(t) and s.evidence.kept(sha, t))
                  if (step := s.step_of(sha)) is not None else 0 for sha in (parent, found)}
        said = (f"{new[found]} fresh launches of the found commit and {new[parent]} of its parent beside "
                f"{counts[found]} and {counts[parent]} of the search")
        sentence = {"confirmed": f"the found commit holds {mass[found]:.1%} of the posterior, {said}: its parent "
                                 "is like the old end and it is like the new end",
                    "not sure": f"the found commit holds only {mass[found]:.1%} of the posterior, {said}, each at its "
                                "cap: the answer is not sure",
                    "not reproduced": f"{said}, the found commit holds {mass[found]:.1%}: it and its parent do not "
                                      "differ as the ends do, so the answer is not reproduced",
                    "host changed": f"{changed}: the host changed between the search and the confirmation, so the "
                                    "answer is not confirmed; run the bisect again on a quiet host"}[level]
        trials = {sha: [t for t in step.trials if s.evidence.kept(sha, t)] if (step := s.step_of(sha)) else []
                  for sha in (parent, found)}
        seen = {sha: a.alone(ts) for sha, ts in trials.items()}
        bad = Outcome.BAD if regression else Outcome.GOOD
        side = {sha: post.after(sha) for sha in (parent, found)}
        control = next((sha for sha in s.labels if sha not in (parent, found)), None)
        return {"launches": new[found], "parent_launches": new[parent],
                "control_launches": sum(self.fresh_launches(e) for e in s.ends if e in s.labels and e not in side),
                "counted": counts[found], "parent_counted": counts[parent], "rounds": rounds, "attempt": attempt,
                "level": level, "held": level == "confirmed", "sentence": sentence,
                "compared": a.compare(trials[parent], trials[found]),
                "guard": {who: s.evidence.dropped.get(sha) or s.evidence.drifted or None
                          for who, sha in (("parent", parent), ("found", found))}
                | ({str(s.role(control)): changed} if control is not None and changed else {}),
                "mass": {"found": round(mass.get(found, 0.0), 6), "parent": round(mass.get(parent, 0.0), 6),
                         "no_change": round(post.no_change, 6)},
                **{who: {"sha": sha, "outcome": bad if side[sha] >= 0.5 else bad.inverted(),
                         "evidence": f"{seen[sha].evidence}; after the change with probability {side[sha]:.1%}"}
                   for who, sha in (("parent", parent), ("found", found))}}

    def search_launches(self, sha: str) -> int:
        s = self.search
        step = s.step_of(sha)
        return sum(1 for t in step.trials if not fresh(t) and phase_of(t) <= s.phase) if step is not None else 0

    def fresh_trials(self, sha: str) -> list[TrialResult]:
        """`sha`'s launches under its label of this confirmation (a resumed one finds those it already made)."""
        s = self.search
        step = s.step_of(sha)
        return [t for t in step.trials if t.spec.side == s.label(sha)] if step is not None else []

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
            if call_of(cmp) == Call.DIFFERENT:
                dropped[sha] = (f"its {len(new)} fresh launch(es) differ from its {len(searched)} in the search "
                                f"({cmp.get('text', '')})")
        s.evidence.dropped.update(dropped)
        if drift is not None:
            s.evidence.drifted, s.evidence.anchors = (f"{drift}: only the ends' launches in the search count, "
                                                      "beside the fresh ones"), frozenset(s.ends)
            dropped.update({sha: s.evidence.drifted for sha in shas if sha not in dropped})
        return dropped

    def confirm_options(self) -> list[Option]:
        """The parent, the found commit and the control (the ends, when the host may drift), each within its cap of
        fresh launches."""
        s = self.search
        cap = s.oracle.assessor.cap
        return [Option(sha, 1.0, sha in s.ends, cap - self.fresh_launches(sha)) for sha in s.labels]
