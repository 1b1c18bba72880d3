"""Multisection: one toy-engine bisect of N commits with k = 1, 2, 4, 8 slots, in one run.

Each trial's server takes a fixed time to become ready (the toy engine sleeps TOYENGINE_LOAD_SECONDS),
standing in for a real engine's start-up; venvs are shared (same dependencies) and built in the first run,
so the numbers compare searching, not building. Prints rounds after the ends, launches and wall time per k,
the ratio to k = 1, and the ideal ratio log2 N / log_(k+1) N.

    python benchmarks/multisection.py [--commits 1000] [--ready 3] [--slots 1,2,4,8] [--no-install]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bisect_vs_git import history

from abbisect.builtin.history import build_history


def bisect(repo: Path, work: Path, cache: Path, k: int, ready: float, install: bool) -> dict:
    recipe = {
        "name": f"multi{k}", "engine": {"kind": "command", "repo": str(repo)},
        # Without installing, the server runs from the commit's worktree (python -m finds it there): for a
        # machine with no package index, where an editable install cannot fetch its build backend.
        **({} if install else {"install": {"strategy": "command", "commands": ["true"]}}),
        "launch": {"command": ["{python}", "-m", "toyengine.server", "--host", "{host}", "--port", "{port}"],
                   "flags": ["--seed", "0"]},
        "env": {"TOYENGINE_LOAD_SECONDS": str(ready)},
        "prompts": ["The capital of France is"], "sampling": {"max_tokens": 48},
        "timeouts": {"ready": 60 + ready, "request": 30, "teardown": 5},
    }
    path = work / f"k{k}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "abbisect", "-q", "bisect", str(path), "--good", "start", "--bad",
                           "end", "--slots", str(k), "--no-cache", "-o", str(work / f"out{k}")], check=False,
                          capture_output=True, text=True, env={**os.environ, "ABBISECT_CACHE_DIR": str(cache)}, cwd=work)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"k={k}: abbisect bisect failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    data = json.loads((work / f"out{k}" / "bisect.json").read_text())
    candidates = [s for s in data["steps"] if s["role"].startswith("candidate")]
    rounds = len(data["rounds"]) if data["rounds"] else len(candidates)
    return {"k": k, "rounds": rounds, "launches": data["launches"], "wall_s": round(wall, 1),
            "first_new": data["first_new"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--ready", type=float, default=3.0, help="seconds each server takes to become ready")
    ap.add_argument("--slots", default="1,2,4,8")
    ap.add_argument("--no-install", action="store_true", help="run each commit from its worktree, install nothing")
    args = ap.parse_args()
    ks = [int(k) for k in args.slots.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        commits, bug = history(args.commits)
        shas = build_history(work / "engine", commits)
        cache = work / "cache"
        rows = [bisect(work / "engine", work, cache, k, args.ready, not args.no_install) for k in ks]
    n = args.commits - 1
    base = next((r for r in rows if r["k"] == 1), rows[0])
    print(f"{args.commits} commits, culprit {shas[bug][:10]}, server ready after {args.ready:g} s; "
          f"ends tested first (at once when k > 1); {os.cpu_count()} CPU cores")
    print(f"{'k':>3} {'rounds':>7} {'launches':>9} {'wall s':>8} {'wall/k=1':>9} {'log2N/log(k+1)N':>16} {'found':>6}")
    for r in rows:
        ideal = math.log2(n) / math.log(n, r["k"] + 1)
        print(f"{r['k']:>3} {r['rounds']:>7} {r['launches']:>9} {r['wall_s']:>8.1f} "
              f"{r['wall_s'] / base['wall_s']:>9.2f} {1 / ideal:>16.2f} {r['first_new'] == shas[bug]!s:>6}")


if __name__ == "__main__":
    main()
