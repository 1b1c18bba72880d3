"""What the toy-engine benchmarks share: a seeded history with one planted change (`history`), the options and
the loop over seeds and parts (`seed_options`, `run_seeds`), abbisect's CLI run and read (`abbisect`), the load
average, and a toy server started straight from a commit's tree (`ToyServer`), for the hand-script baselines
that measure once a commit (no venv, no abbisect: the toy engine is the standard library)."""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from abbisect.builtin.history import planted_history
from abbisect.infra import procfs


class ToyServer:
    """One launch of a commit's toy server from its tree (no venv: the toy engine is the standard library)."""

    def __init__(self, tree: Path, env: dict[str, str]) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen([sys.executable, "-m", "toyengine.server", "--host", "127.0.0.1", "--port",
                                      str(self.port), "--seed", "0"], cwd=tree, start_new_session=True,
                                     env={**os.environ, **env, "PYTHONPATH": str(tree)},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"toy server in {tree} did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def tree_of(repo: Path, sha: str, work: Path) -> Path:
    dest = work / "trees" / sha
    if not dest.is_dir():
        dest.mkdir(parents=True)
        blob = subprocess.run(["git", "-C", str(repo), "archive", sha], check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
            tar.extractall(dest, filter="data")
    return dest


def load1() -> float:
    """The host's 1-minute load average, as abbisect records it beside every pass."""
    return procfs.load_average() or 0.0


def abbisect(work: Path, cache: Path, *args: str) -> tuple[int, dict, float]:
    """`python -m abbisect -q ARGS --json` in `work` with its own cache: exit code, the envelope's data (or
    {"error": stderr's last line}) and the wall time."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "abbisect", "-q", *args, "--json"], check=False, cwd=work,
                          capture_output=True, text=True, env={**os.environ, "ABBISECT_CACHE_DIR": str(cache)})
    wall = time.monotonic() - t0
    try:
        data = json.loads(proc.stdout)["data"]
    except (ValueError, KeyError):
        data = {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return proc.returncode, data, wall


def med(xs: list[float]) -> str:
    """The median to one decimal, or a dash for no values."""
    return f"{statistics.median(xs):.1f}" if xs else "—"


def history(work: Path, seed: int, n: int, change: str) -> tuple[Path, list[str], int]:
    """Seed's history of n commits with `change` planted at a position drawn from the seed (1..n-1: the first
    commit is the good end): the repository, its shas, the position."""
    planted = random.Random(seed).randint(1, n - 1)
    repo = work / f"engine{seed}"
    return repo, planted_history(repo, n, {planted: change}), planted


def seed_options(ap: argparse.ArgumentParser, parts: Sequence[str], commits: int) -> None:
    """The options every seeded benchmark takes: the histories, the seeds, which parts, where to work."""
    ap.add_argument("--commits", type=int, default=commits, help="commits a history (the ends included)")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--parts", default=",".join(parts), help=f"which of {','.join(parts)} to run")
    ap.add_argument("--keep", type=Path, help="work here (histories, recipes, results, the cache) and keep it")
    ap.add_argument("--json", type=Path, help="also write every row to this file")


def run_seeds(ap: argparse.ArgumentParser, args: argparse.Namespace, parts: Sequence[str],
              setup: Callable[[int, Path, Path], Callable[[str], dict[str, Any]]]) -> tuple[dict[str, list[dict]], float]:
    """Every seed's parts, one at a time (they measure): `setup(seed, work, cache)` makes the seed's history and
    recipe and returns what runs one part of it. Each row goes to stderr as it comes (a run cut short keeps
    them) and all of them to `--json`; returns the rows by part and the wall time."""
    chosen = [p for p in args.parts.split(",") if p]
    if unknown := set(chosen) - set(parts):
        ap.error(f"unknown part(s) {', '.join(sorted(unknown))}")
    rows: dict[str, list[dict[str, Any]]] = {p: [] for p in chosen}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            run = setup(seed, work, work / "cache")
            for part in chosen:
                rows[part].append(row := run(part))
                print(f"<!-- {part} seed {seed}: {json.dumps(row, default=str)} -->", file=sys.stderr, flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1, default=str))
    return rows, time.monotonic() - t0
