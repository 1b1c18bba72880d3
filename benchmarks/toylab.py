"""What the toy-engine benchmarks share: abbisect's CLI run and read (`abbisect`), the load average, and a toy
server started straight from a commit's tree (`ToyServer`), for the hand-script baselines that measure once a
commit (no venv, no abbisect: the toy engine is the standard library)."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import httpx


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
    return os.getloadavg()[0]


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
