"""How a comparison is decided and told: the three calls, the sides of a bisect candidate, and the pieces
every kind of evidence shares (the bootstrap, the estimate of how many more values settle a call, the text).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, Protocol, Self, TypeVar

import numpy as np
import numpy.typing as npt
from scipy import stats


class Call(StrEnum):
    """How two sides compare. `settled`: no more runs needed (Pinpoint adds attempts while it is unsure)."""

    SAME = ("same", "same", True)
    DIFFERENT = ("different", "different", True)
    UNSURE = ("unsure", "not sure", False)

    text: str
    settled: bool

    def __new__(cls, value: str, text: str, settled: bool) -> Self:
        obj = str.__new__(cls, value)
        obj._value_, obj.text, obj.settled = value, text, settled
        return obj


class Resemblance(StrEnum):
    """Which end of a bisect a candidate resembles (`Classification.side`, the side of the divide it falls on);
    `outcome` is the bisect verdict it gives, None: run more. (A side of an A/B is the recipe's `Side`.)"""

    LIKE_GOOD = ("like_good", "like good", "good")
    LIKE_BAD = ("like_bad", "like bad", "bad")
    UNSURE = ("unsure", "not sure", None)

    text: str
    outcome: str | None

    def __new__(cls, value: str, text: str, outcome: str | None) -> Self:
        obj = str.__new__(cls, value)
        obj._value_, obj.text, obj.outcome = value, text, outcome
        return obj


class Comparison(Protocol):
    @property
    def call(self) -> Call: ...

    @property
    def p(self) -> float: ...

    @property
    def alpha(self) -> float: ...

    @property
    def reaches_margin(self) -> bool:
        """The estimated change is at least the margin that matters (only then can more runs make it DIFFERENT)."""

    def describe(self) -> str: ...


C = TypeVar("C", bound=Comparison)


@dataclass(frozen=True)
class Classification(Generic[C]):
    """A bisect candidate against both ends, with the three comparisons behind the side it was given."""

    side: Resemblance
    evidence: str
    vs_good: C
    vs_bad: C
    ends: C

    def describe(self) -> str:
        return f"{self.side.text}: {self.evidence}"


def near_floor(alpha: float) -> float:
    """The p under which a side a candidate should resemble is nearly different from it, too close to call:
    five times alpha (0.05 at Pinpoint's 0.01), at most 0.1."""
    return min(0.1, 5 * alpha)


def nearly_different(c: Comparison) -> bool:
    """Not different yet, but close: not sure, an estimate that reaches the margin, and p ≤ `near_floor`. A
    comparison that is SAME, or whose change is under the margin (it cannot become DIFFERENT unless the
    estimate itself grows), is never nearly different however small its p."""
    return c.call is Call.UNSURE and c.reaches_margin and c.p <= near_floor(c.alpha)


def classify(vs_good: C, vs_bad: C, ends: C) -> Classification[C]:
    """Like bad when it differs from good and not from bad (and the other way round); not sure when the side
    it should resemble is nearly different too (`nearly_different`): with one end's sample high or low by chance
    (a bad end that crashed 16 times in 30 where its rate is 1/3), a commit with the bug can differ from that
    end first, and would otherwise be called good (a simulation of 300 flaky bisects: 6 such wrong answers).

    "Not different" rather than SAME on the near side: a SAME needs several times the runs of a DIFFERENT
    (its interval must fit inside the margin), and a bisect step that had to wait for it would cost more
    than the step is worth; the far side's DIFFERENT carries the evidence. Ends that cannot be told apart
    leave nothing to place a candidate between.
    """
    good, bad = vs_good.call is Call.DIFFERENT, vs_bad.call is Call.DIFFERENT
    if ends.call is not Call.DIFFERENT:
        side, why = Resemblance.UNSURE, f"the ends are {ends.call.text} ({ends.describe()})"
    elif good and not bad and nearly_different(vs_bad):
        side, why = Resemblance.UNSURE, (f"differs from good ({vs_good.describe()}) and nearly from bad "
                                         f"({vs_bad.describe()})")
    elif bad and not good and nearly_different(vs_good):
        side, why = Resemblance.UNSURE, (f"differs from bad ({vs_bad.describe()}) and nearly from good "
                                         f"({vs_good.describe()})")
    elif good and not bad:
        side, why = Resemblance.LIKE_BAD, (f"differs from good ({vs_good.describe()}), not from bad "
                                           f"({vs_bad.describe()})")
    elif bad and not good:
        side, why = Resemblance.LIKE_GOOD, (f"differs from bad ({vs_bad.describe()}), not from good "
                                            f"({vs_good.describe()})")
    else:
        which = "differs from both ends" if good else "not told apart from either end"
        side, why = Resemblance.UNSURE, f"{which} (good: {vs_good.describe()}; bad: {vs_bad.describe()})"
    return Classification(side, why, vs_good, vs_bad, ends)


def pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def pts(x: float) -> str:
    return f"{x * 100:+.1f} pts"


def p_text(p: float) -> str:
    return "p < 0.0001" if p < 1e-4 else f"p = {p:.2g}"


def sizes_text(n_a: int, n_b: int, unit: str, needed_n: int | None) -> str:
    """How many `unit` (runs, passes) each side had, and how many each would likely settle an unsure call."""
    each = f"{n_a} {unit} each" if n_a == n_b else f"{n_a} vs {n_b} {unit}"
    return each + (f"; ~{needed_n} {unit} each would settle it" if needed_n else "")


def z(confidence: float) -> float:
    """The normal quantile of a two-sided interval at `confidence`: 1.96 at 0.95."""
    return float(stats.norm.ppf(0.5 + confidence / 2))


def decide(p: float, alpha: float, change: float, ci: tuple[float, float], margin: float, unit: str,
           confidence: float, too_few: str | None = None) -> tuple[Call, str]:
    """The rule every kind of evidence shares (the package's docstring says why there are three calls).

    DIFFERENT: p ≤ alpha, |change| ≥ margin and the interval leaves 0 out. SAME: the interval lies inside
    ±margin, unless `too_few` says why this interval cannot be trusted to rule a change out. The reason
    names what held a call back, so a reader knows whether more runs can help.
    """
    limit, level = f"±{margin * 100:g} {unit}", f"{confidence * 100:g} %"
    if p <= alpha and abs(change) >= margin and (ci[0] > 0 or ci[1] < 0):
        return Call.DIFFERENT, f"{p_text(p)} ≤ {alpha:g} and the change reaches {limit}"
    inside = -margin < ci[0] and ci[1] < margin
    if inside and too_few is None:
        return Call.SAME, f"the {level} interval lies within {limit}"
    if p > alpha:
        not_different = f"{p_text(p)} > {alpha:g}"
    elif abs(change) < margin:
        not_different = f"the change is under {limit}"
    else:
        not_different = f"the {level} interval includes 0"
    return Call.UNSURE, f"{not_different}, and {too_few if inside else f'the interval reaches past {limit}'}"


def settle_n(n: float, change: float, ci: tuple[float, float], margin: float, alpha: float,
             confidence: float) -> int | None:
    """Values a side at which an interval narrowing as 1/√n around today's estimate would settle the call.

    Toward DIFFERENT when the estimate already reaches the margin (the interval at the test's level must
    leave 0 out), toward SAME otherwise (the interval must fit inside ±margin). It assumes the estimate and
    the spread stay put, so it is an even chance, not a promise: of A-vs-A draws of 10 passes (simulated),
    about half settle at the n suggested, fewer where it is small (an interval narrow by chance). None when
    the estimate sits on the margin or the answer would pass 100,000 (more runs will not settle it).
    """
    half = (ci[1] - ci[0]) / 2
    if abs(change) >= margin:
        gap, half = abs(change), half * z(1 - alpha) / z(confidence)
    else:
        gap = margin - abs(change)
    if gap <= 0 or half <= 0:
        return None
    need = math.ceil(n * (half / gap) ** 2)
    return max(need, math.floor(n) + 1) if need <= 100_000 else None


# BCa's jackknife costs n² statistics; above this many values a side the percentile interval, which by then
# agrees with BCa, is used instead.
BCA_MAX = 5_000


def bootstrap_ci(data: tuple[npt.NDArray[np.float64], ...], statistic: Callable[..., object], paired: bool,
                 confidence: float, resamples: int, seed: int) -> tuple[float, float]:
    """A seeded BCa bootstrap interval (scipy's default: it corrects for bias and skew); the percentile one
    where BCa degenerates (its jackknife finds no spread, e.g. two identical samples, and returns NaN)."""
    methods = ("BCa", "percentile") if max(len(d) for d in data) <= BCA_MAX else ("percentile",)
    for method in methods:
        with warnings.catch_warnings():  # the NaN says it; the warnings that come with it say nothing more
            warnings.simplefilter("ignore", RuntimeWarning)
            warnings.simplefilter("ignore", stats.DegenerateDataWarning)
            ci = stats.bootstrap(data, statistic, paired=paired, vectorized=True, n_resamples=resamples,
                                 confidence_level=confidence, method=method, batch=1000,
                                 rng=np.random.default_rng(seed)).confidence_interval
        if np.isfinite(ci.low) and np.isfinite(ci.high):
            break
    return (float(ci.low), float(ci.high))
