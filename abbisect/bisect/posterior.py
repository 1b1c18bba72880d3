"""Noisy bisection: a posterior over where the change is, for every verdict that depends on chance.

Pure: numbers in, numbers out; no trial, no git, no I/O. The hypotheses are "commit c is the first one after
the change" for every counted commit c of the searched range (a line of history, or the full DAG: a commit x
is *after* under c when c is an ancestor of x or x itself), and "no change" (the ends do not differ). Each
launch's evidence is scored by its likelihood under "before" and "after" by the verdict's evidence model
(abbisect/stats/evidence.py: failure rates, performance samples, eval items).

`Posterior` holds the mass, says how likely each commit is to be after the change, plans the next round (the
launches whose outcome is expected to reduce the posterior's entropy most, per unit of cost, chosen jointly
for k slots by greedy conditional information) and decides: a commit is named only when it holds at least
the threshold of the mass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from abbisect.bisect.search import Graph
from abbisect.stats.evidence import AFTER, NONE, Array, Model, logsumexp

# Two computed amounts of information this close (relative) are equal. Launches placed symmetrically in the
# range carry the same information in exact arithmetic; computed, they differ in the last bits, and which way
# depends on the machine (OpenBLAS picks its dot-product kernel by CPU: the `weight @ …` of `information` rounds
# differently on an AVX-512 host than on an AVX2 one). Ties go to the cheaper launch, then the older commit.
SAME = 1e-9


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= SAME * max(abs(a), abs(b))


@dataclass(frozen=True)
class Space:
    """The hypotheses over a searched range: `culprits` (topological, oldest first), their prior mass, and the
    prior mass of "no change". Commits outside the graph (the old ends) are before the change under every
    culprit."""

    graph: Graph
    culprits: tuple[str, ...]
    prior: tuple[float, ...]  # one per culprit, then "no change"; sums to 1

    @classmethod
    def of(cls, graph: Graph, weights: Mapping[str, float] | None = None, no_change: float = 0.5) -> Space:
        """Every counted commit of `graph` (treesame ones are never named), weighted (default 1 each), the
        weights scaled to 1 − `no_change`."""
        culprits = tuple(s for s in graph.order if s not in graph.treesame)
        raw = np.array([max((weights or {}).get(s, 1.0), 1e-9) for s in culprits])
        mass = (1 - no_change) * raw / raw.sum()
        return cls(graph, culprits, (*map(float, mass), no_change))

    @property
    def size(self) -> int:
        """Hypotheses, "no change" included."""
        return len(self.culprits) + 1

    def states(self, shas: Sequence[str]) -> Array:
        """(hypotheses, len(shas)) of BEFORE / AFTER / NONE: each commit's state under each hypothesis."""
        return np.stack([self.column(s) for s in shas], axis=1) if shas else np.zeros((self.size, 0), np.int8)

    def column(self, sha: str) -> Array:
        """`sha`'s state under each hypothesis: AFTER under a culprit that is `sha` or an ancestor of it."""
        cache = self.__dict__.setdefault("_columns", {})
        if sha not in cache:
            col = np.zeros(self.size, dtype=np.int8)
            if sha in self.graph:
                index = self.__dict__.setdefault("_index", {c: i for i, c in enumerate(self.culprits)})
                col[[index[a] for a in self.graph.ancestors(sha) if a in index]] = AFTER
            col[-1] = NONE
            cache[sha] = col
        return cache[sha]


# -- the posterior -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Option:
    """A launch the next round may hold: its commit, what it costs (1: built and warm; more while its venv is
    still to build), whether it is an end, and how many more launches it may get."""

    sha: str
    cost: float = 1.0
    end: bool = False
    left: int = 1


@dataclass(frozen=True)
class Decision:
    """Where the mass stands: `found` a commit holding at least the threshold, or `no_change`, or neither;
    `likely`: the likeliest hypotheses with their mass (None: no change)."""

    found: str | None
    no_change: bool
    mass: float
    likely: tuple[tuple[str | None, float], ...]


