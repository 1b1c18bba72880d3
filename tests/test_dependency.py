"""A dependency as the one variable, through the CLI: the toy engine fixed, `toydep` (a small package built
here as wheels in a --find-links folder and as a git history) changing its output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import abbisect, toy_recipe, write_recipe

from abbisect.bisect.versions import resolve_versions
from abbisect.builtin import toydep
from abbisect.environment.inventory import Inventory
from abbisect.infra.errors import UserError
from abbisect.infra.serial import load
from abbisect.recipe import Over, make_install
from abbisect.report.packages import diff_packages

VERSIONS = ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0"]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    """Five versions of toydep; 1.2.0 is the first that drops the scales (the output loops)."""
    folder = toydep.publish(tmp_path_factory.mktemp("wheels"), VERSIONS, first_broken="1.2.0")
    toydep.write_wheel(folder, "1.5.0rc1", broken=False)  # a pre-release: only walked when asked
    return folder


@pytest.fixture(scope="module")
def dep_repo(tmp_path_factory) -> tuple[Path, list[str]]:
    repo = tmp_path_factory.mktemp("toydep") / "toydep"
    shas = toydep.build_history(repo, ["Initial toydep", "Document row_scales", "Add a version attribute",
                                       "Copy scales on a faster path", "Tidy the package"], first_broken=3)
    return repo, shas


def dep_recipe(engine_repo: Path, wheels: Path, **overrides) -> dict:
    return toy_recipe(engine_repo, install={"strategy": "editable", "find_links": [str(wheels)]}, **overrides)


@pytest.mark.e2e
def test_ab_across_two_versions_of_a_dependency(tmp_path, engine_repo, cache_dir, wheels):
    recipe = write_recipe(tmp_path / "r.yaml", dep_recipe(engine_repo, wheels, sides={
        "a": {"ref": "fixed", "pins": ["toydep==1.1.0"]}, "b": {"ref": "fixed", "pins": ["toydep==1.3.0"]}}))
    out = tmp_path / "out"
    proc = abbisect("run", str(recipe), "-o", str(out), "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    a, b = res["a"], res["b"]
    assert a["spec"]["sha"] == b["spec"]["sha"]  # the engine is fixed
    assert a["spec"]["pins"] == ["toydep==1.1.0"] and b["spec"]["pins"] == ["toydep==1.3.0"]
    assert a["verdict"]["status"] == "ok" and b["verdict"]["status"] == "degenerate"
    assert a["env"]["key"] != b["env"]["key"]
    assert "toydep==1.1.0" in a["extras"]["packages"]["freeze"] and "toydep==1.3.0" in b["extras"]["packages"]["freeze"]
    report = (out / "report.md").read_text()
    assert "The one variable: A `toydep==1.1.0` vs B `toydep==1.3.0`" in report
    assert "on both sides (identical); launch command identical" in report
    assert "| `toydep` | 1.1.0 | 1.3.0 | named |" in report
    assert "Only the named package(s) and what they require differ." in report
    # the CLI pins replace the recipe's; the same engine commit with identical pins is no difference at all
    proc = abbisect("run", str(recipe), "-o", str(tmp_path / "same"), "--json", "--a-pin", "toydep==1.1.0",
                    "--b-pin", "toydep==1.1.0", cwd=tmp_path, cache=cache_dir)
    same = json.loads(proc.stdout)["data"]
    assert same["a"]["cached"] and same["b"]["cached"]  # same venv key, same trial: from the cache
    assert "package lists are identical" in (tmp_path / "same" / "report.md").read_text()


@pytest.mark.e2e
def test_bisect_over_five_versions_names_the_first_bad_one(tmp_path, engine_repo, cache_dir, wheels):
    rec = dep_recipe(engine_repo, wheels, bisect={"over": {"package": "toydep",
                                                           "versions": {"from": "1.0", "to": "1.5.0rc1"},
                                                           "engine_ref": "fixed"}})
    recipe = write_recipe(tmp_path / "r.yaml", rec)
    out = tmp_path / "out"
    proc = abbisect("bisect", str(recipe), "--good", "1.0.0", "--bad", "1.4.0", "-o", str(out), "--json",
                    cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert res["mode"] == "regression" and res["first_new"] == "1.2.0"
    assert res["found_parent"] == "1.1.0"
    assert "1.5.0rc1" not in {s["sha"] for s in res["steps"]}
    md = (out / "bisect.md").read_text()
    assert "The version that broke it: `toydep==1.2.0`" in md
    assert "Walking toydep versions, engine fixed at fixed" in md
    assert "| `toydep` | 1.1.0 | 1.2.0 | named |" in md  # the decisive A/B's package diff


@pytest.mark.e2e
def test_bisect_over_the_dependency_commits(tmp_path, engine_repo, cache_dir, wheels, dep_repo):
    repo, shas = dep_repo
    rec = dep_recipe(engine_repo, wheels, bisect={"over": {"repo": str(repo), "engine_ref": "fixed"}})
    recipe = write_recipe(tmp_path / "r.yaml", rec)
    out = tmp_path / "out"
    proc = abbisect("bisect", str(recipe), "--good", shas[0], "--bad", "main", "-o", str(out), "--json",
                    cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert res["first_new"] == shas[3], res["steps"]
    assert res["commit"]["subject"] == "Copy scales on a faster path"
    md = (out / "bisect.md").read_text()
    assert f"The commit that broke it: `{shas[3]}`" in md
    assert f"(commit {shas[3][:10]})" in md and "| `toydep` |" in md  # installed from the commit, shown by it


def test_version_ranges_and_diffs(wheels):
    install = make_install(find_links=[str(wheels)])
    rng = Over.model_validate({"package": "toydep", "versions": {"from": "1.1", "to": "9"}})
    assert resolve_versions(rng, install) == VERSIONS[1:]
    pre = Over.model_validate({"package": "toydep", "versions": {"from": "1.1", "to": "9", "prereleases": True}})
    assert resolve_versions(pre, install)[-1] == "1.5.0rc1"
    listed = Over.model_validate({"package": "toydep", "versions": ["1.10.0", "1.9.0", "1.2.0"]})
    assert resolve_versions(listed, install) == ["1.2.0", "1.9.0", "1.10.0"]  # by version, not as strings
    with pytest.raises(UserError, match="found 0 version"):
        resolve_versions(Over.model_validate({"package": "toydep", "versions": {"from": "3", "to": "4"}}), install)
    # what a named package pulls in may differ; anything else is flagged
    a = {"dists": {"dep": {"version": "1", "requires": ["sub"]}, "sub": {"version": "1", "requires": []},
                   "other": {"version": "1", "requires": []}}}
    b = {"dists": {"dep": {"version": "2", "requires": ["sub"]}, "sub": {"version": "2", "requires": []},
                   "other": {"version": "3", "requires": []}}}
    diff = diff_packages(load(Inventory, a), load(Inventory, b), {"dep"})
    assert [r[3] for r in diff.rows] == ["named", "", "required by dep"] and diff.unexplained == ("other",)


@pytest.mark.e2e
@pytest.mark.parametrize("over, msg", [
    ({"package": "x"}, "needs 'versions'"),
    ({"package": "x", "repo": ".", "versions": ["1"]}, "either package"),
    ({"versions": ["1"]}, "either package"),
])
def test_bad_over_is_one_line(tmp_path, engine_repo, cache_dir, over, msg):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, bisect={"over": over}))
    proc = abbisect("bisect", str(recipe), "--good", "1", "--bad", "2", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 2 and msg in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.e2e
def test_bisect_dry_run_over_versions(tmp_path, engine_repo, cache_dir, wheels):
    rec = dep_recipe(engine_repo, wheels, bisect={"over": {"package": "toydep", "versions": VERSIONS,
                                                           "engine_ref": "fixed"}})
    recipe = write_recipe(tmp_path / "r.yaml", rec)
    proc = abbisect("bisect", str(recipe), "--good", "1.4.0", "--bad", "1.0", "--dry-run", cwd=tmp_path,
                    cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    assert "4 candidate(s) after the old end: 1.1.0, 1.2.0, 1.3.0, 1.4.0" in proc.stdout
    assert "toydep==1.4.0" in proc.stdout and "install checkout" not in proc.stdout.split("$")[0]
    assert not (tmp_path / "results").exists()


@pytest.mark.e2e
def test_bisect_dry_run_over_dependency_commits_shows_its_install_commands(tmp_path, engine_repo, cache_dir,
                                                                              wheels, dep_repo):
    repo, shas = dep_repo
    rec = dep_recipe(engine_repo, wheels, bisect={"over": {
        "repo": str(repo), "engine_ref": "fixed",
        "install": {"commands": ["{uv} pip install --python {python} --no-deps {src}"], "env": {"CC": "gcc"}}}})
    proc = abbisect("bisect", str(write_recipe(tmp_path / "r.yaml", rec)), "--good", shas[0], "--bad", shas[4],
                    "--dry-run", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    assert f"4 candidate(s) after the old end: {shas[1][:10]}" in proc.stdout
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("  $ CC=gcc VIRTUAL_ENV=") and "pip install --python" in last and "--no-deps" in last
    assert f"cd '<worktree of {shas[4][:10]}>'" in last or f"cd '<worktree of {shas[4][:10]}>" in last
