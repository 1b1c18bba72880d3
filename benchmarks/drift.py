"""Verdicts on a host whose load changes (issue 34): a busy loop on the same cores, switching on and off every
`--period` seconds (15), runs for the whole benchmark, while real toy-engine bisects and A-vs-As measure:

- **perf**: benchmarks/perf_bisect.py's performance bisect (+10 % per token planted, recipes/perf-demo.yaml's
  perf section) on seeded histories, `abbisect bisect --json`;
- **ava**: its A-vs-A (`abbisect run --a X --b X`), which must never say different;
- **batch**: benchmarks/repeats.py's batch-only bug (loops with 4+ requests in flight) bisected with
  `query: {concurrency: 6, repeat: 2}`: on a busy host a bad commit loops in fewer outputs of a launch.

The busy loop is a child process pinned to this process's cores (`--loops` of them), killed at the end. Prints
the tables of perf_bisect.py and repeats.py, and how long the loop was busy.

    python benchmarks/drift.py [--seeds 20] [--commits 60] [--parts perf,ava,batch] [--period 15] [--loops 1]
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import perf_bisect
import repeats
from toylab import history, run_seeds, seed_options

from abbisect.builtin.history import planted_history

PARTS = ("perf", "ava", "batch")
BUSY = """import sys, time
period = float(sys.argv[1])
while True:
    t = time.monotonic()
    while time.monotonic() - t < period:
        pass
    time.sleep(period)
"""


class Drift:
    """`loops` busy processes on this process's cores, busy `period` seconds, then idle as long, and again."""

    def __init__(self, period: float, loops: int) -> None:
        self.period, self.procs = period, []
        cores = sorted(os.sched_getaffinity(0))
        for k in range(loops):
            proc = subprocess.Popen([sys.executable, "-c", BUSY, str(period)], start_new_session=True)
            os.sched_setaffinity(proc.pid, {cores[k % len(cores)]})
            self.procs.append(proc)
        self.t0 = time.monotonic()

    def stop(self) -> float:
        for proc in self.procs:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return time.monotonic() - self.t0


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    seed_options(ap, PARTS, commits=60)
    ap.add_argument("--period", type=float, default=15.0, help="seconds busy, then as many idle")
    ap.add_argument("--loops", type=int, default=1, help="busy loops (one core each)")
    ap.add_argument("--sigma", type=float, default=0.05, help="TOYENGINE_NOISE_SIGMA of the perf histories")
    ap.add_argument("--token-seconds", type=float, default=0.002, help="TOYENGINE_TOKEN_SECONDS")
    ap.add_argument("--batch-commits", type=int, default=16, help="commits of a batch history")
    args = ap.parse_args()
    metric = "tpot_median"

    def setup(seed: int, work: Path, cache: Path) -> Callable[[str], dict[str, Any]]:
        made: dict[str, Any] = {}

        def perf(part: str) -> dict[str, Any]:
            if not made:
                made["history"] = history(work, seed, args.commits, "slow_tokens")
            repo, shas, planted = made["history"]
            path, _ = perf_bisect.recipe(work, repo, seed, args)
            if part == "perf":
                return perf_bisect.run_bisect(work, cache, seed, path, shas, planted)
            return perf_bisect.run_ava(work, cache, seed, path, shas, metric)

        def batch(part: str) -> dict[str, Any]:
            at = repeats.position("batch", seed, args.batch_commits)
            repo = work / f"batch-{seed}"
            shas = planted_history(repo, args.batch_commits, {at: "batch_bug"})
            doc = repeats.recipe(repo, f"drift-batch{seed}", query={"concurrency": 6, "repeat": 2})
            return {"seed": seed, **repeats.bisect(doc, shas, at, work, cache, doc["name"])}

        return lambda part: batch(part) if part == "batch" else perf(part)

    drift = Drift(args.period, args.loops)
    try:
        rows, wall = run_seeds(ap, args, PARTS, setup)
    finally:
        busy = drift.stop()
    print(f"`{shlex.join(['python', 'benchmarks/drift.py', *sys.argv[1:]])}`\n")
    print(f"{args.loops} busy loop(s) pinned to the cores, {args.period:g} s on / {args.period:g} s off, for "
          f"{busy / 60:.1f} min; {os.cpu_count()} CPU cores\n")
    perf_bisect.report(args, {"bisect": rows.get("perf", []), "ava": rows.get("ava", [])}, wall)
    if rows.get("batch"):
        repeats.summary_table(f"Batch-only bug under the drift, {len(rows['batch'])} seeds:",
                              {"concurrency 6, repeat 2": rows["batch"]})
        repeats.per_seed_table("Batch-only bug under the drift, per seed:", rows["batch"])


if __name__ == "__main__":
    main()
