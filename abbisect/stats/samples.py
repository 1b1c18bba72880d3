"""Continuous samples (performance): one value per measurement pass, e.g. a pass's median TTFT or its
throughput, compared as Chromium Pinpoint compares them, with an interval of the relative change.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
import numpy.typing as npt
from scipy import stats

from abbisect.stats.decide import (
    Call,
    Classification,
    bootstrap_ci,
    classify,
    decide,
    p_text,
    pct,
    settle_n,
    sizes_text,
    z,
)

Values = Sequence[float] | npt.NDArray[np.floating]


def _values(xs: Values, side: str) -> npt.NDArray[np.float64]:
    arr = np.asarray(xs, dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"side {side}: a non-empty list of values is needed")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"side {side}: values must be finite and positive (times, rates) for a relative change")
    return arr


# Below MIN_VALUES a side there is no interval; below MIN_SAME the bootstrap interval of a median is too
# narrow to rule a change out: at 3 values a side 5.7 % of its upper ends fall short of a true change where
# 2.5 % should (simulated), at 5 and more about 2.5 %. Two equal constant samples are SAME from MIN_VALUES.
MIN_VALUES, MIN_SAME = 3, 5


@cache
def reachable_n(alpha: float) -> int:
    """The fewest values a side at which min(KS, MWU) can reach p ≤ alpha at all (perfectly separated)."""
    n = 2
    while stats.mannwhitneyu(range(n), range(n, 2 * n), method="exact").pvalue > alpha:
        n += 1
    return n


@dataclass(frozen=True)
class SampleComparison:
    """Two samples of one metric (b against a), one value per measurement pass."""

    n_a: int
    n_b: int
    median_a: float
    median_b: float
    change: float  # median_b / median_a − 1
    ci: tuple[float, float] | None  # bootstrap interval of `change`; None below 3 values a side
    iqr_effect: float | None  # (median_b − median_a) / mean of the two IQRs; None when both IQRs are 0
    p: float  # min(p_ks, p_mwu)
    p_ks: float
    p_mwu: float
    alpha: float
    min_effect: float
    confidence: float
    call: Call
    reason: str
    needed_n: int | None  # values a side that would likely settle an unsure call

    @property
    def reaches_margin(self) -> bool:
        return abs(self.change) >= self.min_effect

    def describe(self) -> str:
        ci = f" [{pct(self.ci[0])}, {pct(self.ci[1])}]" if self.ci else ""
        sizes = sizes_text(self.n_a, self.n_b, "passes", self.needed_n)
        return f"{pct(self.change)}{ci}, {p_text(self.p)}, {self.call.text} ({sizes})"


def _median_ratio(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], axis: int = -1) -> object:
    return np.median(y, axis=axis) / np.median(x, axis=axis) - 1


def compare_samples(a: Values, b: Values, *, min_effect: float = 0.03, alpha: float = 0.01,
                    confidence: float = 0.95, resamples: int = 10_000, seed: int = 0) -> SampleComparison:
    """Compare two samples of a performance metric, b against a.

    p = min(KS, MWU), both two-sided, as Pinpoint: MWU misses a change of spread, KS is weak on discrete
    values. The change is that of the medians (robust to one slow pass), with a seeded bootstrap interval.
    DIFFERENT: p ≤ alpha, |change| ≥ min_effect and the interval leaves 0 out (out of reach below
    `reachable_n(alpha)` values a side: 5 at 0.01). SAME: the interval lies inside ±min_effect, from
    MIN_SAME values a side. Below MIN_VALUES there is no interval and no call. Values must be positive.
    alpha 0.01 is Pinpoint's; the minimum of two p-values makes the real false-positive rate up to twice it.
    The effect is the median's: a minority of passes slowing down (a quarter twice as slow) moves p but not
    the median, and can end SAME; a tail is watched by making a high percentile a metric of its own.
    """
    x, y = _values(a, "a"), _values(b, "b")
    med_a, med_b = float(np.median(x)), float(np.median(y))
    change = med_b / med_a - 1
    with warnings.catch_warnings():  # near p = 1 scipy falls back from the exact KS p to the asymptotic one
        warnings.filterwarnings("ignore", "ks_2samp: Exact calculation unsuccessful", RuntimeWarning)
        p_ks = float(stats.ks_2samp(x, y).pvalue)
    p_mwu = float(stats.mannwhitneyu(x, y, alternative="two-sided").pvalue)
    p = min(p_ks, p_mwu)
    pooled_iqr = (float(stats.iqr(x)) + float(stats.iqr(y))) / 2
    iqr_effect = (med_b - med_a) / pooled_iqr if pooled_iqr > 0 else (0.0 if med_a == med_b else None)
    n, fewest = 2 / (1 / x.size + 1 / y.size), min(x.size, y.size)
    constant = np.ptp(x) == 0 and np.ptp(y) == 0
    ci: tuple[float, float] | None = None
    needed: int | None = None
    if fewest < MIN_VALUES:
        call, reason = Call.UNSURE, f"{x.size} vs {y.size} values: at least {MIN_VALUES} a side are needed"
        needed = max(MIN_SAME, reachable_n(alpha))
    else:
        if constant:  # nothing to resample: the interval is the estimate
            ci = (change, change)
        else:
            ci = bootstrap_ci((x, y), _median_ratio, False, confidence, resamples, seed)
        too_few = None if fewest >= MIN_SAME or constant else f"{MIN_SAME} values a side are needed to rule it out"
        call, reason = decide(p, alpha, change, ci, min_effect, "%", confidence, too_few)
        if call is Call.UNSURE:
            # More values cannot beat the floor of what the rank tests, or the interval, can show.
            floor = reachable_n(alpha) if abs(change) >= min_effect else MIN_SAME
            needed = settle_n(n, change, ci, min_effect, alpha, confidence)
            needed = max(needed or 0, floor) if fewest < floor else needed
    return SampleComparison(x.size, y.size, med_a, med_b, change, ci, iqr_effect, p, p_ks, p_mwu, alpha,
                            min_effect, confidence, call, reason, needed)


@dataclass(frozen=True)
class NoiseFloor:
    """What two samples of the same commit (an A-vs-A) differ by: the noise every A/B carries."""

    n: float  # values a side (harmonic mean of the two sizes)
    change: float  # the relative change of medians between the two: ideally 0
    ci: tuple[float, float]
    half_width: float  # half the interval: a change smaller than this is inside the noise
    confidence: float

    @property
    def stderr(self) -> float:
        """The standard error of the relative change, read off the interval's width."""
        return self.half_width / z(self.confidence)

    def describe(self) -> str:
        return (f"A-vs-A {pct(self.change)} [{pct(self.ci[0])}, {pct(self.ci[1])}]: noise ±"
                f"{self.half_width * 100:.1f} % at {self.n:g} passes each")


