"""Why the flaky bisect's defaults were what they were: a simulation (no processes) of the rule a flaky bisect
followed before the posterior search (issue 31; benchmarks/noisy_sim.py compares the two), with abbisect's own
tests.

Each simulated bisect is a linear history of `--commits` commits whose commit P (uniform in 1..N-1, or
`--positions`) and every later one fails a launch with probability `--rate` (one in three), the earlier ones
never. The rule is the one the former policies.settle_ends, oracle.assess / grow_ends and confirm.confirm
followed, with `abbisect.stats.compare_rates` and `classify_rate` deciding and `abbisect.bisect.search`
choosing the commits (git's midpoints and skip-away):

- the ends get `launches` each, `launches` more each while compare_rates(old, new) is "not sure", up to the
  cap (`cap multiple` × launches); "same", or not different at the cap → no change (exit 3);
- a candidate gets `launches` and is classified with classify_rate against the ends' counts; while not sure:
  if an end has fewer launches than the candidate, the ends grow to the candidate's count (within the cap)
  and it is classified again; else `launches` more for the candidate, up to the cap; not sure at the cap →
  skipped (only skipped commits left → ambiguous, exit 5);
- a found commit and its parent are launched again, fresh, `launches` each, more while compare_rates is
  "unsure", up to the cap: confirmed (different, the found one worse), not sure, or not reproduced.

Each commit's launches are one seeded stream, the same in every setting (common random numbers), so the rows
differ by the rule, not by luck. Prints one markdown row per setting: named the planted commit / a wrong one /
no change / ambiguous, with the hit rate's 95 % Wilson interval, mean launches (search; with the
confirmation), the confirmation's levels, and the wrong answers it nonetheless confirmed.

    python benchmarks/flaky_sim.py [--bisects 300] [--commits 16] [--rate 0.3333] [--settings 6,8,0.15,0.01 ...]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import random
import shlex
import statistics
import sys
from dataclasses import dataclass

from abbisect.bisect.search import NEW, OLD, SKIP, Graph, start
from abbisect.stats import Call, Resemblance, classify_rate, compare_rates, wilson

DEFAULT_SETTINGS = ["6,4,0.25,0.05", "6,8,0.15,0.05", "6,8,0.15,0.01", "6,8,0.5,0.01", "6,16,0.15,0.01",
                    "4,8,0.15,0.01", "10,8,0.15,0.01", "6,8,0.25,0.01", "6,8,0.1,0.01"]


@dataclass(frozen=True)
class Setting:
    launches: int
    multiple: int  # the cap: max_launches = multiple × launches (recipe default 8)
    min_difference: float
    alpha: float

    @property
    def cap(self) -> int:
        return self.multiple * self.launches

    @classmethod
    def parse(cls, text: str) -> Setting:
        launches, multiple, min_difference, alpha = text.split(",")
        return cls(int(launches), int(multiple), float(min_difference), float(alpha))


@functools.cache
def compare(a: tuple[int, int], b: tuple[int, int], min_difference: float, alpha: float) -> Call:
    return compare_rates(*a, *b, min_difference=min_difference, alpha=alpha).call


@functools.cache
def classify(k: int, n: int, good: tuple[int, int], bad: tuple[int, int], min_difference: float,
             alpha: float) -> Resemblance:
    return classify_rate(k, n, good=good, bad=bad, min_difference=min_difference, alpha=alpha).side


class Commit:
    """A commit's launches: one seeded stream of draws, so every setting sees the same j-th launch."""

    def __init__(self, seed: str, rate: float) -> None:
        self.rng, self.rate = random.Random(seed), rate
        self.draws: list[bool] = []

    def outcome(self, j: int) -> bool:
        while len(self.draws) <= j:
            self.draws.append(self.rng.random() < self.rate)
        return self.draws[j]


class Counts:
    """(failures, launches) of one commit in one simulated bisect."""

    def __init__(self, commit: Commit) -> None:
        self.commit, self.k, self.n = commit, 0, 0

    def launch(self, m: int) -> int:
        for j in range(self.n, self.n + m):
            self.k += self.commit.outcome(j)
        self.n += m
        return m

    @property
    def pair(self) -> tuple[int, int]:
        return (self.k, self.n)


