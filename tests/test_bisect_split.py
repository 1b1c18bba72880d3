"""Where a range blurred by two changes is cut, and the budget of every change's search (abbisect/bisect/split.py):
pure functions."""

from __future__ import annotations

import random

from abbisect.bisect.split import Measured, between_steps, blurred, budget, room, two_steps


def _levels(steps: dict[int, float], n: int, se: float = 0.01, seed: int = 0) -> list[Measured]:
    rng = random.Random(seed)
    return [Measured(f"c{k:03d}", sum(v for at, v in steps.items() if k >= at) + rng.gauss(0, se / 2), se)
            for k in range(n)]


def test_the_fit_of_two_steps_finds_both_and_the_cut_lies_between_them():
    for seed in range(20):
        rng = random.Random(seed)
        first = rng.randrange(1, 8)
        second = rng.randrange(first + 1, 10)
        levels = _levels({first: 0.058, second: 0.058}, 10, seed=seed)
        assert two_steps(levels) == (first, second)
        at = int(between_steps(levels)[1:])
        assert first <= at < second  # one step on each side: the part up to it holds one, the part after the other


def test_precise_levels_weigh_more_than_noisy_ones():
    levels = [Measured("a", 0.0, 0.01), Measured("b", 0.06, 0.01), Measured("c", 0.0, 1.0), Measured("d", 0.12, 0.01),
              Measured("e", 0.12, 0.01)]
    assert two_steps(levels) == (1, 3)  # the wild, imprecise "c" does not move the steps


def test_too_few_levels_say_nothing_and_the_budget_is_told_in_launches():
    assert two_steps([Measured("a", 0.0, 0.01), Measured("b", 0.1, 0.01)]) is None
    assert between_steps([Measured("a", 0.0, 0.01)]) is None
    assert blurred(0.12, 0.03) and blurred(-0.07, 0.03) and not blurred(0.05, 0.03)
    assert budget(42) > 42 and room(10, 30) == 0 and room(100, 30) == 70
