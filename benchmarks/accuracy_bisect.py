"""An accuracy bisect on toy histories: how often it names the commit that silently gets sums wrong, what it
costs, how often an A-vs-A says "different", and what a fixed-tolerance gate (an engine CI's lm-eval check)
gets on the same histories.

Per seed, a toy-engine history of N commits where one commit, at a position drawn from the seed, plants
`arith_drift` (8 % of the sums, chosen by a hash of the question, come out one too high: no loop, no log line;
about 27 of the built-in set's 400 items). The engine is not deterministic: each sum also comes out one too low
with probability `--flip` every time it is asked (TOYENGINE_ANSWER_FLIP, drawn afresh), as a batched engine at
temperature 0 is not batch-invariant. The eval is `builtin:arith_facts` at 8 requests in flight, min_effect
`--min-drop`, its n taken from abbisect's own power plan at the A-vs-A flip rate the toy gives. Three parts:

- **bisect**: `abbisect bisect RECIPE --good <first> --bad <last> --json`: the found commit, launches, items
  asked, wall, the confirmation's level;
- **A-vs-A**: `abbisect run RECIPE --a X --b X --json` (X drawn from the seed): the call, the flips;
- **gate**: what an engine's CI does: one run of the same n items a commit (abbisect's own eval client,
  `abbisect.query.evals.ask_eval`, against a toy server this script starts from the commit's tree), and a
  commit fails when its accuracy is more than `--tolerance` below the good end's one run (SGLang's nightly
  evals allow 2 points); git bisect on that gate.

One ABBISECT_CACHE_DIR for every seed (the shared venv is built once; trial results are never shared between
seeds: each seed is its own repository). Prints markdown tables and the command line.

    python benchmarks/accuracy_bisect.py [--commits 60] [--seeds 20] [--flip 0.02] [--parts bisect,ava,gate]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from toylab import ToyServer, abbisect, history, load1, med, run_seeds, seed_options, tree_of

from abbisect.query.evals import EvalSet, ask_eval
from abbisect.recipe.eval import Eval

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("bisect", "ava", "gate")



def section(args: argparse.Namespace) -> dict:
    """The eval section, its n from abbisect's power plan (the toy's A-vs-A flips ≈ twice the flip rate of the
    sums, which are 340 of the 400 items)."""
    flips = round(2 * args.flip * 340 / 400, 4)
    base = {"set": "builtin:arith_facts", "min_effect": args.min_drop, "flip_rate": flips, "concurrency": 8}
    plan = Eval(**base).plan(len(EvalSet.of(Eval(**base)).items))
    n = min(plan.needed_n or 400, 400)
    return {**base, "n": n}


def recipe(work: Path, repo: Path, seed: int, args: argparse.Namespace) -> Path:
    data = {
        "name": f"accuracy-bisect{seed}",
        "description": f"benchmarks/accuracy_bisect.py seed {seed}",
        "engine": {"kind": "command", "repo": str(repo)},
        "install": {"strategy": "editable"},
        "launch": {"command": ["{python}", "-m", "toyengine.server", "--host", "{host}", "--port", "{port}"],
                   "flags": ["--seed", "0"], "ready": {"http": "/health"}},
        "env": {"TOYENGINE_ANSWER_FLIP": str(args.flip)},
        "prompts": ["What is two plus two?"],
        "eval": section(args),
        "sampling": {"temperature": 0, "max_tokens": 32, "seed": 0},
        "timeouts": {"ready": 60, "request": 60},
    }
    path = work / f"acc{seed}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path




def items_of(trials: list[dict]) -> int:
    return sum(len((t.get("extras") or {}).get("eval", {}).get("items", ())) for t in trials)


def run_bisect(work: Path, cache: Path, seed: int, path: Path, shas: list[str], planted: int) -> dict:
    before = load1()
    rc, data, wall = abbisect(work, cache, "bisect", str(path), "--good", shas[0], "--bad", shas[-1],
                              "-o", str(work / f"bisect{seed}"))
    found = data.get("first_new")
    conf = data.get("confirmation") or {}
    state = work / f"bisect{seed}" / "state.json"
    asked = 0
    if state.is_file():
        steps = json.loads(state.read_text())["steps"]
        asked = sum(items_of([s["result"], *(s.get("more") or ())]) for s in steps if s.get("result"))
    return {"seed": seed, "planted": planted, "rc": rc, "found": shas.index(found) if found in shas else None,
            "hit": found == shas[planted], "launches": data.get("launches"), "items": asked,
            "wall_s": data.get("wall_s") or wall, "steps": len(data.get("steps") or ()),
            "confirmation": conf.get("level", "-"), "load": (before, load1()), "error": data.get("error")}


def run_ava(work: Path, cache: Path, seed: int, path: Path, shas: list[str]) -> dict:
    x = shas[random.Random(seed + 10_000).randrange(len(shas))]
    before = load1()
    rc, data, wall = abbisect(work, cache, "run", str(path), "--a", x, "--b", x, "-o", str(work / f"ava{seed}"))
    cmp = ((data.get("assessment") or {}).get("comparison") or {}).get("comparison") or {}
    return {"seed": seed, "commit": shas.index(x), "rc": rc, "call": cmp.get("call", "-"), "n": cmp.get("n"),
            "flips": (cmp.get("lost"), cmp.get("gained")), "diff": cmp.get("diff"), "p": cmp.get("p_mcnemar"),
            "wall_s": wall, "load": (before, load1()), "error": data.get("error")}


def accuracy_once(repo: Path, sha: str, work: Path, env: dict[str, str], eval_section: Eval) -> float:
    server = ToyServer(tree_of(repo, sha, work), env)
    try:
        run = ask_eval(server.url, "toy-model", eval_section, 0, timeout=60.0)
    finally:
        server.stop()
    if run.accuracy is None or run.n_errors:
        raise RuntimeError(f"{sha[:10]}: {run.n_errors} failed request(s)")
    return run.accuracy


def run_gate(work: Path, seed: int, repo: Path, shas: list[str], planted: int, path: Path,
             tolerance: float) -> dict:
    """git bisect on a fixed-tolerance gate: bad when one run is more than `tolerance` below the good end's."""
    data = yaml.safe_load(path.read_text())
    ev, env = Eval(**data["eval"]), data["env"]
    before, t0 = load1(), time.monotonic()
    good = accuracy_once(repo, shas[0], work, env, ev)
    lo, hi, launches, seen = 0, len(shas) - 1, 1, []
    while hi - lo > 1:
        k = (lo + hi) // 2
        acc = accuracy_once(repo, shas[k], work, env, ev)
        launches += 1
        seen.append(round(acc, 4))
        if acc < good - tolerance:
            hi = k
        else:
            lo = k
    return {"seed": seed, "planted": planted, "found": hi, "hit": hi == planted, "launches": launches,
            "good": good, "seen": seen, "wall_s": time.monotonic() - t0, "load": (before, load1())}



