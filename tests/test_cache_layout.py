"""One cache layout (`Cache`), one door to git (`abbisect.infra.git`) and one way to run a command into a log
(`proc.run_logged`): the paths every module asks for are the ones `abbisect cache list` sees, a trial's key
is the same before its build as after, and git's repository variables reach neither git nor a command."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import abbisect, run_ab, toy_recipe

from abbisect import checkout
from abbisect.bisect import gitlog
from abbisect.builtin.history import Commit, build_history, commit, init_repo
from abbisect.environment.tree import CommitTree
from abbisect.infra import git
from abbisect.infra.cache import Cache
from abbisect.infra.errors import UserError
from abbisect.infra.proc import run_logged
from abbisect.infra.serial import dump, load
from abbisect.recipe import Recipe
from abbisect.trial.spec import TrialSpec, trial_spec
from abbisect.trial.trial_cache import TrialCache, machine_key, planned_env_key, trial_key

ROOT = Path(__file__).resolve().parent.parent


def _listing(cache: Path) -> set[tuple[str, str]]:
    """(kind, absolute path) of every entry `abbisect cache list` shows."""
    proc = abbisect("cache", "list", "--json", cwd=cache, cache=cache)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)["data"]
    return {(e["kind"], str(Path(data["cache"]) / e["path"])) for e in data["entries"]}


@pytest.mark.e2e
def test_cache_paths_are_what_cache_list_shows(tmp_path, engine_repo):
    cache = tmp_path / "cache"
    # the --json data: results.json names no folder of this machine (`$ABBISECT_CACHE_DIR/...`)
    results, out = run_ab(tmp_path, engine_repo, cache, "broken", "fixed")
    assert json.loads((out / "results.json").read_text())["a"]["env"]["path"].startswith("$ABBISECT_CACHE_DIR/")
    layout = Cache(cache.resolve())
    listed = _listing(cache)
    machine = machine_key()  # the CLI ran on this machine, with this Python
    for side in "ab":
        r = results[side]
        spec = load(TrialSpec, r["spec"])
        key = trial_key(spec, machine)
        assert r["env"]["path"] == str(layout.venv(r["env"]["key"]))
        expected = {("worktrees", str(layout.worktree(engine_repo, spec.sha))),
                    ("venvs", str(layout.env(r["env"]["key"]))),
                    ("trials", str(layout.trial(key))), ("trials", str(layout.trial_logs(key)))}
        assert expected <= listed, (expected - listed, listed)
    assert layout.servers.is_dir() and not list(layout.servers.glob("*.json"))  # every record was removed


PINNED = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "toyengine"
version = "0.3.0"
requires-python = ">=3.9"
dependencies = ["toy-kernel==1.0"]

[tool.setuptools]
packages = ["toyengine"]
"""


@pytest.mark.e2e
def test_trial_key_is_the_same_before_and_after_the_build(tmp_path):
    """The trial cache keys a trial before it runs (no worktree yet) and stores it after (worktree built):
    the env plan inside the key reads the commit's tree in both cases, so the second run is a hit."""
    from test_env_upstream import _wheel

    links = tmp_path / "links"
    _wheel(links, "toy-kernel", "1.0", {"toy_kernel/__init__.py": b"BUILD = 'cu13'\n"})
    repo = tmp_path / "engine"
    init_repo(repo)
    commit(repo, Commit("base"), 0)
    (repo / "pyproject.toml").write_text(PINNED)
    commit(repo, Commit("pin toy-kernel"), 1, apply=lambda *_: None)
    cache = Cache(tmp_path / "cache")
    recipe = Recipe.model_validate(toy_recipe(repo, install={"strategy": "editable", "read_pins": True,
                                                             "find_links": [str(links)]},
                                              prompts=["The capital of France is"]))
    rev = checkout.resolve(repo, "main")
    spec = trial_spec(recipe, repo, rev, "a", cache, tmp_path / "out")
    where = cache.worktree(repo, rev.sha)

    before, env_before = trial_key(spec, "m"), planned_env_key(spec)
    assert not where.exists()
    result = TrialCache(cache, "m").fetch(spec, lambda _msg: None)
    assert result.env is not None and result.env.ok and not result.cached, result.env
    assert where.is_dir() and result.env.path == str(cache.venv(result.env.key))
    assert env_before == result.env.key == planned_env_key(spec)  # the plan is the build
    assert trial_key(spec, "m") == before and cache.trial(before).is_file()
    elsewhere = load(TrialSpec, {**dump(spec), "out_dir": str(tmp_path / "o2")})
    again = TrialCache(cache, "m").fetch(elsewhere, lambda _msg: None)
    assert again.cached


