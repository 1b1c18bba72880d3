"""Bisecting histories shaped like SGLang's and vLLM's: release tags on release branches, PR merges,
cherry-picked backports, unbuildable stretches -- and `git bisect run abbisect check` agreeing with
`abbisect bisect` on the commands bisect.md prints, in a non-bare and a bare clone."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import abbisect, toy_recipe, write_recipe

from abbisect.bisect import gitlog
from abbisect.builtin.history import Commit, _git, build_history, cherry_pick, commit, merge


def upstream_history(repo: Path, crash: bool) -> dict[str, str]:
    """main:  m0 ─ git ─ bug(#101) ─ m3 ─ m4 ─ M120(fix #120: p1) ─ nobuild ─ rebuild ─ m7 ─ tip
    release/v0.5.18 (cut at m3):  r1 [v0.5.18] ─ bp1 (cherry-pick -x p1) ─ r3 [v0.5.19]
    release/v0.6 (cut at m7):     s1 [v0.6.0]
    side/nobuild (cut at nobuild, which does not install):  q1 [side-1] (repairs install)
    With `crash`, main goes on:  tip ─ M130(crash at start #130: p2) ─ t2, and release/v0.6 gets
    bp2 (cherry-pick -x p2) [v0.6.1].  (The commits before are the same in both.)
    """
    s: dict[str, str] = {}
    s["m0"], s["git"], s["bug"], s["m3"] = build_history(repo, [
        Commit("Initial engine"),
        Commit("Print the engine's git revision at start (#90)", "git_at_start"),
        Commit("Dispatch quantisation to linear layers only (#101)", "break_scale"),
        Commit("Tidy the scheduler (#104)")])
    n = 10
    _git(repo, "checkout", "-q", "-b", "release/v0.5.18")
    s["r1"] = commit(repo, Commit("Bump version to 0.5.18", tag="v0.5.18"), n := n + 1)
    _git(repo, "checkout", "-q", "main")
    s["m4"] = commit(repo, Commit("Speed up the tokenizer (#110)", tag="pre-fix"), n := n + 1)
    _git(repo, "checkout", "-q", "-b", "dev/fix-lm-head")
    s["p1"] = commit(repo, Commit("Route lm_head through the quantised method", "fix_scale"), n := n + 1)
    _git(repo, "checkout", "-q", "main")
    s["M120"] = merge(repo, "dev/fix-lm-head", "Merge pull request #120 from dev/fix-lm-head", n := n + 1)
    s["nobuild"] = commit(repo, Commit("Move to a new build backend (#121)", "break_install"), n := n + 1)
    _git(repo, "checkout", "-q", "-b", "side/nobuild")
    s["q1"] = commit(repo, Commit("Repair the metadata on the side branch", "fix_install", tag="side-1"), n := n + 1)
    _git(repo, "checkout", "-q", "main")
    s["rebuild"] = commit(repo, Commit("Repair the package metadata (#122)", "fix_install"), n := n + 1)
    s["m7"] = commit(repo, Commit("Document the flags (#125)"), n := n + 1)
    _git(repo, "checkout", "-q", "release/v0.5.18")
    s["bp1"] = cherry_pick(repo, s["p1"], n := n + 1)
    s["r3"] = commit(repo, Commit("Bump version to 0.5.19", tag="v0.5.19"), n := n + 1)
    _git(repo, "checkout", "-q", "-b", "release/v0.6", s["m7"])
    s["s1"] = commit(repo, Commit("Bump version to 0.6.0", tag="v0.6.0"), n := n + 1)
    _git(repo, "checkout", "-q", "main")
    s["tip"] = commit(repo, Commit("Update the changelog (#131)"), n := n + 1)
    if not crash:
        return s
    _git(repo, "checkout", "-q", "-b", "dev/crash")
    s["p2"] = commit(repo, Commit("Initialise the KV cache eagerly", "crash_at_start"), n := n + 1)
    _git(repo, "checkout", "-q", "main")
    s["M130"] = merge(repo, "dev/crash", "Merge pull request #130 from dev/crash", n := n + 1)
    s["t2"] = commit(repo, Commit("Update the changelog again (#133)"), n := n + 1)
    _git(repo, "checkout", "-q", "release/v0.6")
    s["bp2"] = cherry_pick(repo, s["p2"], n := n + 1)
    _git(repo, "tag", "v0.6.1")
    _git(repo, "checkout", "-q", "main")
    return s


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    repo = tmp_path_factory.mktemp("upstream") / "engine"
    return repo, upstream_history(repo, crash=False)


@pytest.fixture(scope="module")
def upstream_crash(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    repo = tmp_path_factory.mktemp("upstream-crash") / "engine"
    return repo, upstream_history(repo, crash=True)


# -- pure parts -----------------------------------------------------------------------------------------


def test_cherry_pick_trailers_and_release_order() -> None:
    body = "Fix it\n\n(cherry picked from commit 0123456789abcdef0123456789abcdef01234567)\n"
    assert gitlog.cherry_picked_from(body) == ["0123456789abcdef0123456789abcdef01234567"]
    assert gitlog.cherry_picked_from("no trailer") == []
    assert gitlog.first_release(["v0.5.19", "v0.5.2", "v0.6.0rc1", "nightly", "v0.5.19rc2"]) == "v0.5.2"
    assert gitlog.first_release(["v0.6.0", "v0.6.0rc1"]) == "v0.6.0rc1"
    assert gitlog.first_release(["main-tip", "side-1"]) is None
    assert gitlog.release_tags(["v1.10", "tip", "v1.9", "v1.10rc1"]) == ("v1.9", "v1.10rc1", "v1.10")
    assert gitlog.rank_branches(["dev/x", "release/v0.6", "main"]) == ("main", "release/v0.6", "dev/x")


def test_match_carriers_by_trailer_pr_and_patch_id() -> None:
    e = gitlog.LogEntry
    entries = [e("a" * 40, "Fix (#120)", ""), e("b" * 40, "Backport", "(cherry picked from commit 1234567)"),
               e("c" * 40, "Other", ""), e("d" * 40, 'Revert "Fix (#120)"', ""), e("f" * 40, "Unrelated (#7)", "")]
    found = gitlog.match_carriers({"1234567" + "0" * 33}, 120, {"c" * 40: "P", "f" * 40: "Q"}, {"P"}, entries)
    assert found == [("a" * 40, "same PR #120"), ("b" * 40, "cherry-pick of 1234567"), ("c" * 40, "same patch id")]


# -- git side -------------------------------------------------------------------------------------------


def test_releases_of_a_fix_merge_name_the_backport_and_its_tag(upstream_crash) -> None:
    repo, s = upstream_crash
    rel = gitlog.releases(repo, s["M120"])
    # Released first in v0.6.0 (release/v0.6 was cut after it), backported earlier into v0.5.19.
    assert rel.pr == 120 and rel.first_release == "v0.6.0" and rel.branches[0] == "main"
    assert rel.releases == ("v0.6.0", "v0.6.1")
    assert [(c.sha, c.first_release) for c in rel.carriers] == [(s["bp1"], "v0.5.19")]
    assert "release/v0.5.18" in rel.carriers[0].branches and "cherry-pick" in rel.carriers[0].how
    culprit = gitlog.releases(repo, s["M130"])
    assert [(c.sha, c.first_release) for c in culprit.carriers] == [(s["bp2"], "v0.6.1")]
    backport = gitlog.releases(repo, s["bp1"])  # seen from the backport: the original is found too
    assert backport.first_release == "v0.5.19"
    assert backport.carriers[0].sha == s["p1"] and backport.carriers[0].how == "the original it was cherry-picked from"


def test_bisect_under_way_reads_bisect_head_in_bare_repositories(upstream, tmp_path) -> None:
    src, s = upstream
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(bare)], check=True)
    assert gitlog.bisect_under_way({}, bare) is None
    subprocess.run(["git", "-C", str(bare), "bisect", "start", s["tip"], s["m0"]], check=True, capture_output=True)
    head = _git(bare, "rev-parse", "HEAD")
    found = gitlog.bisect_under_way({}, bare)
    assert found is not None and found[1] == _git(bare, "rev-parse", "BISECT_HEAD") != head
    # Under `git bisect run` in a bare repository: GIT_DIR=. and the clone as the working directory.
    assert gitlog.bisect_under_way({"GIT_DIR": "."}, bare)[1] == found[1]


def test_bisect_under_way_in_a_linked_worktree(upstream, tmp_path) -> None:
    src, s = upstream
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(src), str(clone)], check=True)
    wt = tmp_path / "wt"
    _git(clone, "worktree", "add", "-q", "--detach", str(wt), s["tip"])
    subprocess.run(["git", "-C", str(wt), "bisect", "start", s["tip"], s["m0"]], check=True, capture_output=True)
    found = gitlog.bisect_under_way({}, wt)
    assert found is not None and found[1] == _git(wt, "rev-parse", "HEAD") != s["tip"]
    assert gitlog.bisect_under_way({}, clone) is None  # the bisect is the worktree's, not the clone's


# -- through the CLI, checked against git bisect run --------------------------------------------------------


def run_bisect(tmp_path: Path, engine_repo: str, cache: Path, *args: str):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo))
    out = tmp_path / "out"
    proc = abbisect("bisect", str(recipe), *args, "-o", str(out), "--json", cwd=tmp_path, cache=cache)
    assert proc.returncode in (0, 3, 4), proc.stderr  # found, no change, untestable end
    return proc, json.loads(proc.stdout)["data"], (out / "bisect.md").read_text()


def reproduce_lines(md: str) -> list[str]:
    block = md.rsplit("<summary>Reproduce</summary>", 1)[1]  # the bisect's own, not the A/B's
    body = re.search(r"```sh\n(.*?)\n```", block, re.DOTALL).group(1)
    return [line for line in body.splitlines() if line and not line.startswith("#")]


def run_printed_git_commands(md: str, cache: Path, expect: str, res: dict, recipe: Path,
                             cwd: Path | None = None) -> None:
    """Run every command bisect.md prints, as printed: abbisect's own (again, from the same folder), then git
    bisect start, run, rev-parse, reset; both must name the commit the report claims. bisect.md names no
    local path: the engine's clone and the recipe file are the variables its Reproduce block explains."""
    everything = reproduce_lines(md)
    lines = [line for line in everything if line.startswith("git ")]
    env = {**os.environ, "ABBISECT_CACHE_DIR": str(cache), "ENGINE_REPO": res["repo"], "RECIPE": str(recipe)}
    if cwd is not None:
        (again,) = [line for line in everything if line.startswith("abbisect ")]
        assert " -o " not in f" {again} " and "--json" in again
        proc = subprocess.run(again, shell=True, cwd=cwd, check=False, capture_output=True, text=True, env=env,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["data"]["first_new"] == expect
    for line in lines:
        command, _, claim = line.partition("  # ")
        proc = subprocess.run(command, shell=True, check=False, capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr}"
        if "rev-parse refs/bisect/" in command:
            assert proc.stdout.strip() == claim.strip() == expect, (command, proc.stdout)
    assert any("rev-parse refs/bisect/" in line for line in lines)


@pytest.mark.e2e
def test_done_when_release_tag_vs_main_first_parent_bare_clone(upstream, tmp_path, cache_dir) -> None:
    """--good v0.5.18 --bad main: the tag is on a release branch. The merge base is tested, the fix's merge
    on main is named, the backport and its release tag are reported, and the printed `git bisect run
    abbisect check` on abbisect's own bare clone of the URL names the same commit."""
    src, s = upstream
    proc, res, md = run_bisect(tmp_path, f"file://{src}", cache_dir, "--good", "v0.5.18", "--bad", "main",
                               "--first-parent")
    assert res["mode"] == "fix" and res["first_new"] == s["M120"]
    assert res["merge_bases"] == [s["m3"]] and res["old"] == s["m3"]
    roles = {st["sha"]: st["role"] for st in res["steps"]}
    assert roles[s["m3"]] == "merge base"
    assert f"merge base {s['m3'][:10]}" in proc.stderr and "on different branches" in proc.stderr
    assert "### Ends" in md and s["m3"][:10] in md and "searching merge-base..main" in md
    carriers = res["releases"]["carriers"]
    assert [(c["sha"], c["first_release"]) for c in carriers] == [(s["bp1"], "v0.5.19")]
    assert f"backported to release/v0.5.18 as `{s['bp1'][:10]}`" in md and "first released in v0.5.19" in md
    assert f"fixed on main by `{s['M120'][:10]}` (#120)" in md
    assert "#120" in md
    statuses = {st["sha"]: st["status"] for st in res["steps"]}
    assert statuses.get(s["nobuild"], "build_failed") == "build_failed"
    assert reproduce_lines(md)[1].startswith('git -C "$ENGINE_REPO" bisect start')
    bare = Path(res["repo"])
    assert _git(bare, "rev-parse", "--is-bare-repository") == "true"
    run_printed_git_commands(md, cache_dir, s["M120"], res, tmp_path / "r.yaml", cwd=tmp_path)


@pytest.mark.e2e
def test_merge_base_with_the_bad_ends_verdict_searches_the_release_branch(upstream, tmp_path, cache_dir) -> None:
    """--good v0.5.19 --bad pre-fix: the merge base is bad like main's end, so the fix is on the release
    branch: git would stop ("the merge base is bad"), abbisect searches merge-base..v0.5.19 and names the
    backport, whose original on main it reports. Non-bare clone."""
    src, s = upstream
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(src), str(clone)], check=True)
    for branch in ("release/v0.5.18", "release/v0.6", "side/nobuild"):
        _git(clone, "branch", "-q", "--track", branch, f"origin/{branch}")
    _, res, md = run_bisect(tmp_path, str(clone), cache_dir, "--good", "v0.5.19", "--bad", "pre-fix")
    assert res["mode"] == "fix" and res["first_new"] == s["bp1"] and res["old"] == s["m3"]
    assert "git bisect would stop here" in md and "searching merge-base..v0.5.19" in md
    assert res["releases"]["first_release"] == "v0.5.19"
    assert s["p1"] in {c["sha"] for c in res["releases"]["carriers"]}
    run_printed_git_commands(md, cache_dir, s["bp1"], res, tmp_path / "r.yaml", cwd=tmp_path)


@pytest.mark.e2e
def test_regression_across_branches_names_the_releases_carrying_the_culprit(upstream_crash, tmp_path,
                                                                            cache_dir) -> None:
    """--good v0.6.0 --bad main: merge base good (git's own case); the crash's merge is found, and v0.6.1
    carries it through a backport. Checked against git bisect run on a bare clone of a URL."""
    src, s = upstream_crash
    _, res, md = run_bisect(tmp_path, f"file://{src}", cache_dir, "--good", "v0.6.0", "--bad", "main",
                            "--first-parent")
    assert res["mode"] == "regression" and res["first_new"] == s["M130"] and res["old"] == s["m7"]
    assert [(c["sha"], c["first_release"]) for c in res["releases"]["carriers"]] == [(s["bp2"], "v0.6.1")]
    assert "git bisect does the same" in md and "broken on main by" in md
    run_printed_git_commands(md, cache_dir, s["M130"], res, tmp_path / "r.yaml")


@pytest.mark.e2e
def test_regression_on_one_line_printed_commands_agree_in_a_non_bare_clone(upstream, tmp_path, cache_dir) -> None:
    src, s = upstream
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(src), str(clone)], check=True)
    _, res, md = run_bisect(tmp_path, str(clone), cache_dir, "--good", s["git"], "--bad", "pre-fix")
    assert res["mode"] == "regression" and res["first_new"] == s["bug"] and not res["merge_bases"]
    assert "### Ends" not in md
    run_printed_git_commands(md, cache_dir, s["bug"], res, tmp_path / "r.yaml")


