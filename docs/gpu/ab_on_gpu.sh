#!/usr/bin/env bash
# `abbisect run` on a real GPU: two sides of a GPU-using fixture server (tests/gpu_fixture_server.py: a tiny
# torch model on cuda holding 2 GiB) pinned to GPU 0, with the same-GPU hygiene check before and after each
# side and each side's venv fingerprinted. Run from the repository root on a machine with an NVIDIA GPU,
# torch and triton; OUT names a folder for the outputs.
set -euo pipefail
OUT=${OUT:-$(mktemp -d)}
W=$(mktemp -d)
git init -q -b main "$W/engine"
cp tests/gpu_fixture_server.py "$W/engine/server.py"
g() { git -C "$W/engine" -c user.name=dev -c user.email=dev@example.invalid "$@"; }
g add -A && g commit -qm "v1 fixture server" && g tag v1
echo "# a harmless edit" >> "$W/engine/server.py"
g commit -qam "v2 harmless edit" && g tag v2
cat > "$W/gpu.yaml" <<YAML
name: gpu-fixture
engine: {kind: command, repo: engine}
install:
  strategy: command
  system_site_packages: true
  commands: ["{python} -c 'import torch; assert torch.cuda.is_available()'"]
launch: {command: ["{python}", "server.py", "{port}", "2048"], ready: {http: /health}}
gpus: [0]
sides: {a: v1, b: v2}
prompts: ["hello gpu", "abcdef"]
api: completions
sampling: {max_tokens: 16}
timeouts: {ready: 120, request: 30}
YAML
python3 -m abbisect env | tee "$OUT/env.txt"
python3 -m abbisect run "$W/gpu.yaml" -o "$W/res" --json > "$OUT/ab.json" 2> "$OUT/ab-progress.txt"
cp "$W/res/report.md" "$OUT/report.md"
cat "$OUT/ab-progress.txt"
