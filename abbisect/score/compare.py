"""Relative verdicts: at temperature 0 the strongest evidence is where two outputs part ways."""

from __future__ import annotations

from dataclasses import dataclass
from difflib import SequenceMatcher

_CONTEXT_BEFORE = 30
_CONTEXT_AFTER = 50
# A trial must beat the other end's similarity by this much on a prompt to count as resembling one end.
_MARGIN = 0.05
# Below this mean similarity to both ends the trial resembles neither (a third behaviour).
_MIN_SIMILARITY = 0.3


@dataclass(frozen=True)
class Divergence:
    identical: bool
    char_index: int | None  # first differing character, None when identical
    word_index: int | None  # first differing whitespace-separated word, None when identical
    similarity: float  # 0..1, word-level matching-blocks ratio
    context_a: str  # text around the divergence point in A
    context_b: str


@dataclass(frozen=True)
class Resemblance:
    closer_to: str  # "good" | "bad" | "both" (the ends are identical) | "neither"
    score_good: float
    score_bad: float
    evidence: str


def _common_prefix_len(a: str, b: str) -> int:
    # Binary search over slice equality: C-speed compares instead of a per-character Python loop.
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def similarity(a: str, b: str) -> float:
    """Word-level similarity 0..1 (1.0 for equal texts, including two empty ones)."""
    if a == b:
        return 1.0
    wa, wb = a.split(), b.split()
    if not wa and not wb:
        # Only whitespace differs.
        return round(SequenceMatcher(None, a, b, autojunk=False).ratio(), 4)
    return round(SequenceMatcher(None, wa, wb, autojunk=False).ratio(), 4)


def divergence(a: str, b: str) -> Divergence:
    """Where A and B first differ, how similar they are overall, and the text around that point."""
    if a == b:
        return Divergence(True, None, None, 1.0, "", "")
    ci = _common_prefix_len(a, b)
    wa, wb = a.split(), b.split()
    wi = next((i for i, (x, y) in enumerate(zip(wa, wb)) if x != y), min(len(wa), len(wb)))
    lo = max(0, ci - _CONTEXT_BEFORE)
    return Divergence(
        identical=False,
        char_index=ci,
        word_index=wi,
        similarity=similarity(a, b),
        context_a=a[lo : ci + _CONTEXT_AFTER],
        context_b=b[lo : ci + _CONTEXT_AFTER],
    )


def resemblance(outputs: list[str], good: list[str], bad: list[str]) -> Resemblance:
    """Whether a bisect trial's outputs (one per prompt) look like the good end's or the bad end's.

    Only prompts where the two ends differ can tell them apart; on each, an exact match is decisive
    and otherwise the more similar end wins if it leads by a margin.
    """
    if not (len(outputs) == len(good) == len(bad)):
        raise ValueError(
            f"need one output per prompt on every side: trial {len(outputs)}, good {len(good)}, bad {len(bad)}"
        )
    telling = [i for i in range(len(outputs)) if good[i] != bad[i]]
    if not telling:
        return Resemblance("both", 1.0, 1.0, "the good and bad ends gave identical outputs on every prompt")
    votes = {"good": 0, "bad": 0}
    sims_good: list[float] = []
    sims_bad: list[float] = []
    for i in telling:
        sg, sb = similarity(outputs[i], good[i]), similarity(outputs[i], bad[i])
        sims_good.append(sg)
        sims_bad.append(sb)
        if outputs[i] == good[i] or sg - sb > _MARGIN:
            votes["good"] += 1
        elif outputs[i] == bad[i] or sb - sg > _MARGIN:
            votes["bad"] += 1
    score_good = round(sum(sims_good) / len(telling), 4)
    score_bad = round(sum(sims_bad) / len(telling), 4)
    tally = (
        f"{len(telling)} prompt(s) tell the ends apart: {votes['good']} resemble good, {votes['bad']} bad "
        f"(mean similarity {score_good:.2f} vs {score_bad:.2f})"
    )
    if max(score_good, score_bad) < _MIN_SIMILARITY:
        return Resemblance("neither", score_good, score_bad, f"unlike both ends: {tally}")
    if votes["good"] > votes["bad"] and score_good > score_bad:
        return Resemblance("good", score_good, score_bad, tally)
    if votes["bad"] > votes["good"] and score_bad > score_good:
        return Resemblance("bad", score_good, score_bad, tally)
    return Resemblance("neither", score_good, score_bad, f"mixed: {tally}")
