"""How likely a commit's launches are before and after a change: the evidence models of a noisy bisection.

Pure: numbers in, numbers out. A model holds each launch's evidence by commit and gives its log likelihood for
every row of `z` — the states (BEFORE, AFTER, or NONE for "no change") of the commits with evidence under one
hypothesis of where the change is (abbisect/bisect/posterior.py builds the rows and holds the mass). The two
states' parameters are unknown and learnt as the search goes — marginal likelihoods under conjugate priors, so
nothing assumes the good end never fails. Each statistical assessor (abbisect/assess/) names its model:

- `Rates`: k of n observations failed in a launch (a flaky start, degenerate outputs of a batch). Each state
  has a failure rate θ (uniform prior); a launch's own rate is Beta(θφ, (1 − θ)φ) around it, φ unknown (a
  mixture from "every output of a launch fails alike" to "independent"), integrated on a grid in logit(θ).
- `Samples`: a launch's passes of a performance metric (log values). Each state has a mean; every launch an
  offset of its own and every round one shared by all launches of that round (the drift of the host:
  ends re-measured in a round tell what it was); σ² inverse-gamma — a Normal linear model integrated in
  closed form, with the offsets' sizes a mixture.
- `Items`: per-item correctness of an eval. Each item is right with its own probability per state, and it
  is unchanged by the commit (one probability for both) or changed, a mixture over how many items changed:
  an item answered alike by the ends carries nothing, one the ends disagree on carries the signal, and the
  same items asked of a candidate are paired with the ends' answers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Protocol

import numpy as np
from scipy.special import betaln, expit, gammaln
from scipy.stats import norm

BEFORE, AFTER, NONE = 0, 1, 2  # a commit's state under a hypothesis ("no change": the ends do not differ)
Array = np.ndarray


class Model(Protocol):
    """One kind of evidence: its log likelihood under each hypothesis, what a further launch would show, and what
    a search asks of it without knowing its kind (what the states look like, which is worse, in words)."""

    drifts: bool  # a round's launches share an offset (re-measuring an end in a round pins it down)
    asks_items: bool  # a candidate's launch asks the items that tell the states apart (`focus` chooses them)

    def commits(self) -> tuple[str, ...]:
        """The commits with evidence, in a fixed order (the columns of `z` below)."""

    def loglik(self, z: Array) -> Array:
        """log p(evidence | hypothesis) for each row of `z` (the states of `commits()` under it)."""

    def predictive(self, z: Array, w: Array, target: Array, referenced: bool) -> Array:
        """(3, bins): what a launch shows of a commit in state BEFORE, AFTER and NONE, given the posterior `w`
        over the rows of `z`; `target`: the launched commit's state under each hypothesis (each row averages
        the hypotheses that put it in that state); `referenced`: an end is launched in the same round (it
        pins the round's offset)."""

    def value(self, z: Array, w: Array, target: Array, state: int) -> tuple[float, float]:
        """What `state` looks like given the posterior `w` over the rows of `z` (`target`: the state of the commit
        asked about under each row, as in `predictive`): its value — a failure rate, a metric's mean, the share
        of the items asked answered right — and the spread shown beside it (the rate's sd, the rounds' drift,
        none)."""

    def worse(self, before: float, after: float) -> int:
        """The worse state, given the two states' values: AFTER (a regression) or BEFORE (a fix)."""

    def said(self, state: int, value: float, spread: float) -> str:
        """A state's value and spread (`value`) in the report's words."""

    def drift(self, z: Array, w: Array, target: Array) -> float | None:
        """How much the host's rounds drift (a round offset's typical size, relative), seen from a commit before
        the change (`target`: its state under each row); None: launches share no offset of their round."""

    def focus(self, z: Array, w: Array, most: int, ends: Sequence[str]) -> tuple[str, ...]:
        """The items a candidate's next launch asks — those telling the states apart, at most `most`, at least
        as many as the `ends` answer differently — and from now on the ones `predictive` is of; () for evidence
        whose launches ask no chosen items."""


def logsumexp(a: Array, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Array:
    """log Σ exp(a) along `axis`, stable (scipy's is an order of magnitude slower on small arrays)."""
    a = np.asarray(a, dtype=float)
    top = np.max(a, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    out = np.log(np.sum(np.exp(a - top), axis=axis, keepdims=True)) + top
    return out if keepdims else (np.squeeze(out, axis=axis) if axis is not None else out.reshape(()))


def _state_weights(w: Array, target: Array, state: int) -> Array:
    """The posterior restricted to the hypotheses that put the launched commit in `state`, normalised (all of
    them when none does: that row is then never asked for)."""
    mine = w * (target == state)
    if mine.sum() <= 1e-300:
        mine = w + 1e-300
    return mine / mine.sum()


def _is_none(z: Array) -> Array:
    return (z == NONE).all(axis=1) if z.shape[1] else np.zeros(z.shape[0], bool)


# -- failure rates ----------------------------------------------------------------------------------------
_U = np.linspace(-14.0, 14.0, 225)  # logit(θ): a grid fine enough near 0 for a good end that never fails
_THETA = expit(_U)
_IMPOSSIBLE = -1e30  # log 0, finite: a state's sums multiply it by 0 where a commit is not in it
_SPIKES = 2  # two more points after the grid: θ = 0 (never fails in this state) and θ = 1 (always fails)


class Rates:
    """k of n observations failed, per launch (module docstring). Each state's rate is "never fails" (`never`),
    "always fails" (`always`) or uniform, and under a change the two states' rates differ by at least
    `min_difference` (else a change would be no change, and no evidence could ever tell them apart). `phis`: how
    alike a launch's own observations fail (small: alike; inf: independent), a mixture. `unit`: what one
    observation is, in the report's words ("launches", "outputs")."""

    drifts = False
    asks_items = False

    def __init__(self, min_difference: float = 0.15, phis: Sequence[float] = (1.0, 8.0, math.inf),
                 never: float = 0.4, always: float = 0.1, unit: str = "launches") -> None:
        self.unit = unit
        self.phis = tuple(phis)
        self.log_phi_prior = np.full(len(self.phis), -math.log(len(self.phis)))
        slab = np.log(_THETA) + np.log1p(-_THETA)  # a uniform rate, times the logit's Jacobian
        slab = slab - logsumexp(slab) + math.log(1 - never - always)
        self.log_w = np.concatenate([slab, [math.log(never), math.log(always)]])
        theta = np.concatenate([_THETA, [0.0, 1.0]])
        self.apart = (np.abs(theta[:, None] - theta[None, :]) >= min_difference).astype(float)
        w = np.exp(self.log_w)
        self.log_pairs = math.log(float(w @ self.apart @ w))  # the prior's mass of the pairs that differ
        self.launches: dict[str, list[tuple[int, int]]] = {}
        self._cached: tuple[tuple, tuple[Array, Array, Array], dict[int, Array]] | None = None

    def add(self, sha: str, failed: int, observed: int) -> None:
        """One launch: `failed` of its `observed` observations failed (none observed: no evidence)."""
        if observed > 0:
            self.launches.setdefault(sha, []).append((int(failed), int(observed)))

    def commits(self) -> tuple[str, ...]:
        return tuple(self.launches)

    def _launch(self, k: int, n: int) -> Array:
        """(phis, grid + spikes): log P(this launch's k of n | θ, φ), the sequence's probability."""
        spikes = [0.0 if k == 0 else _IMPOSSIBLE, 0.0 if k == n else _IMPOSSIBLE]
        rows = []
        for phi in self.phis:
            if math.isinf(phi):
                rows.append([*(k * np.log(_THETA) + (n - k) * np.log1p(-_THETA)), *spikes])
            else:
                a, b = _THETA * phi, (1 - _THETA) * phi
                rows.append([*(betaln(a + k, b + n - k) - betaln(a, b)), *spikes])
        return np.array(rows)

    def _groups(self, z: Array) -> tuple[Array, Array, Array]:
        """(hypotheses, phis, grid): the log likelihood of the BEFORE group, the AFTER group, and all pooled."""
        key = (z.shape, z.tobytes(), sum(len(v) for v in self.launches.values()))
        if self._cached is None or self._cached[0] != key:
            per = np.array([sum(self._launch(k, n) for k, n in self.launches[s]) for s in self.commits()])
            if per.size == 0:
                per = np.zeros((0, len(self.phis), _THETA.size + _SPIKES))
            before = np.einsum("hx,xfj->hfj", (z == BEFORE).astype(float), per)
            after = np.einsum("hx,xfj->hfj", (z == AFTER).astype(float), per)
            self._cached = (key, (before, after, np.broadcast_to(per.sum(axis=0), after.shape)), {})
        return self._cached[1]

    def _scaled(self, ll: Array) -> tuple[Array, Array]:
        """w·exp(ll) scaled by its maximum over the grid, and that maximum (log): exact products in float."""
        top = np.max(ll, axis=-1, keepdims=True)
        return np.exp(self.log_w + ll - top), top[..., 0]

    def _two(self, before: Array, after: Array) -> Array:
        """(h, phis): log P(both states' evidence) with their rates at least `min_difference` apart."""
        eb, mb = self._scaled(before)
        ea, ma = self._scaled(after)
        return np.log(np.clip(np.einsum("hfj,jk,hfk->hf", eb, self.apart, ea), 1e-300, None)) + mb + ma \
            - self.log_pairs

    def loglik(self, z: Array) -> Array:
        before, after, total = self._groups(z)
        one = logsumexp(self.log_w + total, axis=2)
        per_phi = np.where(_is_none(z)[:, None], one, self._two(before, after))
        return logsumexp(self.log_phi_prior + per_phi, axis=1)

    def observations(self) -> int:
        """How many observations a launch gives (the median of those seen, at least 1)."""
        ns = [n for ls in self.launches.values() for _, n in ls]
        return max(1, int(np.median(ns))) if ns else 1

    def _joint(self, z: Array, state: int) -> Array:
        """(h, phis, grid): under each hypothesis, the posterior of (φ, θ) of `state` (φ is shared by both
        states: its weight comes from both, θ's from the state's own evidence)."""
        before, after, total = self._groups(z)
        memo = self._cached[2] if self._cached else {}
        if state in memo:
            return memo[state]
        mine = total if state == NONE else after if state == AFTER else before
        joint = self.log_phi_prior[None, :, None] + self.log_w[None, None, :] + mine
        if state != NONE:  # θ's weight is the other state's evidence over the rates far enough from it
            eo, mo = self._scaled(before if state == AFTER else after)
            joint = joint + np.log(np.clip(eo @ self.apart, 1e-300, None)) + mo[:, :, None]
        memo[state] = np.exp(joint - logsumexp(joint, axis=(1, 2), keepdims=True))
        return memo[state]

    def _state_posterior(self, z: Array, w: Array, target: Array, state: int) -> Array:
        """(phis, grid): the posterior of (φ, θ) of the state the launched commit is in, over the hypotheses."""
        return np.einsum("h,hfj->fj", _state_weights(w, target, state), self._joint(z, state))

    def value(self, z: Array, w: Array, target: Array, state: int) -> tuple[float, float]:
        """The posterior mean failure rate of a state and its standard deviation."""
        p = self._state_posterior(z, w, target, state).sum(axis=0)
        theta = np.concatenate([_THETA, [0.0, 1.0]])
        mean = float(p @ theta)
        return mean, float(math.sqrt(max(float(p @ theta**2) - mean**2, 0.0)))

    def worse(self, before: float, after: float) -> int:
        return AFTER if after >= before else BEFORE  # the state that fails more often

    def said(self, state: int, value: float, spread: float) -> str:
        return f"fails {value:.1%} (± {spread:.1%}) of {self.unit}"

    def drift(self, z: Array, w: Array, target: Array) -> float | None:
        return None

    def focus(self, z: Array, w: Array, most: int, ends: Sequence[str]) -> tuple[str, ...]:
        return ()

    def predictive(self, z: Array, w: Array, target: Array, referenced: bool) -> Array:
        m = self.observations()
        ks = np.arange(m + 1)
        choose = (gammaln(m + 1) - gammaln(ks + 1) - gammaln(m - ks + 1))[:, None]
        bins = _count_bins(m)
        out = np.zeros((3, len(bins)))
        for state in (BEFORE, AFTER, NONE):
            post = self._state_posterior(z, w, target, state)
            pmf = np.zeros(m + 1)
            spikes = np.zeros((m + 1, _SPIKES))
            spikes[0, 0] = spikes[m, 1] = 1.0  # never: none of m fails; always: all of them
            for f, phi in enumerate(self.phis):
                if math.isinf(phi):
                    logp = choose + ks[:, None] * np.log(_THETA) + (m - ks)[:, None] * np.log1p(-_THETA)
                else:
                    a, b = _THETA * phi, (1 - _THETA) * phi
                    logp = choose + betaln(a + ks[:, None], b + (m - ks)[:, None]) - betaln(a, b)
                pmf += np.concatenate([np.exp(logp), spikes], axis=1) @ post[f]
            out[state] = [pmf[list(group)].sum() for group in bins]
        return _normalised(out)


def _count_bins(m: int, most: int = 9) -> list[range]:
    """0, 1, … m failed, merged into at most `most` bins (0 alone: "none failed" is the telling outcome)."""
    if m + 1 <= most:
        return [range(k, k + 1) for k in range(m + 1)]
    edges = np.unique(np.round(np.linspace(1, m + 1, most)).astype(int))
    return [range(1), *(range(int(lo), int(hi)) for lo, hi in pairwise(edges))]


def _normalised(p: Array) -> Array:
    p = np.clip(p, 1e-300, None)
    return p / p.sum(axis=1, keepdims=True)


# -- performance samples ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Launch:
    sha: str
    round: int
    m: int
    mean: float
    ss: float  # the passes' squared deviations from their launch's mean


class Samples:
    """A launch's passes of a metric, as log values (module docstring). `lambdas`: the sizes of a launch's
    own offset and `kappas` of a round's, relative to a pass's noise σ, both mixtures; the means' prior is
    centred on the median launch with `mean_prior_sd` (log units), σ's around `noise_guess`. `metric`: the
    metric's name in the report's words; `higher_is_better`: which way of it is better."""

    drifts = True
    asks_items = False

    def __init__(self, passes: int = 5, lambdas: Sequence[float] = (0.3, 1.0, 3.0, 8.0),
                 kappas: Sequence[float] = (0.0, 1.0, 4.0, 16.0), mean_prior_sd: float = 0.5,
                 noise_guess: float = 0.02, metric: str = "", higher_is_better: bool = True) -> None:
        self.metric, self.higher_is_better = metric, higher_is_better
        self.passes = passes
        self.lambdas, self.kappas = tuple(lambdas), tuple(kappas)
        self.mean_prior_sd, self.noise_guess = mean_prior_sd, noise_guess
        self.launches: list[_Launch] = []
        self._fit: tuple[bytes, dict] | None = None

    def add(self, sha: str, round_no: int, values: Sequence[float]) -> None:
        """One launch's passes (positive values of the metric, any unit), measured in round `round_no`."""
        logs = np.log(np.asarray([v for v in values if v > 0], dtype=float))
        if logs.size:
            self.launches.append(_Launch(sha, round_no, int(logs.size), float(logs.mean()),
                                         float(((logs - logs.mean()) ** 2).sum())))
            self._fit = None

    def commits(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(x.sha for x in self.launches))

    def fits(self, z: Array) -> dict[str, Array]:
        """For every hypothesis and (λ, κ): "ll" the log marginal likelihood; "mu", "mu_var" the two states'
        means (log) and their variance in σ² units; "s2" σ²'s posterior mean."""
        key = z.tobytes() + bytes(z.shape[0])
        if self._fit is not None and self._fit[0] == key:
            return self._fit[1]
        col = {s: i for i, s in enumerate(self.commits())}
        rounds = sorted({x.round for x in self.launches})
        n_l, n_r, n_h = len(self.launches), len(rounds), z.shape[0]
        means = np.array([x.mean for x in self.launches])
        m = np.array([x.m for x in self.launches], dtype=float)
        ss, total_n = sum(x.ss for x in self.launches), float(m.sum())
        center = float(np.median(means))
        v0 = (self.mean_prior_sd / self.noise_guess) ** 2
        a0, b0 = 2.0, 2.0 * self.noise_guess**2
        states = z[:, [col[x.sha] for x in self.launches]]
        # "no change" has one mean: its AFTER column stays empty, whose prior then cancels out exactly
        groups = np.stack([(states == BEFORE) | (states == NONE), states == AFTER], axis=2).astype(float)
        rmat = np.zeros((n_l, n_r))
        for i, x in enumerate(self.launches):
            rmat[i, rounds.index(x.round)] = 1.0
        shape = (n_h, len(self.lambdas), len(self.kappas))
        out = {"ll": np.zeros(shape), "mu": np.zeros((*shape, 2)), "mu_var": np.zeros((*shape, 2)),
               "s2": np.zeros(shape)}
        for li, lam in enumerate(self.lambdas):
            d = 1.0 / m + lam**2
            for ki, kap in enumerate(self.kappas):
                design = (np.concatenate([groups, np.broadcast_to(rmat, (n_h, n_l, n_r))], axis=2) if kap > 0
                          else groups)
                extra = design.shape[2] - 2
                v0_diag = np.concatenate([[v0, v0], np.full(extra, kap**2)])
                beta0 = np.concatenate([[center, center], np.zeros(extra)])
                xw, yw = design / np.sqrt(d)[None, :, None], means / np.sqrt(d)
                precision = np.einsum("hlp,hlq->hpq", xw, xw) + np.diag(1.0 / v0_diag)[None]
                rhs = np.einsum("hlp,l->hp", xw, yw) + (beta0 / v0_diag)[None]
                beta_n = np.linalg.solve(precision, rhs[..., None])[..., 0]
                a_n = a0 + total_n / 2
                b_n = b0 + 0.5 * (yw @ yw + beta0 @ (beta0 / v0_diag) - np.einsum("hp,hp->h", rhs, beta_n) + ss)
                logdet = np.linalg.slogdet(precision)[1]
                out["ll"][:, li, ki] = (-0.5 * np.log(d).sum() - 0.5 * np.log(v0_diag).sum() - 0.5 * logdet
                                        + a0 * math.log(b0) - a_n * np.log(b_n) + gammaln(a_n) - gammaln(a0))
                cov = np.linalg.inv(precision)
                out["mu"][:, li, ki] = beta_n[:, :2]
                out["mu_var"][:, li, ki] = np.stack([cov[:, 0, 0], cov[:, 1, 1]], axis=1)
                out["s2"][:, li, ki] = b_n / (a_n - 1)
        self._fit = (key, out)
        return out

    def loglik(self, z: Array) -> Array:
        if not self.launches:
            return np.zeros(z.shape[0])
        ll = self.fits(z)["ll"].reshape(z.shape[0], -1)
        return logsumexp(ll, axis=1) - math.log(ll.shape[1])

    def means(self, z: Array, w: Array, target: Array, state: int) -> tuple[float, float]:
        """A state's mean (in the metric's unit) over the hypotheses, and the round offset's typical size
        (relative): how much the host drifted from round to round."""
        fit = self.fits(z)
        post = np.exp(fit["ll"] - logsumexp(fit["ll"], axis=(1, 2), keepdims=True))
        weight = _state_weights(w, target, state)[:, None, None] * post
        mu = float(np.einsum("hlk,hlk->", weight, fit["mu"][..., 1 if state == AFTER else 0]))
        drift = float(np.einsum("hlk,k,hlk->", weight, np.array(self.kappas), np.sqrt(fit["s2"])))
        return math.exp(mu), drift

    def value(self, z: Array, w: Array, target: Array, state: int) -> tuple[float, float]:
        return self.means(z, w, target, state)

    def worse(self, before: float, after: float) -> int:
        return AFTER if (after < before) == self.higher_is_better else BEFORE

    def said(self, state: int, value: float, spread: float) -> str:
        return f"{self.metric} {value:,.4g}" + (f" (rounds drift ± {spread:.1%})" if state == AFTER else "")

    def drift(self, z: Array, w: Array, target: Array) -> float | None:
        return self.means(z, w, target, BEFORE)[1]

    def focus(self, z: Array, w: Array, most: int, ends: Sequence[str]) -> tuple[str, ...]:
        return ()

    def predictive(self, z: Array, w: Array, target: Array, referenced: bool) -> Array:
        fit = self.fits(z)
        post = np.exp(fit["ll"] - logsumexp(fit["ll"], axis=(1, 2), keepdims=True))  # (h, λ, κ)
        own = 1.0 / self.passes + np.array(self.lambdas)[None, :, None] ** 2
        kap2 = np.array(self.kappas)[None, None, :] ** 2
        drift = kap2 * own / (kap2 + own) if referenced else kap2  # an end in the round measures the offset
        comps = []
        for state in (BEFORE, AFTER, NONE):
            g = 1 if state == AFTER else 0
            var = fit["s2"] * (own + drift + fit["mu_var"][..., g])
            comps.append((_state_weights(w, target, state)[:, None, None] * post, fit["mu"][..., g], var))
        lo = min(float(np.min(mu - 4 * np.sqrt(v))) for _, mu, v in comps)
        hi = max(float(np.max(mu + 4 * np.sqrt(v))) for _, mu, v in comps)
        edges = np.concatenate([[-np.inf], np.linspace(lo, hi, 13)[1:-1], [np.inf]])
        out = np.zeros((3, edges.size - 1))
        for state, (weight, mu, var) in enumerate(comps):
            cdf = norm.cdf((edges - mu[..., None]) / np.sqrt(var)[..., None])
            out[state] = np.einsum("hlk,hlkb->b", weight, np.diff(cdf, axis=-1))
        return _normalised(out)


# -- eval items ---------------------------------------------------------------------------------------------
class Items:
    """Per-item correctness of an eval (module docstring). `changed`: the share of items a change touches, a
    mixture. An item's chance to be answered right is, a priori, `right` (always: temperature 0 answers alike),
    `wrong` (never), else uniform (it flips now and then). `ask`: the items the next launch of a candidate asks
    (its predictions are of those; empty: every item seen)."""

    drifts = False
    asks_items = True

    def __init__(self, changed: Sequence[float] = (0.005, 0.02, 0.08, 0.25), right: float = 0.6,
                 wrong: float = 0.2) -> None:
        self.changed = np.array(changed)
        self.right, self.wrong, self.slab = right, wrong, 1 - right - wrong
        self.asked: dict[str, dict[str, list[int]]] = {}  # sha -> item -> [right, asked]
        self.ask: tuple[str, ...] = ()

    def add(self, sha: str, answers: Mapping[str, bool]) -> None:
        """One launch's graded items (a failed request is no answer: the caller leaves it out)."""
        mine = self.asked.setdefault(sha, {})
        for item, right in answers.items():
            seen = mine.setdefault(item, [0, 0])
            seen[0] += bool(right)
            seen[1] += 1

    def commits(self) -> tuple[str, ...]:
        return tuple(self.asked)

    def items(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(i for per in self.asked.values() for i in per))

    def _split(self, z: Array) -> tuple[Array, Array, Array, Array, Array, Array]:
        """Per hypothesis and item: right and asked BEFORE, then AFTER; then both pooled (per item)."""
        index = {i: n for n, i in enumerate(self.items())}
        k = np.zeros((len(self.asked), len(index)))
        n = np.zeros_like(k)
        for x, per in enumerate(self.asked.values()):
            for item, (right, asked) in per.items():
                k[x, index[item]], n[x, index[item]] = right, asked
        zb, za = (z == BEFORE).astype(float), (z == AFTER).astype(float)
        return zb @ k, zb @ n, za @ k, za @ n, k.sum(axis=0), n.sum(axis=0)

    def _lbb(self, k: Array, n: Array) -> Array:
        """log P(k of n answers right) of one item, the sequence's probability, under its prior."""
        slab = self.slab * np.exp(betaln(1 + k, 1 + n - k))
        return np.log(self.right * (k == n) + self.wrong * (k == 0) + slab)

    def _mean(self, k: Array, n: Array) -> Array:
        """The chance an item is answered right, given k of n right before."""
        slab = self.slab * np.exp(betaln(2 + k, 1 + n - k))
        return (self.right * (k == n) + slab) / np.exp(self._lbb(k, n))

    def _per_item(self, z: Array) -> tuple[Array, Array]:
        """(h, changed, items): the log likelihood of each item if unchanged, and if changed, with the
        mixture's weight."""
        kb, nb, ka, na, kt, nt = self._split(z)
        rho = self.changed[None, :, None]
        same = np.log1p(-rho) + self._lbb(kt, nt)[None, None, :]
        diff = np.log(rho) + (self._lbb(kb, nb) + self._lbb(ka, na))[:, None, :]
        return np.broadcast_to(same, diff.shape), diff

    def loglik(self, z: Array) -> Array:
        if not self.asked:
            return np.zeros(z.shape[0])
        same, diff = self._per_item(z)
        two = logsumexp(np.logaddexp(same, diff).sum(axis=2), axis=1) - math.log(len(self.changed))
        _, _, _, _, kt, nt = self._split(z[:1])
        return np.where(_is_none(z), float(self._lbb(kt, nt).sum()), two)

    def correct(self, z: Array, w: Array) -> tuple[Array, Array, Array]:
        """Per item (in `items()` order): its chance to be answered right BEFORE and AFTER, and the chance the
        change touched it, over the hypotheses of a change."""
        kb, nb, ka, na, kt, nt = self._split(z)
        same, diff = self._per_item(z)
        mixed = np.logaddexp(same, diff)
        rho = np.exp(mixed.sum(axis=2) - logsumexp(mixed.sum(axis=2), axis=1, keepdims=True))  # (h, changed)
        changed = np.einsum("hc,hci->hi", rho, np.exp(diff - mixed))
        pooled = self._mean(kt, nt)
        before = (1 - changed) * pooled + changed * self._mean(kb, nb)
        after = (1 - changed) * pooled + changed * self._mean(ka, na)
        live = w * ~_is_none(z)
        live = live / max(live.sum(), 1e-300)
        return live @ before, live @ after, live @ changed

    def telling(self, z: Array, w: Array, most: int, least: int = 20) -> tuple[str, ...]:
        """The items whose answers tell the states apart, the likeliest to be touched by the change first: twice
        as many as are more likely touched than not, at least `least`, at most `most`."""
        _, _, changed = self.correct(z, w)
        keen = int((changed >= 0.5).sum())
        names = self.items()
        order = np.argsort(-changed, kind="stable")
        return tuple(names[i] for i in order[: min(most, max(least, 2 * keen))])

    def disagreements(self, ends: Sequence[str]) -> int:
        """At least this many items a candidate is asked: as many as the `ends` answer differently, 20 or more."""
        asked = [self.asked[e] for e in ends if e in self.asked]
        both = set.intersection(*(set(e) for e in asked)) if len(asked) > 1 else set()
        differ = sum(1 for i in both if len({e[i][0] / e[i][1] for e in asked}) > 1)
        return max(20, differ)

    def focus(self, z: Array, w: Array, most: int, ends: Sequence[str]) -> tuple[str, ...]:
        self.ask = self.telling(z, w, most, self.disagreements(ends)) if self.asked else ()
        return self.ask

    def value(self, z: Array, w: Array, target: Array, state: int) -> tuple[float, float]:
        """The share of the items asked that a state answers right (over the hypotheses of a change: `target` is
        not asked), no spread."""
        before, after, _ = self.correct(z, w)
        return float((after if state == AFTER else before).mean()), 0.0

    def worse(self, before: float, after: float) -> int:
        return AFTER if after <= before else BEFORE  # the state that answers fewer items right

    def said(self, state: int, value: float, spread: float) -> str:
        return f"{value:.1%} of the items asked right"

    def drift(self, z: Array, w: Array, target: Array) -> float | None:
        return None

    def predictive(self, z: Array, w: Array, target: Array, referenced: bool) -> Array:
        """The count of wrong answers among the items asked (normal approximation, binned)."""
        before, after, _ = self.correct(z, w)
        names = {i: n for n, i in enumerate(self.items())}
        chosen = [names[i] for i in self.ask if i in names] or list(range(len(names)))
        _, _, _, _, kt, nt = self._split(z[:1])
        pooled = self._mean(kt, nt)
        q = len(chosen)
        edges = np.concatenate([[-np.inf], np.linspace(-0.5, q + 0.5, min(q + 1, 12) + 1)[1:-1], [np.inf]])
        out = np.zeros((3, edges.size - 1))
        for state, right in ((BEFORE, before), (AFTER, after), (NONE, pooled)):
            p = right[chosen]
            mean, var = float((1 - p).sum()), float((p * (1 - p)).sum()) + 0.05
            out[state] = np.diff(norm.cdf((edges - mean) / math.sqrt(var)))
        return _normalised(out)
