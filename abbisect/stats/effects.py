"""Effects on one additive scale, and what is left of the ends' difference once the changes found are taken out.

A change's effect is measured between its parent and itself, the ends' between the ends, each on a scale where the
effects along the range add up to the ends' (they telescope): the log ratio of a metric's medians (a performance
verdict), the difference of failure rates, the difference of accuracy over one basis of items. What the changes
named do not account for is the ends' effect minus theirs, measured as one sum (an assessor's `effect` of several
terms), so a commit counted twice is counted once and an accuracy's items keep their pairing. Pure functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

NATS = "nats/token"  # the unit of a numerics verdict's effect (abbisect/assess/numerics.py), told as it is


@dataclass(frozen=True)
class Effect:
    """A difference (after against before) on an additive scale, with its interval at `confidence`. `unit` says
    the scale in words; `relative`: the value is a log ratio, told as a relative change."""

    value: float
    lo: float
    hi: float
    confidence: float
    unit: str
    relative: bool = False
    worse_up: bool = True  # a larger value is worse (a slower TPOT, more failures); False: a smaller one (accuracy)

    @property
    def regression(self) -> bool:
        """Whether it makes things worse (else it is a fix)."""
        return (self.value > 0) == self.worse_up

    @property
    def se(self) -> float:
        """The standard error its interval implies (normal)."""
        return max(self.hi - self.lo, 0.0) / (2 * float(stats.norm.ppf(0.5 + self.confidence / 2)))

    def told(self, value: float | None = None) -> str:
        """`+6.1 %` (a relative change) or `−0.052` (a difference): the effect's value, or `value` on its scale."""
        v = self.value if value is None else value
        if self.relative:
            return f"{math.expm1(v) * 100:+.1f} %"
        if self.unit == NATS:
            return f"{v:+.4f} nats/token"
        return f"{v * 100:+.1f} points"

    def describe(self) -> str:
        """`+6.1 % [+3.9 %, +8.4 %]`."""
        return f"{self.told()} [{self.told(self.lo)}, {self.told(self.hi)}]"

    def share(self, whole: Effect) -> float | None:
        """This effect as a share of `whole` (signed: a fix inside a regression's range is negative); None when the
        whole is nothing."""
        return self.value / whole.value if abs(whole.value) > 1e-12 else None


@dataclass(frozen=True)
class Residual:
    """What the changes found leave of the ends' effect, judged on one interval, at 1 − alpha (`left`'s, the one the
    report tells): whether it is another change (the interval leaves 0 out and reaches the smallest effect that
    matters), whether it is surely no change that matters (the interval lies within ± the smallest effect), and its
    share of the ends'. Neither: the interval holds 0 and reaches past the smallest effect (too wide to say)."""

    left: Effect
    another: bool
    small: bool
    share: float | None


def at_level(e: Effect, alpha: float) -> Effect:
    """`e` with its interval at 1 − alpha (normal, from the standard error its own interval implies)."""
    half = float(stats.norm.ppf(1 - alpha / 2)) * e.se
    return Effect(e.value, e.value - half, e.value + half, 1 - alpha, e.unit, e.relative, e.worse_up)


def residual(left: Effect, ends: Effect, least: float, alpha: float) -> Residual:
    """What the changes named leave of the ends' effect, `left` (measured as the ends' effect minus the changes',
    each commit's launches counted once), judged on its interval at 1 − alpha: another change when the interval
    leaves 0 out and reaches `least` (the smallest effect that matters, on the scale) — a part's search then says
    whether a change that large is there, as the point alone would miss one whose estimate fell short of it by
    chance; surely small when the interval lies within ± `least`. The interval judged is the one told."""
    judged = at_level(left, alpha)
    size, half = abs(judged.value), judged.hi - judged.value
    return Residual(judged, size > half and size + half >= least, -least < judged.lo and judged.hi < least,
                    judged.share(ends))
