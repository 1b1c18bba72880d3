"""Multisection through the CLI on real trials of the toy engine: k local slots (processes) and a real
local Ray instance find the same commit as the one-slot bisect, in fewer rounds."""

from __future__ import annotations

import json
import math

import pytest
from conftest import abbisect, toy_recipe, write_recipe

from abbisect.builtin.history import Commit, build_history

pytestmark = pytest.mark.e2e

CULPRIT = 13


@pytest.fixture(scope="module")
def long_history(tmp_path_factory):
    """20 commits; the lm_head scale is dropped at commit 13."""
    commits = [Commit("Initial engine", tag="v0")]
    for n in range(1, 20):
        commits.append(Commit(f"Change {n}", "break_scale" if n == CULPRIT else None, tag="head" if n == 19 else None))
    repo = tmp_path_factory.mktemp("long") / "engine"
    shas = build_history(repo, commits)
    return repo, shas


def _bisect(tmp_path, repo, cache, name, *extra, env=None):
    recipe = write_recipe(tmp_path / f"{name}.yaml", toy_recipe(repo, name=name))
    out = tmp_path / name
    proc = abbisect("bisect", str(recipe), "--good", "v0", "--bad", "head", "-o", str(out), "--no-cache", *extra,
                    cwd=tmp_path, cache=cache, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "bisect.json").read_text()), (out / "bisect.md").read_text(), proc.stderr


def test_local_slots_find_the_same_commit_in_fewer_rounds(tmp_path, long_history, cache_dir):
    repo, shas = long_history
    one, _, _ = _bisect(tmp_path, repo, cache_dir, "one")
    four, md, err = _bisect(tmp_path, repo, cache_dir, "four", "--slots", "4")
    assert one["first_new"] == four["first_new"] == shas[CULPRIT]
    assert four["slots"] == 4 and four["executor"] == "local"
    n = 19  # candidates after v0
    assert len(four["rounds"]) <= math.ceil(math.log(n, 5))
    candidates = [s for s in one["steps"] if s["role"] == "candidate"]
    assert len(four["rounds"]) < len(candidates)
    # the ends ran at once, on two slots; every candidate of a round had its own slot
    ends = [s for s in four["steps"] if s["role"].endswith("end")]
    assert sorted(e["slot"] for e in ends) == [0, 1]
    for r in four["rounds"]:
        slots = [s["slot"] for s in four["steps"] if s["role"] == "candidate" and s["round"] == r["round"]]
        assert len(slots) == len(set(slots)) <= 4
    assert "4 slots on the local executor" in md and "round 1:" in err
    # the two slots the ends leave free test two commits splitting the range meanwhile, read once the ends
    # showed the direction: one round fewer after the ends
    ahead = [s for s in four["steps"] if s["round"] == 0 and s["role"].startswith("candidate")]
    assert len(ahead) == 2 and sorted(s["slot"] for s in ahead) == [2, 3]
    assert "with 2 commit(s) between them" in md
    assert all(s["remaining"] < n for s in ahead if s["role"] == "candidate")
    tested = [s["sha"] for s in four["steps"]]
    assert len(tested) == len(set(tested)), "a commit was tested twice"
    # the serving matrix's timeline draws the slots of this run and the back-to-back trials of the other
    plots = pytest.importorskip("abbisect.matrix.plots")
    pytest.importorskip("matplotlib", reason="the pictures need matplotlib (pip install 'abbisect[plots]')")
    for data in (four, one):
        assert plots.bisect_timeline(data).startswith(b"\x89PNG")


def test_two_slots_on_ray(tmp_path, long_history, cache_dir):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'abbisect[ray]')")
    repo, shas = long_history
    res, _, _ = _bisect(tmp_path, repo, cache_dir, "ray", "--slots", "2", "--executor", "ray")
    assert res["first_new"] == shas[CULPRIT] and res["executor"] == "ray"
    assert len(res["rounds"]) <= math.ceil(math.log(19, 3))


def test_slots_need_a_parallel_executor(tmp_path, long_history, cache_dir):
    repo, _ = long_history
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo, name="r"))
    proc = abbisect("bisect", str(recipe), "--good", "v0", "--bad", "head", "--slots", "2", "--executor",
                    "sequential", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 2 and "--executor local or ray" in proc.stderr
    bad = abbisect("bisect", str(recipe), "--good", "v0", "--bad", "head", "--gpus", "0,0", cwd=tmp_path,
                   cache=cache_dir)
    assert bad.returncode == 2 and "one slot only" in bad.stderr


def test_commits_tested_with_ends_that_show_no_change_are_not_evidence(tmp_path, long_history, cache_dir):
    """Both ends good: no search follows, so what the free slots tested beside them is marked unneeded."""
    repo, shas = long_history
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo, name="same"))
    out = tmp_path / "same"
    proc = abbisect("bisect", str(recipe), "--good", "v0", "--bad", shas[CULPRIT - 1], "-o", str(out), "--no-cache",
                    "--slots", "4", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 3, proc.stderr[-3000:]  # no change between the ends
    res = json.loads((out / "bisect.json").read_text())
    ahead = [s for s in res["steps"] if s["round"] == 0 and not s["role"].endswith("end")]
    assert len(ahead) == 2 and all(s["role"] == "candidate" and s["needed"] is False for s in ahead)
