"""Wall time of a fixture A/B (the built-in demo recipe) and how much of it is abbisect's own overhead.

Runs `abbisect run recipes/demo.yaml` three times in one go: with an empty cache (venvs built), again
with --no-cache (venvs reused, servers launched), and plainly (results from the trial cache).
Overhead = wall time - (venv build + launch-to-ready + queries + teardown) of both sides.

    python benchmarks/ab_fixture.py [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "demo.yaml"
SPENT = ("build", "ready", "query", "teardown")


def one(work: Path, name: str, *flags: str) -> dict:
    env = {**os.environ, "ABBISECT_CACHE_DIR": str(work / "cache")}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "abbisect", "run", str(RECIPE), "-o", str(work / name), "--json",
                           *flags], check=False, capture_output=True, text=True, env=env, cwd=work)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    res = json.loads(proc.stdout)["data"]
    spent = {k: round(sum(0 if res[s]["cached"] else res[s]["timings"].get(k, 0) for s in "ab"), 3) for k in SPENT}
    return {"wall_s": round(wall, 2), **{f"{k}_s": v for k, v in spent.items()},
            "overhead_s": round(wall - sum(spent.values()), 2),
            "verdicts": f"{res['a']['verdict']['status']} / {res['b']['verdict']['status']}"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = {"cold (venvs built)": one(work, "cold"), "warm venvs (--no-cache)": one(work, "warm", "--no-cache"),
                "trial cache hit": one(work, "cached")}
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    keys = ["wall_s", "build_s", "ready_s", "query_s", "teardown_s", "overhead_s", "verdicts"]
    print(f"{'':26}" + "".join(f"{k:>14}" for k in keys[:-1]) + "  verdicts")
    for name, r in rows.items():
        print(f"{name:26}" + "".join(f"{r[k]:>14}" for k in keys[:-1]) + f"  {r['verdicts']}")


if __name__ == "__main__":
    main()
