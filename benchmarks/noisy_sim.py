"""Noisy bisection, simulated at the seam (issue 31): the posterior search against today's rule and a
Pinpoint-style baseline, on the same seeded histories, in one process.

What runs for real: for **posterior**, abbisect's own driver, oracle, posterior search (abbisect/bisect/noisy.py,
posterior.py), assessors and confirmation, exactly as `abbisect bisect` runs them; only the trial is simulated
(abbisect/testing/seam.py says what each kind's simulated launch does). **today's rule** is the rule abbisect had
before (settle the ends to p ≤ alpha, then each of git's midpoints to p ≤ alpha against the ends, growing the
ends with an unsure candidate, then confirm the answer with fresh launches until different: the loops of the
former oracle.assess / grow_ends, policies.settle_ends and confirm.confirm), written out here over the same
assessors (abbisect/assess: Fisher, KS/MWU, McNemar) and git's own search (abbisect/bisect/search.py); a batch
was a rule on one launch (the 50 % `degenerate_fraction`). **pinpoint** is Chromium Pinpoint's way with a flaky
verdict: 10 launches a commit and 10 more while the comparison with the ends is unsure (up to 40), no
confirmation. **clairvoyant** is a bound, not a method: the posterior search told where the change is, so it may
launch only the planted commit, its parent and the ends — the same posterior, stopping rule and confirmation as
**posterior**; what it costs is what certifying the answer costs, whatever order a search launches in.
Launches count server starts (the confirmation's separately); wall time counts rounds, one launch of time each,
k at once on k slots.

    python benchmarks/noisy_sim.py [--seeds 20] [--commits 60] [--scenarios flaky,flaky10,...]
                                   [--methods posterior,...] [--no-change-prior P] [--changes one|all]
                                   [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from abbisect.assess import assessor_for
from abbisect.assess.accuracy import eval_run
from abbisect.assess.base import Worse
from abbisect.bisect import noisy
from abbisect.bisect.launches import fresh
from abbisect.bisect.noisy import NoisySearch
from abbisect.bisect.posterior import Option
from abbisect.bisect.search import NEW, OLD, SKIP, Graph, start
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome
from abbisect.stats import Call
from abbisect.testing import seam
from abbisect.trial.spec import TrialResult, TrialSpec

# scenario -> (world kind, world options, recipe options, methods)
SCENARIOS: dict[str, tuple[str, dict, dict, tuple[str, ...]]] = {
    "flaky": ("flaky", {}, {}, ("posterior", "posterior-4", "today", "pinpoint", "clairvoyant")),
    # a rare crash: the recipe allows a commit 96 launches (2 × the default cap): telling 1 in 10 from 0 at 99 %
    # takes about 44 clean launches of the parent alone
    "flaky10": ("flaky", {"rate": 0.1}, {"repeats": {"launches": 6, "min_effect": 0.05, "max_launches": 96}},
                ("posterior", "today")),
    "perf": ("perf", {}, {}, ("posterior", "today", "clairvoyant")),
    "perf-drift": ("perf", {"drift": 0.08, "drift_period": 3}, {}, ("posterior", "today", "clairvoyant")),
    # the host turns busy between the search and the confirmation (the confirmation's guard: issue 40)
    "flaky-busy": ("flaky", {"busy_confirm": 0.5}, {}, ("posterior",)),
    # no change: both ends (every commit) crash 1 launch in 3; the answer must be "no change", never a commit
    "flaky-same": ("flaky", {"good_rate": 1 / 3}, {}, ("posterior",)),
    "perf-busy": ("perf", {"busy_confirm": 0.08}, {}, ("posterior",)),
    "batch": ("batch", {}, {}, ("posterior", "today")),
    "batch-busy": ("batch", {"batch_share": (0.3, 0.45)}, {}, ("posterior", "today")),
    "accuracy": ("accuracy", {}, {}, ("posterior", "today")),
    "rules": ("flaky", {"rate": 1.0}, {"repeats": {"launches": 1}, "bisect": {"ends": "lazy"}}, ("posterior",)),
}


@contextmanager
def told(world: seam.World):
    """The posterior search may launch only the planted commit, its parent and the ends (**clairvoyant**)."""
    shas = world.shas
    allowed = {shas[world.culprit], shas[world.culprit - 1]}
    plain = NoisySearch.options

    def options(self: NoisySearch) -> list[Option]:
        return [o for o in plain(self) if o.end or o.sha in allowed]

    NoisySearch.options = options  # type: ignore[method-assign]
    try:
        yield
    finally:
        NoisySearch.options = plain  # type: ignore[method-assign]


def items_of(trials) -> int:
    return sum(len(r.items) for t in trials if (r := eval_run([t])) is not None)


def posterior(world: seam.World, recipe: Recipe, slots: int) -> dict:
    run, _ = seam.bisect(world, recipe, slots)
    c = run.confirmation
    search = sum(1 for s in run.steps for t in s.trials if not fresh(t))  # the confirmations' left out
    wall = sum(len(r.commits) if slots == 1 else math.ceil(len(r.commits) / slots) for r in run.rounds)
    if not run.posterior:  # a rule on one launch: plain bisection, one launch at a time
        wall = run.launches
    found = run.result.first_new if run.result else None
    return {"found": found, "ending": run.mode.ending or (run.result.outcome if run.result else ""),
            "level": c.level if c else None, "search": search, "total": run.launches, "wall": wall,
            "items": sum(items_of(s.trials) for s in run.steps), "mass": run.posterior.answer_mass if run.posterior else None}


class Launcher:
    """Launches of the simulated world, counted, for the rules written out here."""

    def __init__(self, world: seam.World, recipe: Recipe) -> None:
        self.world, self.recipe, self.count, self.items = world, recipe, 0, 0

    def __call__(self, sha: str, label: str, attempt: int) -> TrialResult:
        spec = TrialSpec(self.recipe, label, sha, sha, "", "/nonexistent", "/nonexistent",
                         f"/nonexistent/{label}-{sha}").again(attempt)
        self.count += 1
        result = self.world.run(spec)
        self.items += items_of([result]) if label != "confirm" else 0
        return result

    def further(self, sha: str, label: str, have: list[TrialResult], n: int) -> list[TrialResult]:
        return [self(sha, label, len(have) + i) for i in range(n)]


def settled(world: seam.World, recipe: Recipe, first: int, cap: int, step: int, grow: bool,
            confirm: bool) -> dict:
    """Today's rule (first = the recipe's launches, grow = the ends grow with an unsure candidate, confirm),
    or Pinpoint's (a fixed step of launches, no growing, no confirmation)."""
    a = assessor_for(recipe)  # as an A/B judged a side before: a batch was a rule on one launch
    launch = Launcher(world, recipe)
    shas = world.shas
    old, new = launch.further(shas[0], "old end", [], first), launch.further(shas[-1], "new end", [], first)
    if not a.statistical:
        ends = a.alone(old).outcome, a.alone(new).outcome
    else:
        while True:
            x, y = a.settle_ends(old, new)
            wanted = min(max(x.wanted, y.wanted), step)
            if not wanted or min(len(old), len(new)) >= cap:
                break
            old += launch.further(shas[0], "old end", old, wanted)
            new += launch.further(shas[-1], "new end", new, wanted)
        ends = x.outcome, y.outcome
    out = {"found": None, "level": None, "items": 0}
    if Outcome.SKIP in ends or ends[0] == ends[1] or ends != (Outcome.GOOD, Outcome.BAD):
        ending = "no-change" if ends[0] == ends[1] else "untestable-end" if Outcome.SKIP in ends else "wrong way"
        return {**out, "ending": ending, "search": launch.count, "total": launch.count, "wall": launch.count}
    graph = Graph.from_parents({s: ((shas[i - 1],) if i > 1 else ()) for i, s in enumerate(shas) if i})
    state = start(graph, shas[-1], [shas[0]])
    while (sha := state.next_commit()) is not None:
        trials = launch.further(sha, "candidate", [], first)
        if not a.statistical:
            outcome = a.alone(trials).outcome
        else:
            while True:
                found = a.against(trials, old, new)
                counted = found.stats.get("observations") or found.stats.get("passes") or found.stats.get("items")
                if found.outcome != Outcome.SKIP or not counted:
                    break
                grew = False
                for end, end_sha in ((old, shas[0]), (new, shas[-1])):
                    n = min(len(trials), cap) - len(end) if grow else 0
                    if n > 0:
                        end += launch.further(end_sha, "end", end, n)
                        grew = True
                if grew:
                    continue
                wanted = min(found.wanted, step) if found.wanted else 0
                if not wanted or len(trials) >= cap:
                    break
                trials += launch.further(sha, "candidate", trials, wanted)
            outcome = found.outcome
        state = state.record(sha, {Outcome.GOOD: OLD, Outcome.BAD: NEW}.get(outcome, SKIP))
    res = state.result()
    search, items = launch.count, launch.items
    level = None
    if res.outcome == "found" and res.first_new and confirm and a.statistical:
        parent = shas[shas.index(res.first_new) - 1]
        fresh: dict[str, list] = {parent: [], res.first_new: []}
        while True:  # the former confirm.confirm: the recipe's launches of each, more while not sure
            for sha in (parent, res.first_new):
                fresh[sha] += launch.further(sha, "confirm", fresh[sha], first)
            compared = a.compare(fresh[parent], fresh[res.first_new])
            call = compared.call
            if call != Call.UNSURE or len(fresh[res.first_new]) >= cap:
                break
        level = ("confirmed" if call is Call.DIFFERENT and compared.worse is Worse.B else
                 "not sure" if call == Call.UNSURE else "not reproduced")
    return {"found": res.first_new, "ending": res.outcome if res.outcome != "found" else "", "level": level,
            "search": search, "total": launch.count, "wall": launch.count, "items": items}


