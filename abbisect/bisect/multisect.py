"""Multisection: with k trial slots, test k commits per round that split the remaining candidates into
k + 1 parts as evenly as the graph allows — ⌈log_{k+1} N⌉ rounds instead of ⌈log2 N⌉.

Pure, like `search`: a round is chosen from a `SearchState`, verdicts are folded back into it, and the
search ends exactly where the sequential one does (the same `SearchState.result()`); with one slot the
pick is git's own midpoint. No tool in the field does this; git, cargo-bisect-rustc, mozregression and
asv test one commit at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import pairwise

from abbisect.bisect.search import NEW, SKIP, Graph, SearchResult, SearchState, start


def open_commits(state: SearchState) -> list[str]:
    """Commits whose verdict can still narrow the search: in range, counted, not skipped, not `new`."""
    g = state.graph
    return [sha for sha in state.remaining() if sha != state.new and sha not in state.skipped
            and sha not in g.treesame]


def pick(state: SearchState, k: int, busy: Iterable[str] = ()) -> tuple[str, ...]:
    """Up to `k` commits to test next, besides those `busy` (already being tested).

    Each commit splits the range at its weight (how many counted commits of the range it reaches): on a
    line, weights are positions and the picks are the k-quantiles; on a DAG the nearest weights. The
    busy commits are split points already, so the picks fill the largest gaps between them. With k = 1
    and nothing busy this is git's own choice.
    """
    if state.done():
        return ()
    busy = set(busy)
    if k == 1 and not busy:
        return (state.next_commit(),)  # type: ignore[return-value]
    free = [sha for sha in open_commits(state) if sha not in busy]
    if len(free) <= k:
        return tuple(free)
    _, weight = state._weigh(shortcut=False)
    total = state._counted
    chosen: list[str] = []
    for target in _targets(sorted({0, total, *(weight[s] for s in busy if s in weight)}), k):
        options = [s for s in free if s not in chosen]
        if not options:
            break
        chosen.append(min(options, key=lambda s: (abs(weight[s] - target), state.graph._index[s])))
    return tuple(chosen)


def _targets(cuts: list[int], k: int) -> list[float]:
    """Where k new cuts go so that the largest part between cuts is as small as possible: each new cut
    goes to the gap whose parts are largest, and a gap with m cuts is split evenly into m + 1 parts
    (with no busy commits: the k-quantiles i·N/(k+1))."""
    gaps = list(pairwise(cuts))
    count = [0] * len(gaps)
    for _ in range(k):
        g = max(range(len(gaps)), key=lambda i: ((gaps[i][1] - gaps[i][0]) / (count[i] + 1), -i))
        count[g] += 1
    return [lo + j * (hi - lo) / (m + 1) for (lo, hi), m in zip(gaps, count) for j in range(1, m + 1)]


def fold(state: SearchState, verdicts: Iterable[tuple[str, str]]) -> SearchState:
    """Record verdicts that arrived together (in any order). A verdict on a commit that another verdict
    already put outside the range narrows nothing and is left out, as the sequential search would never
    have tested it."""
    return fold_taken(state, verdicts)[0]


def fold_taken(state: SearchState, verdicts: Iterable[tuple[str, str]]) -> tuple[SearchState, set[str]]:
    """`fold`, and the commits whose verdicts were recorded (the others were no longer needed)."""
    pending = list(verdicts)
    # News first (the lowest wins), then olds and skips on what is left.
    pending.sort(key=lambda sv: (sv[1] != NEW, state.graph._index[sv[0]]))
    taken = set()
    for sha, verdict in pending:
        if still_useful(state, sha):
            state = state.record(sha, verdict)
            taken.add(sha)
    return state, taken


def still_useful(state: SearchState, sha: str) -> bool:
    """Whether a verdict on `sha` could still narrow the search (a running trial on it is worth waiting for)."""
    return sha in set(open_commits(state))


@dataclass(frozen=True)
class Multisected:
    """A whole multisection: its result and the commits each round tested."""

    result: SearchResult
    rounds: tuple[tuple[str, ...], ...]  # the commits tested in each round, replacements included

    @property
    def launches(self) -> int:
        return sum(len(r) for r in self.rounds)


def multisect(graph: Graph, new: str, olds: Iterable[str], verdict: Callable[[str], str], k: int) -> Multisected:
    """A whole search with `k` slots and immediate verdicts (what a driver does with real trials): each
    round tests up to k commits; a skipped commit is replaced within the round while slots and useful
    commits remain."""
    if k < 1:
        raise ValueError("k must be at least 1")
    state = start(graph, new, olds)
    rounds: list[tuple[str, ...]] = []
    while not state.done():
        tested: list[str] = []
        batch = list(pick(state, k))
        while batch:
            answers = [(sha, verdict(sha)) for sha in batch]
            tested += batch
            state = fold(state, answers)
            skipped = sum(1 for _, v in answers if v == SKIP)
            # replace the skipped ones in this round, if the round still has use for them
            batch = list(pick(state, skipped, busy=())) if skipped and not state.done() else []
            batch = [s for s in batch if s not in tested][:skipped]
        rounds.append(tuple(tested))
    return Multisected(state.result(), tuple(rounds))
