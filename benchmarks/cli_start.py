"""How long an abbisect command takes to start: the wall time of commands that end before any real work (help,
a usage error, a dry run), the median of several runs each, in a fresh interpreter every time — what every
step of `git bisect run abbisect check` and every CLI test pays.

    python benchmarks/cli_start.py [--runs 15]

Prints a markdown table: command, median and min wall seconds, and the exit code. Compare rows within one
run (the machine's load moves them all).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = [
    ["--help"],
    ["check", "missing.yaml"],
    ["run", "missing.yaml"],
    ["bisect", str(ROOT / "recipes" / "demo.yaml")],
    ["run", str(ROOT / "recipes" / "demo.yaml"), "--dry-run"],
]


def once(argv: list[str], cwd: str, env: dict[str, str]) -> tuple[float, int]:
    t = time.perf_counter()
    rc = subprocess.run([sys.executable, "-m", "abbisect", *argv], cwd=cwd, env=env, capture_output=True,
                        check=False).returncode
    return time.perf_counter() - t, rc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "ABBISECT_CACHE_DIR": str(Path(tmp) / "cache")}
        baseline = [once_python(tmp, env) for _ in range(args.runs)]
        print(f"python -c pass (the interpreter alone): median {statistics.median(baseline):.3f} s\n")
        print("| command | median | min | exit |")
        print("|---|---:|---:|---:|")
        for argv in COMMANDS:
            times, rc = [], 0
            for _ in range(args.runs):
                t, rc = once(argv, tmp, env)
                times.append(t)
            shown = " ".join("RECIPE" if a.endswith(".yaml") and "/" in a else a for a in argv)
            print(f"| `abbisect {shown}` | {statistics.median(times):.3f} s | {min(times):.3f} s | {rc} |")


def once_python(cwd: str, env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], cwd=cwd, env=env, check=False)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