def run_method(method: str, world: seam.World, recipe: Recipe) -> dict:
    a = assessor_for(recipe)
    if method == "posterior":
        return posterior(world, recipe, 1)
    if method == "posterior-4":
        return posterior(world, recipe, 4)
    if method == "clairvoyant":
        with told(world):
            return posterior(world, recipe, 1)
    if method == "today":
        return settled(world, recipe, a.first, a.cap, a.first, grow=True, confirm=True)
    if method == "pinpoint":
        return settled(world, recipe, 10, 40, 10, grow=False, confirm=False)
    raise ValueError(method)


def table(name: str, rows: dict[str, list[dict]], culprits: list[str]) -> None:
    print(f"\n**{name}**\n")
    print("| method | named and confirmed | named | a wrong commit | no change / other ending | launches: search mean"
          " | with confirmation mean (median) | wall (launch times) mean | eval items (search) mean |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for method, rs in rows.items():
        n = len(rs)
        hit = [r["found"] == c for r, c in zip(rs, culprits)]
        wrong = sum(r["found"] is not None and r["found"] != c for r, c in zip(rs, culprits))
        confirmed = (f"{sum(h and r['level'] == 'confirmed' for h, r in zip(hit, rs))}/{n}"
                     if any(r["level"] for r in rs) else "— (none)")
        other = n - sum(hit) - wrong
        items = [r["items"] for r in rs]
        print(f"| {method} | {confirmed} | **{sum(hit)}/{n}** | {wrong} | {other} | "
              f"{statistics.mean(r['search'] for r in rs):.1f} | {statistics.mean(r['total'] for r in rs):.1f} "
              f"({statistics.median(r['total'] for r in rs):g}) | {statistics.mean(r['wall'] for r in rs):.1f} | "
              + (f"{statistics.mean(items):,.0f}" if any(items) else "—") + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--commits", type=int, default=60)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--methods", help="only these methods (comma-separated), e.g. posterior,clairvoyant")
    ap.add_argument("--no-change-prior", type=float,
                    help="a what-if: the search's prior mass on \"the ends do not differ\" (abbisect's is "
                         f"{noisy.NO_CHANGE_PRIOR})")
    ap.add_argument("--changes", choices=("one", "all"), default="one",
                    help="bisect.changes: the search for the change and its confirmation alone (one, the default "
                         "here), or then every other change of the range as well (all, abbisect's default for a "
                         "statistical verdict: benchmarks/changes_sim.py measures it)")
    ap.add_argument("--json", type=Path, help="also write every row here")
    args = ap.parse_args()
    if args.no_change_prior is not None:
        noisy.NO_CHANGE_PRIOR = args.no_change_prior
    print("`" + shlex.join(["python", "benchmarks/noisy_sim.py", *sys.argv[1:]]) + "`")
    print(f"\n{args.seeds} seeded histories of {args.commits} commits a scenario, the planted commit drawn from the "
          "seed; a simulation at the bisect's seam (abbisect/testing/seam.py): the real driver, oracle, posterior and "
          "assessors, simulated trials.")
    everything: dict = {}
    for name in args.scenarios.split(","):
        kind, world_opts, recipe_opts, methods = SCENARIOS[name]
        if args.methods:
            methods = tuple(m for m in methods if m in args.methods.split(","))
        recipe = seam.recipe_for(kind, **{**recipe_opts,
                                          "bisect": {**recipe_opts.get("bisect", {}), "changes": args.changes}})
        rows: dict[str, list[dict]] = {m: [] for m in methods}
        culprits = []
        t0 = time.monotonic()
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            culprit = random.Random(f"{name}-{seed}").randint(1, args.commits - 1)
            culprits.append(f"c{culprit:03d}")
            for method in methods:
                world = seam.World(kind, args.commits, culprit, seed=seed, **world_opts)
                row = run_method(method, world, recipe)
                rows[method].append(row)
                print(f"<!-- {name} {method} seed {seed}: {json.dumps(row, default=str)} -->", file=sys.stderr,
                      flush=True)
        everything[name] = {"culprits": culprits, "rows": rows}
        table(f"{name} ({time.monotonic() - t0:.0f} s)", rows, culprits)
        if name == "rules":
            git = [len(seam_git(args.commits, int(c[1:]))) for c in culprits]
            print(f"\n`git bisect`'s own steps on the same histories: mean {statistics.mean(git):.1f} launches "
                  f"(abbisect, lazy ends: {statistics.mean(r['total'] for r in rows['posterior']):.1f})")
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1, default=str))


def seam_git(commits: int, culprit: int) -> list[str]:
    """The commits git bisect tests on a line from c000 (good) to the last (bad), the change at `culprit`."""
    shas = [f"c{i:03d}" for i in range(commits)]
    graph = Graph.from_parents({s: ((shas[i - 1],) if i > 1 else ()) for i, s in enumerate(shas) if i})
    state, tested = start(graph, shas[-1], [shas[0]]), []
    verdict: Callable[[str], str] = lambda s: NEW if int(s[1:]) >= culprit else OLD
    while (sha := state.next_commit()) is not None:
        tested.append(sha)
        state = state.record(sha, verdict(sha))
    needs_old = culprit == 1  # lazy ends: the old end is tested when it is the answer's parent
    return tested + (["c000"] if needs_old else []) + (["new end"] if culprit == commits - 1 else [])


if __name__ == "__main__":
    main()