@pytest.mark.e2e
def test_fix_on_one_line_printed_commands_agree_in_a_bare_clone(upstream, tmp_path, cache_dir) -> None:
    """A fix search prints terms git accepts (old=broken, new=fixed, check --invert)."""
    src, s = upstream
    _, res, md = run_bisect(tmp_path, f"file://{src}", cache_dir, "--good", s["m3"], "--bad", s["m7"],
                            "--first-parent")
    assert res["mode"] == "fix" and res["first_new"] == s["M120"]
    assert "--term-old=broken --term-new=fixed" in md and "--invert" in md
    run_printed_git_commands(md, cache_dir, s["M120"], res, tmp_path / "r.yaml")


@pytest.mark.e2e
def test_untestable_merge_base_stops_with_the_evidence(tmp_path, cache_dir) -> None:
    """The release branch was cut at a commit that does not install: no range can be chosen."""
    repo = tmp_path / "engine"
    _, a1 = build_history(repo, [Commit("Initial engine"), Commit("New build backend (#5)", "break_install")])
    _git(repo, "checkout", "-q", "-b", "release/v1")
    commit(repo, Commit("Repair the metadata for the release", "fix_install", tag="v1.0"), 10)
    _git(repo, "checkout", "-q", "main")
    commit(repo, Commit("Repair the package metadata (#6)", "fix_install"), 11)
    commit(repo, Commit("Crash at start (#7)", "crash_at_start"), 12)
    proc, res, md = run_bisect(tmp_path, str(repo), cache_dir, "--good", "v1.0", "--bad", "main")
    assert proc.returncode == 4  # untestable end (the merge base stands in for one)
    assert res["mode"] == "untestable-merge-base" and res["merge_bases"] == [a1]
    assert "neither end's verdict" in res["message"] and "build_failed" in res["message"]
    assert "neither end's verdict" in md
    checks = [line for line in reproduce_lines(md) if line.startswith("abbisect check ")]
    assert len(checks) == 3 and not any(line.startswith("git ") for line in reproduce_lines(md))
    env = {**os.environ, "ABBISECT_CACHE_DIR": str(cache_dir)}
    for line in checks:  # each printed check gives the exit code the report claims
        command, _, claim = line.partition("  # ")
        proc = subprocess.run(command, shell=True, cwd=tmp_path, check=False, capture_output=True, env=env, timeout=300)
        assert f"exit {proc.returncode}" in claim, (line, proc.stderr)
    assert any(line.endswith(f"{a1}  # merge base: exit 125") for line in checks)


