"""The confirmation of a posterior search's answer (issue 40's contract): the found commit and its parent judged on
all their launches, the search's and fresh ones, the fresh ones a guard against drift and chance — a commit whose
fresh launches differ from its search launches keeps only its fresh ones while the confirmation runs, and a
control (the old end, launched again beside them) that no longer behaves as in the search says the host changed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from abbisect.bisect.bisection import BisectRun, Role, Step
from abbisect.bisect.launches import CONFIRM, Evidence, fresh, phase_of
from abbisect.bisect.oracle import Oracle
from abbisect.bisect.posterior import Option, Posterior
from abbisect.bisect.search import Graph
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome
from abbisect.stats.decide import Call
from abbisect.stats.evidence import AFTER


class Searching(Protocol):
    """What a confirmation asks of the search whose answer it confirms (bisect/noisy.py's NoisySearch)."""

    run: BisectRun
    oracle: Oracle
    recipe: Recipe
    evidence: Evidence
    graph: Graph
    ends: dict[str, Role]
    labels: dict[str, str]
    fresh: bool
    rounds: int
    phase: int
    threshold: float
    say: Callable[[str], None]

    def step_of(self, sha: str) -> Step | None: ...
    def role(self, sha: str) -> Role: ...
    def label(self, sha: str) -> str: ...
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
        """The found commit and its parent judged on all their launches, the search's and fresh ones: at least
        `repeats.launches` fresh ones of each and of the control (a round holds them, at once where slots allow),
        then more as the posterior asks, until the found commit holds `bisect.posterior` of the mass, it is no
        longer the likeliest answer, or each has its cap of fresh launches. The fresh launches guard against
        drift and chance (`guard`). Everything else stays as the search has it: the rates learnt, "no change" a
        hypothesis, no commit named below the threshold. Returns what the report says (BisectRun.confirmation) and
        the posterior after it."""
        s = self.search
        a = s.oracle.assessor
        parent = (s.graph.parents.get(found) or (next(iter(s.ends)),))[0]
        regression = s.worse_state(post, found) == AFTER
        label = f"{CONFIRM}{attempt if attempt > 1 else ''}"
        s.labels, s.fresh = {parent: f"{label}-parent", found: f"{label}-found"}, True
        # The control: the old end launched again beside them. Its fresh launches differing from its launches in
        # the search say that the host changed (a busy machine that now crashes a good commit too), not the commit.
        control = next((e for e in s.ends if e not in (parent, found)), None)
        if control is not None:
            s.labels[control] = f"{label}-{s.role(control)}"
        if post.model.drifts:  # the ends measured again beside them: a drift of the host is measured, not mistaken
            s.labels.update({e: f"{label}-{role}" for e, role in s.ends.items() if e not in s.labels})
        start, counted = s.rounds, {sha: self.search_launches(sha) for sha in (parent, found)}
        least = s.recipe.repeats.launches
        s.say(f"{label}: {found[:10]} holds {post.culprit_mass().get(found, 0.0):.0%}; launching it and its parent "
              f"{parent[:10]} at least {least} time(s) each, fresh, beside their {counted[parent]} and "
              f"{counted[found]} launch(es) in the search")
        # a round of the fresh minimum: the pair and the control (on a host that may drift, the control also pins
        # the round's offset, so a host that slowed is not read as the change)
        pair = [parent, found, *([control] if control is not None else [])]
        width = max(len(s.oracle.slots), len(pair))  # a round fills the slots
        while need := {sha: n for sha in pair if (n := least - self.fresh_launches(sha)) > 0}:
            cycle = [sha for k in range(max(need.values())) for sha in pair if need.get(sha, 0) > k]
            s.launch_round(cycle[:width])
        # a host that may drift is the drift model's to measure (the control pins each round's offset); on any
        # other, a control that no longer behaves as in the search means the host changed
        guarded = self.guard((parent, found) if post.model.drifts else pair)
        for sha, why in guarded.items():
            s.say(f"{label}: the {s.labels[sha].rsplit('-', 1)[1]}'s search launches no longer count: {why}")
        changed = guarded.get(control) if control is not None else None
        if changed:  # the host, not the commits: nothing fresh can confirm or refute the answer now
            post = s.posterior()
        else:  # it stops early once the found commit is no longer the likeliest answer, unless the guard took
            # evidence away: then only the fresh launches can say
            post = s.search(self.confirm_options, limit=s.launches() + 2 * a.cap,
                            until=None if guarded else lambda p: p.decide(0.0).found != found)
        decision = post.decide(s.threshold)
        mass = post.culprit_mass()
        as_found = (s.worse_state(post, found) == AFTER) == regression
        level = ("host changed" if changed else "confirmed" if decision.found == found and as_found else
                 "not reproduced" if decision.found or decision.no_change or not as_found
                 or post.decide(0.0).found != found else "not sure")
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
                    "host changed": f"the old end, launched again beside them, no longer behaves as in the search "
                                    f"({changed}): the host changed between the search and the confirmation, so "
                                    "the answer is not confirmed; run the bisect again on a quiet host"}[level]
        trials = {sha: [t for t in step.trials if s.evidence.kept(sha, t)]
                  for sha in (parent, found) if (step := s.step_of(sha)) is not None}
        seen = {sha: a.alone(ts) for sha, ts in trials.items()}
        bad = Outcome.BAD if regression else Outcome.GOOD
        side = {sha: post.after(sha) for sha in (parent, found)}
        summary = {"launches": new[found], "parent_launches": new[parent],
                   "control_launches": self.fresh_launches(control) if control is not None else 0,
                   "counted": counts[found],
                   "parent_counted": counts[parent], "rounds": s.rounds - start, "attempt": attempt,
                   "level": level, "held": level == "confirmed", "sentence": sentence,
                   "compared": a.compare(trials[parent], trials[found]),
                   "guard": {who: s.evidence.dropped.get(sha) or s.evidence.drifted or None
                             for who, sha in (("parent", parent), ("found", found), ("old end", control))
                             if sha is not None},
                   "mass": {"found": round(mass[found], 6), "parent": round(mass.get(parent, 0.0), 6),
                            "no_change": round(post.no_change, 6)},
                   **{who: {"sha": sha, "outcome": bad if side[sha] >= 0.5 else bad.inverted(),
                            "evidence": f"{seen[sha].evidence}; after the change with probability {side[sha]:.1%}"}
                      for who, sha in (("parent", parent), ("found", found))}}
        s.labels, s.fresh = {}, False
        if level != "confirmed":  # searched on with every launch counting: its rounds measure the host again
            s.evidence.dropped, s.evidence.drifted = {}, ""
            post = s.posterior()
        return summary, post

    def search_launches(self, sha: str) -> int:
        s = self.search
        step = s.step_of(sha)
        return sum(1 for t in step.trials if not fresh(t) and phase_of(t) <= s.phase) if step is not None else 0

    def fresh_launches(self, sha: str) -> int:
        """`sha`'s launches under its label of this confirmation (a resumed one finds those it already made)."""
        s = self.search
        step = s.step_of(sha)
        return sum(1 for t in step.trials if t.spec.side == s.label(sha)) if step is not None else 0

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
            if (cmp.get("comparison") or {}).get("call") == Call.DIFFERENT:
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
