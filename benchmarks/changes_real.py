"""Every change in the range on a real server (issue 48's "done when"): toy-engine histories of `--commits` (32)
with two +6 % per-token slowdowns planted (`slow_tokens_6`, then `slow_decode_6`, at positions drawn from the seed
at least 8 apart, as benchmarks/changes_sim.py draws them), bisected by `abbisect bisect --json` with
recipes/perf-demo.yaml's perf section (tpot_median, 5 passes, 2 launches, min_effect 0.03) and `bisect.changes:
all`, on a quiet host or (`--busy 2`) beside busy loops, each pinned to one of this process's cores and spinning
for the whole run; beside each real run, the simulation's prediction for the same history (abbisect/testing/seam.py with
the `--noise` model: `quiet-toy` on a quiet host, `loops-toy` beside busy loops, unless named). A row: both changes named,
a wrong commit named, the named planted changes whose 95 % interval covers +6 % (log ratio), the launches, the
wall time and the load average at the start and the end; then the totals: both named, wrong, intervals covering,
median launches and wall time, real and predicted.

    python benchmarks/changes_real.py [--seeds 10] [--first 0] [--commits 32] [--busy 2] [--noise loops-toy]
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

import changes_sim
import drift
import perf_bisect
import yaml
from toylab import abbisect, load1

from abbisect.builtin.history import planted_history
from abbisect.testing import seam

SIZE = 0.06


def real(seed: int, commits: int, work: Path, cache: Path, args: argparse.Namespace) -> dict:
    at = changes_sim.positions("perf-two", seed, 2, commits)
    repo = work / f"engine{seed}"
    shas = planted_history(repo, commits, {at[0]: "slow_tokens_6", at[1]: "slow_decode_6"})
    path, doc = perf_bisect.recipe(work, repo, seed, args)
    doc["bisect"] = {"changes": "all"}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    before = load1()
    rc, data, wall = abbisect(work, cache, "bisect", str(path), "--good", shas[0], "--bad", shas[-1],
                              "-o", str(work / f"bisect{seed}"))
    planted = {shas[a] for a in at}
    rows = (data.get("changes") or {}).get("changes") or []
    named = {r["sha"] for r in rows}
    covered = [r["effect"]["lo"] <= math.log1p(SIZE) <= r["effect"]["hi"] for r in rows
               if r["sha"] in planted and r.get("effect")]
    return {"seed": seed, "at": at, "rc": rc, "both": planted <= named, "wrong": len(named - planted),
            "covered": covered, "told": [r["effect"]["told"] for r in rows if r.get("effect")],
            "launches": data.get("launches"), "wall_s": data.get("wall_s") or wall, "load": (before, load1()),
            "said": (data.get("changes") or {}).get("said") or data.get("error", "")}


def predicted(seed: int, commits: int, noise: str) -> dict:
    at = changes_sim.positions("perf-two", seed, 2, commits)
    world = seam.World("perf", commits, at[0], seed=seed, changes=((at[0], SIZE), (at[1], SIZE)), **seam.NOISE[noise])
    run, _ = seam.bisect(world, seam.recipe_for("perf", bisect={"changes": "all"}))
    planted = {f"c{a:03d}" for a in at}
    rows = run.changes.changes if run.changes else ()
    named = {r.sha for r in rows}
    covered = [r.effect.lo <= math.log1p(SIZE) <= r.effect.hi for r in rows if r.sha in planted and r.effect]
    return {"both": planted <= named, "wrong": len(named - planted), "covered": covered, "launches": run.launches}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--commits", type=int, default=32)
    ap.add_argument("--busy", type=int, default=0, help="busy loops beside the real runs (one core each)")
    ap.add_argument("--noise", choices=sorted(seam.NOISE),
                    help="the simulation's noise model (default: quiet-toy on a quiet host, loops-toy beside busy loops)")
    ap.add_argument("--sigma", type=float, default=0.05)
    ap.add_argument("--token-seconds", type=float, default=0.002)
    args = ap.parse_args()
    args.noise = args.noise or ("loops-toy" if args.busy else "quiet-toy")
    work = Path(tempfile.mkdtemp(prefix="abbisect-changes-real-"))
    cache = Path(os.environ.get("ABBISECT_CACHE_DIR") or work / "cache")
    print(f"`{shlex.join(['python', 'benchmarks/changes_real.py', *sys.argv[1:]])}`; {os.cpu_count()} CPU cores; "
          + (f"{args.busy} busy loop(s) beside the real runs" if args.busy else "no busy loop")
          + f"; prediction: seam with `{args.noise}`\n")
    print("| seed | planted at | real: both named | wrong | covering +6 % | effects told | launches | wall s | "
          "load start–end | sim: both named | wrong | covering | launches |")
    print("|---:|---|---|---:|---:|---|---:|---:|---|---|---:|---:|---:|")
    reals, sims = [], []
    for seed in range(args.first, args.first + args.seeds):
        p = predicted(seed, args.commits, args.noise)
        loops = drift.Drift(math.inf, args.busy) if args.busy else None
        try:
            r = real(seed, args.commits, work, cache, args)
        finally:
            if loops is not None:
                loops.stop()
        reals.append(r)
        sims.append(p)
        print(f"| {seed} | {r['at']} | {'yes' if r['both'] else 'no'} | {r['wrong']} | "
              f"{sum(r['covered'])}/{len(r['covered'])} | {', '.join(r['told'])} | {r['launches']} | "
              f"{r['wall_s']:.0f} | {r['load'][0]:.1f}–{r['load'][1]:.1f} | {'yes' if p['both'] else 'no'} | "
              f"{p['wrong']} | {sum(p['covered'])}/{len(p['covered'])} | {p['launches']} |", flush=True)
        print(f"<!-- seed {seed}: {r['said']} -->", file=sys.stderr, flush=True)
    for who, rows in (("real", reals), ("sim", sims)):
        cov = [c for r in rows for c in r["covered"]]
        print(f"\n{who}: both named {sum(r['both'] for r in rows)}/{len(rows)}, wrong {sum(r['wrong'] for r in rows)}, "
              f"intervals covering +6 % {sum(cov)}/{2 * len(rows)} planted changes ({len(cov)} named), launches "
              f"median {statistics.median(r['launches'] or 0 for r in rows)}"
              + (f", wall median {statistics.median(r['wall_s'] for r in rows):.0f} s" if who == "real" else ""))


if __name__ == "__main__":
    main()
