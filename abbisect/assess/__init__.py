"""How a commit is judged from its trials: one trial by the recipe's rules (`one_trial.py`), or several — a failure
rate against the ends' (`flaky.py`; in a bisect, a batch's outputs too, `batch.py`), a performance metric's passes
against the other side's (`perf.py`), paired answers to an eval set (`accuracy.py`) — with the statistics of
abbisect/stats; or, in a bisect, one trial's outputs against the good end's (`differs.py`).

A bisect and an A/B ask an `Assessor` (base.py) three things: what one commit's trials say on their own, how
the two ends compare (which is bad, or run more of both), and which end a candidate's trials resemble (or run
more). `failure.py` names how a trial fails, so a bisect can tell its bug from another one.
"""

from __future__ import annotations

from abbisect.assess.base import Assessor
from abbisect.recipe import Recipe
from abbisect.recipe.status import DIFFERS_FROM_GOOD


def assessor_for(recipe: Recipe, bisect: bool = False) -> Assessor:
    """How this recipe's commits are judged: by a performance metric's passes (`perf`), by the token
    log-probabilities (`numerics`), by paired accuracy on an eval set (`eval`), by a failure rate over several
    trials (`repeats`), else from one trial by the rules. A bisect also judges a batch (`query.concurrency` or `query.repeat` above 1) by its outputs' failure rate:
    which requests share a batch is chance, so one launch's share of bad outputs is a sample, not a verdict.
    Else a bisect whose `verdict.bad_if` names differs_from_good judges a commit's outputs against the good end's."""
    # Each imported when chosen: the statistics (scipy) load only for a verdict that needs them.
    if recipe.perf is not None:
        from abbisect.assess.perf import Perf

        return Perf(recipe)
    if recipe.numerics is not None:
        from abbisect.assess.numerics import Numerics

        return Numerics(recipe)
    if recipe.eval is not None:
        from abbisect.assess.accuracy import Accuracy

        return Accuracy(recipe)
    if recipe.repeats.flaky:
        from abbisect.assess.flaky import Flaky

        return Flaky(recipe)
    if bisect and (recipe.query.concurrency > 1 or recipe.query.repeat > 1):
        from abbisect.assess.batch import Batch

        return Batch(recipe)
    if bisect and DIFFERS_FROM_GOOD in recipe.verdict.bad_if:
        from abbisect.assess.differs import Differs

        return Differs()
    from abbisect.assess.one_trial import Rules

    return Rules()