def simulate(s: Setting, commits: int, culprit: int, streams: list[Commit], fresh: list[Commit]) -> dict:
    """One bisect of commits 0..commits-1 (0 good, the last bad) with the rule above."""
    counts = [Counts(c) for c in streams]
    launched = 0
    md, alpha, first, cap = s.min_difference, s.alpha, s.launches, s.cap
    old, new = counts[0], counts[-1]
    launched += old.launch(first) + new.launch(first)
    while (call := compare(old.pair, new.pair, md, alpha)) is not Call.DIFFERENT:  # settle_ends
        more = max(0, min(first, cap - min(old.n, new.n)))
        if call is Call.SAME or not more or min(old.n, new.n) >= cap:
            return {"result": "no change", "launches": launched, "confirm": 0, "level": None}
        launched += old.launch(more) + new.launch(more)
    if new.k <= old.k:  # the old end worse: a fix, not what was planted
        return {"result": "wrong", "launches": launched, "confirm": 0, "level": None}
    ends = (old, new)  # good, bad
    names = [hashlib.sha1(str(i).encode()).hexdigest() for i in range(commits)]  # git's ties go by object id
    graph = Graph.from_parents({names[i]: (names[i - 1],) for i in range(1, commits)})
    state = start(graph, names[-1], [names[0]])
    steps: list[tuple] = []  # (commit, its counts, the good end's, the bad end's, the side): to explain a row
    while (sha := state.next_commit()) is not None:
        c = counts[names.index(sha)]
        launched += c.launch(first)
        while True:  # Oracle.assess
            side = classify(c.k, c.n, old.pair, new.pair, md, alpha)
            if side is not Resemblance.UNSURE:
                break
            grew = 0
            for end in ends:  # Oracle.grow_ends
                grew += end.launch(max(0, min(c.n, cap) - end.n))
            launched += grew
            if grew:
                continue
            more = max(0, min(first, cap - c.n))
            if not more:
                break
            launched += c.launch(more)
        state = state.record(sha, {Resemblance.LIKE_BAD: NEW, Resemblance.LIKE_GOOD: OLD,
                                   Resemblance.UNSURE: SKIP}[side])
        steps.append((names.index(sha), c.pair, old.pair, new.pair, side.value))
    res = state.result()
    if res.outcome != "found" or res.first_new is None:
        return {"result": res.outcome, "launches": launched, "confirm": 0, "level": None, "steps": steps}
    found = names.index(res.first_new)
    parent, mine = Counts(fresh[found - 1]), Counts(fresh[found])  # confirm.confirm: fresh launches only
    confirm = 0
    while True:
        confirm += parent.launch(first) + mine.launch(first)
        call = compare(parent.pair, mine.pair, md, alpha)
        if call is not Call.UNSURE or mine.n >= cap:
            break
    level = ("confirmed" if call is Call.DIFFERENT and mine.k * parent.n > parent.k * mine.n
             else "not sure" if call is Call.UNSURE else "not reproduced")
    return {"result": "hit" if found == culprit else "wrong", "launches": launched, "confirm": confirm,
            "level": level, "found": found, "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bisects", type=int, default=300)
    ap.add_argument("--commits", type=int, default=16)
    ap.add_argument("--rate", type=float, default=1 / 3, help="failure rate from the planted commit on")
    ap.add_argument("--positions", default=None, help="LO..HI: the planted commit's range (default 1..N-1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--settings", nargs="+", default=DEFAULT_SETTINGS,
                    help="launches,cap multiple,min_difference,alpha (e.g. 6,8,0.15,0.01: the defaults)")
    args = ap.parse_args()
    lo, hi = map(int, args.positions.split("..")) if args.positions else (1, args.commits - 1)
    print("`" + " ".join(["python", "benchmarks/flaky_sim.py", *map(shlex.quote, sys.argv[1:])]) + "`")
    print(f"\n{args.bisects} simulated bisects of {args.commits} commits, the planted commit uniform in {lo}..{hi} "
          f"failing {args.rate:.3g} of launches from there on; launches: the search's (ends and candidates), "
          "then with the confirmation's fresh reruns\n")
    print("| launches | cap | min_difference | alpha | named the planted commit | 95 % interval | a wrong commit | "
          "no change | ambiguous | launches mean / median | with confirmation | confirmed / not sure / not "
          "reproduced (of found) | wrong yet confirmed |")
    print("|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---:|")
    bisects = []
    for i in range(args.bisects):
        rng = random.Random(f"{args.seed}-{i}")
        culprit = rng.randint(lo, hi)
        rates = [args.rate if j >= culprit else 0.0 for j in range(args.commits)]
        bisects.append((culprit, [Commit(f"{args.seed}-{i}-{j}", r) for j, r in enumerate(rates)],
                        [Commit(f"{args.seed}-{i}-{j}-confirm", r) for j, r in enumerate(rates)]))
    for text in args.settings:
        s = Setting.parse(text)
        rows = [simulate(s, args.commits, culprit, streams, fresh) for culprit, streams, fresh in bisects]
        n = len(rows)
        count = {k: sum(r["result"] == k for r in rows) for k in ("hit", "wrong", "no change", "ambiguous")}
        levels = {k: sum(r["level"] == k for r in rows) for k in ("confirmed", "not sure", "not reproduced")}
        silent = sum(r["result"] == "wrong" and r["level"] == "confirmed" for r in rows)
        ci = wilson(count["hit"], n)
        search = [r["launches"] for r in rows]
        total = [r["launches"] + r["confirm"] for r in rows]
        print(f"| {s.launches} | {s.multiple} × | {s.min_difference:g} | {s.alpha:g} | **{count['hit']}**/{n} | "
              f"{ci[0]:.0%}–{ci[1]:.0%} | {count['wrong']} | {count['no change']} | {count['ambiguous']} | "
              f"{statistics.mean(search):.0f} / {statistics.median(search):g} | "
              f"{statistics.mean(total):.0f} / {statistics.median(total):g} | "
              f"{levels['confirmed']} / {levels['not sure']} / {levels['not reproduced']} | {silent} |", flush=True)


if __name__ == "__main__":
    main()
