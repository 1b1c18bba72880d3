"""What the numerics verdict needs to call a numerics change, beside what the accuracy verdict needs, in one run.

The toy engine's `logit_shift` (each lm_head row's scale kept with a 2-bit mantissa: every logit moves by up to
12 %, no eval answer changes) A/B'd against its parent:

- **numerics**: `abbisect run` with `numerics: {texts: <the first k default texts>}` for k = 1, 2, 4, 8: the call,
  the effect with its interval, the launches a side;
- **accuracy**: `abbisect run` with `eval: {set: builtin:arith_facts}` (every one of its 400 items) on the same
  two commits: the call and the items that flipped; and abbisect's own power plan for the items a paired eval
  needs to see the drop this change could at most make (1 in 100 items: `--min-drop`).

One ABBISECT_CACHE_DIR (fresh unless given); a deterministic engine, so one launch a side decides each row.

    python benchmarks/numerics_vs_accuracy.py [--cache DIR] [--min-drop 0.01]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import yaml
from toylab import abbisect, load1

from abbisect.builtin.history import planted_history
from abbisect.query.evals import EvalSet
from abbisect.recipe.eval import Eval
from abbisect.recipe.numerics import TEXTS


def recipe(work: Path, repo: Path, name: str, **section: object) -> Path:
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "engine": {"kind": "command", "repo": str(repo)}, "install": {"strategy": "editable"},
        "launch": {"command": ["{python}", "-m", "toyengine.server", "--host", "{host}", "--port", "{port}"],
                   "flags": ["--seed", "0"], "ready": {"http": "/health"}},
        "prompts": ["The capital of France is", "Explain what a hash table is."],
        "sampling": {"temperature": 0, "max_tokens": 24, "seed": 0},
        "timeouts": {"build": 300, "ready": 20, "request": 20, "teardown": 5}, **section}, sort_keys=False))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--min-drop", type=float, default=0.01)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="numerics-bench-"))
    cache = args.cache or work / "cache"
    repo = work / "engine"
    old, new = planted_history(repo, 2, {1: "logit_shift"})
    print(f"load average at start {load1():.1f}\n")
    print("| verdict | texts / items | launches a side | call | effect [interval] | wall |")
    print("|---|---:|---:|---|---|---:|")
    for k in (1, 2, 4, 8):
        path = recipe(work, repo, f"numerics{k}", numerics={"texts": list(TEXTS[:k])})
        _, data, wall = abbisect(work, cache, "run", str(path), "--a", old, "--b", new)
        s = data.get("assessment") or {}
        c = (s.get("comparison") or {}).get("comparison") or {}
        lo, hi = (c.get(k) if c.get(k) is not None else float("nan") for k in ("lo", "hi"))
        print(f"| numerics | {k} text(s) | {s.get('launches', '?')} | {c.get('call', data.get('error'))} | "
              f"{c.get('effect') or float('nan'):.4f} [{lo:.4f}, {hi:.4f}] nats/token | {wall:.1f} s |")
    path = recipe(work, repo, "accuracy", eval={"set": "builtin:arith_facts", "power": 0})
    _, data, wall = abbisect(work, cache, "run", str(path), "--a", old, "--b", new)
    s = data.get("assessment") or {}
    cmp = s.get("comparison") or {}
    c, flips = cmp.get("comparison") or {}, cmp.get("flips") or {}
    print(f"| accuracy | {c.get('n', '?')} items | {s.get('launches', '?')} | {c.get('call', data.get('error'))} | "
          f"{len(flips.get('lost', []))} lost, {len(flips.get('gained', []))} gained | {wall:.1f} s |")
    section = Eval(set="builtin:arith_facts", min_drop=args.min_drop, flip_rate=0.0)
    plan = section.plan(len(EvalSet.of(section).items))
    print(f"\naccuracy's power plan for a drop of {args.min_drop:g} (1 item in {round(1 / args.min_drop)}), no "
          f"A-vs-A flips: {plan.power * 100:.0f} % power with the set's {plan.n} items; "
          f"{plan.needed_n if plan.needed_n is not None else 'no number of'} items reach 80 %")
    print(f"\nload average at the end {load1():.1f}; work dir {work}")


if __name__ == "__main__":
    main()
