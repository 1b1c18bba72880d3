"""Pure bisection search over a DAG of commits, choosing commits exactly the way `git bisect` does.

No git and no I/O here: `history` builds the `Graph`, a driver supplies verdicts.  Verdicts are in
terms of "old" (the state at the known-old end) and "new" (the changed state), so finding a
regression and finding a fix are the same search.

Matching git step for step (not just the final answer) matters: once a commit is skipped, the set of
commits git reports as "could be any of" depends on which commits were tested before, so a search
that picked other (equally good) midpoints could end with a different candidate set.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from typing import Literal


class Mark(StrEnum):
    """What a search records for a tested commit: like the old end, like the new end, or untestable. Its own
    vocabulary (git's terms), apart from a trial's good/bad/skip: which outcome is "old" depends on the
    direction of the search."""

    OLD = "old"
    NEW = "new"
    SKIP = "skip"


OLD, NEW, SKIP = Mark.OLD, Mark.NEW, Mark.SKIP
VERDICTS = tuple(Mark)

Outcome = Literal["running", "found", "ambiguous", "untestable"]


@dataclass(frozen=True, eq=False)
class Graph:
    """The candidate DAG restricted to the bisect range.

    parents: sha -> parents inside the graph (parents outside the range are dropped).
    order:   topological, oldest first.
    walk:    git's own list order, oldest first (the reverse of `git rev-list` for the range); git
             breaks ties between equally good midpoints by it.  Defaults to the order of `parents`.
             Need not be topological (committer dates can be skewed); `order` always is.
    treesame: with a pathspec, commits that do not touch the paths (the tip may be one): git walks
             through them but never counts, tests or names them.
    """

    parents: Mapping[str, tuple[str, ...]]
    order: tuple[str, ...]
    walk: tuple[str, ...]
    treesame: frozenset[str] = frozenset()

    @classmethod
    def from_parents(
        cls,
        parents: Mapping[str, Iterable[str]],
        walk: Iterable[str] | None = None,
        treesame: Iterable[str] = (),
    ) -> Graph:
        shas = list(parents)
        inside = set(shas)
        clean = {sha: tuple(dict.fromkeys(p for p in parents[sha] if p in inside)) for sha in shas}
        walk_t = tuple(walk) if walk is not None else tuple(shas)
        if len(walk_t) != len(inside) or set(walk_t) != inside:
            raise ValueError("walk must list every commit of the graph exactly once")
        return cls(clean, _stable_topo(clean, walk_t), walk_t, frozenset(treesame) & inside)

    def __contains__(self, sha: object) -> bool:
        return sha in self.parents

    def __len__(self) -> int:
        return len(self.order)

    @cached_property
    def _index(self) -> dict[str, int]:
        return {sha: i for i, sha in enumerate(self.order)}

    @cached_property
    def _ancestors(self) -> dict[str, int]:
        """sha -> bitset (bit i = order[i]) of the commit and all its ancestors in the graph."""
        anc: dict[str, int] = {}
        for i, sha in enumerate(self.order):
            bits = 1 << i
            for p in self.parents[sha]:
                bits |= anc[p]
            anc[sha] = bits
        return anc

    @cached_property
    def _treesame_bits(self) -> int:
        return _bits(self._index, self.treesame)

    def ancestors(self, sha: str) -> frozenset[str]:
        """The commit itself and every ancestor of it inside the graph."""
        return frozenset(self._unbits(self._ancestors[sha]))

    def _unbits(self, bits: int) -> list[str]:
        return [sha for i, sha in enumerate(self.order) if bits >> i & 1]


def _bits(index: Mapping[str, int], shas: Iterable[str]) -> int:
    bits = 0
    for sha in shas:
        if sha in index:
            bits |= 1 << index[sha]
    return bits


def _stable_topo(parents: Mapping[str, tuple[str, ...]], walk: tuple[str, ...]) -> tuple[str, ...]:
    """Topological order (parents first) that keeps `walk` order wherever the graph allows it."""
    pos = {sha: i for i, sha in enumerate(walk)}
    children: dict[str, list[str]] = {sha: [] for sha in walk}
    waiting = {sha: len(ps) for sha, ps in parents.items()}
    for sha, ps in parents.items():
        for p in ps:
            children[p].append(sha)
    ready = [pos[sha] for sha, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    out: list[str] = []
    while ready:
        sha = walk[heapq.heappop(ready)]
        out.append(sha)
        for c in children[sha]:
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, pos[c])
    if len(out) != len(walk):
        raise ValueError("the parent relation has a cycle")
    return tuple(out)


@dataclass(frozen=True)
class SearchResult:
    """Where a search ended (or stands).

    outcome: "found" (first_new is set), "ambiguous" (only skipped commits are left: the first new
    commit is one of `candidates`, like git's "could be any of"), "untestable" (nothing left that
    may be tested: with a pathspec, the change is outside the paths; `candidates` holds the known-new
    end), or "running" (`candidates`: every commit still possible).
    """

    outcome: Outcome
    first_new: str | None
    candidates: tuple[str, ...]
    steps_left: int
    verdicts: tuple[tuple[str, str], ...]

    @property
    def tested(self) -> int:
        """How many verdicts were recorded (skips included)."""
        return len(self.verdicts)


@dataclass(frozen=True)
class SearchState:
    """One point of a bisection: the lowest known-new commit, the known-old and skipped ones."""

    graph: Graph
    new: str
    olds: frozenset[str] = frozenset()
    skipped: frozenset[str] = frozenset()
    verdicts: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.new not in self.graph:
            raise ValueError(f"new commit {self.new} is not in the graph")
        if self._is_old(self.new):
            raise ValueError(f"new commit {self.new} is an ancestor of an old commit")

    # -- range -----------------------------------------------------------------------------------

    @cached_property
    def _old_bits(self) -> int:
        """Every commit of the graph known old: the old ones and their ancestors."""
        bits = 0
        for sha in self.olds:
            if sha in self.graph:  # the starting old ends are usually just outside the graph
                bits |= self.graph._ancestors[sha]
        return bits

    def _is_old(self, sha: str) -> bool:
        return bool(self._old_bits >> self.graph._index[sha] & 1)

    @cached_property
    def _range_bits(self) -> int:
        return self.graph._ancestors[self.new] & ~self._old_bits

    def remaining(self) -> list[str]:
        """Commits that may still be the first new one (skipped ones and `new` included), in
        topological order.  Treesame commits are left out: git never names them."""
        return self.graph._unbits(self._range_bits & ~self.graph._treesame_bits)

    @cached_property
    def _counted(self) -> int:
        """How many commits of the range count (git's "all"): treesame ones never do."""
        return (self._range_bits & ~self.graph._treesame_bits).bit_count()

    def _weigh(self, shortcut: bool) -> tuple[str | None, dict[str, int]]:
        """git's do_find_bisection, step for step.

        A weight is how many counted commits of the range a commit reaches (itself included); -1 or
        -2 are git's "not known yet" marks for one and several parents in the range.  git gives up
        computing as soon as it has counted as many commits as the range holds, and with
        `shortcut` returns the first commit it finds "halfway": both quirks decide which commit is
        tested, so both are kept.
        """
        g = self.graph
        bits = self._range_bits
        walk = [sha for sha in g.walk if bits >> g._index[sha] & 1]
        nr = self._counted
        weight: dict[str, int] = {}
        counted = 0
        for sha in walk:
            inside = sum(1 for p in g.parents[sha] if bits >> g._index[p] & 1)
            if inside == 0:
                weight[sha] = 0 if sha in g.treesame else 1
                counted += sha not in g.treesame
            else:
                weight[sha] = -1 if inside == 1 else -2

        def halfway(sha: str) -> bool:
            if not shortcut or sha in g.treesame:
                return False
            diff = 2 * weight[sha] - nr
            return -1 <= diff <= 1 or abs(diff) < nr // 1024

        counted_bits = bits & ~g._treesame_bits
        for sha in walk:
            if weight[sha] != -2:
                continue
            # Merges: count what they reach directly (parents' counts would overlap).
            weight[sha] = (g._ancestors[sha] & counted_bits).bit_count()
            if halfway(sha):
                return sha, weight
            counted += 1
        while counted < nr:
            progress = False
            for sha in walk:
                if weight[sha] >= 0:
                    continue
                known = [p for p in g.parents[sha] if bits >> g._index[p] & 1 and weight[p] >= 0]
                if not known:
                    continue
                progress = True
                if sha in g.treesame:
                    weight[sha] = weight[known[0]]
                else:
                    weight[sha] = weight[known[0]] + 1
                    counted += 1
                if halfway(sha):
                    return sha, weight
            if not progress:
                break  # unreachable on a DAG; keeps a malformed graph from looping forever
        return None, weight

    @cached_property
    def _pick(self) -> str | None:
        """The commit git would check out next; `self.new` means git stops; None: nothing testable."""
        nr = self._counted
        if nr == 0:
            return None
        g = self.graph
        halfway, weight = self._weigh(shortcut=not self.skipped)
        if halfway is not None:
            return halfway
        distance = {
            sha: min(weight[sha], nr - weight[sha])
            for sha in g.walk
            if sha in weight and sha not in g.treesame
        }
        if not self.skipped:
            # The first commit (in walk order) with the best distance.
            return max(distance, key=lambda sha: distance[sha])
        # With any skip recorded git ranks every commit by distance, ties by object id, and steps
        # away from a skipped best choice with its own pseudo-random jump.
        ranked = sorted(distance, key=lambda sha: (-distance[sha], sha))
        if ranked[0] not in self.skipped:
            return ranked[0]
        usable = [sha for sha in ranked if sha not in self.skipped]
        if not usable:
            return None
        index = _skip_away_index(len(usable))
        if index >= len(usable):
            return usable[0]
        if usable[index] != self.new:
            return usable[index]
        return usable[index - 1] if index > 0 else usable[0]

    def next_commit(self) -> str | None:
        """The commit to test next, or None when the search is over."""
        pick = self._pick
        return None if pick is None or pick == self.new else pick

    def done(self) -> bool:
        return self.next_commit() is None

    def lookahead(self) -> tuple[str, ...]:
        """Commits tested after `next_commit()` if it is old, then if it is new (no repeats, no None).

        Lets a driver prepare (build, install) both possible next commits while one is tested.
        """
        current = self.next_commit()
        if current is None:
            return ()
        ahead = (self.record(current, OLD).next_commit(), self.record(current, NEW).next_commit())
        return tuple(dict.fromkeys(sha for sha in ahead if sha is not None))

    def steps_left(self) -> int:
        """git's "roughly N steps": tests expected *after* the next one (0 when done)."""
        return 0 if self.done() else estimate_steps(self._counted)

    # -- verdicts ----------------------------------------------------------------------------------

    def record(self, sha: str, verdict: str) -> SearchState:
        if verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, not {verdict!r}")
        if sha not in self.graph:
            raise ValueError(f"{sha} is not a candidate commit")
        history = (*self.verdicts, (sha, verdict))
        if verdict == NEW:
            if self._is_old(sha):
                raise ValueError(f"{sha} cannot be new: it is an ancestor of an old commit")
            in_range = self._range_bits >> self.graph._index[sha] & 1
            # A new commit outside the range (a sibling of the known-new one) narrows nothing.
            return replace(self, new=sha if in_range else self.new, verdicts=history)
        if self.graph._ancestors[sha] >> self.graph._index[self.new] & 1:
            raise ValueError(f"{sha} cannot be {verdict}: it is (a descendant of) the known-new commit")
        if verdict == OLD:
            return replace(self, olds=self.olds | {sha}, verdicts=history)
        return replace(self, skipped=self.skipped | {sha}, verdicts=history)

    def result(self) -> SearchResult:
        pick = self._pick
        left = [sha for sha in self.remaining() if sha != self.new]
        if pick is not None and pick != self.new:
            return SearchResult("running", None, tuple(self.remaining()), self.steps_left(), self.verdicts)
        if pick == self.new and not left:
            return SearchResult("found", self.new, (self.new,), 0, self.verdicts)
        if left:  # every commit left is skipped
            tail = () if self.new in self.graph.treesame else (self.new,)
            return SearchResult("ambiguous", None, (*left, *tail), 0, self.verdicts)
        return SearchResult("untestable", None, (self.new,), 0, self.verdicts)


def start(graph: Graph, new: str, olds: Iterable[str] = ()) -> SearchState:
    return SearchState(graph, new, frozenset(olds))


def bisect(graph: Graph, new: str, olds: Iterable[str], verdict: Callable[[str], str]) -> SearchResult:
    """Run a whole search, asking `verdict(sha)` for "old", "new" or "skip"."""
    state = start(graph, new, olds)
    while (sha := state.next_commit()) is not None:
        state = state.record(sha, verdict(sha))
    return state.result()


def estimate_steps(count: int) -> int:
    """git's estimate of the tests left after the current one, for `count` commits in the range."""
    if count < 3:
        return 0
    n = count.bit_length() - 1
    e = 1 << n
    return n if e < 3 * (count - e) else n - 1


# -- git's deterministic "skip away" jump -------------------------------------------------------------

_PRN_MODULO = 32768


def _prn(count: int) -> int:
    state = (count * 1103515245 + 12345) & 0xFFFFFFFF  # C unsigned arithmetic
    return (state // 65536) % _PRN_MODULO


def _skip_away_index(count: int) -> int:
    # git takes its square roots in single precision; for every value _prn can return that equals
    # math.isqrt (the tests check all of them).
    prn = _prn(count)
    return (count * prn // _PRN_MODULO) * math.isqrt(prn) // math.isqrt(_PRN_MODULO)
