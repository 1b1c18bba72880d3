#!/usr/bin/env bash
# A performance A/B on a machine with an NVIDIA GPU: recipes/perf-demo.yaml (the toy engine, +10 % per token
# at v1.1) with `gpus: [0]`, so every pass records the GPU's clocks, temperature, power and memory next to the
# host's load (abbisect/query/measure.py) and the same-GPU hygiene runs before each launch. The toy engine
# itself computes on the CPU: what this shows is the measurement's plumbing on a real GPU, not a GPU kernel's
# speed.
#
#   OUT=<folder> bash docs/gpu/perf_conditions.sh     # ~1 minute; writes report.md, results.json, conditions.txt
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$(mktemp -d)}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# No network on such a machine: the toy engine is the standard library, so its venv is an empty one and the
# server runs from the commit's worktree (the launch's working directory) instead of an editable install.
python3 - "$ROOT/recipes/perf-demo.yaml" "$W/perf-gpu.yaml" <<'PY'
import sys, yaml
recipe = yaml.safe_load(open(sys.argv[1]))
recipe["install"] = {"strategy": "command", "system_site_packages": True, "commands": ["true"]}
recipe["gpus"] = [0]
yaml.safe_dump(recipe, open(sys.argv[2], "w"), sort_keys=False)
PY
rc=0
(cd "$W" && python3 -m abbisect run perf-gpu.yaml --cache-dir "$W/cache" -o "$W/out" --json > "$W/run.json") || rc=$?
cp "$W/out/report.md" "$W/out/results.json" "$OUT/" 2>/dev/null || true
python3 - "$W/run.json" > "$OUT/conditions.txt" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))["data"]
cmp = data["assessment"]["comparison"]
print("call:", cmp.get("text"))
for side in ("a", "b"):
    for n, trial in enumerate([data[side], *data[f"more_{side}"]]):
        for p in trial["extras"]["perf"]["passes"]:
            c = p["conditions"]
            gpu = {k: v for k, v in c.items() if k.startswith("gpu")}
            print(side, n, f"tpot_median {p['values']['tpot_median']:.3f} ms", f"load1 {c.get('load1')}", gpu)
PY
cat "$OUT/conditions.txt"
exit $rc
