"""Two sides' token log-probabilities compared: per text, the differences along its positions, the largest and the
first divergence with both sides' top-k there; over texts, the mean absolute difference (nats a token) with its
interval, against the launches' own noise floor and the smallest difference that matters; and vLLM's near-tie rule
on the greedy continuations (tests/models/utils.py `check_logprobs_close`: where two greedy outputs first pick
different tokens, each pick must be among the other's top-k; after that the outputs are not compared). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from abbisect.score.logprobs import NumericsRun, Scored, Token
from abbisect.stats.decide import Call, Classification, Resemblance

TOP_SHOWN = 5


@dataclass(frozen=True)
class Divergence:
    """One position of a text on both sides: the tokens, their log-probabilities and each side's top-k there."""

    position: int
    token_a: str
    token_b: str
    logprob_a: float
    logprob_b: float
    top_a: tuple[tuple[str, float], ...]
    top_b: tuple[tuple[str, float], ...]

    @property
    def gap(self) -> float:
        return self.logprob_b - self.logprob_a


@dataclass(frozen=True)
class TextComparison:
    """One text (or continuation) on both sides. `deltas`: B − A at every position both sides hold the same
    token, up to the first whose tokens differ (`split`: its position, None when none does); `near_tie`: at the
    split, each side's pick is among the other's top-k (None: no split)."""

    id: str
    kind: str
    prompt: str
    deltas: tuple[float, ...]
    largest: Divergence | None
    first: Divergence | None
    split: int | None
    near_tie: bool | None

    @property
    def mean_abs(self) -> float:
        return float(np.mean(np.abs(self.deltas))) if self.deltas else 0.0

    @property
    def far(self) -> bool:
        """The sides pick different tokens where neither pick is a near tie: never noise (vLLM's rule)."""
        return self.near_tie is False


def _div(i: int, a: Token, b: Token) -> Divergence:
    return Divergence(i, a.text, b.text, float(a.logprob or 0.0), float(b.logprob or 0.0), a.top[:TOP_SHOWN],
                      b.top[:TOP_SHOWN])


def compare_text(a: Scored, b: Scored, tol: float) -> TextComparison:
    """`a` and `b` (one text, both sides) position by position; the first divergence is the first position whose
    difference exceeds `tol` or whose tokens differ."""
    deltas: list[float] = []
    largest = first = None
    split = near = None
    for i, (ta, tb) in enumerate(zip(a.tokens, b.tokens)):
        if ta.text != tb.text:
            split = i
            near = ta.text in {t for t, _ in tb.top} and tb.text in {t for t, _ in ta.top}
            if first is None:
                first = _div(i, ta, tb)
            break
        d = float(tb.logprob or 0.0) - float(ta.logprob or 0.0)
        deltas.append(d)
        if largest is None or abs(d) > abs(largest.gap):
            largest = _div(i, ta, tb)
        if first is None and abs(d) > tol:
            first = _div(i, ta, tb)
    if split is None and len(a.tokens) != len(b.tokens) and min(len(a.tokens), len(b.tokens)) > 0:
        split = min(len(a.tokens), len(b.tokens))  # one side ended earlier: its end token against a word
    return TextComparison(a.id, a.kind, a.prompt, tuple(deltas), largest, first, split, near)


def paired(a: Sequence[Scored], b: Sequence[Scored]) -> list[tuple[Scored, Scored]]:
    """The texts both sides scored, by id."""
    bi = {s.id: s for s in b if s.error is None}
    return [(s, bi[s.id]) for s in a if s.error is None and s.id in bi]


def floor_of(run: NumericsRun, tol: float) -> dict[str, float]:
    """A launch's own noise floor per text: the mean absolute difference between its one-at-a-time and batched
    passes over the same text."""
    return {x.id: compare_text(x, y, tol).mean_abs for x, y in paired(run.texts, run.batched)}


