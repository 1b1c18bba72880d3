"""The sentence that says a host's drift, not a change, is the likeliest reason a performance bisect could not
decide (abbisect/stats/drift.py measures it on the ends' launches). Pure over the run."""

from __future__ import annotations

import math

from abbisect.assess.perf import metric_values
from abbisect.bisect.bisection import BisectRun
from abbisect.bisect.findings import Level
from abbisect.stats.drift import host_drift


def undecided(run: BisectRun) -> bool:
    """Whether the bisect could not decide: no commit named, an answer not confirmed, or the changes named not sure
    of what is left of the ends' difference."""
    res, c = run.result, run.changes
    return (res is None or res.outcome != "found"
            or (run.confirmation is not None and run.confirmation.level is Level.NOT_SURE)
            or (c is not None and c.ends is not None and not c.sure))


def drift_said(run: BisectRun) -> str | None:
    """`The host's drift, not a change, …`: when a performance bisect could not decide and its ends' own launches
    differ from one another by at least half of perf.min_effect beyond what their passes vary; else None."""
    perf = run.recipe.perf
    if perf is None or not undecided(run):
        return None
    ends = [[metric_values([t], perf.metric) for t in s.trials] for s in run.steps if s.is_end]
    drift = host_drift(ends)
    if drift is None or not drift.blamed(math.log1p(perf.min_effect)):
        return None
    told = math.expm1(drift.drift)
    return (f"⚠ The host's drift, not a change, is the likeliest reason this bisect could not decide: the ends' own "
            f"launches ({drift.launches}) differ from one another by ± {told:.1%} beyond what their passes vary, "
            f"at least half of the smallest change that matters (perf.min_effect, {perf.min_effect:.0%}), so a change "
            "of that size cannot be told from the host's moods in the launches the search could afford. Run the "
            "bisect again on a quiet host (nothing else on its cores or its GPU).")
