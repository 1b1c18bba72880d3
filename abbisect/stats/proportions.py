"""Counts of yes and no: failure rates of repeated runs (flaky launches) and paired accuracy on the same
eval items, with the power of an eval to see a drop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import optimize, stats

from abbisect.stats.decide import (
    Call,
    Classification,
    bootstrap_ci,
    classify,
    decide,
    p_text,
    pts,
    settle_n,
    sizes_text,
    z,
)

Answers = Sequence[bool] | npt.NDArray[np.bool_]


# --- failure rates ---------------------------------------------------------------------------------


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of k in n: unlike the normal one it stays inside [0, 1] and is honest at k = 0."""
    if n == 0:
        return (0.0, 1.0)
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return (float(ci.low), float(ci.high))


@dataclass(frozen=True)
class RateComparison:
    """Failure rates of two sides (b against a): k of n runs failed on each."""

    k_a: int
    n_a: int
    k_b: int
    n_b: int
    rate_a: float
    rate_b: float
    ci_a: tuple[float, float]  # Wilson
    ci_b: tuple[float, float]
    difference: float  # rate_b − rate_a
    ci: tuple[float, float]  # Newcombe's interval of the difference
    p: float  # Fisher's exact test, two-sided
    alpha: float
    min_difference: float
    confidence: float
    call: Call
    reason: str
    needed_n: int | None  # runs a side that would likely settle an unsure call

    @property
    def reaches_margin(self) -> bool:
        return abs(self.difference) >= self.min_difference

    def describe(self) -> str:
        return (f"failed {self.k_a}/{self.n_a} → {self.k_b}/{self.n_b} ({pts(self.difference)} "
                f"[{pts(self.ci[0])}, {pts(self.ci[1])}]), {p_text(self.p)}, {self.call.text} "
                f"({sizes_text(self.n_a, self.n_b, 'runs', self.needed_n)})")


def compare_rates(k_a: int, n_a: int, k_b: int, n_b: int, *, min_difference: float = 0.5,
                  alpha: float = 0.05, confidence: float = 0.95) -> RateComparison:
    """Compare two failure rates, as Pinpoint's flaky-test mode does, with a margin that matters.

    `min_difference` is the smallest change of failure rate worth a verdict; 0.5 is Pinpoint's default
    flaky magnitude. Pinpoint uses it to pick its SAME threshold; here it also gates DIFFERENT, so a change
    smaller than it (0 → 30 % failures at the default) ends SAME once enough runs show it is small: lower it
    to chase rarer flakes, at the price of more runs. DIFFERENT: Fisher's p ≤ alpha and |difference| ≥
    min_difference. SAME: Newcombe's interval of the difference (the hybrid score interval built from the
    two Wilson intervals; scipy has none for a difference of proportions) lies inside ±min_difference.
    alpha defaults to 0.05, not Pinpoint's 0.01: every run is an engine launch, and Fisher's test is
    conservative on small counts (its real false-positive rate is well under alpha).
    """
    if not (0 <= k_a <= n_a and 0 <= k_b <= n_b):
        raise ValueError(f"failures must be between 0 and the runs: {k_a}/{n_a}, {k_b}/{n_b}")
    rate_a, rate_b = (k_a / n_a if n_a else 0.0), (k_b / n_b if n_b else 0.0)
    ci_a, ci_b = wilson(k_a, n_a, confidence), wilson(k_b, n_b, confidence)
    d = rate_b - rate_a
    ci = (d - math.hypot(rate_b - ci_b[0], ci_a[1] - rate_a), d + math.hypot(ci_b[1] - rate_b, rate_a - ci_a[0]))
    p = float(stats.fisher_exact([[k_a, n_a - k_a], [k_b, n_b - k_b]]).pvalue) if n_a and n_b else 1.0
    needed: int | None = None
    if not (n_a and n_b):
        call, reason = Call.UNSURE, "no runs on a side"
    else:
        call, reason = decide(p, alpha, d, ci, min_difference, "pts", confidence)
        if call is Call.UNSURE:
            needed = settle_n(2 / (1 / n_a + 1 / n_b), d, ci, min_difference, alpha, confidence)
    return RateComparison(k_a, n_a, k_b, n_b, rate_a, rate_b, ci_a, ci_b, d, ci, p, alpha, min_difference,
                          confidence, call, reason, needed)