@pytest.mark.e2e
def test_server_that_runs_git_serves_under_git_bisect_run(upstream, tmp_path, cache_dir) -> None:
    """git bisect run exports GIT_DIR=. in a bare clone; the engine's own `git rev-parse` at start must
    not see it (it would fail and the commit would be called crashed)."""
    src, s = upstream
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(bare)], check=True)
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(str(bare)))
    env = {**os.environ, "ABBISECT_CACHE_DIR": str(cache_dir)}
    git = ["git", "-C", str(bare)]
    # Two candidates, m4 (bad: scale bug) and M120 (good): any commit that crashed would be "bad".
    subprocess.run([*git, "bisect", "start", "--term-old=broken", "--term-new=fixed", "--first-parent", s["M120"],
                    s["m3"]], check=True, env=env, capture_output=True)
    run = subprocess.run([*git, "bisect", "run", "abbisect", "check", str(recipe), "--invert", "--no-cache"],
                         check=False, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert _git(bare, "rev-parse", "refs/bisect/fixed") == s["M120"]
    assert "crashed" not in run.stdout + run.stderr


@pytest.mark.e2e
def test_dry_run_plans_both_ends_counts_and_midpoints_without_building(upstream_crash, tmp_path) -> None:
    src, s = upstream_crash
    cache = tmp_path / "cache"
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(str(src)))
    proc = abbisect("bisect", str(recipe), "--good", "v0.5.18", "--bad", "main", "--first-parent", "--dry-run",
                    cwd=tmp_path, cache=cache)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"merge base {s['m3'][:10]}" in out and "merge-base..main is searched" in out
    assert "git bisect would stop" in out and "untestable" in out
    full = int(_git(src, "rev-list", "--count", "main", f"^{s['m3']}", "^v0.5.18"))
    fp = int(_git(src, "rev-list", "--count", "--first-parent", "main", f"^{s['m3']}", "^v0.5.18"))
    assert full != fp
    assert f"candidates merge-base..main: {full} in the full history, {fp} with --first-parent ← this run" in out
    assert "side A: v0.5.18" in out and "side B: main" in out and "env key" in out
    # The first midpoint is the commit git bisect checks out first for the same range.
    subprocess.run(["git", "-C", str(src), "bisect", "start", "--first-parent", "main", s["m3"], "v0.5.18"],
                   check=True, capture_output=True)
    try:
        first = _git(src, "rev-parse", "HEAD")
    finally:
        subprocess.run(["git", "-C", str(src), "bisect", "reset"], check=True, capture_output=True)
    assert f"first midpoint: {first[:10]}" in out
    assert not (cache / "envs").exists() and not (cache / "trials").exists()  # nothing built or run
    # Ends on one line: one range, no merge base.
    proc = abbisect("bisect", str(recipe), "--good", s["git"], "--bad", "pre-fix", "--dry-run", cwd=tmp_path,
                    cache=cache)
    assert proc.returncode == 0 and "is an ancestor of pre-fix" in proc.stdout and "merge base" not in proc.stdout


