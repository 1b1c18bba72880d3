"""Delta debugging (Zeller and Hildebrandt, "Simplifying and Isolating Failure-Inducing Input", 2002): the
smallest subset of changes that still makes a test fail, found by testing parts and their complements.

Pure: `test` is given a batch of subsets and answers each (fail, pass, or unresolved — a configuration that
could not be tried, e.g. a flag rejected); a batch lets the caller run its probes at once. Every subset is
tried at most once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import TypeVar

T = TypeVar("T")


class Result(StrEnum):
    FAIL = "fail"
    PASS = "pass"
    UNRESOLVED = "unresolved"


Tester = Callable[[Sequence[tuple[T, ...]]], Sequence[Result]]


def split(items: tuple[T, ...], n: int) -> list[tuple[T, ...]]:
    """`items` in n parts as equal as can be, in order."""
    size, extra = divmod(len(items), n)
    parts, start = [], 0
    for k in range(n):
        end = start + size + (1 if k < extra else 0)
        parts.append(items[start:end])
        start = end
    return [p for p in parts if p]


def ddmin(changes: Sequence[T], test: Tester, seen: dict[tuple[T, ...], Result] | None = None) -> tuple[T, ...]:
    """A 1-minimal failing subset of `changes` (all of them fail together, by the caller's check): removing
    any single change from the result makes the test pass or unresolved. Each round asks the untried parts
    and complements of the current set in one batch and takes the first that fails, in order."""
    memo = seen if seen is not None else {}

    def ask(subsets: list[tuple[T, ...]]) -> list[Result]:
        new = [s for s in dict.fromkeys(subsets) if s not in memo]
        if new:
            memo.update(zip(new, test(new)))
        return [memo[s] for s in subsets]

    current, n = tuple(changes), 2
    while len(current) >= 2:
        parts = split(current, n)
        complements = [tuple(c for c in current if c not in part) for part in parts] if n > 2 else []
        candidates = parts + complements
        for subset, result in zip(candidates, ask(candidates)):
            if result is Result.FAIL:
                reduced = subset in parts
                current, n = subset, (2 if reduced else max(n - 1, 2))
                break
        else:
            if n >= len(current):
                break
            n = min(len(current), 2 * n)
    return current
