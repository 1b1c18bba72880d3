"""The linter and the type checker, run as CI runs them: a lint finding or a type error fails the suite.

Both read their configuration from pyproject.toml (ruff's rule sets, mypy's files and options) and come
with the `test` extra, so the README's test command installs them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _run(tool: str, *args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", tool, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, check=False)
    assert "No module named" not in proc.stderr, (
        f"{tool} is not installed: python3 -m pip install -e '.[test]'\n{proc.stderr}")
    return proc


def test_ruff_finds_nothing() -> None:
    proc = _run("ruff", "check", "abbisect", "tests", "benchmarks")
    assert proc.returncode == 0, f"ruff check abbisect tests benchmarks:\n{proc.stdout}{proc.stderr}"


def test_mypy_finds_nothing() -> None:
    proc = _run("mypy")
    assert proc.returncode == 0, f"mypy (configured in pyproject.toml):\n{proc.stdout}{proc.stderr}"
    assert re.search(r"Success: no issues found in \d+ source files", proc.stdout), proc.stdout


@pytest.mark.e2e  # a type check of a copy of the whole package: cold, a minute or two
def test_registries_hold_modules_to_their_protocols(tmp_path: Path) -> None:
    """An adapter or a strategy module that drifts from its Protocol is a type error where it is registered
    (ADAPTERS, STRATEGIES), not an AttributeError in the middle of a trial. The checkout's own mypy cache, when
    there is one (test_mypy_finds_nothing wrote it), starts the copy's: mypy checks again the two changed
    modules and what imports them, and the errors below are found only if it does."""
    copy = tmp_path / "repo"
    if (REPO_ROOT / ".mypy_cache").is_dir():
        shutil.copytree(REPO_ROOT / ".mypy_cache", tmp_path / "mypy-cache")
    shutil.copytree(REPO_ROOT / "abbisect", copy / "abbisect", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", copy / "pyproject.toml")
    sglang = copy / "abbisect" / "launch" / "engines" / "sglang.py"
    text = sglang.read_text()
    assert ", port: int)" in text
    sglang.write_text(text.replace(", port: int)", ", port: str)", 1))  # an ill-typed parameter
    wheel = copy / "abbisect" / "environment" / "wheel.py"
    text = wheel.read_text()
    assert "\ndef steps(" in text
    wheel.write_text(text.replace("\ndef steps(", "\ndef build_steps(", 1))  # a missing function
    proc = _run("mypy", "--cache-dir", str(tmp_path / "mypy-cache"), cwd=copy)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert re.search(r"abbisect/launch/engines/__init__\.py:\d+: error: .*\"Adapter\"", out), out
    assert re.search(r"abbisect/environment/store\.py:\d+: error: .*\"Strategy\"", out), out