@dataclass(frozen=True)
class NumericsComparison:
    """Two runs compared (B against A). `effect`: the mean over texts of each text's mean absolute difference
    (nats a token), `lo`/`hi` the interval (1 − alpha) of its excess over `floor`, the launches' own noise; `far`:
    continuations that part beyond a near tie."""

    call: Call
    effect: float
    lo: float
    hi: float
    floor: float
    p: float
    alpha: float
    least: float
    texts: tuple[TextComparison, ...]
    continuations: tuple[TextComparison, ...]

    @property
    def far(self) -> int:
        return sum(c.far for c in self.continuations)

    @property
    def parted(self) -> int:
        return sum(c.split is not None for c in self.continuations)

    @property
    def reaches_margin(self) -> bool:
        return self.effect - self.floor >= self.least

    def describe(self) -> str:
        conf = f"{(1 - self.alpha) * 100:g} %"
        text = (f"mean |Δ log p| {self.effect:.4f} nats/token over {len(self.texts)} text(s), excess over the "
                f"noise floor {self.effect - self.floor:.4f} [{self.lo:.4f}, {self.hi:.4f}] ({conf}; floor "
                f"{self.floor:.4f}, smallest that matters {self.least:g})")
        if self.continuations:
            text += (f"; {self.parted} of {len(self.continuations)} continuation(s) part"
                     f", {self.far} beyond a near tie")
        return f"{self.call.text}: {text}"


def interval(x: np.ndarray, alpha: float) -> tuple[float, float, float, float]:
    """The mean of `x` with its t interval at 1 − alpha, and the one-sided p of mean > 0."""
    m = float(x.mean()) if x.size else 0.0
    if x.size < 2:
        return m, -math.inf, math.inf, 1.0
    sd = float(x.std(ddof=1))
    if sd == 0.0:
        return m, m, m, (0.0 if m > 0 else 1.0)
    se = sd / math.sqrt(x.size)
    half = float(stats.t.ppf(1 - alpha / 2, x.size - 1)) * se
    return m, m - half, m + half, float(stats.t.sf(m / se, x.size - 1))


def compare_runs(a: NumericsRun, b: NumericsRun, least: float, alpha: float) -> NumericsComparison:
    """B against A: different when the excess over the floor is surely above 0 and at least `least`, or when a
    continuation parts beyond a near tie; same when the excess's interval lies below `least`; else not sure."""
    texts = [compare_text(x, y, least) for x, y in paired(a.texts, b.texts)]
    conts = tuple(compare_text(x, y, least) for x, y in paired(a.continuations, b.continuations))
    fa, fb = floor_of(a, least), floor_of(b, least)
    floors = np.array([(fa.get(t.id, 0.0) + fb.get(t.id, 0.0)) / 2 for t in texts])
    d = np.array([t.mean_abs for t in texts])
    m, lo, hi, p = interval(d - floors, alpha)
    if d.size == 1 and not floors.any():  # one text of an engine without noise: its difference is exact
        lo = hi = m
        p = 0.0 if m > 0 else 1.0
    effect, floor = (float(d.mean()), float(floors.mean())) if d.size else (0.0, 0.0)
    far = sum(c.far for c in conts)
    if far or (d.size and lo > 0 and m >= least):
        call = Call.DIFFERENT
    elif d.size and hi < least:
        call = Call.SAME
    else:
        call = Call.UNSURE
    return NumericsComparison(call, effect, lo, hi, floor, p, alpha, least, tuple(texts), conts)


def resemblance(mine: NumericsRun, good: NumericsRun, bad: NumericsRun, least: float,
                alpha: float) -> Classification[NumericsComparison]:
    """Which end a candidate's log-probabilities resemble: per text, its distance to the bad end minus its
    distance to the good one, with its interval; like good when surely positive by half of `least` or more, like
    bad when surely negative by as much, else not sure. A continuation parting from one end beyond a near tie, and
    from the other not at all, places it too."""
    vs_good, vs_bad = compare_runs(good, mine, least, alpha), compare_runs(bad, mine, least, alpha)
    ends = compare_runs(good, bad, least, alpha)
    dg = {t.id: t.mean_abs for t in vs_good.texts}
    db = {t.id: t.mean_abs for t in vs_bad.texts}
    ids = [i for i in dg if i in db]
    m, lo, hi, _ = interval(np.array([db[i] - dg[i] for i in ids]), alpha)
    margin = least / 2
    if (lo > 0 and m >= margin) or (vs_bad.far and not vs_good.parted):
        side = Resemblance.LIKE_GOOD
    elif (hi < 0 and m <= -margin) or (vs_good.far and not vs_bad.parted):
        side = Resemblance.LIKE_BAD
    else:
        side = Resemblance.UNSURE
    evidence = (f"{len(ids)} text(s): to the good end {float(np.mean(list(dg.values()) or [0])):.4f}, to the bad "
                f"end {float(np.mean(list(db.values()) or [0])):.4f} nats/token; bad − good {m:.4f} "
                f"[{lo:.4f}, {hi:.4f}]")
    return Classification(side, evidence, vs_good, vs_bad, ends)
