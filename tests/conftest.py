"""Shared fixtures: a toy-engine git history with a bug, its fix and ways to fail; one cache per session."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from abbisect.builtin.history import Commit, build_history

REPO_ROOT = Path(__file__).resolve().parents[1]

FIXTURE_HISTORY = [
    Commit("Initial engine", tag="healthy0"),
    Commit("Housekeeping 1"),
    Commit("Dispatch quantisation to linear layers only", "break_scale", tag="broken"),
    Commit("Housekeeping 2"),
    Commit("Route lm_head through the quantised method (#23)", "fix_scale", tag="fixed"),
    Commit("Break the package metadata", "break_install", tag="noinstall"),
    Commit("Repair the package metadata", "fix_install"),
    Commit("Crash at start", "crash_at_start", tag="crash"),
    Commit("Stop crashing", "fix_crash"),
    Commit("Hang while loading", "hang_at_start", tag="hang"),
    Commit("Load again", "fix_hang"),
    Commit("Rename --seed to --random-seed", "rename_seed_flag", tag="flagdrift"),
]


@pytest.fixture(scope="session")
def engine_repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("engine") / "toyengine"
    build_history(repo, FIXTURE_HISTORY)
    return repo


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One abbisect cache for the session, so each fixture commit's venv is built once."""
    return tmp_path_factory.mktemp("cache")


def toy_recipe(repo: Path, **overrides) -> dict:
    recipe = {
        "name": "toy",
        "engine": {"kind": "command", "repo": str(repo)},
        "install": {"strategy": "editable"},
        "launch": {"command": ["{python}", "-m", "toyengine.server", "--host", "{host}", "--port", "{port}"],
                   "flags": ["--seed", "0"], "ready": {"http": "/health"}},
        "prompts": [{"prompt": "The capital of France is", "expect": "(?i)paris"},
                    "What is two plus two?", "Explain what a hash table is.", "List three uses of copper."],
        "sampling": {"temperature": 0, "max_tokens": 48, "seed": 0},
        "timeouts": {"build": 300, "ready": 20, "request": 20, "teardown": 5},
    }
    recipe.update(overrides)
    return recipe


def write_recipe(path: Path, recipe: dict) -> Path:
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def abbisect(*args: str, cwd: Path, cache: Path, timeout: float = 600, env: dict | None = None):
    """Run the real CLI in a subprocess, as a user would."""
    full_env = {**os.environ, "ABBISECT_CACHE_DIR": str(cache), **(env or {})}
    return subprocess.run([sys.executable, "-m", "abbisect", *args], check=False, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


@pytest.fixture
def test_mark():
    """A fresh ABBISECT_TEST_MARK; whatever still carries it when the test ends (a failed assertion
    before its own cleanup) is killed, so one failing test cannot leave a server running for hours."""
    mark = uuid.uuid4().hex
    yield mark
    for pid in marked_pids(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def marked_pids(mark: str) -> list[int]:
    """Live processes whose environment carries ABBISECT_TEST_MARK=mark: this test's own servers (and their
    children), never another run's (a `pgrep -f toyengine.server` would match every run on the machine)."""
    needle = f"ABBISECT_TEST_MARK={mark}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if needle in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def run_ab(tmp_path: Path, repo: Path, cache: Path, a: str, b: str, **overrides) -> tuple[dict, Path]:
    """`abbisect run` of the toy recipe on refs a and b (with recipe overrides); its --json data and folder."""
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo, sides={"a": a, "b": b}, **overrides))
    out = tmp_path / "out"
    proc = abbisect("run", str(recipe), "--output", str(out), "--json", cwd=tmp_path, cache=cache)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["data"], out
