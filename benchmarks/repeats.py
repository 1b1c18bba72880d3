"""Bugs only sometimes or only under load (issue 21): how often abbisect names the planted commit, and what it
costs, on real toy-engine processes.

1. A flaky crash: a history of `--commits` commits whose commit P (drawn from the seed in 3..N-4) makes the
   toy server die at start in about one launch of three (a fresh os.urandom draw each launch: truly random).
   Per seed, the same recipe bisected twice: with `repeats: {launches: L}` (the defaults otherwise: failure
   rates, Fisher's test, the found commit confirmed by a fresh rerun), and once a commit (no repeats).
2. A batch-only bug: the same kind of history with a commit that loops ("for for for") only when 4 or more
   requests are in flight, bisected with `query: {concurrency: 6, repeat: 2}` and with the default query (one
   request at a time).

Every bisect is `abbisect bisect RECIPE --good FIRST --bad LAST --no-cache --json` with one shared cache
(venvs are built once; `--no-cache` so that no trial is ever replayed). Prints markdown tables: per seed, and
per method the hit rate, mean / median launches (confirmation included) and wall time.

    python benchmarks/repeats.py [--seeds 20] [--batch-seeds 5] [--commits 16] [--launches 6] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from abbisect.builtin.history import planted_history

PROMPTS = ["What is two plus two?", "Explain what a hash table is.", "List three uses of copper.",
           "Name a prime number."]
EXITS = {0: "found", 3: "no change", 4: "untestable end", 5: "ambiguous"}


def recipe(repo: Path, name: str, **overrides) -> dict:
    """tests/conftest.py's toy recipe."""
    doc = {
        "name": name,
        "engine": {"kind": "command", "repo": str(repo)},
        "install": {"strategy": "editable"},
        "launch": {"command": ["{python}", "-m", "toyengine.server", "--host", "{host}", "--port", "{port}"],
                   "flags": ["--seed", "0"], "ready": {"http": "/health"}},
        "prompts": PROMPTS,
        "sampling": {"temperature": 0, "max_tokens": 48, "seed": 0},
        "timeouts": {"build": 300, "ready": 20, "request": 20, "teardown": 5},
    }
    doc.update(overrides)
    return doc


def position(kind: str, seed: int, commits: int) -> int:
    return random.Random(f"{kind}-{seed}").randint(3, commits - 3)


def bisect(doc: dict, shas: list[str], planted: int, work: Path, cache: Path, name: str) -> dict:
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = work / name
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOYENGINE_CRASH")}  # truly random crashes
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "abbisect", "-q", "bisect", str(path), "--good", shas[0],
                           "--bad", shas[-1], "-o", str(out), "--json", "--no-cache"], check=False, cwd=work,
                          capture_output=True, text=True, env={**env, "ABBISECT_CACHE_DIR": str(cache)})
    wall = time.monotonic() - t0
    data = json.loads(proc.stdout)["data"] if proc.stdout.strip().startswith("{") else {}
    if proc.returncode not in EXITS or not data:
        raise SystemExit(f"{name}: abbisect bisect failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    first = data.get("first_new")
    if proc.returncode == 0:
        result = "hit" if first == shas[planted] else f"wrong ({shas.index(first) if first in shas else first})"
    else:
        result = EXITS[proc.returncode]
    ends = {s["role"]: s.get("launches", 1) for s in data["steps"] if s["role"].endswith(" end")}
    conf = data.get("confirmation") or {}
    return {"name": name, "planted": planted, "rc": proc.returncode, "result": result, "hit": result == "hit",
            "first_new": shas.index(first) if first in shas else None, "launches": data["launches"],
            "wall_s": round(wall, 1), "steps": len(data["steps"]),
            "ends": f"{ends.get('old end', '-')}/{ends.get('new end', '-')}",
            "confirmation": conf.get("level", "-"), "confirm_launches": conf.get("launches", 0),
            "candidates": [shas.index(c) for c in data.get("candidates", []) if c in shas]}


def per_seed_table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}\n")
    print("| seed | planted | result | first_new | launches | ends (old/new) | steps | confirmation | wall |")
    print("|---:|---:|---|---:|---:|---|---:|---|---:|")
    for r in rows:
        first = "-" if r["first_new"] is None else r["first_new"]
        conf = r["confirmation"] + (f" ({r['confirm_launches']} each)" if r["confirm_launches"] else "")
        print(f"| {r['seed']} | {r['planted']} | {r['result']} | {first} | {r['launches']} | {r['ends']} | "
              f"{r['steps']} | {conf} | {r['wall_s']:.0f} s |")