def classify_rate(k: int, n: int, *, good: tuple[int, int], bad: tuple[int, int], min_difference: float = 0.5,
                  alpha: float = 0.05, confidence: float = 0.95) -> Classification[RateComparison]:
    """A candidate's k failures in n runs against the good and the bad end's (failures, runs)."""
    def vs(base: tuple[int, int], k_b: int, n_b: int) -> RateComparison:
        return compare_rates(*base, k_b, n_b, min_difference=min_difference, alpha=alpha, confidence=confidence)
    return classify(vs(good, k, n), vs(bad, k, n), vs(good, *bad))


# --- paired accuracy ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairedComparison:
    """Accuracy of two sides on the same items (b against a), aligned by item."""

    n: int
    accuracy_a: float
    accuracy_b: float
    ci_a: tuple[float, float]  # Wilson
    ci_b: tuple[float, float]
    lost: int  # right on a, wrong on b
    gained: int  # wrong on a, right on b
    difference: float  # accuracy_b − accuracy_a
    ci: tuple[float, float]  # paired bootstrap interval of the difference (after padding)
    p: float  # exact McNemar after padding to the A-vs-A baseline: the p the call uses
    p_mcnemar: float  # exact McNemar on the pairs as observed
    p_unpaired: float  # the two-proportion test that ignores the pairing, to show what pairing gains
    expected_flips: float  # items an A-vs-A would flip: n × baseline_flip_rate
    padded: int  # pairs added each way (lost and gained) to reach expected_flips
    alpha: float
    min_change: float
    confidence: float
    call: Call
    reason: str
    needed_n: int | None  # items that would likely settle an unsure call
    warning: str | None

    @property
    def reaches_margin(self) -> bool:
        return abs(self.difference) >= self.min_change

    def describe(self) -> str:
        settle = f"; ~{self.needed_n} items would settle it" if self.needed_n else ""
        return (f"accuracy {self.accuracy_a:.3f} → {self.accuracy_b:.3f} ({pts(self.difference)} "
                f"[{pts(self.ci[0])}, {pts(self.ci[1])}]), {self.lost} lost / {self.gained} gained, "
                f"{p_text(self.p)}, {self.call.text} ({self.n} items{settle})")


def _mean_difference(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], axis: int = -1) -> object:
    return np.mean(y, axis=axis) - np.mean(x, axis=axis)


