"""Every change in the range (issue 41), simulated at the bisect's seam: 60-commit histories with several planted
changes, bisected by abbisect's real driver, oracle, posterior search, confirmation and changes search
(abbisect/bisect/changes.py), only the trial simulated (abbisect/testing/seam.py), with `bisect.changes: all` beside
`bisect.changes: one` on the same seeded histories.

For each scenario and seed the planted commits are drawn from the seed (at least 8 commits apart); a row says
whether every planted change was named, whether a commit that is not one was named, whether each named planted
change's interval covers its planted size (on the effect's scale: the log ratio for a performance change, the
accuracy difference over the ends' items for an accuracy one), and the launches.

    python benchmarks/changes_sim.py [--seeds 20] [--scenarios perf-two,perf-fix,accuracy-two,perf-one,accuracy-one]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import shlex
import statistics
import sys
import time

from abbisect.assess.accuracy import eval_run
from abbisect.testing import seam

# scenario -> (kind, planted sizes, oldest first)
SCENARIOS: dict[str, tuple[str, tuple[float, ...]]] = {
    "perf-two": ("perf", (0.06, 0.06)),  # two regressions that add up
    "perf-fix": ("perf", (0.12, -0.05)),  # a regression, partly undone by a later fix
    "accuracy-two": ("accuracy", (0.08, 0.08)),  # two accuracy drops, each its own items
    "perf-one": ("perf", (0.10,)),  # one change only: it must stay one
    "accuracy-one": ("accuracy", (0.08,)),
}


def positions(name: str, seed: int, n: int, commits: int) -> list[int]:
    rng = random.Random(f"{name}-{seed}")
    while True:
        at = sorted(rng.sample(range(2, commits - 2), n))
        if all(b - a >= 8 for a, b in itertools.pairwise(at)):
            return at


def planted_effect(world: seam.World, run, k: int) -> float:
    """Change k's size on the effect's scale."""
    size = world.changes[k][1]
    if world.kind == "perf":
        return math.log1p(size)
    ends = [eval_run(s.trials) for s in run.steps if s.sha in (run.old.sha, run.new.sha)]
    both = set.intersection(*({i.id for i in r.items if i.correct is not None} for r in ends if r is not None))
    hit = sum(world.changed_item(i, k, size) for i in both)
    return -(1 - world.flip) * hit / len(both)


def one(name: str, seed: int, changes: str, commits: int, noise: str = "sim") -> dict:
    kind, sizes = SCENARIOS[name]
    at = positions(name, seed, len(sizes), commits)
    world = seam.World(kind, commits, at[0], seed=seed, changes=tuple(zip(at, sizes)), **seam.NOISE[noise])
    recipe = seam.recipe_for(kind, bisect={"changes": changes})
    run, _ = seam.bisect(world, recipe)
    planted = {f"c{a:03d}": k for k, a in enumerate(at)}
    if changes == "all":
        named = {r.sha: r for r in (run.changes.changes if run.changes else ())}
    else:
        named = {run.result.first_new: None} if run.result and run.result.first_new else {}
    covered = []
    for sha, r in named.items():
        if sha in planted and r is not None and r.effect is not None:
            want = planted_effect(world, run, planted[sha])
            covered.append(r.effect.lo <= want <= r.effect.hi)
    return {"planted": sorted(planted), "named": sorted(named), "all": set(planted) <= set(named),
            "some": bool(set(planted) & set(named)), "wrong": sorted(set(named) - set(planted)),
            "covered": covered, "launches": run.launches, "said": run.changes.said if run.changes else ""}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--commits", type=int, default=60)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--modes", default="all,one", help="`bisect.changes` values to run (all,one)")
    ap.add_argument("--noise", default="sim", choices=sorted(seam.NOISE),
                    help="the launch and pass noise model (abbisect/testing/seam.py NOISE): sim (the old 0.5 %% launch "
                         "offset) or a measured one")
    ap.add_argument("--json", help="also write every row here")
    args = ap.parse_args()
    print("`" + shlex.join(["python", "benchmarks/changes_sim.py", *sys.argv[1:]]) + "`\n")
    print("| scenario | `bisect.changes` | every planted change named | a wrong commit named | intervals covering "
          "the planted size | launches mean (median) |")
    print("|---|---|---:|---:|---:|---:|")
    everything = {}
    for name in args.scenarios.split(","):
        t0 = time.monotonic()
        for changes in args.modes.split(","):
            rows = [one(name, seed, changes, args.commits, args.noise) for seed in range(args.seeds)]
            everything[f"{name}/{changes}"] = rows
            for seed, r in enumerate(rows):
                print(f"<!-- {name} {changes} seed {seed}: {json.dumps(r)} -->", file=sys.stderr, flush=True)
            cov = [c for r in rows for c in r["covered"]]
            n_planted = len(SCENARIOS[name][1])
            named_all = sum(r["all"] for r in rows) if n_planted > 1 or changes == "all" else sum(r["some"] for r in rows)
            print(f"| {name} ({time.monotonic() - t0:.0f} s) | {changes} | {named_all}/{len(rows)} | "
                  f"{sum(bool(r['wrong']) for r in rows)} | "
                  + (f"{sum(cov)}/{len(cov)}" if cov else "—")
                  + f" | {statistics.mean(r['launches'] for r in rows):.1f} "
                    f"({statistics.median(r['launches'] for r in rows):g}) |", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(everything, fh, indent=1)


if __name__ == "__main__":
    main()
