"""abbisect bisect vs the plain approach (git bisect run + fresh venv + pip install + launch per step).

Builds a toy-engine history of N commits (the bug and, later, its fix somewhere inside; some unbuildable
commits sprinkled in), then runs both on it in one go and prints wall time, launches, builds and
abbisect's own overhead per step (time not spent building or serving).

    python benchmarks/bisect_vs_git.py [--commits 1000] [--json]
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

from abbisect.builtin.history import Commit, build_history

PLAIN_SCRIPT = textwrap.dedent("""\
    #!/usr/bin/env bash
    # What a user writes by hand: fresh venv, pip install, launch, ask, grep.
    set -u
    V=$(mktemp -d)/venv
    python3 -m venv "$V" || exit 125
    "$V/bin/pip" install -q . >/dev/null 2>&1 || exit 125
    echo build >> "$COUNTS"
    PORT=$("$V/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    setsid "$V/bin/python" -m toyengine.server --port "$PORT" --seed 0 > server.log 2>&1 &
    PID=$!
    echo launch >> "$COUNTS"
    for i in $(seq 1 200); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
    OUT=$(curl -s "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \\
      -d '{"model":"toy-model","messages":[{"role":"user","content":"The capital of France is"}],"max_tokens":48,"temperature":0}')
    kill -- -"$PID" 2>/dev/null; wait "$PID" 2>/dev/null
    rm -rf "$(dirname "$V")"
    echo "$OUT" | grep -q "need analysis there need analysis there" && exit 1
    exit 0
""")


def history(n: int) -> tuple[list[Commit], int]:
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


def run_abbisect(repo: Path, work: Path) -> dict:
    recipe = {
        "name": "bench", "engine": {"kind": "command", "repo": str(repo)},
        "launch": {"command": ["{python}", "-m", "toyengine.server", "--host", "{host}", "--port", "{port}"],
                   "flags": ["--seed", "0"]},
        "prompts": ["The capital of France is"], "sampling": {"max_tokens": 48},
        "timeouts": {"ready": 30, "request": 30, "teardown": 5},
    }
    (work / "r.yaml").write_text(yaml.safe_dump(recipe))
    env = {**os.environ, "ABBISECT_CACHE_DIR": str(work / "cache")}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "abbisect", "bisect", str(work / "r.yaml"), "--good", "start",
                           "--bad", "end", "-o", str(work / "out"), "--json"], check=False, capture_output=True, text=True,
                          env=env, cwd=work)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"abbisect bisect failed:\n{proc.stderr[-2000:]}")
    res = json.loads(proc.stdout)["data"]
    data = json.loads((work / "out" / "bisect.json").read_text())
    trials = [json.loads(p.read_text()) for p in (work / "cache" / "trials").glob("*.json")]
    build = sum(t["timings"].get("build", 0) for t in trials)
    serve = sum(t["timings"].get(k, 0) for t in trials for k in ("ready", "query", "teardown"))
    steps = len(data["steps"])
    # Everything else: git, worktrees, scoring, reports, process start of abbisect itself.
    overhead = (wall - build - serve) / max(steps, 1)
    return {"wall_s": round(wall, 1), "launches": res["launches"], "builds": res["builds"], "steps": steps,
            "first_bad": res["first_new"], "overhead_per_step_s": round(overhead, 3),
            "build_s": round(build, 1), "serve_s": round(serve, 1)}


def run_plain(src: Path, work: Path) -> dict:
    repo = work / "plain"
    subprocess.run(["git", "clone", "-q", str(src), str(repo)], check=True)
    script = work / "plain.sh"
    script.write_text(PLAIN_SCRIPT)
    script.chmod(0o755)
    counts = work / "counts.txt"
    env = {**os.environ, "COUNTS": str(counts)}
    git = ["git", "-C", str(repo)]
    t0 = time.monotonic()
    subprocess.run([*git, "bisect", "start", "end", "start"], check=True, capture_output=True, env=env)
    subprocess.run([*git, "bisect", "run", str(script)], check=False, capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    bad = subprocess.run([*git, "rev-parse", "refs/bisect/bad"], check=False, capture_output=True, text=True).stdout.strip()
    tally = counts.read_text().split() if counts.exists() else []
    return {"wall_s": round(wall, 1), "launches": tally.count("launch"), "builds": tally.count("build"),
            "first_bad": bad}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        commits, bug = history(args.commits)
        t0 = time.monotonic()
        shas = build_history(work / "engine", commits)
        made = time.monotonic() - t0
        (work / "a").mkdir()
        (work / "p").mkdir()
        ours = run_abbisect(work / "engine", work / "a")
        plain = run_plain(work / "engine", work / "p")
        skips = sum(1 for c in commits if c.change == "break_install")
        bound = math.ceil(math.log2(args.commits)) + 2
        result = {"commits": args.commits, "history_build_s": round(made, 1), "culprit": shas[bug],
                  "unbuildable_commits": skips, "launch_bound_log2N_plus_2": bound,
                  "abbisect": ours, "plain_git_bisect_run": plain,
                  "speedup": round(plain["wall_s"] / ours["wall_s"], 2)}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"history: {args.commits} commits ({skips} unbuildable) built in {made:.1f} s; culprit {shas[bug][:10]}")
    print(f"{'':24}{'abbisect':>12}{'git bisect run':>16}")
    for key in ("wall_s", "launches", "builds"):
        print(f"{key:24}{ours[key]:>12}{plain[key]:>16}")
    print(f"{'found culprit':24}{ours['first_bad'] == shas[bug]!s:>12}{plain['first_bad'] == shas[bug]!s:>16}")
    print(f"abbisect overhead per step: {ours['overhead_per_step_s']:.3f} s  (build {ours['build_s']} s, "
          f"serving {ours['serve_s']} s over {ours['steps']} steps)")
    print(f"launch bound ceil(log2 N)+2 = {bound} (+ skips); speed-up {result['speedup']}x")


if __name__ == "__main__":
    main()
