"""The posterior over where the change is (abbisect/bisect/posterior.py, its evidence models in
abbisect/stats/evidence.py), pure: its likelihoods against brute force on small histories, the choice of the
next launch by expected entropy reduction, the stop rule, the joint choice for several slots, and the prior's
weights. No process, no git."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import betaln
from scipy.stats import multivariate_t

from abbisect.bisect.posterior import Option, Posterior, Space
from abbisect.bisect.search import Graph
from abbisect.stats.evidence import AFTER, BEFORE, NONE, Array, Items, Rates, Samples


def line(n: int) -> tuple[list[str], Graph]:
    """c00 (the old end, outside the graph) … c{n-1} (the new end)."""
    shas = [f"c{i:02d}" for i in range(n)]
    return shas, Graph.from_parents({s: ((shas[i - 1],) if i > 1 else ()) for i, s in enumerate(shas) if i})


def dag() -> tuple[list[str], Graph]:
    """o ─ a ─ b ─ m (merge) ─ t, and a ─ x ─ m: x is after the change at a, not at b."""
    parents = {"a": (), "b": ("a",), "x": ("a",), "m": ("b", "x"), "t": ("m",)}
    return ["o", *parents], Graph.from_parents(parents)


def test_states_follow_ancestry_on_a_dag():
    shas, g = dag()
    space = Space.of(g)
    z = space.states(shas)
    row = {c: z[i] for i, c in enumerate(space.culprits)}
    col = {s: j for j, s in enumerate(shas)}
    assert row["b"][col["x"]] == BEFORE and row["b"][col["m"]] == AFTER and row["x"][col["b"]] == BEFORE
    assert all(row[c][col["o"]] == BEFORE for c in space.culprits)  # the old end: before under every culprit
    assert all(row[c][col["t"]] == AFTER for c in space.culprits)  # the new end: after under every one
    assert (z[-1] == NONE).all()


def brute_rates(launches: dict[str, list[tuple[int, int]]], states: dict[str, int], model: Rates,
                delta: float, points: int = 20_000) -> float:
    """The Rates likelihood of one hypothesis by direct summation on a fine uniform grid of rates (not the
    model's logit grid): φ shared by both states, each state's rate never / always / uniform, and under a change
    the two rates at least `delta` apart."""
    never, always = math.exp(model.log_w[-2]), math.exp(model.log_w[-1])
    slab = 1 - never - always
    t = (np.arange(points) + 0.5) / points  # midpoints: ∫ f ≈ mean(f(t))
    none = NONE in states.values()
    total = 0.0
    for phi in model.phis:
        def lik(g: int, phi=phi) -> tuple[Array, float, float]:
            """The state's likelihood on the grid, at rate 0 and at rate 1."""
            ll, at0, at1 = np.zeros(points), 1.0, 1.0
            for sha, ls in launches.items():
                for k, n in ls if states[sha] == g else ():
                    ll += (k * np.log(t) + (n - k) * np.log1p(-t) if math.isinf(phi)
                           else betaln(t * phi + k, (1 - t) * phi + n - k) - betaln(t * phi, (1 - t) * phi))
                    at0 *= k == 0
                    at1 *= k == n
            return np.exp(ll), at0, at1

        if none:
            grid, at0, at1 = lik(NONE)
            total += (never * at0 + always * at1 + slab * grid.mean()) / len(model.phis)
            continue
        (gb, b0, b1), (ga, a0, a1) = lik(BEFORE), lik(AFTER)
        below = np.concatenate([[0.0], np.cumsum(ga)]) / points  # ∫_0^x of AFTER's likelihood
        far = round(delta * points)
        idx = np.arange(points)
        lo, hi = np.clip(idx - far + 1, 0, points), np.clip(idx + far, 0, points)
        apart = below[lo] + (below[points] - below[hi])  # AFTER's mass at least delta from each BEFORE rate
        both = slab * slab * float((gb * apart).mean())
        both += never * always * (b0 * a1 + b1 * a0)
        for rate, w, bs, as_ in ((0.0, never, b0, a0), (1.0, always, b1, a1)):
            keep = np.abs(t - rate) >= delta
            both += w * slab * (bs * float((ga * keep).mean()) + as_ * float((gb * keep).mean()))
        total += both / len(model.phis)
    if none:
        return math.log(total)
    z = 2 * never * always + 2 * (never + always) * slab * (1 - delta) + slab**2 * (1 - delta) ** 2
    return math.log(total / z)


@pytest.mark.parametrize("seed", range(6))
def test_rates_likelihood_matches_brute_force(seed):
    rng = random.Random(seed)
    shas, g = line(6)
    model = Rates(min_difference=0.15)
    launches: dict[str, list[tuple[int, int]]] = {}
    for sha in rng.sample(shas, 4):
        for _ in range(rng.randint(1, 3)):
            n = rng.choice([1, 4])
            k = rng.randint(0, n)
            model.add(sha, k, n)
            launches.setdefault(sha, []).append((k, n))
    space = Space.of(g)
    z = space.states(model.commits())
    ll = model.loglik(z)
    for h in range(space.size):
        states = {sha: int(z[h, j]) for j, sha in enumerate(model.commits())}
        assert ll[h] == pytest.approx(brute_rates(launches, states, model, 0.15), abs=0.02)


def test_samples_likelihood_matches_the_multivariate_t():
    """For each (λ, κ) the closed form differs from the marginal of every pass (a multivariate t, the launch
    and round offsets and both means integrated out) by the same constant under every hypothesis."""
    rng = np.random.default_rng(3)
    _, g = line(5)
    model = Samples(passes=3, lambdas=(0.5, 2.0), kappas=(0.0, 3.0))
    plan = [("c00", 0), ("c04", 0), ("c02", 1), ("c00", 1), ("c03", 2), ("c04", 2), ("c01", 3)]
    values: list[tuple[str, int, list[float]]] = []
    for sha, rnd in plan:
        v = list(np.exp(rng.normal(0.1 * (sha >= "c03") + 0.02 * rnd, 0.02, size=3)))
        model.add(sha, rnd, v)
        values.append((sha, rnd, v))
    space = Space.of(g)
    z = space.states(model.commits())
    fits = model.fits(z)["ll"]
    y = np.log([x for _, _, v in values for x in v])
    v0 = (model.mean_prior_sd / model.noise_guess) ** 2
    a0, b0 = 2.0, 2.0 * model.noise_guess**2
    center = float(np.median([np.mean(np.log(v)) for _, _, v in values]))
    col = {s: j for j, s in enumerate(model.commits())}
    for li, lam in enumerate(model.lambdas):
        for ki, kap in enumerate(model.kappas):
            diffs = []
            for h in range(space.size):
                rows = [(z[h, col[sha]], rnd, launch) for launch, (sha, rnd, v) in enumerate(values) for _ in v]
                cov = np.eye(len(rows))
                for i, j in itertools.product(range(len(rows)), repeat=2):
                    same_state = (rows[i][0] == AFTER) == (rows[j][0] == AFTER)
                    cov[i, j] += v0 * same_state + lam**2 * (rows[i][2] == rows[j][2]) \
                        + kap**2 * (rows[i][1] == rows[j][1])
                t = multivariate_t(loc=np.full(len(rows), center), shape=(b0 / a0) * cov, df=2 * a0)
                diffs.append(fits[h, li, ki] - t.logpdf(y))
            assert np.ptp(diffs) < 1e-6, (lam, kap, diffs)


def test_items_likelihood_matches_a_loop():
    rng = random.Random(5)
    shas, g = line(5)
    model = Items(changed=(0.05, 0.3))
    asked: dict[str, dict[str, list[int]]] = {}
    for sha in shas:
        answers = {f"i{k}": rng.random() < (0.3 if k < 3 and sha >= "c03" else 0.9) for k in range(6)}
        model.add(sha, answers)
        for item, right in answers.items():
            asked.setdefault(sha, {}).setdefault(item, [0, 0])
            asked[sha][item][0] += right
            asked[sha][item][1] += 1
    space = Space.of(g)
    z = space.states(model.commits())
    ll = model.loglik(z)

    def lbb(k, n):
        return math.log(0.6 * (k == n) + 0.2 * (k == 0) + 0.2 * quad(lambda p: p**k * (1 - p) ** (n - k), 0, 1)[0])

    for h in range(space.size):
        state = {sha: z[h, j] for j, sha in enumerate(model.commits())}
        items = [f"i{k}" for k in range(6)]

        def counts(which, item, state=state):
            return (sum(asked[s][item][0] for s in shas if state[s] in which),
                    sum(asked[s][item][1] for s in shas if state[s] in which))

        if h == space.size - 1:
            want = sum(lbb(*counts((NONE,), i)) for i in items)
        else:
            per_rho = [sum(np.logaddexp(math.log(1 - rho) + lbb(*counts((BEFORE, AFTER), i)),
                                        math.log(rho) + lbb(*counts((BEFORE,), i)) + lbb(*counts((AFTER,), i)))
                           for i in items) for rho in (0.05, 0.3)]
            want = float(np.logaddexp(*per_rho) - math.log(2))
        assert ll[h] == pytest.approx(want, abs=1e-9)


def test_the_posterior_is_prior_times_likelihood():
    _, g = line(8)
    space = Space.of(g, {"c03": 0.2}, no_change=0.3)
    model = Rates()
    for sha, k in (("c00", 0), ("c07", 1), ("c04", 1), ("c02", 0), ("c02", 0)):
        model.add(sha, k, 1)
    post = Posterior(space, model)
    raw = np.asarray(space.prior) * np.exp(model.loglik(space.states(model.commits())))
    assert np.allclose(post.mass, raw / raw.sum())
    assert post.mass.sum() == pytest.approx(1.0)
    # c02 launched twice and clean, c04 and c07 failed: c04 is likely after the change, c02 likely before
    assert post.after("c04") > 0.7 and post.after("c02") < 0.5


def test_prior_weights_scale_a_commits_mass():
    _, g = line(6)
    space = Space.of(g, {"c02": 0.1, "c03": 0.1}, no_change=0.5)
    prior = dict(zip(space.culprits, space.prior))
    assert prior["c02"] == pytest.approx(0.1 * prior["c01"]) and prior["c03"] == pytest.approx(prior["c02"])
    assert sum(space.prior) == pytest.approx(1.0) and space.prior[-1] == pytest.approx(0.5)
    weighted = Posterior(space, Rates())
    assert weighted.culprit_mass()["c04"] == pytest.approx(10 * weighted.culprit_mass()["c03"])


def expected_entropy_drop(space: Space, launches: dict[str, list[tuple[int, int]]], sha: str) -> float:
    """By refitting: the posterior's entropy now, minus its mean over a launch's outcomes (fail / not)."""
    def model_with(extra):
        m = Rates()
        for s, ls in launches.items():
            for k, n in ls:
                m.add(s, k, n)
        for k in extra:
            m.add(sha, k, 1)
        return Posterior(space, m)

    now = model_with([])
    z = space.column(sha)
    pred = now.predict(sha)
    fail = float(sum(now.mass[h] * pred[z[h]][1] for h in range(space.size)))
    after = fail * model_with([1]).entropy() + (1 - fail) * model_with([0]).entropy()
    return (now.entropy() - after) * math.log(2)


def test_the_next_launch_is_the_one_expected_to_reduce_entropy_most():
    shas, g = line(12)
    space = Space.of(g)
    launches = {"c00": [(0, 1)] * 4, "c11": [(1, 1), (0, 1), (1, 1), (0, 1)], "c06": [(0, 1), (1, 1)]}
    model = Rates()
    for s, ls in launches.items():
        for k, n in ls:
            model.add(s, k, n)
    post = Posterior(space, model)
    options = [Option(s, left=10) for s in shas[1:-1]]
    chosen = post.plan(options, 1)
    drops = {o.sha: expected_entropy_drop(space, launches, o.sha) for o in options}
    assert len(chosen) == 1
    assert drops[chosen[0]] >= max(drops.values()) - 0.01, (chosen, drops)
    # the information it ranks by is that refitted drop, up to the model's prediction
    for o in options:
        assert post.information([o.sha]) == pytest.approx(drops[o.sha], abs=0.03)


def test_a_costly_launch_must_tell_more_per_unit_of_cost():
    shas, g = line(12)
    model = Rates()
    model.add("c00", 0, 1)
    model.add("c11", 1, 1)
    post = Posterior(Space.of(g), model)
    best = post.plan([Option(s, left=5) for s in shas[1:-1]], 1)[0]
    again = post.plan([Option(s, cost=1.0 if s != best else 50.0, left=5) for s in shas[1:-1]], 1)[0]
    assert again != best


def test_several_slots_choose_different_commits_that_split_the_range():
    """A failure that always shows: k launches of one commit would tell what one does; the joint choice takes
    k commits that split the range into k + 1 parts."""
    shas, g = line(33)
    model = Rates()
    for _ in range(3):
        model.add("c00", 0, 1)
        model.add("c32", 1, 1)
    post = Posterior(Space.of(g), model)
    chosen = post.plan([Option(s, left=10) for s in shas[1:-1]], 3)
    assert len(chosen) == 3 and len(set(chosen)) == 3, chosen
    positions = sorted(shas.index(s) for s in chosen)
    assert positions[0] < 14 < positions[1] < 20 < positions[2], positions
    assert post.information(list(chosen)) > post.information([chosen[0]] * 3)


@pytest.mark.parametrize("seed", range(20))
def test_a_commit_is_named_only_above_the_threshold(seed):
    rng = random.Random(seed)
    shas, g = line(10)
    space = Space.of(g)
    model = Rates()
    for _ in range(rng.randint(0, 40)):
        model.add(rng.choice(shas), int(rng.random() < 0.3), 1)
    post = Posterior(space, model)
    for threshold in (0.5, 0.9, 0.99):
        d = post.decide(threshold)
        if d.found is not None:
            assert post.culprit_mass()[d.found] >= threshold
        elif d.no_change:
            assert post.no_change >= threshold
        else:
            assert max(post.mass) < threshold and d.mass == pytest.approx(max(post.mass))


def test_a_change_is_found_from_rates_learnt_as_it_goes():
    """A one-in-three failure after c07, a good end that fails one launch in twenty: the ends' rates are not
    given, the posterior learns them; the search names c07 and holds it above the threshold."""
    rng = random.Random(11)
    shas, g = line(16)
    space = Space.of(g)
    model = Rates()

    def launch(sha: str) -> None:
        model.add(sha, int(rng.random() < (1 / 3 if sha >= "c07" else 0.05)), 1)

    launch("c00")
    launch("c15")
    for _ in range(400):
        post = Posterior(space, model)
        if post.decide(0.99).found or post.decide(0.99).no_change:
            break
        for sha in post.plan([Option(s, end=s in ("c00", "c15"), left=60) for s in shas], 1):
            launch(sha)
    d = Posterior(space, model).decide(0.99)
    assert d.found == "c07" and d.mass >= 0.99


def test_samples_find_a_slowdown_and_an_end_pins_a_rounds_drift():
    """+10 % after c05. A candidate before it, measured in a round that ran 8 % slow, looks like the bad end on
    its own; the good end re-measured in the same round shows the round's offset, and the candidate goes back
    to the good side."""
    _, g = line(9)

    def model(remeasured: bool) -> Samples:
        rng = np.random.default_rng(0)
        m = Samples(passes=5)
        for sha, rnd, drift in (("c00", 0, 0.0), ("c08", 0, 0.0), ("c02", 1, 0.0), ("c07", 1, 0.0),
                                ("c04", 2, 0.08), *((("c00", 2, 0.08),) if remeasured else ())):
            m.add(sha, rnd, list(2.0 * np.exp(0.1 * (sha >= "c05") + drift + rng.normal(0, 0.015, 5))))
        return m

    alone, pinned = Posterior(Space.of(g), model(False)), Posterior(Space.of(g), model(True))
    assert alone.after("c04") > 0.5 and pinned.after("c04") < 0.3
    before, drift = pinned.model.means(pinned.z, pinned.mass, pinned.target("c00"), BEFORE)
    after, _ = pinned.model.means(pinned.z, pinned.mass, pinned.target("c08"), AFTER)
    assert after / before == pytest.approx(1.105, abs=0.02) and drift > 0.02


# -- what a search asks a model, whatever its kind --------------------------------------------------------------
def planted(kind: str, regression: bool) -> Rates | Samples | Items:
    """Evidence of a change at c03 of line(6) (c00 … c05), of each kind: a regression (c03 and later worse) or a
    fix (c00 … c02 worse). "throughput": higher is better; "latency": lower is."""
    rng = np.random.default_rng(11)
    shas, _ = line(6)
    worse = {s: (s >= "c03") == regression for s in shas}
    if kind == "rates":
        rates = Rates(unit="outputs")
        for sha in shas:
            for _ in range(3):
                rates.add(sha, 7 if worse[sha] else 0, 8)
        return rates
    if kind in ("throughput", "latency"):
        up = kind == "latency"
        samples = Samples(passes=5, metric=kind, higher_is_better=not up)
        for rnd, sha in enumerate(shas):
            shift = 0.2 * worse[sha] * (1 if up else -1)
            samples.add(sha, rnd, list(np.exp(math.log(50) + shift + rng.normal(0, 0.01, 5))))
        return samples
    items = Items()
    for sha in shas:
        items.add(sha, {f"i{k:02d}": not (worse[sha] and k < 12) for k in range(40)})
    return items


@pytest.mark.parametrize("regression", [True, False])
@pytest.mark.parametrize("kind", ["rates", "throughput", "latency", "items"])
def test_a_model_tells_which_state_is_worse(kind, regression):
    """The search asks the model, not its kind: each state's value if c03 is the change, and which is worse."""
    _, g = line(6)
    model = planted(kind, regression)
    post = Posterior(Space.of(g), model)
    assert post.decide(0.9).found == "c03"
    before, after = (model.value(post.z, *post.under("c03", s), s)[0] for s in (BEFORE, AFTER))
    assert model.worse(before, after) == (AFTER if regression else BEFORE)
    if kind == "rates":  # 21 of 24 outputs failed on the worse side, none on the other
        assert max(before, after) == pytest.approx(7 / 8, abs=0.05) and min(before, after) < 0.05
    elif kind == "items":  # 12 of 40 items wrong on the worse side
        assert max(before, after) == pytest.approx(1.0, abs=0.02) and min(before, after) == pytest.approx(0.7, abs=0.03)
    else:
        assert max(before, after) / min(before, after) == pytest.approx(math.exp(0.2), abs=0.02)
        better = after if model.worse(before, after) == BEFORE else before
        assert better == pytest.approx(50, rel=0.02)  # the unchanged side, 50 a pass


def test_a_model_says_its_states_in_its_own_words():
    assert Rates(unit="outputs").said(BEFORE, 0.05, 0.01) == "fails 5.0% (± 1.0%) of outputs"
    samples = Samples(metric="tpot_median", higher_is_better=False)
    assert samples.said(BEFORE, 2.5, 0.012) == "tpot_median 2.5"
    assert samples.said(AFTER, 3125.0, 0.012) == "tpot_median 3,125 (rounds drift ± 1.2%)"  # the drift once
    assert Items().said(AFTER, 0.625, 0.0) == "62.5% of the items asked right"
    # which way is worse: the model's own
    assert Samples(higher_is_better=True).worse(2.0, 1.0) == AFTER and Samples(higher_is_better=False).worse(2.0, 1.0) \
        == BEFORE
    assert Rates().worse(0.1, 0.3) == AFTER and Items().worse(0.9, 0.7) == AFTER and Items().worse(0.7, 0.9) == BEFORE


def test_only_samples_drift_and_a_drifting_host_drifts_more():
    """The rounds' drift is a performance model's: a host whose rounds move by ±6 % drifts more than a steady
    one; a failure rate and eval items share no round offset (None)."""
    _, g = line(6)
    space = Space.of(g)

    def drift(moves: float) -> float:
        rng = np.random.default_rng(2)
        m = Samples(passes=5)
        for rnd, sha in enumerate(["c00", "c05", "c02", "c00", "c04", "c05", "c01", "c00"]):
            offset = moves * (1 if rnd % 2 else -1)
            m.add(sha, rnd, list(np.exp(math.log(50) + 0.2 * (sha >= "c03") + offset + rng.normal(0, 0.01, 5))))
        post = Posterior(space, m)
        found = m.drift(post.z, post.mass, post.target("c00"))
        assert found is not None and m.drifts
        assert found == m.means(post.z, post.mass, post.target("c00"), BEFORE)[1]
        return found

    assert drift(0.06) > 2 * drift(0.0)
    for model in (planted("rates", True), planted("items", True)):
        post = Posterior(space, model)
        assert model.drift(post.z, post.mass, post.target("c00")) is None and not model.drifts


def test_only_items_focus_a_launch_on_the_items_telling_the_ends_apart():
    """An accuracy's candidate is asked the items the ends answer differently first (at least as many as they
    differ on), and its predictions are of those; a rate or a metric asks no chosen items."""
    _, g = line(6)
    space = Space.of(g)
    empty = Items()
    post = Posterior(space, empty)
    assert empty.focus(post.z, post.mass, 400, ["c00", "c05"]) == () and empty.ask == ()  # nothing answered yet
    items = Items()
    for sha in ("c00", "c05"):  # the ends: 25 of 60 items answered differently
        items.add(sha, {f"i{k:02d}": not (sha == "c05" and k < 25) for k in range(60)})
    post = Posterior(space, items)
    chosen = items.focus(post.z, post.mass, 400, ["c00", "c05"])
    assert items.asks_items and items.ask == chosen
    assert 25 <= len(chosen) <= 60 and set(chosen[:25]) == {f"i{k:02d}" for k in range(25)}
    assert len(items.focus(post.z, post.mass, 10, ["c00", "c05"])) == 10  # never more than `most`
    everything = items.predictive(post.z, post.mass, post.target("c03"), False)
    items.ask = ("i30",)  # one item the ends agree on: a launch asking it tells (almost) nothing
    assert items.predictive(post.z, post.mass, post.target("c03"), False).shape[1] < everything.shape[1]
    for model in (planted("rates", True), planted("throughput", True)):
        post = Posterior(space, model)
        assert model.focus(post.z, post.mass, 400, ["c00", "c05"]) == () and not model.asks_items
