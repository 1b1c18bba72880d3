"""abbisect bisect vs plain `git bisect run` on one slot, on a toy-engine history, in one run.

Rows (each a full bisect of the same history, one after the other):

- plain + uv:  `git bisect run` with the script a skilled user writes today: `uv venv`, `uv pip install .`,
  launch the server, ask one prompt, grep the output for the loop; exit 125 when the build fails.
- plain + pip: the same script with `python -m venv` + `pip install .`.
- abbisect:    `abbisect bisect` with its best one-slot settings (default: shared venvs for commits with
  equal dependencies, background prefetch builds); both ends are tested first. Fresh abbisect cache.
- abbisect, ends cached: the same bisect after an earlier `abbisect run` of the two ends with the same recipe
  (its trials and venvs in the cache; that run's own time is not counted): the ends come from the trial cache.
- abbisect, lazy ends: `abbisect bisect --ends lazy`, fresh cache: the search starts from the labels at once,
  as git's does, and an end is tested only when the answer rests on it (here it does not: the bug is inside).

Every side installs offline from the same local package index and finds its dependencies in a warm uv / pip
cache (a warm-up install runs first). Parameters: the engine's ready time (the toy server sleeps
TOYENGINE_LOAD_SECONDS before it listens) and the dependency weight (light: the toy engine declares
none; heavy: it declares a real set of wheels, numpy, pandas, scipy, ...). Commits around the middle do not
build (the first midpoint is unbuildable), so every search has to skip.

    python benchmarks/bisect_vs_git.py [--commits 100] [--ready 0.5,5] [--deps light] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import yaml

from abbisect.builtin.history import Commit, build_history, commit, init_repo

HEAVY = ["numpy", "pandas", "scipy", "sympy", "networkx"]

PLAIN_SCRIPT = textwrap.dedent("""\
    #!/usr/bin/env bash
    # What a user writes by hand: a fresh venv, install, launch, one prompt, grep.
    set -u
    D=$(mktemp -d); V=$D/venv
    trap 'rm -rf "$D"' EXIT
    if [ "$TOOL" = uv ]; then
      uv venv -q "$V" || exit 125
      uv pip install -q --python "$V/bin/python" . >/dev/null 2>&1 || { echo skip >> "$COUNTS"; exit 125; }
    else
      python3 -m venv "$V" || exit 125
      "$V/bin/pip" install -q . >/dev/null 2>&1 || { echo skip >> "$COUNTS"; exit 125; }
    fi
    echo build >> "$COUNTS"
    PORT=$("$V/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    setsid "$V/bin/python" -m toyengine.server --port "$PORT" --seed 0 > "$D/server.log" 2>&1 &
    PID=$!
    echo launch >> "$COUNTS"
    for i in $(seq 1 3000); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
    OUT=$(curl -s "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \\
      -d '{"model":"toy-model","messages":[{"role":"user","content":"The capital of France is"}],"max_tokens":48,"temperature":0}')
    kill -- -"$PID" 2>/dev/null; wait "$PID" 2>/dev/null
    echo "$OUT" | grep -q "need analysis there need analysis there" && exit 1
    exit 0
""")


def history(n: int) -> tuple[list[Commit], int]:
    """A linear history with the bug at 37% and, every 97 commits, one unbuildable commit (the next repairs
    it). Used by benchmarks/multisection.py."""
    bug = int(n * 0.37)
    commits = [Commit("initial", tag="start")]
    for i in range(1, n):
        if i == bug:
            commits.append(Commit(f"commit {i}: dispatch quantisation to linear layers only", "break_scale"))
        elif i % 97 == 0 and i + 1 < n and i + 1 != bug:
            commits.append(Commit(f"commit {i}: break packaging", "break_install"))
        elif i % 97 == 1 and i > 1 and i - 1 != bug:
            commits.append(Commit(f"commit {i}: repair packaging", "fix_install"))
        else:
            commits.append(Commit(f"commit {i}"))
    commits[-1] = Commit(commits[-1].message, commits[-1].change, tag="end")
    return commits, bug


def hit_history(n: int, broken: int = 5) -> tuple[list[Commit], int, range]:
    """The bug at 37%; `broken` commits around the middle do not build (the first midpoint of either search
    is among them)."""
    bug = int(n * 0.37)
    lo = n // 2 - broken // 2
    dead = range(lo, lo + broken)
    commits = [Commit("initial", tag="start")]
    for i in range(1, n):
        change = ("break_scale" if i == bug else "break_install" if i == dead.start else
                  "fix_install" if i == dead.stop else None)
        commits.append(Commit(f"commit {i}" + (f": {change}" if change else ""), change))
    commits[-1] = Commit(commits[-1].message, commits[-1].change, tag="end")
    return commits, bug, dead


def make_repo(repo: Path, commits: list[Commit], deps: list[str]) -> list[str]:
    if not deps:
        return build_history(repo, commits)
    init_repo(repo)
    py = repo / "pyproject.toml"
    py.write_text(py.read_text().replace('requires-python = ">=3.9"\n',
                                         f'requires-python = ">=3.9"\ndependencies = {json.dumps(deps)}\n'))
    return [commit(repo, c, n) for n, c in enumerate(commits)]


def recipe(repo: Path, ready: float) -> dict:
    return {
        "name": "bench", "engine": {"kind": "command", "repo": str(repo)},
        "launch": {"command": ["{python}", "-m", "toyengine.server", "--host", "{host}", "--port", "{port}"],
                   "flags": ["--seed", "0"]},
        "env": {"TOYENGINE_LOAD_SECONDS": str(ready)},
        "prompts": ["The capital of France is"], "sampling": {"max_tokens": 48},
        "timeouts": {"ready": 60 + ready, "request": 30, "teardown": 5},
    }


def run_abbisect(repo: Path, work: Path, ready: float, ends_cached: bool, lazy: bool = False) -> dict:
    work.mkdir()
    (work / "r.yaml").write_text(yaml.safe_dump(recipe(repo, ready)))
    env = {**os.environ, "ABBISECT_CACHE_DIR": str(work / "cache")}
    abb = [sys.executable, "-m", "abbisect", "-q"]
    if ends_cached:  # an earlier A/B of the same two commits with the same recipe (not timed)
        subprocess.run([*abb, "run", str(work / "r.yaml"), "--a", "start", "--b", "end", "-o", str(work / "ab")],
                       check=False, capture_output=True, env=env, cwd=work)
    t0 = time.monotonic()
    proc = subprocess.run([*abb, "bisect", str(work / "r.yaml"), "--good", "start", "--bad", "end", "-o",
                           str(work / "out"), "--json", *(["--ends", "lazy"] if lazy else [])], check=False, capture_output=True, text=True, env=env, cwd=work)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"abbisect bisect failed:\n{proc.stderr[-2000:]}")
    res = json.loads(proc.stdout)["data"]
    data = json.loads((work / "out" / "bisect.json").read_text())
    steps = data["steps"]
    return {"wall_s": round(wall, 1), "launches": res["launches"], "builds": res["builds"],
            "skips": sum(1 for s in steps if s["outcome"] == "skip"),
            "cached": sum(1 for s in steps if s["cached"]), "first_bad": res["first_new"]}


def run_plain(src: Path, work: Path, ready: float, tool: str) -> dict:
    work.mkdir()
    repo = work / "plain"
    subprocess.run(["git", "clone", "-q", str(src), str(repo)], check=True)
    script = work / "plain.sh"
    script.write_text(PLAIN_SCRIPT)
    script.chmod(0o755)
    counts = work / "counts.txt"
    env = {**os.environ, "COUNTS": str(counts), "TOOL": tool, "TOYENGINE_LOAD_SECONDS": str(ready)}
    git = ["git", "-C", str(repo)]
    t0 = time.monotonic()
    subprocess.run([*git, "bisect", "start", "end", "start"], check=True, capture_output=True, env=env)
    subprocess.run([*git, "bisect", "run", str(script)], check=False, capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    bad = subprocess.run([*git, "rev-parse", "refs/bisect/bad"], check=False, capture_output=True, text=True).stdout.strip()
    tally = counts.read_text().split() if counts.exists() else []
    return {"wall_s": round(wall, 1), "launches": tally.count("launch"), "builds": tally.count("build"),
            "skips": tally.count("skip"), "cached": 0, "first_bad": bad}


def warm_up(repo: Path, work: Path) -> None:
    """One install of the first commit with each tool, so every side starts with warm uv and pip caches."""
    for _n, argv in enumerate((["uv", "venv", "-q", "{v}"], ["uv", "pip", "install", "-q", "--python", "{v}/bin/python",
                                                               str(repo)])):
        subprocess.run([a.format(v=work / "warm-uv") for a in argv], check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "venv", str(work / "warm-pip")], check=True)
    subprocess.run([str(work / "warm-pip" / "bin" / "pip"), "install", "-q", str(repo)], check=True, capture_output=True)


ROWS = {"uv": "plain + uv", "pip": "plain + pip", "abbisect": "abbisect", "ends": "abbisect, ends cached",
        "lazy": "abbisect, lazy ends"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=100)
    ap.add_argument("--ready", default="0.5,5", help="server ready times in seconds, comma-separated")
    ap.add_argument("--deps", default="light", help="light, heavy or both (light,heavy)")
    ap.add_argument("--sides", default="uv,pip,abbisect,ends", help=f"which rows: {','.join(ROWS)}")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    readies = [float(r) for r in args.ready.split(",")]
    sides = args.sides.split(",")
    commits, bug, dead = hit_history(args.commits)
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        for deps in args.deps.split(","):
            work = Path(tmp) / deps
            shas = make_repo(work / "engine", commits, HEAVY if deps == "heavy" else [])
            warm_up(work / "engine", work)
            for ready in readies:
                for side in sides:
                    w = work / f"{side}-{ready:g}"
                    r = (run_plain(work / "engine", w, ready, side) if side in ("uv", "pip") else
                         run_abbisect(work / "engine", w, ready, side == "ends", side == "lazy"))
                    row = {"deps": deps, "ready_s": ready, "side": ROWS[side], **r,
                           "found": r["first_bad"] == shas[bug]}
                    table.append(row)
                    if not args.json:
                        print(f"  {deps:6} ready {ready:>4g} s  {ROWS[side]:22} {r['wall_s']:>7.1f} s", file=sys.stderr)
    if args.json:
        print(json.dumps({"commits": args.commits, "unbuildable": [dead.start, dead.stop - 1], "rows": table}, indent=1))
        return
    print(f"{args.commits} commits, bug at commit {bug}, commits {dead.start}-{dead.stop - 1} unbuildable; "
          f"one slot; {os.cpu_count()} CPU cores; ceil(log2 N) = {math.ceil(math.log2(args.commits - 1))}")
    print(f"{'deps':6} {'ready':>6} {'side':22} {'wall s':>7} {'vs uv':>6} {'launches':>8} {'builds':>6} "
          f"{'skips':>5} {'cached':>6} {'found':>5}")
    for row in table:
        uv = next((r for r in table if r["deps"] == row["deps"] and r["ready_s"] == row["ready_s"]
                   and r["side"] == ROWS["uv"]), None)
        ratio = f"{uv['wall_s'] / row['wall_s']:.2f}x" if uv else "-"
        print(f"{row['deps']:6} {row['ready_s']:>5g}s {row['side']:22} {row['wall_s']:>7.1f} {ratio:>6} "
              f"{row['launches']:>8} {row['builds']:>6} {row['skips']:>5} {row['cached']:>6} {row['found']!s:>5}")
    print("vs uv: plain + uv's wall time / this row's (above 1: faster than plain + uv). launches: servers "
          "started; builds: venvs built (abbisect: thin per-commit venvs and shared dependency venvs, "
          "background ones included); skips: unbuildable commits tested; cached: trials taken from the cache.")


if __name__ == "__main__":
    main()
