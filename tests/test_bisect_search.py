"""The pure search: unit tests on small graphs, and brute force on linear histories with skips."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abbisect.bisect.search import (
    NEW,
    OLD,
    SKIP,
    Graph,
    SearchState,
    _prn,
    _skip_away_index,
    bisect,
    estimate_steps,
    start,
)


def linear(n: int) -> tuple[Graph, list[str]]:
    """c00 <- c01 <- ... <- c{n-1}: c00 is the known-old end, outside nothing (it is in the graph)."""
    shas = [f"c{i:02d}" for i in range(n)]
    return Graph.from_parents({s: (shas[i - 1],) if i else () for i, s in enumerate(shas)}), shas


def by_culprit(graph: Graph, culprit: str, skips: frozenset[str] = frozenset()):
    def verdict(sha: str) -> str:
        if sha in skips:
            return SKIP
        return NEW if culprit in graph.ancestors(sha) else OLD

    return verdict


# -- Graph ------------------------------------------------------------------------------------------


def test_graph_drops_parents_outside_and_orders_parents_first() -> None:
    g = Graph.from_parents({"m": ("b", "a"), "a": ("outside",), "b": ("a",)})
    assert g.parents == {"m": ("b", "a"), "a": (), "b": ("a",)}
    assert g.order == ("a", "b", "m")
    assert g.walk == ("m", "a", "b")  # insertion order: git's walk order is whatever the caller gives
    assert g.ancestors("m") == {"a", "b", "m"}
    assert "m" in g and "outside" not in g and len(g) == 3


def test_graph_keeps_walk_order_where_topology_allows() -> None:
    parents = {"a": (), "x": ("a",), "y": ("a",), "m": ("x", "y")}
    assert Graph.from_parents(parents, walk=["a", "y", "x", "m"]).order == ("a", "y", "x", "m")
    # A walk that is not topological (clock skew) still yields a topological order.
    skewed = Graph.from_parents(parents, walk=["m", "y", "a", "x"])
    assert skewed.order == ("a", "y", "x", "m")
    assert skewed.walk == ("m", "y", "a", "x")


def test_graph_rejects_cycles_and_bad_walks() -> None:
    with pytest.raises(ValueError, match="cycle"):
        Graph.from_parents({"a": ("b",), "b": ("a",)})
    with pytest.raises(ValueError, match="walk"):
        Graph.from_parents({"a": (), "b": ("a",)}, walk=["a"])


# -- choice of commits --------------------------------------------------------------------------------


def test_linear_choice_matches_git() -> None:
    # git on 4 candidates + tip (weights 1..5): the first commit counted "halfway" is the one
    # reaching 2 commits, i.e. c02 (c01 is a root of the range and is never checked early).
    g, c = linear(6)
    state = start(g, c[5], [c[0]])
    assert state.remaining() == c[1:]
    assert state.next_commit() == "c02"
    assert state.steps_left() == estimate_steps(5) == 1


def test_bisect_finds_the_culprit_on_a_line() -> None:
    g, c = linear(33)
    for culprit in c[1:]:
        result = bisect(g, c[-1], [c[0]], by_culprit(g, culprit))
        assert (result.outcome, result.first_new, result.candidates) == ("found", culprit, (culprit,))
        assert result.tested <= 6  # 32 candidates: log2(32) + 1 at most


def test_bisect_finds_a_fix_with_the_same_words() -> None:
    # "old" = broken (the known-old end), "new" = fixed: the first new commit is the fix.
    g, c = linear(10)
    fix = "c07"
    result = bisect(g, c[-1], [c[0]], lambda s: NEW if s >= fix else OLD)
    assert result.first_new == fix


def test_merge_dag_and_first_new_on_a_side_branch() -> None:
    #   o - a - b ------- m - t
    #        \           /
    #         x1 - x2 - x3
    parents = {
        "a": (),
        "b": ("a",),
        "x1": ("a",),
        "x2": ("x1",),
        "x3": ("x2",),
        "m": ("b", "x3"),
        "t": ("m",),
    }
    g = Graph.from_parents(parents)
    for culprit in parents:
        result = bisect(g, "t", ["o"], by_culprit(g, culprit))
        assert result.first_new == culprit


def test_skipped_culprit_gives_git_candidate_set() -> None:
    g, c = linear(9)
    result = bisect(g, c[-1], [c[0]], by_culprit(g, "c04", frozenset({"c03", "c04"})))
    assert result.outcome == "ambiguous" and result.first_new is None
    assert result.candidates == ("c03", "c04", "c05")


def test_where_skips_end_depends_on_the_path_taken() -> None:
    # c is the culprit and untestable; x and y both descend from it.  Whichever git tests first
    # becomes the lowest new commit, so the final candidate set depends on git's tie-break (the
    # smaller object id once a skip is recorded): we must make the same choice.
    parents = {"c": (), "x": ("c",), "y": ("c",), "m": ("x", "y")}
    g = Graph.from_parents(parents)
    state = start(g, "m").record("c", SKIP)
    assert state.next_commit() == "x"
    assert bisect(g, "m", [], by_culprit(g, "c", frozenset({"c"}))).candidates in (("c", "x"), ("c", "y"))


def test_lookahead_is_both_possible_next_commits() -> None:
    g, c = linear(17)
    state = start(g, c[-1], [c[0]])
    current = state.next_commit()
    assert current is not None
    if_old = state.record(current, OLD).next_commit()
    if_new = state.record(current, NEW).next_commit()
    assert state.lookahead() == (if_old, if_new)
    assert if_old != if_new and current not in state.lookahead()


def test_done_state_has_no_lookahead_and_no_steps() -> None:
    g, c = linear(3)
    state = start(g, c[-1], [c[0]]).record("c01", OLD)
    assert state.done() and state.next_commit() is None
    assert state.lookahead() == () and state.steps_left() == 0
    assert state.result().first_new == "c02"


def test_running_result_lists_every_possible_commit() -> None:
    g, c = linear(8)
    result = start(g, c[-1], [c[0]]).result()
    assert result.outcome == "running" and result.first_new is None
    assert result.candidates == tuple(c[1:]) and result.steps_left == 2


def test_treesame_tip_is_never_named() -> None:
    # With a pathspec the tip may not touch the paths: git walks through it but never names it.
    g = Graph.from_parents({"a": (), "b": ("a",), "t": ("b",)}, treesame={"t"})
    state = start(g, "t")
    assert state.next_commit() == "a"
    result = bisect(g, "t", [], lambda s: OLD)
    assert result.outcome == "untestable" and result.first_new is None
    assert bisect(g, "t", [], lambda s: NEW if s == "b" else OLD).first_new == "b"


def test_contradictory_or_unknown_verdicts_are_refused() -> None:
    g, c = linear(6)
    state = start(g, c[-1], [c[0]])
    with pytest.raises(ValueError, match="verdict"):
        state.record("c02", "bad")
    with pytest.raises(ValueError, match="not a candidate"):
        state.record("nope", OLD)
    with pytest.raises(ValueError, match="known-new"):
        state.record(c[-1], OLD)
    with pytest.raises(ValueError, match="known-new"):
        state.record(c[-1], SKIP)
    with pytest.raises(ValueError, match="ancestor of an old"):
        state.record("c03", OLD).record("c02", NEW)
    with pytest.raises(ValueError, match="ancestor of an old"):
        SearchState(g, "c01", frozenset({"c02"}))


def test_verdict_history_is_kept_and_states_are_immutable() -> None:
    g, c = linear(6)
    state = start(g, c[-1], [c[0]])
    after = state.record("c02", OLD).record("c04", SKIP)
    assert after.verdicts == (("c02", OLD), ("c04", SKIP))
    assert state.verdicts == () and state.olds == {"c00"}


def test_estimate_steps_matches_git() -> None:
    assert [estimate_steps(n) for n in range(1, 18)] == [0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3]
    assert estimate_steps(1024) == 9 and estimate_steps(1500) == 10


def _git_sqrti(val: int) -> int:
    """git's sqrti, in single precision like the C code."""

    def f32(x: float) -> float:
        return struct.unpack("f", struct.pack("f", x))[0]

    if val == 0:
        return 0
    x = f32(float(val))
    while True:
        y = f32(f32(x + f32(val / x)) / 2)
        d = f32(y - x) if y > x else f32(x - y)
        x = y
        if d < 0.5:
            return int(x)


