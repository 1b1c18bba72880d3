"""A bug that shows only in a batch (`query.concurrency` or `query.repeat` above 1): whether an output loops
depends on which requests happened to be in flight with it, so one launch's share of bad outputs is a random
rate, not a verdict. A bisect judges it as one (issue 34): every output is an observation — degenerate, a
missed expected answer, or (when `verdict.bad_if` lists `batch_variant`) an answer that changed with the batch
— counted against both ends, as a flaky failure is (`Flaky`: Fisher's exact test, Wilson intervals). A launch
that failed as a whole (a crash, a timeout, failed requests) is one failed observation; one that could not be
tested is none.
"""

from __future__ import annotations

from abbisect.assess.base import Sample
from abbisect.assess.flaky import Flaky
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome, Status
from abbisect.trial.spec import TrialResult

# The statuses judged output by output; any other bad status failed the launch as a whole.
_PER_OUTPUT = {Status.OK, Status.DEGENERATE, Status.WRONG_ANSWER, Status.BATCH_VARIANT}


def bad_outputs(trial: TrialResult, bad_if: list[str]) -> tuple[int, int]:
    """(bad outputs, outputs answered) of one launch; a launch that failed as a whole is (1, 1), one that could
    not be tested (0, 0)."""
    if trial.verdict.outcome == Outcome.SKIP:
        return 0, 0
    if trial.verdict.outcome == Outcome.BAD and trial.verdict.status not in _PER_OUTPUT:
        return 1, 1
    alone = {(o.pass_no, o.prompt_id): o.text for o in trial.outputs if o.batch == 1 and o.copy == 0 and not o.error}
    bad = answered = 0
    for o, a, c in zip(trial.outputs, trial.analyses, trial.answers or (None,) * len(trial.outputs)):
        if o.error:
            continue
        answered += 1
        variant = o.batch > 1 and o.copy == 0 and alone.get((o.pass_no, o.prompt_id), o.text) != o.text
        bad += (("degenerate" in bad_if and a.label == "degenerate")
                or ("answer_mismatch" in bad_if and c is not None and not c.passed)
                or ("batch_variant" in bad_if and variant))
    return bad, answered


class Batch(Flaky):
    kind = "batch"
    unit = "outputs"

    def __init__(self, recipe: Recipe) -> None:
        super().__init__(recipe)
        self.bad_if = list(recipe.verdict.bad_if)

    def observed(self, sample: Sample) -> tuple[int, int]:
        counts = [bad_outputs(t, self.bad_if) for t in sample]
        return sum(k for k, _ in counts), sum(n for _, n in counts)