def report(args: argparse.Namespace, rows: dict[str, list[dict]], wall: float, eval_section: dict) -> None:
    print(f"`{shlex.join(['python', 'benchmarks/accuracy_bisect.py', *sys.argv[1:]])}`\n")
    print(f"{args.commits} commits a history, arith_drift planted at a position drawn from each seed; sums flipped "
          f"with probability {args.flip:g} a request; eval {json.dumps(eval_section)}; gate tolerance "
          f"{args.tolerance:g}; {os.cpu_count()} CPU cores; whole run {wall / 60:.1f} min\n")
    if b := rows.get("bisect"):
        print("| seed | planted | found | hit | rc | steps | launches | items asked | confirmation | wall s |")
        print("|---:|---:|---:|:---:|---:|---:|---:|---:|---|---:|")
        for r in b:
            print(f"| {r['seed']} | {r['planted']} | {r['found'] if r['found'] is not None else '—'} | "
                  f"{'✓' if r['hit'] else '✗'} | {r['rc']} | {r['steps']} | {r['launches']} | {r['items']} | "
                  f"{r['confirmation']} | {r['wall_s']:.1f} |" + (f" {r['error']}" if r.get("error") else ""))
        print(f"\nbisect named the planted commit **{sum(r['hit'] for r in b)}/{len(b)}**; launches median "
              f"{med([r['launches'] for r in b if r['launches']])}; wall median {med([r['wall_s'] for r in b])} s\n")
    if a := rows.get("ava"):
        print("| seed | commit | call | n | lost / gained | p | wall s |")
        print("|---:|---:|---|---:|---|---:|---:|")
        for r in a:
            p = f"{r['p']:.3g}" if r["p"] is not None else "—"
            print(f"| {r['seed']} | {r['commit']} | {r['call']} | {r['n']} | {r['flips'][0]} / {r['flips'][1]} | "
                  f"{p} | {r['wall_s']:.1f} |" + (f" {r['error']}" if r.get("error") else ""))
        calls = {c: sum(r["call"] == c for r in a) for c in ("same", "different", "unsure")}
        print(f"\nA-vs-A *different* **{calls['different']}/{len(a)}**, same {calls['same']}, not sure "
              f"{calls['unsure']}\n")
    if g := rows.get("gate"):
        print("| seed | planted | found | hit | launches | good end | wall s |")
        print("|---:|---:|---:|:---:|---:|---:|---:|")
        for r in g:
            print(f"| {r['seed']} | {r['planted']} | {r['found']} | {'✓' if r['hit'] else '✗'} | {r['launches']} | "
                  f"{r['good']:.4f} | {r['wall_s']:.1f} |")
        print(f"\nfixed-tolerance gate named the planted commit **{sum(r['hit'] for r in g)}/{len(g)}**; launches "
              f"median {med([r['launches'] for r in g])}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    seed_options(ap, PARTS, commits=60)
    ap.add_argument("--flip", type=float, default=0.02, help="TOYENGINE_ANSWER_FLIP: a sum's chance to flip")
    ap.add_argument("--min-drop", type=float, default=0.05, help="eval.min_effect")
    ap.add_argument("--tolerance", type=float, default=0.02, help="the gate's allowed drop below the good end")
    args = ap.parse_args()

    def setup(seed: int, work: Path, cache: Path) -> Callable[[str], dict[str, Any]]:
        repo, shas, planted = history(work, seed, args.commits, "arith_drift")
        path = recipe(work, repo, seed, args)
        parts = {"bisect": lambda: run_bisect(work, cache, seed, path, shas, planted),
                 "ava": lambda: run_ava(work, cache, seed, path, shas),
                 "gate": lambda: run_gate(work, seed, repo, shas, planted, path, args.tolerance)}
        return lambda part: parts[part]()

    rows, wall = run_seeds(ap, args, PARTS, setup)
    report(args, rows, wall, section(args))


if __name__ == "__main__":
    main()
