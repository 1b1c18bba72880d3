"""A performance bisect on toy histories: how often it names the planted slowdown, what it costs, how often an
A-vs-A says "different", and what a naive one-measurement-a-commit bisect gets on the same histories.

Per seed, a toy-engine history of N commits with +10 % per-token cost planted at a position drawn from the seed
(`planted_history(repo, N, {k: "slow_tokens"})`), the tokens paced at TOYENGINE_TOKEN_SECONDS with a per-request
log-normal factor of sigma TOYENGINE_NOISE_SIGMA (its seed left random: every launch draws its own noise). The
recipe is recipes/perf-demo.yaml's (metric tpot_median) pointed at that history. Three parts:

- **bisect**: `abbisect bisect RECIPE --good <first> --bad <last> --json`: the found commit, launches, wall, and
  the confirmation's level;
- **A-vs-A**: `abbisect run RECIPE --a X --b X --json` (X drawn from the seed): the call (same / different /
  not sure), the change and the noise floor of its passes;
- **naive**: what `asv find` or a hand script does: one launch and one pass of the same load (abbisect's own
  load generator, `abbisect.query.load.run_pass`, against a toy server this script starts from the commit's
  tree) for each end and each tested commit, classified by which end's value it is nearer (the midpoint).

One ABBISECT_CACHE_DIR for every seed, so the shared venv is built once (performance trials are never
replayed from the trial cache). Prints markdown tables and the command line.

    python benchmarks/perf_bisect.py [--commits 80] [--seeds 20] [--sigma 0.05] [--parts bisect,ava,naive]
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from toylab import ToyServer, abbisect, history, load1, med, run_seeds, seed_options, tree_of

from abbisect.query.load import run_pass
from abbisect.query.measure import values, workload
from abbisect.recipe.perf import Perf
from abbisect.stats import noise_floor

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "recipes" / "perf-demo.yaml"
PARTS = ("bisect", "ava", "naive")




def recipe(work: Path, repo: Path, seed: int, args: argparse.Namespace) -> tuple[Path, dict]:
    demo = yaml.safe_load(DEMO.read_text())
    demo.pop("sides", None)
    demo["name"] = f"perf-bisect{seed}"
    demo["description"] = f"benchmarks/perf_bisect.py seed {seed}"
    demo["engine"]["repo"] = str(repo)
    demo["env"] = {**demo["env"], "TOYENGINE_TOKEN_SECONDS": str(args.token_seconds),
                   "TOYENGINE_NOISE_SIGMA": str(args.sigma)}
    path = work / f"perf{seed}.yaml"
    path.write_text(yaml.safe_dump(demo, sort_keys=False))
    return path, demo



def passes_of(trials: list[dict], metric: str) -> list[float]:
    return [p["values"][metric] for t in trials for p in (t.get("extras") or {}).get("perf", {}).get("passes", ())
            if p.get("completed") and p["values"].get(metric)]


def run_bisect(work: Path, cache: Path, seed: int, path: Path, shas: list[str], planted: int) -> dict:
    before = load1()
    rc, data, wall = abbisect(work, cache, "bisect", str(path), "--good", shas[0], "--bad", shas[-1],
                              "-o", str(work / f"bisect{seed}"))
    found = data.get("first_new")
    conf = data.get("confirmation") or {}
    return {"seed": seed, "planted": planted, "rc": rc, "found": shas.index(found) if found in shas else None,
            "hit": found == shas[planted], "launches": data.get("launches"), "wall_s": data.get("wall_s") or wall,
            "steps": len(data.get("steps") or ()), "confirmation": conf.get("level", "-"),
            "confirm_launches": conf.get("launches", 0), "load": (before, load1()), "error": data.get("error")}


def run_ava(work: Path, cache: Path, seed: int, path: Path, shas: list[str], metric: str) -> dict:
    x = shas[random.Random(seed + 10_000).randrange(len(shas))]
    before = load1()
    rc, data, wall = abbisect(work, cache, "run", str(path), "--a", x, "--b", x, "-o", str(work / f"ava{seed}"))
    cmp = ((data.get("assessment") or {}).get("comparison") or {}).get("comparison") or {}
    a = [data["a"], *data.get("more_a", ())] if "a" in data else []
    b = [data["b"], *data.get("more_b", ())] if "b" in data else []
    va, vb = passes_of(a, metric), passes_of(b, metric)
    floor = noise_floor(va, vb).half_width if min(len(va), len(vb)) >= 3 else None
    return {"seed": seed, "commit": shas.index(x), "rc": rc, "call": cmp.get("call", "-"),
            "change": cmp.get("change"), "p": cmp.get("p"), "passes": (len(va), len(vb)), "launches": len(a) + len(b),
            "floor": floor, "wall_s": wall, "load": (before, load1()), "error": data.get("error")}


def measure_once(repo: Path, sha: str, work: Path, demo: dict, perf: Perf) -> float:
    server = ToyServer(tree_of(repo, sha, work), demo["env"])
    try:
        result = run_pass(server.url, "toy-model", workload(perf, demo.get("api", "chat"), []), 60.0)
    finally:
        server.stop()
    got = values(result)[perf.metric]
    if got is None or result.errors:
        raise RuntimeError(f"{sha[:10]}: a pass with {result.errors} error(s)")
    return got


def run_naive(work: Path, seed: int, repo: Path, shas: list[str], planted: int, demo: dict) -> dict:
    """git bisect with one measurement a commit: bad when the value is nearer the bad end's than the good end's."""
    perf = Perf(**demo["perf"])
    before = load1()
    t0 = time.monotonic()
    good, bad = measure_once(repo, shas[0], work, demo, perf), measure_once(repo, shas[-1], work, demo, perf)
    mid = (good + bad) / 2
    lo, hi, launches = 0, len(shas) - 1, 2
    while hi - lo > 1:
        k = (lo + hi) // 2
        v = measure_once(repo, shas[k], work, demo, perf)
        launches += 1
        if (v > mid) == (bad > good):
            hi = k
        else:
            lo = k
    return {"seed": seed, "planted": planted, "found": hi, "hit": hi == planted, "launches": launches,
            "ends": (good, bad), "wall_s": time.monotonic() - t0, "load": (before, load1())}


def fmt_load(rows: list[dict]) -> str:
    loads = [x for r in rows for x in r["load"]]
    return f"{min(loads):.2f}–{max(loads):.2f} (median {statistics.median(loads):.2f})" if loads else "—"



def report(args: argparse.Namespace, rows: dict[str, list[dict]], wall: float) -> None:
    print(f"`{shlex.join(['python', 'benchmarks/perf_bisect.py', *sys.argv[1:]])}`\n")
    print(f"{args.commits} commits a history, +10 % per-token cost planted at a position drawn from each seed, "
          f"tokens paced at {args.token_seconds * 1000:g} ms with {args.sigma:.0%} log-normal noise a request (noise "
          f"seed random); recipes/perf-demo.yaml's perf section (metric tpot_median); {os.cpu_count()} CPU cores; "
          f"whole run {wall / 60:.1f} min\n")
    if rows.get("bisect"):
        b = rows["bisect"]
        hits = sum(r["hit"] for r in b)
        levels = {lv: sum(r["confirmation"] == lv for r in b) for lv in dict.fromkeys(r["confirmation"] for r in b)}
        print("**bisect** (`abbisect bisect --good <first> --bad <last>`; launches include the confirmation's):\n")
        print("| seed | planted | found | hit | rc | steps | launches | confirmation (launches each) | wall s | "
              "load before → after |")
        print("|---:|---:|---:|:---:|---:|---:|---:|---|---:|---|")
        for r in b:
            print(f"| {r['seed']} | {r['planted']} | {r['found'] if r['found'] is not None else '—'} | "
                  f"{'✓' if r['hit'] else '✗'} | {r['rc']} | {r['steps']} | {r['launches']} | {r['confirmation']} "
                  f"({r['confirm_launches']}) | {r['wall_s']:.1f} | {r['load'][0]:.2f} → {r['load'][1]:.2f} |"
                  + (f" {r['error']}" if r.get("error") else ""))
        launches = [r["launches"] for r in b if r["launches"] is not None]
        print(f"\nnamed the planted commit **{hits}/{len(b)}**; launches median {med(launches)} "
              f"(range {min(launches, default=0)}–{max(launches, default=0)}); wall median "
              f"{med([r['wall_s'] for r in b])} s (range {min(r['wall_s'] for r in b):.1f}–"
              f"{max(r['wall_s'] for r in b):.1f}); confirmation {', '.join(f'{k} {v}' for k, v in levels.items())}; "
              f"load average {fmt_load(b)}\n")
    if rows.get("ava"):
        a = rows["ava"]
        calls = {c: sum(r["call"] == c for r in a) for c in ("same", "different", "unsure")}
        print("**A-vs-A** (`abbisect run --a X --b X`, X drawn from the seed):\n")
        print("| seed | commit | call | change | p | passes a side | launches | noise floor ± | wall s | "
              "load before → after |")
        print("|---:|---:|---|---:|---:|---|---:|---:|---:|---|")
        for r in a:
            ch = f"{r['change'] * 100:+.2f} %" if r["change"] is not None else "—"
            fl = f"{r['floor'] * 100:.2f} %" if r["floor"] is not None else "—"
            p = f"{r['p']:.3g}" if r["p"] is not None else "—"
            print(f"| {r['seed']} | {r['commit']} | {r['call']} | {ch} | {p} | {r['passes'][0]}/{r['passes'][1]} | "
                  f"{r['launches']} | {fl} | {r['wall_s']:.1f} | {r['load'][0]:.2f} → {r['load'][1]:.2f} |"
                  + (f" {r['error']}" if r.get("error") else ""))
        floors = [r["floor"] * 100 for r in a if r["floor"] is not None]
        print(f"\n*different* **{calls['different']}/{len(a)}**, same {calls['same']}, not sure {calls['unsure']}; "
              f"noise floor median ±{med(floors)} %; launches median {med([r['launches'] for r in a])}; wall median "
              f"{med([r['wall_s'] for r in a])} s; load average {fmt_load(a)}\n")
    if rows.get("naive"):
        n = rows["naive"]
        hits = sum(r["hit"] for r in n)
        print("**naive** (one launch, one pass a commit, split at the midpoint of the ends' values):\n")
        print("| seed | planted | found | hit | launches | good end ms | bad end ms | wall s | load before → after |")
        print("|---:|---:|---:|:---:|---:|---:|---:|---:|---|")
        for r in n:
            print(f"| {r['seed']} | {r['planted']} | {r['found']} | {'✓' if r['hit'] else '✗'} | {r['launches']} | "
                  f"{r['ends'][0]:.4g} | {r['ends'][1]:.4g} | {r['wall_s']:.1f} | {r['load'][0]:.2f} → "
                  f"{r['load'][1]:.2f} |")
        print(f"\nnamed the planted commit **{hits}/{len(n)}**; launches median {med([r['launches'] for r in n])}; "
              f"wall median {med([r['wall_s'] for r in n])} s; load average {fmt_load(n)}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    seed_options(ap, PARTS, commits=80)
    ap.add_argument("--sigma", type=float, default=0.05, help="TOYENGINE_NOISE_SIGMA: log-normal noise a request")
    ap.add_argument("--token-seconds", type=float, default=0.002, help="TOYENGINE_TOKEN_SECONDS")
    args = ap.parse_args()
    metric = yaml.safe_load(DEMO.read_text())["perf"]["metric"]

    def setup(seed: int, work: Path, cache: Path) -> Callable[[str], dict[str, Any]]:
        repo, shas, planted = history(work, seed, args.commits, "slow_tokens")
        path, demo = recipe(work, repo, seed, args)
        parts = {"bisect": lambda: run_bisect(work, cache, seed, path, shas, planted),
                 "ava": lambda: run_ava(work, cache, seed, path, shas, metric),
                 "naive": lambda: run_naive(work, seed, repo, shas, planted, demo)}
        return lambda part: parts[part]()

    rows, wall = run_seeds(ap, args, PARTS, setup)
    report(args, rows, wall)


if __name__ == "__main__":
    main()