def test_isqrt_equals_gits_float_sqrti_for_every_prn() -> None:
    assert all(_git_sqrti(v) == math.isqrt(v) for v in range(32768))
    assert _prn(1) == 16838 and _skip_away_index(1) == 0


def test_large_graph_takes_logarithmic_steps() -> None:
    # A few thousand commits with merges every so often: the size of a release-to-release range. How fast
    # the search is in seconds is benchmarks/upstream_history.py's; here, how many commits it asks about.
    parents: dict[str, tuple[str, ...]] = {"r0": ()}
    for i in range(1, 4000):
        ps = (f"r{i - 1}",) + ((f"r{i - 7}",) if i % 5 == 0 and i > 7 else ())
        parents[f"r{i}"] = ps
    g = Graph.from_parents(parents)
    asked: list[str] = []
    judge = by_culprit(g, "r1234")

    def counted(sha: str):  # type: ignore[no-untyped-def]
        asked.append(sha)
        return judge(sha)

    result = bisect(g, "r3999", [], counted)
    assert result.first_new == "r1234"
    assert len(asked) == len(set(asked)) <= math.ceil(math.log2(4000)) + 2


# -- brute force on linear histories ------------------------------------------------------------------


def brute_force(n: int, culprit: int, skips: frozenset[int]) -> tuple[str, tuple[int, ...]]:
    """What git must end with on c0 (old) .. c{n-1} (new): the lowest testable new commit, and every
    skipped commit between it and the highest testable old one."""
    new = min(i for i in range(culprit, n) if i not in skips)
    old = max(i for i in range(culprit) if i not in skips)
    between = tuple(i for i in range(old + 1, new) if i in skips)
    return ("ambiguous" if between else "found"), (*between, new)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_linear_with_random_skips_matches_brute_force(data: st.DataObject) -> None:
    n = data.draw(st.integers(2, 80))
    culprit = data.draw(st.integers(1, n - 1))
    percent = data.draw(st.sampled_from((0, 10, 30, 60, 90)))
    skips = frozenset(i for i in range(1, n - 1) if data.draw(st.integers(0, 99)) < percent)
    g, c = linear(n)
    result = bisect(g, c[-1], [c[0]], by_culprit(g, c[culprit], frozenset(c[i] for i in skips)))
    outcome, expected = brute_force(n, culprit, skips)
    assert result.outcome == outcome
    assert result.candidates == tuple(c[i] for i in expected)
    assert result.first_new == (c[culprit] if outcome == "found" else None)
    tested = [sha for sha, _ in result.verdicts]
    assert len(tested) == len(set(tested)), "a commit was tested twice"
    if not skips:
        assert len(tested) <= math.ceil(math.log2(n))
