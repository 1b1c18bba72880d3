"""How a commit is judged from its trials: one trial by the recipe's rules (`rules.py`), or several — a failure
rate against the ends' (`flaky.py`) — with the statistics of abbisect/stats.

A bisect and an A/B ask an `Assessor` (base.py) three things: what one commit's trials say on their own, how
the two ends compare (which is bad, or run more of both), and which end a candidate's trials resemble (or run
more). `failure.py` names how a trial fails, so a bisect can tell its bug from another one.
"""

from __future__ import annotations

from abbisect.assess.base import Assessor
from abbisect.assess.flaky import Flaky
from abbisect.assess.rules import Rules
from abbisect.recipe import Recipe


def assessor_for(recipe: Recipe) -> Assessor:
    """How this recipe's commits are judged: by a failure rate over several trials when `repeats` asks for
    them, else from one trial by the rules."""
    return Flaky(recipe) if recipe.repeats.flaky else Rules()
