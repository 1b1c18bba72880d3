"""One real run of each command that launches engines, in the fast tier: the CLI as a subprocess, real venvs,
real toy-engine servers, real git histories (the built-in demo, and a planted one for narrow). Everything
else about these commands is in the e2e tier (`pytest --tier e2e`); these say at once that none is broken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO_ROOT, abbisect, toy_recipe, write_recipe

pytestmark = pytest.mark.smoke
DEMO = str(REPO_ROOT / "recipes" / "demo.yaml")


def _data(proc) -> dict:
    return json.loads(proc.stdout)["data"]


def test_run(tmp_path: Path, cache_dir: Path) -> None:
    proc = abbisect("run", DEMO, "-o", str(tmp_path / "ab"), "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    data = _data(proc)
    assert (data["a"]["verdict"]["status"], data["a"]["verdict"]["outcome"]) == ("degenerate", "bad")
    assert data["b"]["verdict"]["outcome"] == "good"
    assert "degenerate" in (tmp_path / "ab" / "report.md").read_text()


def test_check(tmp_path: Path, cache_dir: Path) -> None:
    proc = abbisect("check", DEMO, "v0.2", "--no-cache", "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 1, proc.stderr  # bad: git bisect run's exit code
    assert _data(proc)["launch"]["status"] == "ready"


def test_bisect(tmp_path: Path, cache_dir: Path) -> None:
    proc = abbisect("bisect", DEMO, "--good", "v0.1", "--bad", "v0.2", "-o", str(tmp_path / "bis"), "--json",
                    cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    data = _data(proc)
    assert data["mode"] == "regression" and data["commit"]["subject"].startswith("Refactor quantisation dispatch")
    assert (tmp_path / "bis" / "bisect.md").is_file()


def test_narrow(tmp_path: Path, cache_dir: Path, planted) -> None:
    """A bug that needs two feature flags at once (tests/test_narrow.py's history): the smallest failing
    difference is both."""
    repo, shas = planted(8, {1: "feature_flags", 5: "feature_bug"})
    recipe = toy_recipe(repo, prompts=["What is two plus two?"], env={"TOYENGINE_LOAD_SECONDS": "0.1"},
                        narrow={"passing": {"flags": ["--seed", "0"]}})
    recipe["launch"]["flags"] = ["--seed", "0", "--enable-prefix-caching", "--enable-chunked-prefill"]
    path = write_recipe(tmp_path / "narrow.yaml", recipe)
    proc = abbisect("narrow", str(path), "--ref", shas[-1], "--no-switches", "-o", str(tmp_path / "n"), "--json",
                    cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    data = _data(proc)
    assert sorted(data["deltas"][i]["key"] for i in data["minimal"]) == ["--enable-chunked-prefill",
                                                                        "--enable-prefix-caching"]
    assert (tmp_path / "n" / "narrow.md").is_file()
