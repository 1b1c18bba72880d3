"""A bisect's background (prefetch) builds run at a lower CPU priority than the trial they overlap with; a
build the trial itself waits for runs at abbisect's own priority."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import abbisect, toy_recipe, write_recipe

from abbisect.builtin.history import Commit, build_history
from abbisect.environment.store import BACKGROUND_NICE

pytestmark = pytest.mark.e2e


def test_prefetch_builds_run_niced(tmp_path: Path):
    repo = tmp_path / "engine"
    commits = [Commit("initial", tag="start")] + [Commit(f"commit {i}") for i in range(1, 12)]
    commits[5] = Commit("commit 5: dispatch quantisation to linear layers only", "break_scale")
    commits[-1] = Commit("commit 11", tag="end")
    shas = build_history(repo, commits)
    seen = tmp_path / "nice"
    seen.mkdir()
    # The build step records its own niceness, read by the kernel's account of the process (/proc/PID/stat,
    # field 19), under its commit's sha; the server then runs from the worktree (nothing to install).
    record = f"awk '{{print $19}}' /proc/$$/stat > {seen}/{{sha}}"
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(
        repo, name="nice", install={"strategy": "command", "commands": [record]},
        env={"TOYENGINE_LOAD_SECONDS": "1.5"}, prompts=["The capital of France is"]))
    proc = abbisect("-q", "bisect", str(recipe), "--good", "start", "--bad", "end", "--no-cache", "-o",
                    str(tmp_path / "out"), cwd=tmp_path, cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert data["first_new"] == shas[5]
    mine = os.nice(0)
    niceness = {p.name: int(p.read_text()) for p in seen.iterdir()}
    # The old end is built by its own trial (nothing built it before): normal priority.
    assert niceness[shas[0]] == mine
    # Built and never tested: only a background build makes those (the search went the other way); each
    # ran niced. (A tested candidate may have been promoted back: its trial waited for its build.)
    tested = {s["sha"] for s in data["steps"]}
    background = [sha for sha in niceness if sha not in tested]
    assert background, niceness
    assert all(niceness[sha] == min(mine + BACKGROUND_NICE, 19) for sha in background), niceness
