"""Where to cut a range whose whole search ran to its cap naming none, and how many launches the search of every
change may spend (`bisect.changes: all`, abbisect/bisect/changes.py). Pure functions: numbers in, numbers out.

Two changes of about one size blur a posterior of one: the commits between them sit half-way between the ends, so
no commit takes the mass and the whole range's search runs to its cap. When the ends differ by much more than the
smallest effect that matters (room for two such changes: `blurred`), the range is cut where the evidence says the
difference grows: a fit of two steps over the tested commits' measured differences from the old end (each weighed
by its precision) puts one step on each side of a tested commit, and the range is cut there (`between_steps`), so
that each part holds one change — what a search of one change finds. The parts' searches spend what the bisect's
budget (`budget`: a multiple of the whole range's search's own) leaves after the first search; none starts once
what is left of it cannot hold a search and its confirmation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# The launches the search of every change may spend in all: this many times the whole range's search's budget
# (the whole range's search, then the parts' searches and the measurements of what they name).
BUDGET = 4


@dataclass(frozen=True)
class Measured:
    """A tested commit's measured difference from the old end (on the effect's additive scale) and its standard
    error."""

    sha: str
    value: float
    se: float


def budget(first: int) -> int:
    """The launches every change's search may spend in all, the whole range's search (budget `first`) included."""
    return BUDGET * first


def blurred(ends: float, least: float) -> bool:
    """Whether the ends' difference `ends` (on the effect's scale) leaves room for two changes of the smallest size
    that matters, `least`: then a whole range's search that ran to its cap naming none was likely blurred by two."""
    return abs(ends) >= 2 * least


def two_steps(levels: Sequence[Measured]) -> tuple[int, int] | None:
    """The weighted least-squares fit of three flat stretches (two steps) over `levels` in the history's order:
    (i, j), the first step landing between levels[i − 1] and levels[i], the second between levels[j − 1] and
    levels[j] (0 < i < j < len); None with fewer than three levels."""
    n = len(levels)
    if n < 3:
        return None
    w = [1.0 / max(lv.se, 1e-9) ** 2 for lv in levels]
    y = [lv.value for lv in levels]

    def sse(a: int, b: int) -> float:  # the weighted squared residuals of levels[a:b] around their weighted mean
        tw = sum(w[a:b])
        mean = sum(w[k] * y[k] for k in range(a, b)) / tw
        return sum(w[k] * (y[k] - mean) ** 2 for k in range(a, b))

    fits = {(i, j): sse(0, i) + sse(i, j) + sse(j, n) for i in range(1, n - 1) for j in range(i + 1, n)}
    return min(fits, key=lambda ij: (fits[ij], ij))


def between_steps(levels: Sequence[Measured]) -> str | None:
    """The tested commit to cut the range at: one between the two steps of the fit (`two_steps`), the middle one of
    those, so that each part holds one step; None when the levels are too few."""
    fit = two_steps(levels)
    if fit is None:
        return None
    i, j = fit
    return levels[(i + j - 1) // 2].sha


def room(left: int, reserve: int) -> int:
    """The launches a part's search may take of the `left` of the budget, keeping `reserve` for its confirmation
    and the measurement of what it names (0: no search starts)."""
    return max(left - reserve, 0)
