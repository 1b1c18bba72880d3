"""Statistical verdicts: numbers in, frozen decisions out; no I/O and no knowledge of trials.

Three kinds of evidence, each judged the way the tools in REGRESSIONS.md judge it:

- failure rates (a launch that crashes 3 times in 10): Fisher's exact test, Wilson intervals per side and
  Newcombe's interval of the difference;
- continuous samples (one value per measurement pass, e.g. a pass's median TTFT): Chromium Pinpoint's
  p = min(Kolmogorov–Smirnov, Mann–Whitney U) and a bootstrap interval of the relative change of medians;
- paired accuracy (the same eval items on both sides): exact McNemar and a paired bootstrap, as
  lm-evaluation-harness's paired comparison does.

Every comparison ends in one of three calls, never two, because "not significant" is not "same": with few
values nothing is significant.

- DIFFERENT: significant (p ≤ alpha), the interval of the change leaves 0 out, and the observed change is at
  least the smallest one that matters (the margin the caller sets).
- SAME: the interval of the change lies inside ± that margin, so the data rule out a change that matters.
  This is an equivalence test (two one-sided tests at (1 − confidence)/2 each); it is the principled form of
  Pinpoint's simulated "high threshold" tables, and like them it becomes reachable as n grows. A real change
  smaller than the margin ends here too, once the data show it is small.
- UNSURE: neither yet; `needed_n` says about how many values a side would settle it.

scipy.stats does every test and interval; these modules only decide and explain. `decide` holds the calls
and what the kinds share, `proportions` the yes/no counts (failure rates, paired accuracy, an eval's
power), `samples` the performance samples, `power` an eval's power plan before it runs.
"""

from __future__ import annotations

from abbisect.stats.decide import Call, Classification, Resemblance
from abbisect.stats.power import PowerPlan, power_plan
from abbisect.stats.proportions import (
    PairedComparison,
    RateComparison,
    classify_paired,
    classify_rate,
    compare_paired,
    compare_rates,
    detectable_drop,
    n_for_power,
    power_paired,
    power_unpaired,
    wilson,
)
from abbisect.stats.samples import (
    Detectable,
    NoiseFloor,
    SampleComparison,
    classify_sample,
    compare_samples,
    detectable_change,
    noise_floor,
    reachable_n,
)

__all__ = [
    "Call",
    "Classification",
    "Detectable",
    "NoiseFloor",
    "PairedComparison",
    "PowerPlan",
    "RateComparison",
    "Resemblance",
    "SampleComparison",
    "classify_paired",
    "classify_rate",
    "classify_sample",
    "compare_paired",
    "compare_rates",
    "compare_samples",
    "detectable_change",
    "detectable_drop",
    "n_for_power",
    "noise_floor",
    "power_paired",
    "power_plan",
    "power_unpaired",
    "reachable_n",
    "wilson",
]
