"""Judging as the anchors allow: a verdict script (git bisect run's exit codes, the trial's JSON on stdin),
an interactive prompt answered on stdin, and dates as bisect ends — all through the CLI on real trials."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import toy_recipe, write_recipe

from abbisect.builtin.history import Commit, _git, build_history, commit, init_repo
from abbisect.trial.judges import outcome_of_exit

# Exits 1 (bad) when any output says "famous": a change the built-in rules call harmless.
JUDGE = '''import json, os, sys
trial = json.load(sys.stdin)
log = os.environ["ABBISECT_TRIAL_LOG"]
if trial["spec"]["sha"] != os.environ["ABBISECT_TRIAL_SHA"]:
    sys.exit(200)
seen = "log=read" if log and "startup complete" in open(log).read() else "log=none"
texts = " ".join(o["text"] for o in trial["outputs"])
print(("said famous " if "famous" in texts else "no famous ") + seen)
sys.exit(1 if "famous" in texts else 0)
'''


def abbisect(*args: str, cwd: Path, cache: Path, input: str | None = None) -> subprocess.CompletedProcess:
    """The real CLI, with `input` piped to its stdin (what a person would type)."""
    return subprocess.run([sys.executable, "-m", "abbisect", *args], check=False, cwd=cwd, capture_output=True,
                          text=True, timeout=600, input=input if input is not None else "",
                          env={**os.environ, "ABBISECT_CACHE_DIR": str(cache)})


@pytest.fixture(scope="module")
def reword(tmp_path_factory) -> tuple[Path, list[str]]:
    repo = tmp_path_factory.mktemp("judges") / "engine"
    return repo, build_history(repo, [Commit("v1", tag="v1"), Commit("docs"), Commit("Reword", "reword_corpus"),
                                      Commit("tidy"), Commit("more", tag="v2")])


@pytest.mark.parametrize("code,outcome", [(0, "good"), (1, "bad"), (124, "bad"), (125, "skip"), (126, "bad"),
                                          (127, "bad"), (128, None), (255, None), (-9, None)])
def test_exit_codes_mean_what_git_bisect_run_says(code, outcome):
    assert outcome_of_exit(code) == outcome


@pytest.mark.e2e
def test_check_with_a_script(tmp_path, reword, cache_dir):
    repo, _ = reword
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo))
    (tmp_path / "judge.py").write_text(JUDGE)
    script = f"{sys.executable} judge.py"
    good = abbisect("check", str(recipe), "v1", "--script", script, "--json", cwd=tmp_path, cache=cache_dir)
    assert good.returncode == 0, good.stderr
    bad = abbisect("check", str(recipe), "v2", "--script", script, "--json", cwd=tmp_path, cache=cache_dir)
    assert bad.returncode == 1, bad.stderr
    res = json.loads(bad.stdout)["data"]
    # The built-in status stays as evidence; the script's verdict is the outcome.
    assert res["verdict"]["status"] == "ok" and res["verdict"]["outcome"] == "bad"
    assert "said famous log=read" in res["verdict"]["reasons"][0]
    assert res["extras"]["judge"]["builtin"]["outcome"] == "good"
    # Served from the trial cache, the script still judges (the cache keeps the built-in verdict).
    again = abbisect("check", str(recipe), "v2", "--script", script, cwd=tmp_path, cache=cache_dir)
    assert again.returncode == 1 and "(cached)" in again.stderr


@pytest.mark.e2e
@pytest.mark.parametrize("script,why", [
    ("no-such-judge-command", "not found"),
    (f"{sys.executable} missing_judge.py", "not found"),
    ("sh -c 'exit 200'", "failed itself (exit 200)"),
    ("sh -c 'kill -9 $$'", "failed itself"),
    ("sh -c 'exit 125'", "exit 125"),
])
def test_a_script_that_cannot_judge_is_a_skip_never_bad(tmp_path, reword, cache_dir, script, why):
    repo, _ = reword
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo))
    proc = abbisect("check", str(recipe), "v2", "--script", script, "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 125, proc.stderr
    assert why in json.loads(proc.stdout)["data"]["verdict"]["reasons"][0]


@pytest.mark.e2e
def test_bisect_with_the_recipe_script_finds_a_change_the_built_in_rules_allow(tmp_path, reword, cache_dir):
    repo, shas = reword
    (tmp_path / "judges").mkdir()
    (tmp_path / "judges" / "judge.py").write_text(JUDGE)
    recipe = write_recipe(tmp_path / "judges" / "r.yaml",
                          toy_recipe(repo, verdict={"script": f"{sys.executable} judge.py"}))
    out = tmp_path / "out"
    # Run from another folder: verdict.script runs in the recipe's folder.
    proc = abbisect("bisect", str(recipe), "--good", "v1", "--bad", "v2", "-o", str(out), "--json", cwd=tmp_path,
                    cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert res["mode"] == "regression" and res["first_new"] == shas[2]
    assert all(s["status"] == "ok" for s in res["steps"])
    assert any("said famous" in s["evidence"] for s in res["steps"])


@pytest.mark.e2e
def test_run_with_a_script_judges_each_side(tmp_path, reword, cache_dir):
    repo, _ = reword
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo))
    (tmp_path / "judge.py").write_text(JUDGE)
    proc = abbisect("run", str(recipe), "--a", "v1", "--b", "v2", "--script", f"{sys.executable} judge.py", "-o",
                    str(tmp_path / "out"), "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert (res["a"]["verdict"]["outcome"], res["b"]["verdict"]["outcome"]) == ("good", "bad")
    assert "ok → bad" in proc.stderr


@pytest.mark.e2e
def test_run_interactive(tmp_path, reword, cache_dir):
    repo, _ = reword
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo))
    proc = abbisect("run", str(recipe), "--a", "v1", "--b", "v2", "--interactive", "-o", str(tmp_path / "out"),
                    "--json", cwd=tmp_path, cache=cache_dir, input="skip\nbad\n")
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert (res["a"]["verdict"]["outcome"], res["b"]["verdict"]["outcome"]) == ("skip", "bad")
    assert proc.stderr.count("good, bad, skip or retry?") == 2


@pytest.mark.e2e
def test_interactive_bisect_answered_on_stdin(tmp_path, reword, cache_dir):
    """Four trials asked in git's order (ends, then the midpoint, then the next); one retry re-runs a trial."""
    repo, shas = reword
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo))
    # old end good, new end bad; midpoint shas[2]: retry, then bad; next shas[1]: good.
    answers = "good\nbad\nretry\nbad\ngood\n"
    proc = abbisect("bisect", str(recipe), "--good", "v1", "--bad", "v2", "--interactive", "--no-cache", "-o",
                    str(tmp_path / "out"), "--json", cwd=tmp_path, cache=cache_dir, input=answers)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert [s["sha"] for s in res["steps"]] == [shas[0], shas[4], shas[2], shas[1]]
    assert res["first_new"] == shas[2]
    assert res["launches"] == 5  # four trials and the retry
    assert proc.stderr.count("good, bad, skip or retry?") == 5
    assert "this: " in proc.stderr and "good end:" in proc.stderr  # a candidate beside the ends
    closed = abbisect("bisect", str(recipe), "--good", "v1", "--bad", "v2", "--interactive", "-o",
                      str(tmp_path / "out2"), cwd=tmp_path, cache=cache_dir, input="")
    assert closed.returncode == 2 and "no answer on stdin" in closed.stderr


