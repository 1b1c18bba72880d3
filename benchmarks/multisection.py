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
            "first_new": data["first_new"], "stages": _stages(data)}


STAGES = ("checkout", "build", "ready", "query", "teardown", "score", "total")


def _stages(data: dict) -> dict[str, float]:
    """Mean seconds per trial stage, the mean step (a trial as the driver waited for it), and per round the
    time beyond its slowest step (picking, dispatch, the results coming back)."""
    trials = [t["timings"] for t in data["trials"] if not t.get("cached")]
    out = {name: sum(t.get(name, 0.0) for t in trials) / max(len(trials), 1) for name in STAGES}
    steps = data["steps"]
    out["step"] = sum(s["seconds"] for s in steps) / max(len(steps), 1)
    # a trial as the driver waited for it, beyond the trial's own time (dispatch, a new trial process,
    # the result coming back); stopped trials left out
    total = {t["n"]: t["timings"].get("total", 0.0) for t in data["trials"] if not t.get("cached")}
    beyond = [s["seconds"] - total[s["n"]] for s in steps if s["n"] in total and s["status"] != "infra_error"]
    out["beyond"] = sum(beyond) / max(len(beyond), 1)
    gaps = [r["seconds"] - max((s["seconds"] for s in steps if s["round"] == r["round"]), default=0.0)
            for r in data["rounds"]]
    out["round gap"] = sum(gaps) / len(gaps) if gaps else 0.0
    return out


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
    names = [*STAGES, "step", "beyond", "round gap"]
    print("\nmean seconds per trial stage (fresh trials), per step, a step beyond its trial's own time, and a"
          " round beyond its slowest step:")
    print(f"{'k':>3} " + " ".join(f"{n:>9}" for n in names))
    for r in rows:
        print(f"{r['k']:>3} " + " ".join(f"{r['stages'][n]:>9.2f}" for n in names))


if __name__ == "__main__":
    main()
