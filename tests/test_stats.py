"""The statistics core: hand-checkable values, REGRESSIONS.md's arithmetic, symmetry, and seeded simulations
of how often each comparison calls a difference that is not there (or a sameness that is not there)."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pytest
from scipy import stats as sp

from abbisect.stats import (
    Call,
    NoiseFloor,
    Resemblance,
    classify_paired,
    classify_rate,
    classify_sample,
    compare_paired,
    compare_rates,
    compare_samples,
    detectable_change,
    detectable_drop,
    n_for_power,
    noise_floor,
    power_paired,
    power_unpaired,
    reachable_n,
    wilson,
)
from abbisect.stats.decide import settle_n

FAST = 2000  # bootstrap resamples in the simulations: the calls, not the third digit of an interval, are tested


def lognormal(seed: int, n: int, sigma: float, shift: float = 0.0) -> np.ndarray:
    """n passes of a metric around 100 with `sigma` log-normal noise, moved by `shift` (0.1 = +10 %)."""
    return 100 * np.exp(np.random.default_rng(seed).normal(math.log1p(shift), sigma, n))


def nested(n: int, right_a: int, right_b: int) -> tuple[np.ndarray, np.ndarray]:
    """Answers where every item b gets right, a gets right too: all discordant items are losses."""
    return np.arange(n) < right_a, np.arange(n) < right_b


# --- the enums -------------------------------------------------------------------------------------------


def test_calls_and_sides_carry_their_text_and_meaning() -> None:
    assert [c.text for c in Call] == ["same", "different", "not sure"]
    assert [c.settled for c in Call] == [True, True, False]
    assert Call.UNSURE == "unsure" and json.dumps(Call.UNSURE) == '"unsure"'
    assert [(s.text, s.outcome) for s in Resemblance] == [("like good", "good"), ("like bad", "bad"),
                                                          ("not sure", None)]


# --- failure rates ---------------------------------------------------------------------------------------


def test_wilson_by_hand_and_regressions_interval() -> None:
    assert wilson(0, 0) == (0.0, 1.0)
    # Upper Wilson bound of 0 in n is z²/(n + z²).
    z2 = sp.norm.ppf(0.975) ** 2
    assert wilson(0, 10)[1] == pytest.approx(z2 / (10 + z2))
    # REGRESSIONS.md: at 200 items and 0.8 accuracy the 95 % interval is about ±5.5 points.
    lo, hi = wilson(160, 200)
    assert (hi - lo) / 2 == pytest.approx(0.055, abs=0.002)


def test_rates_half_of_ten_runs_failing_is_different_by_hand() -> None:
    r = compare_rates(0, 10, 5, 10)
    # Fisher: two tables as extreme, each C(10,5)/C(20,5).
    assert r.p == pytest.approx(2 * math.comb(10, 5) / math.comb(20, 5))
    assert (r.call, r.difference, r.needed_n) == (Call.DIFFERENT, 0.5, None)


def test_rates_clean_runs_rule_out_the_margin() -> None:
    r = compare_rates(0, 10, 0, 10)
    # Newcombe's interval of 0/10 vs 0/10 is ± the Wilson upper bound of 0/10.
    assert r.ci == pytest.approx((-wilson(0, 10)[1], wilson(0, 10)[1]))
    assert r.call is Call.SAME
    assert compare_rates(0, 3, 0, 3).call is Call.UNSURE  # 3 clean runs a side do not rule out 50 points


def test_rates_a_real_change_under_the_margin_is_same_and_a_smaller_margin_finds_it() -> None:
    assert compare_rates(0, 40, 12, 40).call is Call.SAME
    assert compare_rates(0, 40, 12, 40, min_difference=0.2).call is Call.DIFFERENT


def test_rates_unsure_says_how_many_runs_and_why() -> None:
    r = compare_rates(0, 10, 4, 10)
    assert r.call is Call.UNSURE and r.needed_n is not None and r.needed_n > 10
    assert "> 0.05" in r.reason and "±50 pts" in r.reason
    assert compare_rates(0, 0, 1, 3).call is Call.UNSURE
    with pytest.raises(ValueError):
        compare_rates(11, 10, 0, 10)


def test_rates_swapped_sides_mirror() -> None:
    r, s = compare_rates(2, 12, 7, 11), compare_rates(7, 11, 2, 12)
    assert (s.p, s.difference) == (pytest.approx(r.p), -r.difference)
    assert s.ci == pytest.approx((-r.ci[1], -r.ci[0]))


def test_rates_false_different_on_equal_rates_is_below_alpha() -> None:
    rng = np.random.default_rng(0)
    calls = [compare_rates(int(rng.binomial(20, 0.3)), 20, int(rng.binomial(20, 0.3)), 20, min_difference=0.0).call
             for _ in range(200)]
    assert calls.count(Call.DIFFERENT) / len(calls) <= 0.05


def test_classify_rate_places_a_candidate() -> None:
    assert classify_rate(5, 10, good=(0, 10), bad=(6, 10)).side is Resemblance.LIKE_BAD
    assert classify_rate(0, 10, good=(0, 10), bad=(6, 10)).side is Resemblance.LIKE_GOOD
    c = classify_rate(1, 10, good=(0, 10), bad=(1, 10))
    assert c.side is Resemblance.UNSURE and c.evidence.startswith("the ends are")


# --- continuous samples ----------------------------------------------------------------------------------


def test_samples_a_planted_ten_percent_shift_is_different() -> None:
    r = compare_samples(lognormal(1, 10, 0.05), lognormal(2, 10, 0.05, 0.10))
    assert r.call is Call.DIFFERENT and r.ci is not None and r.ci[0] > 0
    assert r.change == pytest.approx(0.10, abs=0.04) and r.iqr_effect is not None and r.iqr_effect > 1
    assert re.fullmatch(r"\+\d+\.\d % \[\+\d+\.\d %, \+\d+\.\d %\], p [=<] [\d.e-]+, different \(10 passes each\)",
                        r.describe())
    # ... and most of the time, not only for one draw (about 85 % at these settings).
    found = [compare_samples(lognormal(s, 10, 0.05), lognormal(s + 1000, 10, 0.05, 0.10), resamples=FAST).call
             for s in range(40)]
    assert found.count(Call.DIFFERENT) >= 30


def test_samples_one_distribution_is_never_different() -> None:
    r = compare_samples(lognormal(3, 10, 0.05), lognormal(4, 10, 0.05))
    assert r.call in (Call.SAME, Call.UNSURE)
    # Quiet enough, the same draw settles as SAME.
    assert compare_samples(lognormal(3, 10, 0.01), lognormal(4, 10, 0.01)).call is Call.SAME


def test_samples_false_different_on_one_distribution_is_at_most_alpha_ish() -> None:
    calls = [compare_samples(lognormal(s, 10, 0.05), lognormal(s + 1000, 10, 0.05), min_effect=0.0,
                             resamples=FAST).call for s in range(200)]
    assert calls.count(Call.DIFFERENT) / len(calls) <= 0.05


def test_samples_false_same_at_the_margin_is_rare() -> None:
    # A true change of exactly min_effect must not be called SAME more than (1 − confidence)/2 of the time,
    # give or take: the equivalence rule's own error rate.
    calls = [compare_samples(lognormal(s, 10, 0.01), lognormal(s + 1000, 10, 0.01, 0.03), resamples=FAST).call
             for s in range(200)]
    assert calls.count(Call.SAME) / len(calls) <= 0.05


def test_samples_swapped_sides_mirror() -> None:
    a, b = lognormal(5, 9, 0.05), lognormal(6, 11, 0.05, 0.04)
    r, s = compare_samples(a, b), compare_samples(b, a)
    assert (s.p, s.p_ks, s.p_mwu) == (r.p, r.p_ks, r.p_mwu)
    assert (1 + r.change) * (1 + s.change) == pytest.approx(1)
    assert s.iqr_effect == pytest.approx(-r.iqr_effect)


def test_samples_p_is_the_smaller_of_ks_and_mwu() -> None:
    # Pinpoint's two examples (shifted to positive values): MWU sees the shift in a discrete sample, KS the
    # change of spread; the combined p is the smaller.
    discrete = compare_samples([1] * 20, [1] * 15 + [2] * 5)
    assert discrete.p == discrete.p_mwu < 0.05 and discrete.p_ks > 0.5
    spread = compare_samples(list(range(11, 31)), list(range(1, 11)) + list(range(31, 41)))
    assert spread.p == spread.p_ks < 0.05 and spread.p_mwu == 1.0
    assert spread.change == 0.0 and spread.call is Call.UNSURE


def test_samples_a_change_in_a_minority_of_passes_does_not_move_the_median() -> None:
    # A known limit of the median's change, pinned: a quarter of the passes twice as slow is significant,
    # yet the median and its interval stay put, so the call is SAME. Tails need a percentile as a metric.
    r = compare_samples([1] * 40, [1] * 30 + [2] * 10)
    assert r.p <= 0.01 and r.ci == (0.0, 0.0) and r.call is Call.SAME


def test_samples_seeded_bootstrap_is_reproducible() -> None:
    a, b = lognormal(7, 10, 0.05), lognormal(8, 10, 0.05)
    assert compare_samples(a, b, seed=3) == compare_samples(a, b, seed=3)
    assert compare_samples(a, b, seed=3).ci != compare_samples(a, b, seed=4).ci


def test_samples_tiny_and_constant() -> None:
    r = compare_samples([5, 5], [6, 6, 7])
    assert (r.call, r.ci) == (Call.UNSURE, None) and "at least 3" in r.reason
    assert r.needed_n == reachable_n(0.01) == 5
    same = compare_samples([5, 5, 5], [5, 5, 5])
    assert (same.call, same.change, same.ci, same.iqr_effect, same.p) == (Call.SAME, 0.0, (0.0, 0.0), 0.0, 1.0)
    three = compare_samples([5, 5, 5], [6, 6, 6])  # p cannot reach 0.01 with 3 a side
    assert (three.call, three.ci, three.iqr_effect) == (Call.UNSURE, pytest.approx((0.2, 0.2)), None)
    assert three.needed_n == 5
    assert compare_samples([5] * 5, [6] * 5).call is Call.DIFFERENT
    # 4 values a side: the interval may fit, but it is not trusted to rule a change out yet.
    four = compare_samples([1.0, 1.01, 0.99, 1.0], [1.0, 1.0, 1.0, 1.01])
    assert four.call is Call.UNSURE and "5 values a side" in four.reason


@pytest.mark.parametrize("bad", [[1.0, math.nan, 2.0], [1.0, -2.0, 3.0], [1.0, math.inf, 2.0], []])
def test_samples_refuse_values_without_a_relative_change(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        compare_samples(bad, [1.0, 2.0, 3.0])


def test_samples_needed_n_is_an_even_chance_not_a_promise() -> None:
    settled = []
    for s in range(40):
        r = compare_samples(lognormal(s, 10, 0.05), lognormal(s + 1000, 10, 0.05), resamples=FAST)
        if r.call is Call.UNSURE and r.needed_n is not None and r.needed_n <= 1000:
            again = compare_samples(lognormal(s + 2000, r.needed_n, 0.05), lognormal(s + 3000, r.needed_n, 0.05),
                                    resamples=FAST)
            settled.append(again.call.settled)
    assert len(settled) >= 25
    assert 0.3 <= sum(settled) / len(settled) <= 0.8  # about half; 10 passes more would settle far fewer


def test_settle_n_by_hand() -> None:
    # An interval ±6 % around 0 must shrink to ±3 %: four times the values.
    assert settle_n(10, 0.0, (-0.06, 0.06), 0.03, 0.05, 0.95) == 40
    assert settle_n(10, 0.03, (-0.03, 0.09), 0.03, 0.05, 0.95) == 40  # toward DIFFERENT: 0 must leave a ±6 %
    assert settle_n(10, 0.0, (0.0, 0.0), 0.03, 0.05, 0.95) is None


def test_noise_floor_and_detectable_change_by_hand() -> None:
    floor = NoiseFloor(n=10, change=0.0, ci=(-0.05, 0.05), half_width=0.05, confidence=0.95)
    z = sp.norm.ppf
    d = detectable_change(floor, alpha=0.01, power=0.8)
    assert d.change == pytest.approx((z(0.995) + z(math.sqrt(0.8))) * 0.05 / z(0.975))
    assert detectable_change(floor, n=40).change == pytest.approx(d.change / 2)
    assert detectable_change(floor, n=4).change is None  # p ≤ 0.01 needs 5 a side


def test_detectable_change_is_found_about_as_often_as_promised() -> None:
    floor = noise_floor(lognormal(11, 40, 0.05), lognormal(12, 40, 0.05), resamples=FAST)
    assert floor.half_width == pytest.approx(0.05 * 1.2533 * math.sqrt(2 / 40) * 1.96, rel=0.4)
    change = detectable_change(floor, n=10).change
    assert change is not None
    found = [compare_samples(lognormal(s, 10, 0.05), lognormal(s + 1000, 10, 0.05, change), min_effect=0.0,
                             resamples=FAST).call for s in range(40)]
    assert found.count(Call.DIFFERENT) / len(found) >= 0.7  # 0.8 promised, give or take the A-vs-A's own noise
    with pytest.raises(ValueError):
        noise_floor([1.0, 2.0], [1.0, 2.0])


def test_classify_sample_places_a_candidate() -> None:
    good, bad = lognormal(20, 10, 0.03), lognormal(21, 10, 0.03, 0.12)
    like_bad = classify_sample(lognormal(22, 10, 0.03, 0.12), good=good, bad=bad)
    assert like_bad.side is Resemblance.LIKE_BAD and like_bad.describe().startswith("like bad: differs from good")
    assert classify_sample(lognormal(23, 10, 0.03), good=good, bad=bad).side is Resemblance.LIKE_GOOD
    assert classify_sample(good, good=good, bad=lognormal(24, 10, 0.03)).side is Resemblance.UNSURE


# --- paired accuracy -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "p"), [(200, 0.16), (500, 0.028), (1319, 0.0004)])
def test_paired_regressions_unpaired_p_and_what_pairing_gains(n: int, p: float) -> None:
    # REGRESSIONS.md: 0.78 → 0.72 unpaired gives p ≈ 0.16 at 200 items, 0.028 at 500, 0.0004 at 1,319.
    a, b = nested(n, round(0.78 * n), round(0.72 * n))
    r = compare_paired(a, b, resamples=FAST)
    assert r.p_unpaired == pytest.approx(p, rel=0.1)
    assert r.p_mcnemar < r.p_unpaired and r.call is Call.DIFFERENT


def test_paired_mcnemar_by_hand() -> None:
    r = compare_paired(*nested(200, 156, 144), resamples=FAST)
    assert (r.lost, r.gained, r.difference) == (12, 0, pytest.approx(-0.06))
    assert r.p_mcnemar == r.p == pytest.approx(2 * 0.5**12)  # all 12 discordant items one way
    assert r.ci_a == wilson(156, 200) and r.warning is not None and "300" in r.warning
    assert compare_paired(*nested(300, 240, 240), resamples=FAST).warning is None
    assert re.fullmatch(r"accuracy 0\.780 → 0\.720 \(-6\.0 pts \[-\d+\.\d pts, -\d+\.\d pts\]\), 12 lost / 0 gained, "
                        r"p = 0\.00049, different \(200 items\)", r.describe())


def test_paired_baseline_flips_make_the_call_stricter() -> None:
    a = np.arange(500) < 382
    b = a.copy()
    b[:9], b[499] = False, True  # 9 lost, 1 gained
    plain = compare_paired(a, b, min_change=0.01)
    assert plain.call is Call.DIFFERENT and plain.p == pytest.approx(sp.binomtest(9, 10).pvalue)
    noisy = compare_paired(a, b, min_change=0.01, baseline_flip_rate=0.1)  # an A-vs-A flips 50 items
    assert (noisy.padded, noisy.p_mcnemar) == (20, plain.p)
    assert noisy.p == pytest.approx(sp.binomtest(29, 50).pvalue) and noisy.call is Call.UNSURE
    assert noisy.ci[0] < plain.ci[0] and noisy.ci[1] > plain.ci[1]
    # A comparison that already flips more than the baseline is judged on its own pairs.
    few = compare_paired(a, b, min_change=0.01, baseline_flip_rate=0.01)
    assert (few.padded, few.p, few.ci, few.call) == (0, plain.p, plain.ci, plain.call)


def test_paired_baseline_never_lowers_p() -> None:
    rng = np.random.default_rng(5)
    for _ in range(20):
        a = rng.random(300) < 0.8
        b = np.where(rng.random(300) < 0.1, ~a, a)
        ps = [compare_paired(a, b, baseline_flip_rate=f, resamples=500).p for f in (0.0, 0.1, 0.2, 0.4)]
        assert ps == sorted(ps)


def test_paired_swapped_sides_mirror() -> None:
    rng = np.random.default_rng(6)
    a = rng.random(400) < 0.75
    b = np.where(rng.random(400) < 0.12, ~a, a)
    r, s = compare_paired(a, b), compare_paired(b, a)
    assert (s.lost, s.gained, s.p, s.p_unpaired) == (r.gained, r.lost, r.p, r.p_unpaired)
    assert s.difference == pytest.approx(-r.difference)
    assert s.ci == pytest.approx((-r.ci[1], -r.ci[0]))


def test_paired_identical_answers_are_same_with_enough_items() -> None:
    a = np.arange(1000) % 5 != 0
    r = compare_paired(a, a)
    bound = 1 - 0.025 ** (1 / 1000)  # Clopper–Pearson's upper bound at 0 of 1000, by hand
    assert (r.call, r.p) == (Call.SAME, 1.0) and r.ci == pytest.approx((-bound, bound))
    with pytest.raises(ValueError):
        compare_paired([True, False], [True])


def test_paired_false_different_on_one_commit_is_at_most_alpha() -> None:
    # A nondeterministic engine: most items settled, 15 % coin flips; both sides are runs of one commit.
    different = 0
    for s in range(200):
        rng = np.random.default_rng(s)
        p = rng.choice([0.98, 0.03, 0.5], size=300, p=[0.7, 0.15, 0.15])
        r = compare_paired(rng.random(300) < p, rng.random(300) < p, min_change=0.0, resamples=1000)
        different += r.call is Call.DIFFERENT
    assert different / 200 <= 0.05


def test_classify_paired_places_a_candidate() -> None:
    rng = np.random.default_rng(7)
    good = rng.random(600) < 0.8
    bad = good & (rng.random(600) < 0.85)  # loses about 12 points
    assert classify_paired(good.copy(), good=good, bad=bad).side is Resemblance.LIKE_GOOD
    assert classify_paired(bad.copy(), good=good, bad=bad).side is Resemblance.LIKE_BAD
    assert classify_paired(good.copy(), good=good, bad=good.copy()).side is Resemblance.UNSURE


# --- power of an eval ------------------------------------------------------------------------------------


def test_power_paired_by_hand() -> None:
    assert power_paired(5, 1.0, 1.0) == 0.0  # 5 of 5 lost: p = 2/32 > 0.05
    assert power_paired(6, 1.0, 1.0) == pytest.approx(1.0)  # 6 of 6: p = 2/64
    # Half the items are lost, none gained: only all 6 lost (chance 1/64) reaches p ≤ 0.05.
    assert power_paired(6, 0.5, 0.5) == pytest.approx(1 / 64)
    assert power_paired(100, 0.8, 0.0) == 0.0
    with pytest.raises(ValueError):
        power_paired(100, 0.1, 0.2)  # cannot lose more than was right


@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_power_paired_matches_binomtest_rejections(alpha: float) -> None:
    # The same power, summed with binomtest itself deciding each split of d discordant items.
    n, lose, gain = 60, 0.1, 0.05
    total = 0.0
    for d in range(n + 1):
        rejecting = [k for k in range(d // 2 + 1, d + 1) if sp.binomtest(k, d).pvalue <= alpha]
        if rejecting:
            total += sp.binom.pmf(d, n, lose + gain) * sp.binom.sf(min(rejecting) - 1, d, lose / (lose + gain))
    assert power_paired(n, 0.8, 0.05, flip_rate=0.1, alpha=alpha) == pytest.approx(total, rel=1e-9)


def test_regressions_detectable_drops_unpaired() -> None:
    # REGRESSIONS.md: unpaired at 0.8, the smallest drop found 80 % of the time is about 12 points at
    # 200 items and about 4.7 at 1,319.
    assert detectable_drop(200, 0.8, paired=False) == pytest.approx(0.12, abs=0.01)
    assert detectable_drop(1319, 0.8, paired=False) == pytest.approx(0.047, abs=0.003)
    assert power_unpaired(200, 0.8, 0.12) == pytest.approx(0.8, abs=0.02)


def test_pairing_finds_smaller_drops_with_fewer_items() -> None:
    paired = detectable_drop(200, 0.8, flip_rate=0.1)
    assert paired is not None and paired < 0.12 * 0.8
    n_paired = n_for_power(0.8, 0.05, flip_rate=0.1)
    n_unpaired = n_for_power(0.8, 0.05, paired=False)
    assert n_paired is not None and n_unpaired is not None and n_paired < n_unpaired / 1.5
    assert power_paired(n_paired, 0.8, 0.05, flip_rate=0.1) >= 0.8
    assert power_unpaired(n_unpaired, 0.8, 0.05) >= 0.8 > power_unpaired(n_unpaired - 1, 0.8, 0.05)
    assert n_for_power(0.8, 0.0, n_max=1000) is None


# --- reports ---------------------------------------------------------------------------------------------


def test_results_are_frozen_and_json_friendly() -> None:
    results = [compare_rates(1, 10, 6, 10), compare_samples(lognormal(30, 6, 0.05), lognormal(31, 6, 0.05)),
               compare_paired(*nested(50, 40, 35), resamples=FAST), classify_rate(5, 10, good=(0, 10), bad=(6, 10))]
    for r in results:
        text = json.dumps(dataclasses.asdict(r))
        assert "NaN" not in text and "Infinity" not in text
        assert "\n" not in r.describe()
        with pytest.raises(dataclasses.FrozenInstanceError):
            r.call = Call.SAME


def test_a_candidate_nearly_different_from_the_end_it_resembles_is_not_sure():
    """benchmarks/RESULTS.md's wrong answer: 7 failures in 36 against a good end at 0/30 and a bad end at 16/30
    (high by chance) differs from the bad end and only nearly from the good one; it was called like good."""
    from abbisect.stats import Resemblance, classify_rate
    from abbisect.stats.decide import near_floor

    found = classify_rate(7, 36, good=(0, 30), bad=(16, 30), min_difference=0.15, alpha=0.01)
    assert found.vs_bad.call.text == "different" and found.vs_good.call.text != "different"
    assert found.vs_good.p <= near_floor(0.01) == 0.05
    assert found.side is Resemblance.UNSURE and "nearly from good" in found.evidence
    # far from the good end's rate as well as the bad end's: no longer near, it is called
    clear = classify_rate(1, 36, good=(0, 30), bad=(16, 30), min_difference=0.15, alpha=0.01)
    assert clear.side is Resemblance.LIKE_GOOD, clear.evidence


def test_a_candidate_same_as_an_end_is_never_nearly_different_from_it_however_small_p():
    """A culprit "same" as the bad end (−1 %, its interval inside the 3 % min_effect) with p ≈ 0.003 is not
    "nearly different" on its p alone (a bisect would end ambiguous on it). The near-side rule respects
    the call and the margin: only a not-sure comparison whose change reaches the margin is near."""
    from abbisect.stats.decide import nearly_different

    good, bad = lognormal(40, 20, 0.01), lognormal(41, 20, 0.01, -0.12)
    found = classify_sample(lognormal(42, 20, 0.01, -0.131), good=good, bad=bad)
    assert found.vs_good.call is Call.DIFFERENT
    assert found.vs_bad.call is Call.SAME and found.vs_bad.p <= 0.05 and abs(found.vs_bad.change) < 0.03
    assert not nearly_different(found.vs_bad)
    assert found.side is Resemblance.LIKE_BAD, found.evidence
    # Not sure, p small, but a change under the margin: it cannot become different unless the estimate grows.
    under = compare_samples(lognormal(44, 10, 0.02), lognormal(144, 10, 0.02, -0.02), min_effect=0.03)
    assert under.call is Call.UNSURE and under.p <= 0.05 and not under.reaches_margin
    assert not nearly_different(under)
    # The same p with a change past the margin is near (the flaky case above).
    near = compare_rates(0, 30, 7, 36, min_difference=0.15, alpha=0.01)
    assert near.call is Call.UNSURE and near.reaches_margin and nearly_different(near)


def test_paired_with_no_discordant_item_is_same_only_with_the_items_to_rule_the_margin_out() -> None:
    """With no discordant item the interval is not (0, 0): 20 items of a run against themselves (or 3) are not
    "same — the 95 % interval lies within ±3 pts". The exact bound of a discordance none of n items showed
    is 1 − 0.025^(1/n): 16.8 points at 20, inside 3 points from 122 items."""
    from abbisect.stats.proportions import items_to_rule_out, no_discordance_bound

    for n in (3, 20, 121):
        a = np.arange(n) % 4 != 0
        r = compare_paired(a, a, min_change=0.03)
        bound = sp.binomtest(0, n).proportion_ci(method="exact").high
        assert r.call is Call.UNSURE and r.ci == pytest.approx((-bound, bound)), (n, r.reason)
        assert r.needed_n == 122 == items_to_rule_out(0.03) and "no item changed answer" in r.reason
    assert no_discordance_bound(20) == pytest.approx(0.1684, abs=1e-4)
    big = np.arange(122) % 4 != 0
    assert compare_paired(big, big, min_change=0.03).call is Call.SAME
    # An A-vs-A with a baseline of flips is judged as if it had seen them: the bootstrap speaks again.
    assert compare_paired(big, big, min_change=0.03, baseline_flip_rate=0.05).padded == 4  # ⌈122 × 0.05 / 2⌉
