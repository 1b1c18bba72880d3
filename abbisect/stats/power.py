"""The power plan of a paired eval, before anything runs: can n items find the drop the recipe cares about?

At 200 items and 80 % accuracy a 6-point drop is about as likely missed as found (REGRESSIONS.md), and an
eval that cannot see its own minimum drop answers "not sure" or, worse, "same" after an engine build and two
launches. The plan says so first, with the n that would see it and the smallest drop this n sees.
"""

from __future__ import annotations

from dataclasses import dataclass

from abbisect.stats.proportions import detectable_drop, n_for_power, power_paired

# Beyond this many items an eval is not a plan but a wish; n_for_power answers None there.
N_MAX = 1_000_000


@dataclass(frozen=True)
class PowerPlan:
    """The power of exact McNemar on n paired items to find a drop of `min_drop` (stats.power_paired)."""

    n: int
    accuracy: float  # expected accuracy of the good side (an assumption unless an A-vs-A measured it)
    min_drop: float
    flip_rate: float  # items an A-vs-A flips, as a fraction of n
    alpha: float
    target: float  # the power asked for
    power: float  # the power at n
    needed_n: int | None  # the fewest items that reach `target`; None beyond N_MAX
    detectable: float | None  # the smallest drop n items find with `target` power; None: none is

    @property
    def enough(self) -> bool:
        return self.power >= self.target

    @staticmethod
    def percent(x: float) -> str:
        return f"{x * 100:.0f} %"

    def assumptions(self) -> str:
        return (f"accuracy {self.accuracy:g}, A-vs-A flips {self.flip_rate * 100:g} %, alpha {self.alpha:g}, "
                "exact McNemar")

    def describe(self) -> str:
        """One line for a dry run: n, the power at the minimum drop, the smallest drop n detects."""
        target = self.percent(self.target)
        seen = (f"the smallest drop found with {target} power is {self.detectable * 100:.1f} points"
                if self.detectable is not None else f"no drop is found with {target} power")
        need = f"; {self.needed_n:,} items reach {target}" if self.needed_n else ""
        return (f"power plan: {self.n:,} items find a drop of {self.min_drop * 100:g} points with "
                f"{self.percent(self.power)} power ({target} asked{need}); {seen} ({self.assumptions()})")


def power_plan(n: int, accuracy: float, min_drop: float, *, flip_rate: float = 0.0, alpha: float = 0.05,
               power: float = 0.8) -> PowerPlan:
    """The plan of n paired items; a ValueError for an eval that cannot exist (a drop larger than the
    accuracy, flips an accuracy of 1 cannot have)."""
    got = power_paired(n, accuracy, min_drop, flip_rate=flip_rate, alpha=alpha)
    needed = n_for_power(accuracy, min_drop, power=power, flip_rate=flip_rate, alpha=alpha, n_max=N_MAX)
    # A power no larger than what a drop of nothing has (alpha/2 on the drop's side) is reached at once.
    smallest = (detectable_drop(n, accuracy, power=power, flip_rate=flip_rate, alpha=alpha)
                if power > alpha / 2 else 0.0)
    return PowerPlan(n, accuracy, min_drop, flip_rate, alpha, power, got, needed, smallest)