def compare_paired(a: Answers, b: Answers, *, min_change: float = 0.02, alpha: float = 0.05,
                   baseline_flip_rate: float = 0.0, confidence: float = 0.95, resamples: int = 10_000,
                   seed: int = 0) -> PairedComparison:
    """Compare accuracy on the same items, b against a: only the items that changed answer count.

    Exact McNemar is the binomial test of lost against gained items at one half (McNemar 1947; scipy's
    binomtest on the discordant pairs); the unpaired z-test is "the wrong null model" (lm-evaluation-harness).
    `min_change` is the smallest change of accuracy worth a verdict, either way (a fix is a change too);
    0.02 is SGLang's nightly GSM8K tolerance. DIFFERENT: p ≤ alpha, |difference| ≥ min_change and the
    interval leaves 0 out; SAME: the interval lies inside ±min_change.

    `baseline_flip_rate` is the fraction of items that flipped between two runs of the same commit. A
    nondeterministic engine flips about n × that many items on any rerun, so a comparison that happened to
    see fewer discordant items overstates its certainty. Such a comparison is judged as if it had seen the
    expected number: equal numbers of lost and gained pairs are added (the net change stays), which raises
    p and widens the interval. With more discordant items than the baseline, the data speak alone.
    """
    x, y = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if x.ndim != 1 or x.shape != y.shape or x.size == 0:
        raise ValueError(f"both sides need the same non-empty list of items ({x.size} vs {y.size})")
    n = x.size
    lost, gained = int(np.sum(x & ~y)), int(np.sum(~x & y))
    k_a, k_b = int(x.sum()), int(y.sum())
    expected = n * baseline_flip_rate
    pad = min(max(0, math.ceil((expected - lost - gained) / 2)), (n - lost - gained) // 2)
    p_raw = float(stats.binomtest(lost, lost + gained).pvalue) if lost + gained else 1.0
    p = float(stats.binomtest(lost + pad, lost + gained + 2 * pad).pvalue) if lost + gained + pad else 1.0
    both = k_a + k_b
    p_unpaired = (float(stats.chi2_contingency([[k_a, n - k_a], [k_b, n - k_b]], correction=False).pvalue)
                  if 0 < both < 2 * n else 1.0)
    diff = (k_b - k_a) / n
    exact = None
    if lost + gained + pad == 0:  # nothing to resample: the change is bounded by what n items can rule out
        exact = no_discordance_bound(n, confidence)
        ci = (-exact, exact)
    else:
        xa, xb = x.astype(float), y.astype(float)
        concordant = np.flatnonzero(x == y)[: 2 * pad]
        xa[concordant[:pad]], xb[concordant[:pad]] = 1.0, 0.0
        xa[concordant[pad:]], xb[concordant[pad:]] = 0.0, 1.0
        ci = bootstrap_ci((xa, xb), _mean_difference, True, confidence, resamples, seed)
    call, reason = decide(p, alpha, diff, ci, min_change, "pts", confidence)
    needed = settle_n(n, diff, ci, min_change, alpha, confidence) if call is Call.UNSURE else None
    if exact is not None:
        reason += (f" (no item changed answer; {n:,} items bound the change to ±{exact * 100:.1f} pts, the exact "
                   f"{confidence * 100:g} % bound of a discordance none of them showed)")
        needed = items_to_rule_out(min_change, confidence) if call is Call.UNSURE else None
    if pad:
        reason += f" (judged as {lost + gained + 2 * pad} discordant items, the A-vs-A's flips, not {lost + gained})"
    warning = (f"only {n} items: below 300, intervals and p-values are rough (lm-evaluation-harness warns too)"
               if n < 300 else None)
    return PairedComparison(n, k_a / n, k_b / n, wilson(k_a, n, confidence), wilson(k_b, n, confidence), lost,
                            gained, diff, ci, p, p_raw, p_unpaired, expected, pad, alpha, min_change,
                            confidence, call, reason, needed, warning)


def no_discordance_bound(n: int, confidence: float = 0.95) -> float:
    """How far the accuracy can have moved when none of n paired items changed answer: the exact
    (Clopper–Pearson) upper bound of the discordance rate at 0 of n, two-sided at `confidence`, since a change of
    accuracy is at most the share of items that changed (1 − ((1 − confidence) / 2)^(1/n): 16.8 points at 20
    items, 3 points only from 122). A paired bootstrap has nothing to resample there and would say ±0 at any n."""
    return float(stats.binomtest(0, n).proportion_ci(confidence_level=confidence, method="exact").high)


def items_to_rule_out(margin: float, confidence: float = 0.95) -> int:
    """The fewest items, none of them changing answer, whose `no_discordance_bound` lies inside ±margin."""
    return math.floor(math.log((1 - confidence) / 2) / math.log1p(-margin)) + 1


def classify_paired(candidate: Answers, *, good: Answers, bad: Answers, min_change: float = 0.02,
                    alpha: float = 0.05, baseline_flip_rate: float = 0.0, confidence: float = 0.95,
                    resamples: int = 10_000, seed: int = 0) -> Classification[PairedComparison]:
    """A candidate's answers against the good and the bad end's, all on the same items."""
    def vs(base: Answers, other: Answers) -> PairedComparison:
        return compare_paired(base, other, min_change=min_change, alpha=alpha, confidence=confidence,
                              baseline_flip_rate=baseline_flip_rate, resamples=resamples, seed=seed)
    return classify(vs(good, candidate), vs(bad, candidate), vs(good, bad))


# --- power of an eval ---------------------------------------------------------------------------------


def _rates(accuracy: float, drop: float, flip_rate: float) -> tuple[float, float]:
    """Each item's chance to be lost and to be gained; an item can only be lost if it was right."""
    lose, gain = drop + flip_rate / 2, flip_rate / 2
    if not (0 <= accuracy <= 1 and drop >= 0 and flip_rate >= 0 and lose <= accuracy and gain <= 1 - accuracy):
        raise ValueError(f"no such eval: accuracy {accuracy:g}, drop {drop:g}, flip rate {flip_rate:g}")
    return lose, gain


def power_paired(n: int, accuracy: float, min_drop: float, *, flip_rate: float = 0.0,
                 alpha: float = 0.05) -> float:
    """The exact power of exact McNemar to see a drop of `min_drop` on n items.

    Each item is lost with probability min_drop + flip_rate/2 and gained with flip_rate/2 (the A-vs-A's
    flips, half each way). Summed over the number of discordant items d (binomial in n), the chance that
    the split of d lands in the test's rejection region on the side of a drop.
    """
    lose, gain = _rates(accuracy, min_drop, flip_rate)
    if lose + gain == 0:
        return 0.0
    d = np.arange(n + 1)
    # The largest minority count that binomtest rejects at alpha (two-sided, one half: p = 2·cdf), or −1.
    c = stats.binom.ppf(alpha / 2, d, 0.5)
    c = np.where(stats.binom.cdf(c, d, 0.5) <= alpha / 2, c, c - 1)
    reject = np.where(c >= 0, stats.binom.sf(d - c - 1, d, lose / (lose + gain)), 0.0)
    return float(np.sum(stats.binom.pmf(d, n, lose + gain) * reject))


def power_unpaired(n: int, accuracy: float, min_drop: float, *, alpha: float = 0.05) -> float:
    """The power of an unpaired two-proportion z-test (normal approximation): what ignoring the pairing costs."""
    p1, p2 = accuracy, accuracy - _rates(accuracy, min_drop, 0.0)[0]
    se = math.sqrt((p1 * (1 - p1) + p2 * (1 - p2)) / n)
    return float(stats.norm.cdf(min_drop / se - z(1 - alpha))) if se > 0 else float(min_drop > 0)


def n_for_power(accuracy: float, min_drop: float, *, power: float = 0.8, flip_rate: float = 0.0,
                alpha: float = 0.05, paired: bool = True, n_max: int = 1_000_000) -> int | None:
    """The fewest items that reach `power` (found by doubling, then bisection); None beyond n_max.

    The exact test's power saws up and down with n, so an n a little above the answer may dip under it.
    """
    def enough(n: int) -> bool:
        got = (power_paired(n, accuracy, min_drop, flip_rate=flip_rate, alpha=alpha) if paired
               else power_unpaired(n, accuracy, min_drop, alpha=alpha))
        return got >= power
    hi = 1
    while not enough(hi):
        if hi > n_max:
            return None
        hi *= 2
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


def detectable_drop(n: int, accuracy: float, *, power: float = 0.8, flip_rate: float = 0.0,
                    alpha: float = 0.05, paired: bool = True) -> float | None:
    """The smallest drop n items find with `power`; None when even the largest possible drop is missed."""
    def short(drop: float) -> float:
        got = (power_paired(n, accuracy, drop, flip_rate=flip_rate, alpha=alpha) if paired
               else power_unpaired(n, accuracy, drop, alpha=alpha))
        return got - power
    top = accuracy - flip_rate / 2 if paired else accuracy
    if top <= 0 or short(top) < 0:
        return None
    return float(optimize.brentq(short, 1e-9, top, xtol=1e-6))
