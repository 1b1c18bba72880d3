"""A killed-and-resumed bisect: trials run vs trials reused, against the same bisect never interrupted.

Runs the demo recipe's regression search (`--good v0.1 --bad v0.2`, `--no-cache`) three ways in a fresh
cache: uninterrupted; killed with SIGKILL once K trials are recorded in state.json, then resumed with the
command it printed at the start; and prints launches, replayed trials and wall times of each.

    python benchmarks/resume.py [--after 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "demo.yaml"


def abbisect(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "abbisect", *args]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--after", type=int, default=3, help="kill once this many trials are recorded")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="abbisect-resume-"))
    env = {**os.environ, "ABBISECT_CACHE_DIR": str(tmp / "cache")}
    base = ["bisect", str(RECIPE), "--good", "v0.1", "--bad", "v0.2", "--no-cache", "--json"]

    t = time.monotonic()
    ref = subprocess.run(abbisect([*base, "-o", str(tmp / "ref")]), env=env, capture_output=True, text=True,
                         check=True)
    ref_wall = time.monotonic() - t
    reference = json.loads(ref.stdout)["data"]

    out = tmp / "killed"
    t = time.monotonic()
    proc = subprocess.Popen(abbisect([*base, "-o", str(out)]), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    printed = None
    for line in proc.stderr:
        printed = printed or ((m := re.search(r"if interrupted, resume with: (.+)\)", line)) and m[1])
        state = out / "state.json"
        if state.exists() and len(json.loads(state.read_text())["steps"]) >= args.after:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    killed_wall = time.monotonic() - t
    recorded = len(json.loads((out / "state.json").read_text())["steps"])

    t = time.monotonic()
    argv = shlex.split(printed)
    again = subprocess.run(abbisect([*argv[1:], "--json"]), env=env, capture_output=True, text=True, check=True)
    resumed_wall = time.monotonic() - t
    res = json.loads(again.stdout)["data"]
    replayed = sum(1 for s in res["steps"] if s["replayed"])

    print(f"printed resume command: {printed}")
    print(f"uninterrupted: {len(reference['steps'])} trials, {reference['launches']} launches, {ref_wall:.1f} s, "
          f"first_new {reference['first_new'][:10]}")
    print(f"killed (SIGKILL) after {recorded} recorded trials: {killed_wall:.1f} s")
    print(f"resumed: {len(res['steps'])} trials, {replayed} replayed from state.json, {res['launches']} launched, "
          f"{resumed_wall:.1f} s, first_new {res['first_new'][:10]}")
    print(f"same answer: {res['first_new'] == reference['first_new']}; trials run twice: "
          f"{replayed + res['launches'] - len(res['steps'])}")


if __name__ == "__main__":
    main()