def test_rerun_command_drops_the_result_folder() -> None:
    from abbisect.report.bisect import rerun_command

    assert rerun_command("abbisect bisect r.yaml --good a -o out --json") == "abbisect bisect r.yaml --good a --json"
    assert rerun_command("abbisect bisect r.yaml --output=x --resume d --bad b") == "abbisect bisect r.yaml --bad b"


@pytest.mark.e2e
def test_across_branches_full_history_names_the_pull_requests_commit(upstream, tmp_path, cache_dir) -> None:
    """Without --first-parent the fix is the PR's own commit (p1), not its merge; the backport's trailer names
    it. Checked against git bisect run in a non-bare clone."""
    src, s = upstream
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(src), str(clone)], check=True)
    _git(clone, "branch", "-q", "--track", "release/v0.5.18", "origin/release/v0.5.18")
    _, res, md = run_bisect(tmp_path, str(clone), cache_dir, "--good", "v0.5.18", "--bad", "main")
    assert res["mode"] == "fix" and res["first_new"] == s["p1"] and res["old"] == s["m3"]
    assert [(c["sha"], c["how"]) for c in res["releases"]["carriers"]] == [(s["bp1"], f"cherry-pick of {s['p1'][:10]}")]
    run_printed_git_commands(md, cache_dir, s["p1"], res, tmp_path / "r.yaml")


