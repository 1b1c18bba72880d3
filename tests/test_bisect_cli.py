"""`abbisect bisect` and `abbisect check` through the CLI on a toy-engine history with merges."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import abbisect, toy_recipe, write_recipe

from abbisect.builtin.history import Commit, _git, build_history, commit

pytestmark = pytest.mark.e2e


def merge(repo: Path, branch: str, message: str, n: int) -> str:
    date = f"@{1_767_225_600 + 3600 * n} +0000"
    _git(repo, "merge", "-q", "--no-ff", branch, "-m", message,
         env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def merge_repo(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """main: v1 ─ c1 ─ c2 ─ M1(feature: f1, f2=bug) ─ c5 ─ c6(unbuildable) ─ c7 ─ M2(fix: x1=fix) ─ tip."""
    repo = tmp_path_factory.mktemp("merges") / "engine"
    shas: dict[str, str] = {}
    shas["v1"], shas["c1"] = build_history(repo, [Commit("v1 release", tag="v1"),
                                                  Commit("c1 housekeeping", tag="c1-tag")])
    n = 10
    _git(repo, "checkout", "-q", "-b", "feature")
    shas["f1"] = commit(repo, Commit("f1 feature work"), n := n + 1)
    shas["f2"] = commit(repo, Commit("f2 quant dispatch for linear layers only", "break_scale"), n := n + 1)
    _git(repo, "checkout", "-q", "main")
    shas["c2"] = commit(repo, Commit("c2 housekeeping"), n := n + 1)
    shas["M1"] = merge(repo, "feature", "Merge pull request #7 from dev/feature", n := n + 1)
    shas["c5"] = commit(repo, Commit("c5 housekeeping", tag="broken-release"), n := n + 1)
    shas["c6"] = commit(repo, Commit("c6 break packaging", "break_install"), n := n + 1)
    shas["c7"] = commit(repo, Commit("c7 repair packaging", "fix_install"), n := n + 1)
    _git(repo, "checkout", "-q", "-b", "fix")
    shas["x1"] = commit(repo, Commit("x1 route lm_head through the quantised method", "fix_scale"), n := n + 1)
    _git(repo, "checkout", "-q", "main")
    shas["c8"] = commit(repo, Commit("c8 housekeeping"), n := n + 1)
    shas["M2"] = merge(repo, "fix", "Merge pull request #9 from dev/fix", n := n + 1)
    shas["tip"] = commit(repo, Commit("tip housekeeping", tag="tip"), n := n + 1)
    return repo, shas


def bisect(tmp_path, repo, cache, *args, recipe_overrides=None):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo, **(recipe_overrides or {})))
    out = tmp_path / "out"
    proc = abbisect("bisect", str(recipe), *args, "-o", str(out), "--json", cwd=tmp_path, cache=cache)
    return proc, out


def test_regression_first_parent_names_the_merge(tmp_path, merge_repo, cache_dir):
    repo, shas = merge_repo
    proc, out = bisect(tmp_path, repo, cache_dir, "--good", "v1", "--bad", "broken-release", "--first-parent")
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert res["mode"] == "regression" and res["first_new"] == shas["M1"]
    md = (out / "bisect.md").read_text()
    assert "**regression**" in md and "#7" in md and shas["M1"] in md and "Decisive A/B" in md
    n = 3  # first-parent candidates: c1, c2, M1 (plus the tip c5)
    assert res["launches"] <= math.ceil(math.log2(n + 1)) + 2


def test_regression_full_dag_names_the_side_branch_commit(tmp_path, merge_repo, cache_dir):
    repo, shas = merge_repo
    proc, _ = bisect(tmp_path, repo, cache_dir, "--good", "v1", "--bad", "broken-release")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["data"]["first_new"] == shas["f2"]


def test_fix_search_when_good_is_actually_bad(tmp_path, merge_repo, cache_dir):
    repo, shas = merge_repo
    proc, out = bisect(tmp_path, repo, cache_dir, "--good", "broken-release", "--bad", "tip", "--first-parent")
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert "is actually bad" in proc.stderr and "fixed" in proc.stderr
    assert res["mode"] == "fix" and res["first_new"] == shas["M2"]
    md = (out / "bisect.md").read_text()
    assert "**fix**" in md and "#9" in md and "--term-old=broken --term-new=fixed" in md


def test_same_verdict_at_both_ends_stops(tmp_path, merge_repo, cache_dir):
    repo, _ = merge_repo
    proc, out = bisect(tmp_path, repo, cache_dir, "--good", "v1", "--bad", "c1-tag")
    assert proc.returncode == 3, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert res["mode"] == "no-change" and "nothing to bisect" in res["message"]
    assert "nothing to bisect" in (out / "bisect.md").read_text()


def test_bad_ref_and_missing_ends(tmp_path, merge_repo, cache_dir):
    repo, _ = merge_repo
    proc, _ = bisect(tmp_path, repo, cache_dir, "--good", "v1", "--bad", "no-such-ref")
    assert proc.returncode == 2 and "no-such-ref" in proc.stderr and "Traceback" not in proc.stderr
    proc, _ = bisect(tmp_path, repo, cache_dir, "--good", "v1")
    assert proc.returncode == 2 and "--bad" in proc.stderr


def test_second_bisect_is_served_from_cache(tmp_path, merge_repo, cache_dir):
    repo, shas = merge_repo
    (tmp_path / "1").mkdir()
    (tmp_path / "2").mkdir()
    bisect(tmp_path / "1", repo, cache_dir, "--good", "v1", "--bad", "broken-release", "--first-parent")
    proc, _ = bisect(tmp_path / "2", repo, cache_dir, "--good", "v1", "--bad", "broken-release", "--first-parent")
    res = json.loads(proc.stdout)["data"]
    assert res["first_new"] == shas["M1"] and res["launches"] == 0
    assert all(s["cached"] for s in res["steps"])


def test_git_bisect_run_with_check(tmp_path, merge_repo, cache_dir):
    """`git bisect run abbisect check` gives the same answer as `abbisect bisect`."""
    src, shas = merge_repo
    repo = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(src), str(repo)], check=True)
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo))
    env = {**os.environ, "ABBISECT_CACHE_DIR": str(cache_dir)}
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "bisect", "start", "--first-parent", shas["c5"], shas["v1"]], check=True, env=env,
                   capture_output=True)
    run = subprocess.run([*git, "bisect", "run", sys.executable, "-m", "abbisect", "check", str(recipe)], check=False,
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    bad = subprocess.run([*git, "rev-parse", "refs/bisect/bad"], check=False, capture_output=True, text=True).stdout.strip()
    assert bad == shas["M1"]


def test_check_exit_codes(tmp_path, merge_repo, cache_dir):
    repo, shas = merge_repo
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo))
    assert abbisect("check", str(recipe), "v1", cwd=tmp_path, cache=cache_dir).returncode == 0
    assert abbisect("check", str(recipe), shas["f2"], cwd=tmp_path, cache=cache_dir).returncode == 1
    assert abbisect("check", str(recipe), shas["c6"], cwd=tmp_path, cache=cache_dir).returncode == 125
    assert abbisect("check", str(recipe), shas["f2"], "--invert", cwd=tmp_path, cache=cache_dir).returncode == 0
    assert abbisect("check", str(recipe), "nope", cwd=tmp_path, cache=cache_dir).returncode == 128


def test_unbuildable_commit_is_skipped_inside_bisect(tmp_path, cache_dir):
    """The search's first pick cannot be built: it is skipped (never bad) and the answer is still found."""
    repo = tmp_path / "engine"
    shas = build_history(repo, [Commit("v1", tag="v1"), Commit("docs"),
                                Commit("Break the package metadata", "break_install"),
                                Commit("Repair the package metadata", "fix_install"),
                                Commit("Dispatch quantisation to linear layers only", "break_scale", tag="bad")])
    proc, out = bisect(tmp_path, repo, cache_dir, "--good", "v1", "--bad", "bad")
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    steps = {s["sha"]: s for s in res["steps"]}
    assert res["steps"][2]["sha"] == shas[2]  # git's midpoint of four: the unbuildable commit
    assert steps[shas[2]]["status"] == "build_failed" and steps[shas[2]]["outcome"] == "skip"
    assert res["mode"] == "regression" and res["first_new"] == shas[4]
    assert "Skipped (untestable) commits" in (out / "bisect.md").read_text()