def summary_table(title: str, methods: dict[str, list[dict]]) -> None:
    print(f"\n{title}\n")
    print("| method | named the planted commit | a wrong commit | no change (exit 3) | ambiguous (exit 5) | "
          "launches mean / median | wall mean / median |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rows in methods.items():
        n = len(rows)
        count = {k: sum(1 for r in rows if r["result"].startswith(k)) for k in ("hit", "wrong", "no change",
                                                                                 "ambiguous")}
        launches, wall = [r["launches"] for r in rows], [r["wall_s"] for r in rows]
        print(f"| {name} | {count['hit']}/{n} | {count['wrong']}/{n} | {count['no change']}/{n} | "
              f"{count['ambiguous']}/{n} | {statistics.mean(launches):.1f} / {statistics.median(launches):g} | "
              f"{statistics.mean(wall):.0f} s / {statistics.median(wall):.0f} s |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20, help="flaky-crash histories (each bisected two ways)")
    ap.add_argument("--batch-seeds", type=int, default=5, help="batch-bug histories (each bisected two ways)")
    ap.add_argument("--commits", type=int, default=16)
    ap.add_argument("--launches", type=int, default=6, help="repeats.launches of the flaky bisect")
    ap.add_argument("--keep", type=Path, help="keep every bisect's output folder here (default: a temp folder)")
    args = ap.parse_args()
    print("`" + " ".join(["python", "benchmarks/repeats.py", *map(shlex.quote, sys.argv[1:])]) + "`")
    print(f"\n{args.commits} commits, {os.cpu_count()} CPU cores; launches include the confirmation's; wall is "
          "the whole `abbisect bisect` command")
    work = args.keep or Path(tempfile.mkdtemp(prefix="abbisect-repeats-"))
    work.mkdir(parents=True, exist_ok=True)
    cache = work / "cache"
    histories: dict[tuple[str, int], list[str]] = {}

    def history(change: str, at: int) -> tuple[Path, list[str]]:
        repo = work / f"{change}-{at}"
        if (change, at) not in histories:
            histories[change, at] = planted_history(repo, args.commits, {at: change})
        return repo, histories[change, at]

    flaky: dict[str, list[dict]] = {f"repeats (launches {args.launches})": [], "one run a commit": []}
    for seed in range(args.seeds):
        at = position("flaky", seed, args.commits)
        repo, shas = history("flaky_crash", at)
        base = {"prompts": PROMPTS[:1], "timeouts": {"build": 300, "ready": 10, "request": 20, "teardown": 5}}
        docs = (recipe(repo, f"flaky{seed}", **base, repeats={"launches": args.launches}),
                recipe(repo, f"once{seed}", **base))
        for (method, rows), doc in zip(flaky.items(), docs):
            row = bisect(doc, shas, at, work, cache, doc["name"])
            rows.append({"seed": seed, **row})
            print(f"<!-- {method} seed {seed}: {json.dumps(row)} -->", file=sys.stderr, flush=True)
    batch: dict[str, list[dict]] = {"concurrency 6, repeat 2": [], "sequential (default query)": []}
    for seed in range(args.batch_seeds):
        at = position("batch", seed, args.commits)
        repo, shas = history("batch_bug", at)
        docs = (recipe(repo, f"batch{seed}", query={"concurrency": 6, "repeat": 2}), recipe(repo, f"seq{seed}"))
        for (method, rows), doc in zip(batch.items(), docs):
            row = bisect(doc, shas, at, work, cache, doc["name"])
            rows.append({"seed": seed, **row})
            print(f"<!-- {method} seed {seed}: {json.dumps(row)} -->", file=sys.stderr, flush=True)

    if args.seeds:
        summary_table(f"Flaky crash (one launch in three dies at start), {args.seeds} seeds:", flaky)
        for method, rows in flaky.items():
            per_seed_table(f"Flaky crash, {method}:", rows)
    if args.batch_seeds:
        summary_table(f"Batch-only bug (loops with 4+ requests in flight), {args.batch_seeds} seeds:", batch)
        for method, rows in batch.items():
            per_seed_table(f"Batch-only bug, {method}:", rows)
    if args.keep:
        print(f"\n(output folders kept in {args.keep})", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