class Posterior:
    """The mass over `space`'s hypotheses given a model's evidence (module docstring)."""

    def __init__(self, space: Space, model: Model) -> None:
        self.space, self.model = space, model
        self.columns = model.commits()
        self.z = space.states(self.columns)
        post = np.log(np.asarray(space.prior)) + (model.loglik(self.z) if self.columns else 0.0)
        self.mass = np.exp(post - logsumexp(post))
        self._predicted: dict[tuple[str, bool], Array] = {}

    @property
    def no_change(self) -> float:
        return float(self.mass[-1])

    def culprit_mass(self) -> dict[str, float]:
        return {c: float(m) for c, m in zip(self.space.culprits, self.mass[:-1])}

    def entropy(self) -> float:
        """The posterior's entropy in bits."""
        m = self.mass[self.mass > 0]
        return float(-(m * np.log2(m)).sum())

    def target(self, sha: str) -> Array:
        """`sha`'s state under each hypothesis."""
        return self.space.column(sha)

    def under(self, culprit: str, state: int) -> tuple[Array, Array]:
        """(weights, target) that ask a model about `state` under the one hypothesis "the change is `culprit`"
        alone: what before and after look like if that is the answer (a state's rate or mean over the hypotheses
        that put one commit in it mixes wrong answers in: those that put the culprit itself before the change)."""
        w = np.zeros(self.space.size)
        w[self.space.culprits.index(culprit)] = 1.0
        return w, np.full(self.space.size, state, dtype=np.int8)

    def after(self, sha: str) -> float:
        """The chance that `sha` is after the change, given that there is one."""
        change = self.mass[:-1]
        return float(change[self.target(sha)[:-1] == AFTER].sum() / max(change.sum(), 1e-300))

    def decide(self, threshold: float) -> Decision:
        order = np.argsort(-self.mass, kind="stable")
        last = len(self.mass) - 1
        likely = tuple((None if i == last else self.space.culprits[i], float(self.mass[i])) for i in order[:8])
        top, mass = likely[0]
        return Decision(top, top is None, mass, likely) if mass >= threshold else Decision(None, False, mass, likely)

    def candidates(self, threshold: float) -> tuple[str, ...]:
        """The fewest commits that together hold `threshold` of the change's mass, likeliest first."""
        change = self.mass[:-1] / max(float(self.mass[:-1].sum()), 1e-300)
        held, out = 0.0, []
        for i in np.argsort(-change, kind="stable"):
            out.append(self.space.culprits[i])
            held += change[i]
            if held >= threshold:
                break
        return tuple(out)

    # -- the next round ------------------------------------------------------------------------------------
    def predict(self, sha: str, referenced: bool = False) -> Array:
        """(3, bins): what a launch of `sha` shows in each state."""
        key = (sha, referenced)
        if key not in self._predicted:
            self._predicted[key] = self.model.predictive(self.z, self.mass, self.target(sha), referenced)
        return self._predicted[key]

    def information(self, launches: Sequence[str], referenced: bool = False) -> float:
        """I(hypothesis; the launches' outcomes) in nats: by how much the round is expected to reduce the
        posterior's entropy (outcomes independent given each launch's state)."""
        if not launches:
            return 0.0
        preds = [self.predict(s, referenced) for s in launches]
        states = np.stack([self.target(s) for s in launches], axis=1)
        keys, inverse = np.unique(states, axis=0, return_inverse=True)
        weight = np.bincount(inverse.ravel(), weights=self.mass, minlength=len(keys))
        keys, weight = keys[weight > 1e-12], weight[weight > 1e-12]
        weight = weight / weight.sum()
        given = sum(float(weight @ np.array([_entropy(p[key[i]]) for key in keys])) for i, p in enumerate(preds))
        cells = math.prod(p.shape[1] for p in preds)
        if cells * len(keys) <= 250_000:
            joint = sum(wk * _outer([p[key[i]] for i, p in enumerate(preds)]) for key, wk in zip(keys, weight))
            outcome = _entropy(np.asarray(joint).ravel())
        else:  # Monte Carlo, seeded: the same plan every time for the same evidence
            rng = np.random.default_rng(0)
            which = rng.choice(len(keys), size=4000, p=weight)
            ys = np.array([[rng.choice(p.shape[1], p=p[keys[c][i]]) for i, p in enumerate(preds)] for c in which])
            prob = sum(wk * np.prod([p[key[i]][ys[:, i]] for i, p in enumerate(preds)], axis=0)
                       for key, wk in zip(keys, weight))
            outcome = float(-np.log(np.asarray(prob)).mean())
        return max(outcome - given, 0.0)

    def plan(self, options: Sequence[Option], slots: int, shortlist: int = 16,
             reference: bool = False) -> tuple[str, ...]:
        """The next round: up to `slots` launches, chosen greedily by the information each adds to those
        already chosen, per unit of cost (a commit comes more than once only when a second launch of it tells
        more than any other). With a drifting model, a round that also re-measures an end (which pins the
        round's offset) is weighed against one that does not, and is the only choice with `reference` (how
        much the host drifts is learnt only from ends measured again); with one slot such a round holds two
        launches, the end first. () when no launch is expected to tell anything."""
        options = [o for o in options if o.left > 0]
        alone = {o.sha: self.information([o.sha]) / o.cost for o in options}
        cut = sorted(alone.values(), reverse=True)[min(shortlist, len(options)) - 1] if options else 0.0
        pool = [o for o in options if alone[o.sha] >= cut or _same(alone[o.sha], cut)]  # ties at the cut: all
        cost = {o.sha: o.cost for o in options}
        order = {o.sha: i for i, o in enumerate(options)}

        def greedy(choices: Sequence[Option], size: int, start: list[str], ref: bool) -> tuple[list[str], float]:
            chosen, info = list(start), self.information(start, ref)
            for _ in range(size):
                scored = [((self.information([*chosen, o.sha], ref) - info) / o.cost, o) for o in choices
                          if chosen.count(o.sha) < o.left]
                if not scored:
                    break
                top = max(x[0] for x in scored)
                score, best = min((x for x in scored if _same(x[0], top)), key=lambda x: (x[1].cost, order[x[1].sha]))
                if score <= 1e-6:
                    break
                chosen.append(best.sha)
                info += score * best.cost
            return chosen, info

        plain, info = greedy(pool, slots, [], False)
        best, rate = plain, info / max(sum(cost[s] for s in plain), 1e-9) if plain else 0.0
        ends = [o for o in options if o.end]
        if self.model.drifts and ends and self.columns and reference:
            best, rate = [], 0.0
        if self.model.drifts and ends and self.columns:
            end = min(ends, key=lambda o: (o.cost, o.left * -1, o.sha))
            with_end, ref_info = greedy([o for o in pool if not o.end], max(slots - 1, 1), [end.sha], True)
            ref_rate = ref_info / sum(cost[s] for s in with_end)
            if len(with_end) > 1 and ref_rate > rate and not _same(ref_rate, rate):
                best, rate = with_end, ref_rate
        if not best and plain:  # no candidate to measure beside an end (a part whose only commit is its end)
            best, rate = plain, info / max(sum(cost[s] for s in plain), 1e-9)
        return tuple(best) if rate > 1e-6 else ()


def _entropy(p: Array) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def _outer(vectors: Sequence[Array]) -> Array:
    out = vectors[0]
    for v in vectors[1:]:
        out = np.multiply.outer(out, v)
    return out