@pytest.mark.e2e
def test_git_bisect_run_in_a_linked_worktree(upstream, tmp_path, cache_dir) -> None:
    """`git bisect run abbisect check` from a linked worktree of the recipe's repository judges the
    worktree's commit (no GIT_DIR is exported there)."""
    src, s = upstream
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(src), str(clone)], check=True)
    wt = tmp_path / "wt"
    _git(clone, "worktree", "add", "-q", "--detach", str(wt), "HEAD")
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(str(clone)))
    env = {**os.environ, "ABBISECT_CACHE_DIR": str(cache_dir)}
    subprocess.run(["git", "-C", str(wt), "bisect", "start", s["m4"], s["m0"]], check=True, env=env,
                   capture_output=True)
    run = subprocess.run(["git", "-C", str(wt), "bisect", "run", "abbisect", "check", str(recipe)], check=False,
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert _git(wt, "rev-parse", "refs/bisect/bad") == s["bug"]


@pytest.mark.e2e
def test_check_under_git_bisect_run_in_the_cache_clone_needs_no_network(upstream, tmp_path, cache_dir) -> None:
    """The printed `git -C <cache clone> bisect run abbisect check` works offline: the clone git is bisecting
    in is not fetched at every step (its source is gone here)."""
    src, s = upstream
    source = tmp_path / "source"
    subprocess.run(["git", "clone", "-q", "--mirror", str(src), str(source)], check=True)
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(f"file://{source}"))
    env = {**os.environ, "ABBISECT_CACHE_DIR": str(cache_dir)}
    proc = abbisect("bisect", str(recipe), "--good", s["git"], "--bad", "pre-fix", "--dry-run", cwd=tmp_path,
                    cache=cache_dir)  # makes the cache's clone
    assert proc.returncode == 0, proc.stderr
    clone = checkout_clone(cache_dir, source)
    assert _git(clone, "rev-parse", "--is-bare-repository") == "true"
    source.rename(tmp_path / "gone")
    git = ["git", "-C", str(clone)]
    subprocess.run([*git, "bisect", "start", s["m4"], s["git"]], check=True, env=env, capture_output=True)
    run = subprocess.run([*git, "bisect", "run", "abbisect", "check", str(recipe)], check=False, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert _git(clone, "rev-parse", "refs/bisect/bad") == s["bug"]


def checkout_clone(cache: Path, source: Path) -> Path:
    from abbisect.infra.cache import Cache

    return Cache(cache).clone(f"file://{source}")


@pytest.mark.e2e
def test_criss_cross_ends_test_every_merge_base(tmp_path, cache_dir) -> None:
    """Two branches that merged each other have two merge bases: both are tested (as git does), and the
    search excludes everything below them."""
    repo = tmp_path / "engine"
    (a0,) = build_history(repo, [Commit("Initial engine")])
    _git(repo, "checkout", "-q", "-b", "x")
    x1 = commit(repo, Commit("x1 housekeeping"), 1)
    _git(repo, "checkout", "-q", "-b", "y", a0)
    y1 = commit(repo, Commit("y1 housekeeping"), 2)
    _git(repo, "checkout", "-q", "x")
    merge(repo, "y", "Merge branch y into x", 3)
    _git(repo, "tag", "good-x")
    _git(repo, "checkout", "-q", "y")
    merge(repo, x1, "Merge x1 into y", 4)
    y2 = commit(repo, Commit("y2 dispatch quantisation to linear layers only", "break_scale", tag="bad-y"), 5)
    assert sorted(gitlog.merge_bases(repo, "good-x", "bad-y")) == sorted([x1, y1])
    _, res, md = run_bisect(tmp_path, str(repo), cache_dir, "--good", "good-x", "--bad", "bad-y")
    assert res["mode"] == "regression" and res["first_new"] == y2
    assert sorted(res["merge_bases"]) == sorted([x1, y1])
    assert [st["role"] for st in res["steps"]].count("merge base") == 2
    (start_line,) = [line for line in reproduce_lines(md) if " bisect start " in line]
    assert x1 in start_line and y1 in start_line  # git is told both bases are old: it need not test them again
    run_printed_git_commands(md, cache_dir, y2, res, tmp_path / "r.yaml")
