"""`abbisect run` with `ab: {parallel: true}`: A and B at once, each on its own slot (here two CPU slots: no
GPU, so same-GPU hygiene is skipped with a notice); the default stays A then B."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import abbisect, toy_recipe, write_recipe

pytestmark = pytest.mark.e2e


def _run(tmp_path: Path, repo: Path, name: str, **over) -> tuple[dict, str, str]:
    recipe = write_recipe(tmp_path / f"{name}.yaml", toy_recipe(
        repo, name=name, sides={"a": "broken", "b": "fixed"}, env={"TOYENGINE_LOAD_SECONDS": "2"},
        prompts=["The capital of France is"], **over))
    proc = abbisect("run", str(recipe), "-o", str(tmp_path / name), "--no-cache", cwd=tmp_path,
                    cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    return (json.loads((tmp_path / name / "results.json").read_text()),
            (tmp_path / name / "report.md").read_text(), proc.stderr)


def test_sides_at_once_on_two_slots(tmp_path, engine_repo):
    res, report, err = _run(tmp_path, engine_repo, "together", ab={"parallel": True})
    a, b = res["a"], res["b"]
    assert a["verdict"]["status"] == "degenerate" and b["verdict"]["status"] == "ok"
    ta, tb = a["extras"]["server_times"], b["extras"]["server_times"]
    # both servers were up at the same time: each started before the other was stopped, and both were
    # loading (the 2 s ready wait) at once
    assert ta["launched"] < tb["stopped"] and tb["launched"] < ta["stopped"], (ta, tb)
    assert max(ta["launched"], tb["launched"]) < min(ta["ready"], tb["ready"]), (ta, tb)
    assert {a["extras"]["placement"]["slot"], b["extras"]["placement"]["slot"]} == {0, 1}
    assert "same-GPU hygiene skipped" in err
    assert "A and B ran at the same time" in report
    assert "A: none (" in report and "B: none (" in report  # both sides' GPUs (none on this machine)
    assert "Environment fingerprint of each side's venv" in report


def test_default_runs_one_after_the_other(tmp_path, engine_repo):
    res, report, _ = _run(tmp_path, engine_repo, "apart")
    ta, tb = res["a"]["extras"]["server_times"], res["b"]["extras"]["server_times"]
    assert ta["stopped"] <= tb["launched"], (ta, tb)
    assert "ran at the same time" not in report
