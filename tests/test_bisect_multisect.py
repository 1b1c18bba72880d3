"""Multisection (k slots a round) against the sequential search and brute force: the same answer, on
lines and random DAGs with skips, for k = 1, 2, 3, 4, 8; ⌈log_{k+1} N⌉ rounds on a line."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bisect_search import brute_force, by_culprit, linear
from test_bisect_search_git import ancestors, scenarios

from abbisect.bisect.multisect import fold, multisect, open_commits, pick, still_useful
from abbisect.bisect.search import NEW, OLD, SKIP, Graph, bisect, start

KS = (1, 2, 3, 4, 8)


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("n", [2, 3, 10, 101, 1000])
def test_line_without_skips_takes_log_k_plus_1_rounds(n, k):
    g, c = linear(n)
    for culprit in sorted({1, n // 3, n // 2, n - 1} - {0}):
        out = multisect(g, c[-1], [c[0]], by_culprit(g, c[culprit]), k)
        assert out.result.outcome == "found" and out.result.first_new == c[culprit]
        candidates = n - 1  # c0 is the known-old end
        assert len(out.rounds) <= max(1, math.ceil(math.log(candidates) / math.log(k + 1))), (culprit, out.rounds)
        assert all(len(r) <= k for r in out.rounds)
        tested = [s for r in out.rounds for s in r]
        assert len(tested) == len(set(tested)), "a commit was tested twice"


def test_one_slot_is_gits_own_sequence():
    g, c = linear(300)
    verdict = by_culprit(g, c[123], frozenset({c[150], c[151], c[75]}))
    seq = bisect(g, c[-1], [c[0]], verdict)
    one = multisect(g, c[-1], [c[0]], verdict, 1)
    assert [sha for sha, _ in seq.verdicts] == [r[0] for r in one.rounds]
    assert one.result == seq


def test_four_slots_on_a_thousand_commits():
    """The issue's target: at most 5 rounds after the ends for 1,000 commits with 4 slots."""
    g, c = linear(1001)
    for culprit in (1, 370, 999, 1000):
        out = multisect(g, c[-1], [c[0]], by_culprit(g, c[culprit]), 4)
        assert out.result.first_new == c[culprit] and len(out.rounds) <= 5


def test_picks_are_quantiles_on_a_line_and_fill_gaps_around_busy_commits():
    g, c = linear(101)
    state = start(g, c[-1], [c[0]])
    assert pick(state, 3) == (c[50], c[25], c[75]) or sorted(pick(state, 3)) == sorted((c[25], c[50], c[75]))
    assert set(pick(state, 1, busy=[c[50]])) <= {c[25], c[75]}
    assert c[50] not in pick(state, 4, busy=[c[50]])


def test_fold_is_order_free_and_drops_verdicts_made_moot():
    g, c = linear(50)
    state = start(g, c[-1], [c[0]])
    answers = [(c[10], OLD), (c[20], NEW), (c[30], NEW), (c[15], SKIP)]
    results = set()
    for _ in range(10):
        random.shuffle(answers)
        s = fold(state, answers)
        results.add((s.new, frozenset(s.olds), frozenset(s.skipped)))
    assert results == {(c[20], frozenset({c[0], c[10]}), frozenset({c[15]}))}
    # a flaky "old" above the known-new commit no longer matters and is not an error
    s = fold(state, [(c[20], NEW), (c[30], OLD)])
    assert s.new == c[20] and c[30] not in s.olds
    assert not still_useful(s, c[30]) and still_useful(s, c[5])


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_line_with_random_skips_matches_brute_force(data):
    n = data.draw(st.integers(2, 120))
    culprit = data.draw(st.integers(1, n - 1))
    percent = data.draw(st.sampled_from((0, 10, 30, 60)))
    skips = frozenset(i for i in range(1, n - 1) if data.draw(st.integers(0, 99)) < percent)
    k = data.draw(st.sampled_from(KS))
    g, c = linear(n)
    out = multisect(g, c[-1], [c[0]], by_culprit(g, c[culprit], frozenset(c[i] for i in skips)), k)
    outcome, expected = brute_force(n, culprit, skips)
    assert out.result.outcome == outcome
    assert out.result.candidates == tuple(c[i] for i in expected)


def _graph(parents: tuple[tuple[int, ...], ...]) -> tuple[Graph, list[str]]:
    names = [f"c{i:03d}" for i in range(len(parents))]
    return Graph.from_parents({names[i]: tuple(names[p] for p in ps) for i, ps in enumerate(parents)}), names


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(max_commits=40), st.sampled_from(KS))
def test_random_dags_same_answer_as_the_sequential_search(scenario, k):
    """On every verdict pattern: a unique answer is the culprit, and it is the sequential search's (which is
    proved equal to `git bisect run`'s in test_bisect_search_git.py); without skips both always find it."""
    g, names = _graph(scenario.parents)
    olds = [names[o] for o in scenario.olds]

    def verdict(sha: str) -> str:
        i = names.index(sha)
        if i in scenario.skips:
            return SKIP
        return NEW if scenario.culprit in ancestors(scenario.parents, i) else OLD

    seq = bisect(g, names[scenario.tip], olds, verdict)
    multi = multisect(g, names[scenario.tip], olds, verdict, k)
    if multi.result.outcome == "found":
        assert multi.result.first_new == names[scenario.culprit]
    if seq.outcome == "found":
        assert multi.result.outcome == "found" or scenario.skips
        if multi.result.outcome == "found":
            assert multi.result.first_new == seq.first_new
    if not scenario.skips:
        assert multi.result.outcome == seq.outcome == "found"
    # every candidate the multisection leaves is one the sequential search could not rule out either way
    assert names[scenario.culprit] in multi.result.candidates or multi.result.outcome == "untestable"
    tested = [s for r in multi.rounds for s in r]
    assert len(tested) == len(set(tested))
    assert all(len(r) <= k for r in multi.rounds) or any(verdict(s) == SKIP for r in multi.rounds for s in r)


def test_open_commits_exclude_skipped_and_new():
    g, c = linear(10)
    s = start(g, c[-1], [c[0]]).record(c[4], SKIP)
    assert c[4] not in open_commits(s) and c[-1] not in open_commits(s) and c[0] not in open_commits(s)
