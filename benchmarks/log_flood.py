"""abbisect's memory while a server floods its log: `python benchmarks/log_flood.py [--mb 1024]`.

A toy engine prints `--mb` MiB of log lines before it becomes ready, on both sides of an `abbisect run`.
The script samples the RSS of the abbisect process (not the server's) every 50 ms and prints the peak,
the size of each side's server.log in the results (capped: head + tail, the middle elided), and the
verdicts (the flood must not change them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

from abbisect.builtin.history import Commit, build_history


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=1024, help="MiB of log each side's server prints")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        repo = tmp_path / "engine"
        build_history(repo, [Commit("Initial engine", tag="v1")])
        recipe = {
            "name": "flood", "engine": {"kind": "command", "repo": str(repo)}, "install": {"strategy": "editable"},
            "launch": {"command": ["{python}", "-m", "toyengine.server", "--host", "{host}", "--port", "{port}"],
                       "ready": {"http": "/health"}},
            "env": {"TOYENGINE_FLOOD_MB": str(args.mb)},
            "sides": {"a": "v1", "b": "v1"},
            "prompts": ["The capital of France is", "What is two plus two?"],
            "sampling": {"temperature": 0, "max_tokens": 16},
            "timeouts": {"build": 600, "ready": 3600, "request": 60, "teardown": 10},
        }
        (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
        out = tmp_path / "out"
        env = {**os.environ, "ABBISECT_CACHE_DIR": str(tmp_path / "cache")}
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "abbisect", "run", str(tmp_path / "r.yaml"), "-o", str(out),
                                 "--json"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        me = psutil.Process(proc.pid)
        peak = 0
        while proc.poll() is None:
            try:
                peak = max(peak, me.memory_info().rss)
            except psutil.Error:
                break
            time.sleep(0.05)
        stdout = proc.stdout.read()
        wall = time.monotonic() - t0
        if proc.returncode != 0:
            print(f"abbisect run failed (exit {proc.returncode})")
            return 1
        res = json.loads(stdout)["data"]
        print(f"log printed per side:   {args.mb:.0f} MiB ({2 * args.mb:.0f} MiB in all)")
        print(f"abbisect peak RSS:      {peak / 2**20:.1f} MiB")
        for side in ("a", "b"):
            log = Path(res[side]["launch"]["log_path"])
            marker = next((ln for ln in log.read_text(errors="replace").splitlines() if "elided" in ln), "no marker")
            print(f"side {side}: server.log {log.stat().st_size / 2**20:.1f} MiB, verdict "
                  f"{res[side]['verdict']['status']}; {marker.strip()}")
        print(f"wall time:              {wall:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
