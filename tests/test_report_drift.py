"""A host's drift told as the likeliest reason a performance bisect could not decide (abbisect/stats/drift.py,
abbisect/report/drift.py): the measure on known launches, and bisects through the seam (abbisect/testing/seam.py) on a
host that drifts and on a quiet one."""

from __future__ import annotations

import math
import random

import pytest

from abbisect.report.bisect import render_bisect
from abbisect.report.drift import drift_said
from abbisect.stats.drift import host_drift
from abbisect.testing import seam

SENTENCE = "The host's drift, not a change, is the likeliest reason"


def _launches(rng: random.Random, n: int, launch_sd: float, pass_sd: float = 0.02) -> list[list[float]]:
    out = []
    for _ in range(n):
        offset = rng.gauss(0, launch_sd)
        out.append([2.0 * math.exp(offset + rng.gauss(0, pass_sd)) for _ in range(5)])
    return out


def test_the_drift_is_the_launches_spread_beyond_their_passes():
    rng = random.Random(0)
    quiet = host_drift([_launches(rng, 12, 0.0), _launches(rng, 12, 0.0)])
    busy = host_drift([_launches(rng, 12, 0.05), _launches(rng, 12, 0.05)])
    assert quiet is not None and busy is not None and quiet.launches == busy.launches == 24
    assert quiet.drift < 0.01 and busy.drift == pytest.approx(0.05, rel=0.35)
    assert busy.pass_sd == pytest.approx(0.02, rel=0.3)  # the passes' own spread is not counted as drift
    assert busy.blamed(math.log1p(0.03)) and not quiet.blamed(math.log1p(0.03))
    assert host_drift([[[2.0, 2.1]]]) is None  # one launch: nothing to compare


def test_a_bisect_that_cannot_decide_on_a_drifting_host_says_the_host_is_the_likeliest_reason():
    """A +6 % slowdown in 32 commits, the host 8 % slower every other three launches (a busy loop switching on and
    off): where the bisect cannot decide, its report says the host's drift is the likeliest reason (seeds tried
    until one cannot decide); the same histories on a quiet host never blame the host."""
    seen = False
    for seed in range(6):
        drifting, _ = seam.bisect(seam.World("perf", 32, 16, seed=seed, drift=0.08, drift_period=3,
                                             changes=((16, 0.06),)), seam.recipe_for("perf"))
        quiet, _ = seam.bisect(seam.World("perf", 32, 16, seed=seed, changes=((16, 0.06),)), seam.recipe_for("perf"))
        assert SENTENCE not in render_bisect(quiet, ["x"]) and drift_said(quiet) is None
        named = [r.sha for r in drifting.changes.changes] if drifting.changes else []
        assert set(named) <= {"c016"}, named  # the drift is not named as a change
        if drifting.result.outcome != "found":
            md = render_bisect(drifting, ["x"])
            head = md.split("### ", 2)[1]  # under the headline, before any section
            assert SENTENCE in head and "Run the bisect again on a quiet host" in head
            seen = True
            break
    assert seen, "the drifting host never kept a bisect from deciding: the case is not exercised"