def test_any_change_in_output_is_the_signal(tmp_path, cache_dir):
    """bad_if: [differs_from_good] finds a commit that changes answers without breaking anything."""
    repo = tmp_path / "engine"
    shas = build_history(repo, [Commit("v1", tag="v1"), Commit("docs"), Commit("Reword the corpus", "reword_corpus"),
                                Commit("tidy"), Commit("more", tag="v2")])
    proc, _ = bisect(tmp_path, repo, cache_dir, "--good", "v1", "--bad", "v2",
                       recipe_overrides={"verdict": {"bad_if": ["differs_from_good"]}})
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert res["mode"] == "regression" and res["first_new"] == shas[2]
    ends = {s["role"]: s for s in res["steps"][:2]}
    assert ends["new end"]["outcome"] == "bad" and "differ" in ends["new end"]["evidence"]
    assert all(s["status"] == "ok" for s in res["steps"])  # nothing is broken: only the answers changed


def test_retries_confirm_each_verdict(tmp_path, merge_repo, cache_dir):
    repo, shas = merge_repo
    proc, _ = bisect(tmp_path, repo, cache_dir, "--good", "v1", "--bad", "broken-release", "--first-parent",
                     "--retries", "1", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert res["first_new"] == shas["M1"]
    assert res["launches"] == 2 * len(res["steps"])  # every trial ran twice and agreed
