"""The cache's disk budget through the CLI: list, gc (LRU, age, dry run), in-use entries kept, automatic
eviction over a budget, sparse worktrees of abbisect's own clones, worktrees dropped after an overlay build."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import abbisect, toy_recipe, write_recipe

from abbisect.builtin.history import TEMPLATE, Commit, _git, commit
from abbisect.infra.cache import Entry, parse_age, parse_size, select
from abbisect.infra.errors import UserError


def _run(tmp_path: Path, repo: Path, cache: Path, a: str, b: str, name: str, env: dict | None = None, **over):
    recipe = write_recipe(tmp_path / f"{name}.yaml", toy_recipe(repo, name=name, sides={"a": a, "b": b}, **over))
    proc = abbisect("run", str(recipe), "-o", str(tmp_path / f"out-{name}"), cwd=tmp_path, cache=cache, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc


def _listing(cache: Path) -> list[dict]:
    proc = abbisect("cache", "list", "--json", cwd=cache, cache=cache)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["data"]["entries"]


def test_parse_sizes_and_ages():
    assert parse_size("50G") == 50 * 1024**3 and parse_size("1024") == 1024 and parse_size("1.5M") == 1572864
    assert parse_age("14d") == 14 * 86400 and parse_age("12h") == 43200
    for bad in ("lots", "5X"):
        with pytest.raises(UserError):
            parse_size(bad)
    with pytest.raises(UserError):
        parse_age("7")


def test_select_is_lru_and_only_evictable_kinds():
    def e(kind, size, used):
        return Entry(kind, Path(f"/{kind}/{used}"), size, used)

    found = [e("venvs", 100, 3), e("worktrees", 50, 1), e("models", 500, 0), e("venvs", 100, 2)]
    # 750 bytes in all; to fit 500 the oldest evictable entries go first, models never
    chosen = select(found, 500, None, now=10)
    assert [(c.kind, c.last_used) for c in chosen] == [("worktrees", 1), ("venvs", 2), ("venvs", 3)]
    assert [c.last_used for c in select(found, None, 7.5, now=10)] == [1, 2]
    assert select(found, 10_000, None, now=10) == []


@pytest.mark.e2e
def test_list_and_gc_through_the_cli(tmp_path, engine_repo):
    cache = tmp_path / "cache"
    _run(tmp_path, engine_repo, cache, "broken", "fixed", "one")
    kinds = {e["kind"] for e in _listing(cache)}
    assert {"worktrees", "venvs", "trials"} <= kinds
    plain = abbisect("cache", "list", cwd=tmp_path, cache=cache)
    assert plain.returncode == 0 and "venvs" in plain.stdout and "total" in plain.stdout

    before = _listing(cache)
    dry = abbisect("cache", "gc", "--max-size", "1", "--dry-run", cwd=tmp_path, cache=cache)
    assert dry.returncode == 0 and "would remove" in dry.stdout
    assert _listing(cache) == before  # a dry run removes nothing

    assert abbisect("cache", "gc", cwd=tmp_path, cache=cache).returncode == 2  # nothing said: usage error
    assert abbisect("cache", "gc", "--max-size", "lots", cwd=tmp_path, cache=cache).returncode == 2

    gc = abbisect("cache", "gc", "--older-than", "0m", cwd=tmp_path, cache=cache)
    assert gc.returncode == 0, gc.stderr
    left = {e["kind"] for e in _listing(cache)}
    assert "worktrees" not in left and "venvs" not in left and "trials" in left
    assert not list((cache / "envs").glob("*.lock")) and not list((cache / "envs").glob("*.use"))
    # the repository forgot the removed worktrees, and a new run rebuilds what it needs
    listed = subprocess.run(["git", "-C", str(engine_repo), "worktree", "list"], check=False,
                            capture_output=True, text=True)
    assert str(cache) not in listed.stdout
    _run(tmp_path, engine_repo, cache, "healthy0", "fixed", "two")


@pytest.mark.e2e
def test_gc_keeps_what_another_process_uses(tmp_path, engine_repo):
    cache = tmp_path / "cache"
    _run(tmp_path, engine_repo, cache, "broken", "fixed", "one")
    venvs = sorted(p for p in (cache / "envs").iterdir() if p.is_dir())
    assert len(venvs) == 3  # the shared venv of the dependencies and one thin venv per commit
    script = ("import pathlib, time\nfrom abbisect.infra.cache import hold\n"
              f"hold(pathlib.Path({str(venvs[0])!r}))\nprint('held', flush=True)\ntime.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        gc = abbisect("cache", "gc", "--max-size", "1", cwd=tmp_path, cache=cache)
        assert gc.returncode == 0, gc.stderr
        assert "kept (in use)" in gc.stdout
        assert venvs[0].is_dir() and not venvs[1].exists() and not venvs[2].exists()
    finally:
        holder.kill()
        holder.wait()
    # once the holder is gone (even killed), the entry can go
    assert abbisect("cache", "gc", "--max-size", "1", cwd=tmp_path, cache=cache).returncode == 0
    assert not venvs[0].exists()


@pytest.mark.e2e
def test_gc_removes_least_recently_used_first(tmp_path, engine_repo):
    cache = tmp_path / "cache"
    _run(tmp_path, engine_repo, cache, "broken", "fixed", "one")
    old, new = sorted(p for p in (cache / "envs").iterdir() if p.is_dir())[:2]
    now = time.time()
    os.utime(old.with_name(old.name + ".use"), (now - 3600, now - 3600))
    sizes = {e["path"]: e["bytes"] for e in _listing(cache)}
    total = sum(sizes.values())
    # a budget that only the removal of one venv satisfies
    budget = total - sizes[str(old.relative_to(cache))] + 1
    gc = abbisect("cache", "gc", "--max-size", str(budget), "--kind", "venvs", cwd=tmp_path, cache=cache)
    assert gc.returncode == 0, gc.stderr
    assert not old.exists() and new.is_dir()


@pytest.mark.e2e
def test_automatic_budget_evicts_earlier_entries(tmp_path, engine_repo):
    cache = tmp_path / "cache"
    _run(tmp_path, engine_repo, cache, "broken", "fixed", "one")
    res = json.loads((tmp_path / "out-one" / "results.json").read_text())
    first = {res[side]["env"]["key"] for side in ("a", "b")}  # the two commits' own venvs
    assert first <= {p.name for p in (cache / "envs").iterdir()}
    proc = _run(tmp_path, engine_repo, cache, "healthy0", "healthy0", "two", env={"ABBISECT_CACHE_MAX_SIZE": "1"})
    assert "over its budget" in proc.stderr
    now = {p.name for p in (cache / "envs").iterdir() if p.is_dir()}
    assert now and not (now & first)  # the earlier run's venvs went, this run's own venvs stayed


def _nested_engine(tmp_path: Path) -> Path:
    """The toy engine under python/, with a bulky folder beside it (SGLang's shape)."""
    repo = tmp_path / "nested"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    shutil.copytree(TEMPLATE, repo / "python", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "docs").mkdir()
    (repo / "docs" / "big.bin").write_bytes(os.urandom(2_000_000))
    (repo / "README.md").write_text("nested toy\n")
    commit(repo, Commit("nested toy engine", tag="v1"), 0)
    return repo


@pytest.mark.e2e
def test_sparse_worktree_of_a_clone(tmp_path):
    cache = tmp_path / "cache"
    repo = _nested_engine(tmp_path)
    recipe = toy_recipe(repo, name="sparse", sides={"a": "v1", "b": "v1"},
                        engine={"kind": "command", "repo": f"file://{repo}", "subdir": "python",
                                "sparse": ["python"]})
    _run(tmp_path, repo, cache, "v1", "v1", "sparse", **{k: v for k, v in recipe.items() if k == "engine"})
    trees = [p for p in (cache / "worktrees").glob("*/*") if p.is_dir()]
    assert len(trees) == 1
    assert (trees[0] / "python" / "toyengine" / "server.py").is_file() and (trees[0] / "README.md").is_file()
    assert not (trees[0] / "docs").exists()


@pytest.mark.e2e
def test_overlay_build_drops_the_worktree(tmp_path, engine_repo):
    cache = tmp_path / "cache"
    wheels = tmp_path / "wheels"
    src = tmp_path / "src"
    shutil.copytree(TEMPLATE, src, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(wheels), str(src)], check=True, capture_output=True)
    wheel = next(wheels.glob("toyengine-*.whl"))
    proc = _run(tmp_path, engine_repo, cache, "broken", "fixed", "overlay",
                install={"strategy": "overlay", "wheel": str(wheel)})
    res = json.loads((tmp_path / "out-overlay" / "results.json").read_text())
    assert res["a"]["verdict"]["status"] == "degenerate" and res["b"]["verdict"]["status"] == "ok", proc.stderr
    assert not [p for p in (cache / "worktrees").glob("*/*") if p.is_dir()]
    listed = subprocess.run(["git", "-C", str(engine_repo), "worktree", "list"], check=False,
                            capture_output=True, text=True)
    assert str(cache) not in listed.stdout


def test_holds_are_counted_within_a_process(tmp_path):
    """A trial and a background build of the same process may hold one worktree: the first to let go must
    not free it for removal under the other (a bisect once lost its candidate's worktree that way)."""
    from abbisect.infra.cache import hold, release

    entry = tmp_path / "worktrees" / "repo" / "abc"
    entry.mkdir(parents=True)
    probe = ("import sys, pathlib\nfrom abbisect.infra.cache import remove_if_unused\n"
             "print(remove_if_unused(pathlib.Path(sys.argv[1])))")

    def removable() -> bool:
        out = subprocess.run([sys.executable, "-c", probe, str(entry)], check=True, capture_output=True, text=True)
        return out.stdout.strip() == "True"

    hold(entry)
    hold(entry)
    release(entry)
    assert not removable() and entry.is_dir()  # the other holder still has it
    release(entry)
    assert removable() and not entry.exists()