@pytest.mark.e2e
def test_check_interactive(tmp_path, reword, cache_dir):
    repo, _ = reword
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo))
    proc = abbisect("check", str(recipe), "v1", "--interactive", cwd=tmp_path, cache=cache_dir, input="skip\n")
    assert proc.returncode == 125, proc.stderr
    assert "capital of France" in proc.stderr


@pytest.mark.e2e
def test_script_and_interactive_together_is_a_usage_error(tmp_path, reword, cache_dir):
    repo, _ = reword
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo))
    proc = abbisect("bisect", str(recipe), "--good", "v1", "--bad", "v2", "--interactive", "--script", "true",
                    cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 2 and "choose one judge" in proc.stderr


@pytest.fixture(scope="module")
def dated(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """Commits at fixed hours after 2026-01-01 00:00 UTC; a side branch commit on 2026-01-02 is merged later."""
    repo = tmp_path_factory.mktemp("dated") / "engine"
    init_repo(repo)
    s = {"v1": commit(repo, Commit("v1", tag="v1"), 0),            # 2026-01-01 00:00
         "c30": commit(repo, Commit("docs"), 30),                  # 2026-01-02 06:00
         "c40": commit(repo, Commit("tidy"), 40)}                  # 2026-01-02 16:00
    _git(repo, "checkout", "-q", "-b", "side")
    s["f45"] = commit(repo, Commit("side work"), 45)               # 2026-01-02 21:00, not first-parent
    _git(repo, "checkout", "-q", "main")
    date = f"@{1_767_225_600 + 3600 * 48} +0000"                   # 2026-01-03 00:00
    _git(repo, "merge", "-q", "--no-ff", "side", "-m", "Merge side", env={"GIT_AUTHOR_DATE": date,
                                                                          "GIT_COMMITTER_DATE": date})
    s["m48"] = _git(repo, "rev-parse", "HEAD")
    s["b50"] = commit(repo, Commit("Dispatch quantisation to linear layers only", "break_scale"), 50)
    s["c60"] = commit(repo, Commit("cleanup"), 60)                 # 2026-01-03 12:00
    s["v2"] = commit(repo, Commit("release", tag="v2"), 80)        # 2026-01-04 08:00
    return repo, s


@pytest.mark.e2e
def test_dates_as_ends(tmp_path, dated, cache_dir):
    repo, s = dated
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo))
    proc = abbisect("bisect", str(recipe), "--good", "2026-01-02", "--bad", "v2", "--first-parent", "-o", str(out),
                    "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    # The last first-parent commit of that day: c40, not the side branch's later f45.
    assert res["old"] == s["c40"] and res["good"] == f"2026-01-02 → {s['c40'][:10]}"
    assert res["first_new"] == s["b50"]
    assert f"2026-01-02 → {s['c40'][:10]}" in (out / "bisect.md").read_text()
    # A date as the bad end, after the good ref: read on the mainline (HEAD's first-parent line).
    proc = abbisect("bisect", str(recipe), "--good", "v1", "--bad", "2026-01-03", "--first-parent", "-o",
                    str(tmp_path / "out2"), "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert res["new"] == s["c60"] and res["first_new"] == s["b50"]
    early = abbisect("bisect", str(recipe), "--good", "2025-12-01", "--bad", "v2", cwd=tmp_path, cache=cache_dir)
    assert early.returncode == 2 and "no commit on the first-parent line" in early.stderr
    bad_day = abbisect("bisect", str(recipe), "--good", "2026-13-45", "--bad", "v2", cwd=tmp_path, cache=cache_dir)
    assert bad_day.returncode == 2 and "not a date" in bad_day.stderr
