#!/usr/bin/env bash
# Issue 25's proof on one GPU: the same bisect with one slot (gpus: [0], the whole GPU) and with four slots
# sharing GPU 0 (gpus: {count: 1, per_gpu: 4}: each server told its share, 0.22, hygiene per slot), on a
# history of N commits (default 300) of a GPU-using fixture engine (tests/gpu_fixture_server.py: a tiny torch
# model on cuda holding min(share x total, 2 GiB), refusing to start when its share is not free, as vLLM does)
# whose commit CULPRIT (default 211) plants the bad mode (every completion loops).
#
#   OUT=<folder> bash docs/gpu/bisect_one_gpu_shared.sh          # on a machine with an NVIDIA GPU: ~4 minutes
#   OUT=<folder> bash docs/gpu/bisect_one_gpu_shared.sh --cpu    # the plumbing on a CPU: --slots 4, no NVML, N=40
#   OUT=<folder> bash docs/gpu/bisect_one_gpu_shared.sh --dry    # history, recipes, both bisects' --dry-run
#
# Prints and writes to OUT (at most 6 files): summary.txt (the culprit each run found, trials and rounds, wall
# times and their ratio, target <= 0.6, then every trial's per-slot hygiene before and after), hygiene.csv,
# timeline.csv (NVML every 0.5 s: used/free MiB and each compute process's MiB, labelled by run), the two runs'
# progress (stderr) and results.tar.gz (both bisect.md/json/state.json, the recipes, nvidia-smi before/after).
# Exits 1 when the proof fails (another culprit, infra_error trials, a slot check still busy, ratio > 0.6).
#
# Runs with no network: abbisect's own dependencies must be importable (the wheels carried for earlier runs:
# pydantic, httpx-sse, uv, ...; docs/gpu-verification.md), torch comes from the machine. Run from anywhere.
set -euo pipefail
MODE=${1:---gpu}
case "$MODE" in --gpu|--cpu|--dry) ;; *) echo "usage: $0 [--gpu|--cpu|--dry]" >&2; exit 2 ;; esac
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HELPER="$ROOT/docs/gpu/shared_bisect.py"
if [ "$MODE" = --cpu ]; then N=${N:-40}; CULPRIT=${CULPRIT:-29}; else N=${N:-300}; CULPRIT=${CULPRIT:-211}; fi
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
W=$(mktemp -d)  # the histories, caches and results; removed at the end unless KEEP=1 (results.tar.gz keeps them)
R="$W/results"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$W"' EXIT
mkdir -p "$R"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 -c "import abbisect.cli, pydantic, uv, httpx_sse, torch" || {
  echo "abbisect's dependencies (or torch) are not importable: install the carried wheels first" >&2; exit 2; }

python3 "$HELPER" history "$W/engine" "$N" "$CULPRIT" "$ROOT/tests/gpu_fixture_server.py" > "$R/expected-culprit.txt"
echo "history: $N commits, culprit $CULPRIT = $(cut -c1-12 "$R/expected-culprit.txt")"

DEVICE=${FIXTURE_DEVICE:-cuda}  # cpu: the GPU recipes with the fixture on the CPU (a rehearsal under recorded NVML)
ONE_GPUS="gpus: [0]"
FOUR_GPUS="gpus: {count: 1, per_gpu: 4}"
FOUR_ARGS=()
if [ "$MODE" = --cpu ]; then  # CPU slots: no GPU pinned, no hygiene; the same bisects otherwise
  DEVICE=cpu ONE_GPUS="" FOUR_GPUS="" FOUR_ARGS=(--slots 4)
fi
recipe() {  # NAME GPUS-LINE: the two recipes differ only there
  cat > "$W/$1.yaml" <<YAML
name: $1
engine: {kind: command, repo: $W/engine}
install: {strategy: command, system_site_packages: true, commands: ["true"]}
launch:
  command: ["{python}", "server.py", "{port}", "--share", "{gpu_share}", "--cap-mib", "2048", "--device", "$DEVICE"]
  ready: {http: /health}
$2
prompts: ["hello gpu", "abcdef", "the quick brown fox"]
api: completions
sampling: {max_tokens: 32}
timeouts: {ready: 120, request: 30, teardown: 10}
YAML
  cp "$W/$1.yaml" "$R/"
}
recipe one "$ONE_GPUS"
recipe four "$FOUR_GPUS"

if [ "$MODE" = --dry ]; then
  for label in one four; do
    echo "== $label: abbisect bisect --dry-run"
    python3 -m abbisect bisect "$W/$label.yaml" --good v0 --bad head --cache-dir "$W/cache-$label" --dry-run
  done
  exit 0
fi

echo idle > "$W/phase"
python3 "$HELPER" sample "$OUT/timeline.csv" "$W/phase" "$W/stop" &
SAMPLER=$!
trap 'touch "$W/stop"; wait "$SAMPLER" 2>/dev/null || true; [ "${KEEP:-0}" = 1 ] || rm -rf "$W"' EXIT
if [ "$MODE" = --gpu ] && [ "$DEVICE" = cuda ]; then
  nvidia-smi > "$R/nvidia-smi-before.txt" 2>&1 || true
  # torch and the driver warm (page cache, first context) before either run, so neither pays for it alone
  python3 -c "import torch; torch.zeros(1, device='cuda'); print('warm:', torch.cuda.get_device_name(0))"
fi
echo "{\"mode\": \"$MODE\"}" > "$R/walls.json"

bisect() {  # LABEL LIMIT_S [ARGS...]: one bisect, cold cache of its own, timed from outside
  local label=$1 limit=$2 rc=0 t0 t1
  shift 2
  echo "$label" > "$W/phase"
  t0=$(date +%s.%N)
  timeout "$limit" python3 -m abbisect bisect "$W/$label.yaml" --good v0 --bad head --no-cache \
    --cache-dir "$W/cache-$label" -o "$R/$label" "$@" > "$R/$label-stdout.txt" 2> "$OUT/$label-progress.txt" || rc=$?
  t1=$(date +%s.%N)
  echo idle > "$W/phase"
  python3 - "$R/walls.json" "$label" "$t0" "$t1" <<'PY'
import json, sys
path, label, t0, t1 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
walls = json.load(open(path)); walls[label] = round(t1 - t0, 2); json.dump(walls, open(path, "w"))
PY
  echo "$label: exit $rc, $(python3 -c "import json; print(json.load(open('$R/walls.json'))['$label'])") s"
  tail -3 "$OUT/$label-progress.txt"
  sleep 2  # the timeline shows the GPU back at idle between the runs
}
bisect one 300
bisect four 180 ${FOUR_ARGS[@]+"${FOUR_ARGS[@]}"}

touch "$W/stop"
wait "$SAMPLER" || true
[ "$MODE" = --gpu ] && { nvidia-smi > "$R/nvidia-smi-after.txt" 2>&1 || true; }
cp "$OUT/timeline.csv" "$R/" 2>/dev/null || true
rc=0
python3 "$HELPER" summary "$R" || rc=$?
cp "$R/summary.txt" "$R/hygiene.csv" "$OUT/"
tar -czf "$OUT/results.tar.gz" -C "$W" results
echo "outputs in $OUT"
exit $rc