# -- git's repository variables reach nothing -----------------------------------------------------------

GIT_VARS = {"GIT_DIR": "", "GIT_WORK_TREE": "", "GIT_INDEX_FILE": "/nonexistent/index"}


@pytest.fixture
def two_repos(tmp_path, monkeypatch):
    """`mine` (two commits) and `other` (one), then GIT_DIR/GIT_WORK_TREE pointing at `other`, as under
    `git bisect run` in another repository."""
    mine, other = tmp_path / "mine", tmp_path / "other"
    shas = build_history(mine, [Commit("one"), Commit("two")])
    other_sha = build_history(other, [Commit("elsewhere")])[0]
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_INDEX_FILE", GIT_VARS["GIT_INDEX_FILE"])
    return mine, shas, other, other_sha


def test_git_calls_read_the_repository_they_name(two_repos, tmp_path):
    mine, shas, other, other_sha = two_repos
    assert git.git(mine, "rev-parse", "HEAD").strip() == shas[-1]
    assert gitlog.resolve(mine, "HEAD") == shas[-1] and checkout.resolve(mine, "HEAD").sha == shas[-1]
    assert gitlog.is_ancestor(mine, shas[0], shas[1]) and not gitlog.has_commit(mine, other_sha)
    assert CommitTree(mine, shas[0]).in_git and CommitTree(mine, shas[0]).read("CHANGES.txt")
    with pytest.raises(git.GitError):
        git.git(mine, "rev-parse", "--verify", "no-such-ref")
    # the demo history builder writes into its own new repository, not into GIT_DIR's
    fresh = tmp_path / "fresh"
    sha = build_history(fresh, [Commit("new")])[0]
    assert (fresh / ".git").is_dir() and git.git(fresh, "rev-parse", "HEAD").strip() == sha
    assert git.git(other, "rev-list", "--all").split() == [other_sha]


def test_run_logged_scrubs_the_environment_and_returns_the_tail(two_repos, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/nonexistent/site")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Kept On Purpose")
    log = tmp_path / "cmd.log"
    log.write_text("an earlier command\n")
    show = ("import os, sys; [print(k + '=' + v) for k, v in sorted(os.environ.items()) "
            "if k.startswith(('GIT_', 'PYTHON', 'EXTRA'))]; print('cwd=' + os.getcwd()); sys.exit(3)")
    ran = run_logged([sys.executable, "-c", show], log, env={"EXTRA": "yes"}, cwd=tmp_path)
    text = log.read_text()
    assert ran.returncode == 3
    assert text.startswith("an earlier command\n$ ") and f"{sys.executable} -c …" in text  # appended, shown
    for name in (*GIT_VARS, "PYTHONPATH"):
        assert f"{name}=" not in text, text
    assert "GIT_AUTHOR_NAME=Kept On Purpose" in text and "EXTRA=yes" in text
    assert ran.tail == tuple(text.splitlines()[-3:]) and ran.tail[-1] == f"cwd={tmp_path}"

    fresh = run_logged(["sh", "-c", "echo only"], log, fresh=True, header=False)
    assert (fresh.returncode, fresh.tail, log.read_text()) == (0, ("only",), "only\n")
    with pytest.raises(subprocess.TimeoutExpired):
        run_logged(["sleep", "5"], log, timeout=0.2)


def test_git_runs_only_through_the_door():
    """No module starts git by hand or through GitPython: abbisect/git.py is the only door."""
    raw = re.compile(r"""^\s*[^'"\s].*\[\s*["']git["']\s*,|^\s*(import git\b|from git import)""")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in (ROOT / "abbisect").rglob("*.py") if p.name != "git.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if raw.search(line)]
    assert found == []


def test_engine_repo_must_be_a_repository_itself(tmp_path):
    """`engine.repo` as a local path: a checkout, a bare clone or a linked worktree, not a folder inside one
    (asked of git now that GitPython is gone)."""
    repo = tmp_path / "engine"
    sha = build_history(repo, [Commit("one")])[0]
    bare = tmp_path / "bare.git"
    git.git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    linked = tmp_path / "linked"
    git.git(repo, "worktree", "add", "-q", "--detach", str(linked), sha)
    cache = Cache(tmp_path / "cache")
    for ok in (repo, bare, linked):
        assert checkout.open_repo(str(ok), cache) == ok
    (tmp_path / "plain").mkdir()
    for bad in (tmp_path / "plain", repo / "toyengine", tmp_path / "missing"):
        with pytest.raises(UserError, match="is not a git repository"):
            checkout.open_repo(str(bad), cache)
