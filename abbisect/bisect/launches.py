"""What a posterior search's launches are evidence of: which search made a launch and whether it is a
confirmation's (its spec's purpose and phase, kept with it, so a resumed bisect sorts them again), the prior's
weights, and the `Evidence` that turns a bisect's steps into the posterior's model, with the confirmation's guard."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field

from abbisect.assess.base import Assessor
from abbisect.assess.failure import fingerprint
from abbisect.bisect.bisection import Step
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome
from abbisect.stats.evidence import Model
from abbisect.trial.spec import TrialResult


def fresh(trial: TrialResult) -> bool:
    """Whether a launch is a confirmation's (fresh: never from the trial cache) rather than the search's."""
    return trial.spec.purpose.fresh


def phase_of(trial: TrialResult) -> int:
    """Which search of the bisect launched it: 1 the whole range's, k ≥ 2 the k-th search of a part of it for
    another change (abbisect/bisect/changes.py)."""
    return trial.spec.phase


def likely(path: str, patterns: Sequence[str]) -> bool:
    """Whether `path` is not among the `unlikely` patterns: a folder (`docs/`) or a glob (`*.md`)."""
    for p in patterns:
        if p.endswith("/") and path.startswith(p):
            return False
        if fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path.rsplit("/", 1)[-1], p):
            return False
    return True


def prior_weights(recipe: Recipe, touched: dict[str, tuple[str, ...]]) -> dict[str, float]:
    """{commit: weight} for the commits touching only `bisect.prior.unlikely` paths (every other weighs 1)."""
    prior = recipe.bisect.prior
    if not prior.unlikely:
        return {}
    return {sha: prior.weight for sha, paths in touched.items()
            if paths and not any(likely(p, prior.unlikely) for p in paths)}


@dataclass
class Evidence:
    """A verdict's evidence, launch by launch, as the posterior's model of it (the assessor's)."""

    recipe: Recipe
    assessor: Assessor
    failure: str = ""  # how the worse end fails (verdict.same_failure): other failures are no evidence
    # Commits whose search launches no longer count while a confirmation runs (its guard): sha → why
    dropped: dict[str, str] = field(default_factory=dict)
    # While a confirmation runs on a host seen to drift (why): only the ends' search launches count, beside the
    # fresh ones, as a confirmation from nothing would have it (`anchors`: the ends)
    drifted: str = ""
    anchors: frozenset[str] = frozenset()
    phase: int = 1  # the searches whose launches count: this one and those before it (a resume replays in order)

    def drop(self, dropped: dict[str, str]) -> None:
        """The guard: these commits' search launches no longer count (sha → why)."""
        self.dropped.update(dropped)

    def drift(self, why: str, anchors: frozenset[str]) -> None:
        """The guard on a host seen to drift: only the `anchors`' search launches count, beside the fresh ones."""
        self.drifted, self.anchors = why, anchors

    def unguard(self) -> None:
        """Every search launch counts again (the search goes on: its rounds measure the host again)."""
        self.dropped, self.drifted = {}, ""

    def model(self, steps: Sequence[Step]) -> Model:
        model = self.assessor.model()
        assert model is not None  # the posterior search runs only a verdict that depends on chance
        for s in steps:
            for t, rnd in zip(s.trials, s.trial_rounds or (0,) * len(s.trials)):
                if self.counts(t) and self.kept(s.sha, t):
                    self.assessor.observe(model, s.sha, rnd, t)
        return model

    def kept(self, sha: str, trial: TrialResult) -> bool:
        """Whether the guard leaves a launch of `sha` in the evidence: every fresh one; a search launch unless its
        commit was dropped, or the host drifts and it is not an end's."""
        if phase_of(trial) > self.phase:
            return False
        return fresh(trial) or (sha not in self.dropped and (not self.drifted or sha in self.anchors))

    def counts(self, trial: TrialResult) -> bool:
        """Whether a launch is evidence of the change searched for: a failure unlike the worse end's is not."""
        return not (self.failure and trial.verdict.outcome == Outcome.BAD and self.recipe.verdict.same_failure
                    and fingerprint(trial, self.recipe.scoring.warn_severity) != self.failure)

    def observes(self, trial: TrialResult) -> bool:
        """Whether a launch is evidence at all (it built, started, and measured or answered something)."""
        return self.counts(trial) and self.assessor.observes(trial)
