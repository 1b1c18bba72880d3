#!/usr/bin/env bash
# `abbisect bisect` with two GPU slots on a real two-GPU host: a GPU-using fixture engine
# (tests/gpu_fixture_server.py: a tiny torch model on cuda holding 2 GiB) in a 12-commit history whose
# commit 7 makes every output loop. `--gpus 0,1` gives each trial one GPU (CUDA_VISIBLE_DEVICES pinned,
# same-GPU hygiene before and after it on that GPU); the ends run at once, then rounds of two commits.
# Run from the repository root on a machine with two NVIDIA GPUs, torch and triton; OUT names a folder.
set -euo pipefail
OUT=${OUT:-$(mktemp -d)}
W=$(mktemp -d)
git init -q -b main "$W/engine"
cp tests/gpu_fixture_server.py "$W/engine/server.py"
g() { git -C "$W/engine" -c user.name=dev -c user.email=dev@example.invalid "$@"; }
g add -A && g commit -qm "fixture server" && g tag v0
for n in $(seq 1 11); do
  if [ "$n" = 7 ]; then  # the regression: every completion becomes the seed's loop
    python3 - "$W/engine/server.py" <<'PY'
import sys, pathlib
p = pathlib.Path(sys.argv[1])
p.write_text(p.read_text().replace("        return bytes(ids[-n:]).decode()\n",
                                   "        return ('need analysis there ' * n)[: 4 * n]\n"))
PY
  else
    echo "# edit $n" >> "$W/engine/server.py"
  fi
  g commit -qam "change $n"
done
g tag head
cat > "$W/gpu.yaml" <<YAML
name: gpu-two-slots
engine: {kind: command, repo: engine}
install:
  strategy: command
  system_site_packages: true
  commands: ["{python} -c 'import torch; assert torch.cuda.is_available()'"]
launch: {command: ["{python}", "server.py", "{port}", "2048"], ready: {http: /health}}
gpus: [[0], [1]]
prompts: ["hello gpu", "abcdef", "the quick brown fox"]
api: completions
sampling: {max_tokens: 32}
timeouts: {ready: 120, request: 30}
YAML
nvidia-smi --query-gpu=index,name,memory.used --format=csv | tee "$OUT/gpus-before.csv"
python3 -m abbisect bisect "$W/gpu.yaml" --good v0 --bad head -o "$W/res" --json \
  > "$OUT/bisect-stdout.json" 2> "$OUT/bisect-progress.txt" || echo "exit $?" >> "$OUT/bisect-progress.txt"
cp "$W/res/bisect.md" "$W/res/bisect.json" "$OUT/" || true
nvidia-smi --query-gpu=index,name,memory.used --format=csv | tee "$OUT/gpus-after.csv"
git -C "$W/engine" rev-parse "head~4" > "$OUT/expected-culprit.txt"
tail -30 "$OUT/bisect-progress.txt"