def noise_floor(first: Values, second: Values, *, confidence: float = 0.95, resamples: int = 10_000,
                seed: int = 0) -> NoiseFloor:
    """The noise floor from an A-vs-A, measured with the same bootstrap as compare_samples."""
    cmp = compare_samples(first, second, min_effect=0.0, confidence=confidence, resamples=resamples, seed=seed)
    if cmp.ci is None:
        raise ValueError("a noise floor needs at least 3 values a side")
    return NoiseFloor(2 / (1 / cmp.n_a + 1 / cmp.n_b), cmp.change, cmp.ci, (cmp.ci[1] - cmp.ci[0]) / 2,
                      confidence)


@dataclass(frozen=True)
class Detectable:
    """The smallest relative change that n values a side would find with the given power; None: out of reach."""

    change: float | None
    n: float
    alpha: float
    power: float

    def describe(self) -> str:
        if self.change is None:
            return f"p ≤ {self.alpha:g} is out of reach at {self.n:g} passes each"
        return (f"a change of ±{self.change * 100:.1f} % is found {self.power:.0%} of the time at "
                f"{self.n:g} passes each (alpha {self.alpha:g})")


def detectable_change(floor: NoiseFloor, *, alpha: float = 0.01, power: float = 0.8,
                      n: float | None = None) -> Detectable:
    """The smallest change these settings find with `power`: (z_{1−α/2} + z_{√power}) standard errors.

    The standard error is the A-vs-A's, scaled by √(its n / n) for another number of passes, with the normal
    approximation of the median ratio. A DIFFERENT needs both the rank tests and the interval to succeed;
    each is given power √power as if they were independent, which errs large (they rise and fall together):
    simulated at 10 passes and 5 % noise, the plain z_power gives about 65 % power where 80 % was asked.
    Below `reachable_n(alpha)` no change can be found.
    """
    n = floor.n if n is None else n
    if n < reachable_n(alpha):
        return Detectable(None, n, alpha, power)
    se = floor.stderr * math.sqrt(floor.n / n)
    return Detectable((z(1 - alpha) + float(stats.norm.ppf(math.sqrt(power)))) * se, n, alpha, power)


def classify_sample(candidate: Values, *, good: Values, bad: Values, min_effect: float = 0.03,
                    alpha: float = 0.01, confidence: float = 0.95, resamples: int = 10_000,
                    seed: int = 0) -> Classification[SampleComparison]:
    """A candidate's samples against the good and the bad end's."""
    def vs(base: Values, other: Values) -> SampleComparison:
        return compare_samples(base, other, min_effect=min_effect, alpha=alpha, confidence=confidence,
                               resamples=resamples, seed=seed)
    return classify(vs(good, candidate), vs(bad, candidate), vs(good, bad))
