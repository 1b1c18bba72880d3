"""A toy-engine server started straight from a commit's tree, for benchmarks that compare abbisect with what a
hand script does (one launch, one measurement a commit): no venv, no abbisect; the toy engine is the standard
library."""

from __future__ import annotations

import io
import os
import signal
import socket
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
