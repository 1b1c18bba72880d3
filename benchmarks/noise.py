"""The noise a performance search lives with (issue 48): one commit launched again and again by a real A-vs-A
(`abbisect run RECIPE --a X --b X --json` with `--launches` a side) — a toy-engine commit with recipes/perf-demo.yaml's
perf section, or with `--recipe` a real engine's recipe and its `sides.a` commit (or `--commit`) — and the spread of
each metric (`tpot_median`, and the recipe's own `perf.metric`) split in two, on the log scale:

- pass to pass: the passes of one launch around their launch's mean (pooled over the launches);
- launch to launch: the launches' means around the commit's, less what their passes' spread alone explains.

It prints both, the load average before and after, and the figures abbisect/testing/seam.py's NOISE takes (the launch's
offset, and a pass's own offset beside the simulated requests' noise: 24 requests with 5 % log-normal noise give
a pass median about 1.3 % of spread on their own).

    python benchmarks/noise.py [--launches 6] [--runs 2] [--loops 0]
    python benchmarks/noise.py --recipe recipes/vllm-cpu-perf.yaml --launches 3 --runs 1 [--loops 2]
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

import perf_bisect
import yaml
from drift import Drift
from toylab import abbisect, load1

from abbisect.builtin.history import planted_history

REQUEST_SPREAD = 1.2533 * 0.05 / math.sqrt(24)  # a simulated pass's median of 24 requests at sigma 0.05 (seam.py)


def launches_of(data: dict, metric: str) -> list[list[float]]:
    """Each launch's passes of `metric`, of both sides of an A-vs-A's data."""
    trials = [data[k] for k in ("a", "b") if k in data] + [*data.get("more_a", ()), *data.get("more_b", ())]
    return [v for t in trials if len(v := perf_bisect.passes_of([t], metric)) >= 2]


def setup(work: Path, args: argparse.Namespace) -> tuple[Path, str, str]:
    """The A-vs-A's recipe, written into `work` with `--launches` a side, the commit it launches, and its metric."""
    if args.recipe:
        doc = yaml.safe_load(Path(args.recipe).read_text())
        sha = args.commit or (doc.get("sides") or {}).get("a")
        if not sha:
            raise SystemExit(f"{args.recipe} has no sides.a: name the commit to launch with --commit")
        path = work / "noise.yaml"
    else:
        repo = work / "engine"
        shas = planted_history(repo, 2, {}) if not repo.exists() else None
        path, doc = perf_bisect.recipe(work, repo, 0, args)
        sha = shas[-1] if shas else "HEAD"
    doc["perf"] = {**doc["perf"], "launches": args.launches, "max_launches": args.launches}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path, sha, doc["perf"]["metric"]


def spread(launches: list[list[float]]) -> tuple[float, float]:
    """(pass-to-pass, launch-to-launch) standard deviations on the log scale."""
    logs = [[math.log(x) for x in v] for v in launches]
    within = [x - statistics.fmean(v) for v in logs for x in v]
    dof = sum(len(v) - 1 for v in logs)
    pass_var = sum(d * d for d in within) / dof
    means = [statistics.fmean(v) for v in logs]
    per = statistics.fmean(len(v) for v in logs)
    launch_var = max(statistics.variance(means) - pass_var / per, 0.0)
    return math.sqrt(pass_var), math.sqrt(launch_var)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--launches", type=int, default=6, help="launches a side of each A-vs-A (no more while not sure)")
    ap.add_argument("--runs", type=int, default=2, help="A-vs-As, one after the other")
    ap.add_argument("--loops", type=int, default=0, help="busy loops beside it (always busy), one core each")
    ap.add_argument("--sigma", type=float, default=0.05)
    ap.add_argument("--token-seconds", type=float, default=0.002)
    ap.add_argument("--work", help="a folder to keep (default: a temporary one); its cache is kept for the next run")
    ap.add_argument("--recipe", help="a real engine's recipe to measure instead of the toy engine")
    ap.add_argument("--commit", help="the commit to launch (default: the recipe's sides.a)")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="abbisect-noise-"))
    work.mkdir(parents=True, exist_ok=True)
    cache = Path(os.environ.get("ABBISECT_CACHE_DIR") or work / "cache")
    path, sha, metric = setup(work, args)
    metrics = list(dict.fromkeys(["tpot_median", metric]))
    drift = Drift(1e9, args.loops) if args.loops else None
    loads: list[float] = [load1()]
    everything: dict[str, list[list[float]]] = {m: [] for m in metrics}
    try:
        for k in range(args.runs):
            rc, data, wall = abbisect(work, cache, "run", str(path), "--a", sha, "--b", sha, "-o", str(work / f"ava{k}"))
            loads.append(load1())
            got = {m: launches_of(data, m) for m in metrics}
            for m in metrics:
                everything[m] += got[m]
            print(f"<!-- run {k}: rc {rc}, {len(got[metrics[0]])} launches, {wall:.0f} s, load "
                  f"{loads[-1]:.2f}{', ' + str(data.get('error')) if data.get('error') else ''} -->", file=sys.stderr,
                  flush=True)
    finally:
        if drift is not None:
            drift.stop()
    first = everything[metrics[0]]
    print(f"`{shlex.join(['python', 'benchmarks/noise.py', *sys.argv[1:]])}`: {len(first)} launches of {sha[:7]}, "
          f"{sum(len(v) for v in first)} passes; {args.loops} busy loop(s); {os.cpu_count()} CPU cores; "
          f"load average {min(loads):.2f}–{max(loads):.2f} (median {statistics.median(loads):.2f})\n")
    if len(first) < 3:
        print("too few launches measured")
        return
    print("| metric | pass to pass (log sd) | launch to launch (log sd) | launch means' range | seam NOISE |")
    print("|---|---:|---:|---:|---|")
    for m in metrics:
        pass_sd, launch_sd = spread(everything[m])
        means = [statistics.fmean(math.log(x) for x in v) for v in everything[m]]
        extra = math.sqrt(max(pass_sd ** 2 - REQUEST_SPREAD ** 2, 0.0))
        print(f"| {m} | {pass_sd:.4f} | {launch_sd:.4f} | {math.expm1(max(means) - min(means)) * 100:.1f} % | "
              f"launch_sd {launch_sd:.4f}, pass_sd {extra:.4f} |")


if __name__ == "__main__":
    main()
