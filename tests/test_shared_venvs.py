"""Commits with the same declared dependencies share one venv of them; each commit gets a thin venv of its
own source on top. A commit that changes a dependency gets a shared venv of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import abbisect, toy_recipe, write_recipe

from abbisect.builtin.history import Commit, build_history

pytestmark = pytest.mark.e2e


def _run(tmp_path: Path, repo: Path, cache: Path, a: str, b: str, name: str, **over) -> dict:
    recipe = write_recipe(tmp_path / f"{name}.yaml", toy_recipe(repo, name=name, sides={"a": a, "b": b}, **over))
    proc = abbisect("run", str(recipe), "-o", str(tmp_path / name), "--no-cache", "--json", cwd=tmp_path,
                    cache=cache)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["data"]  # this machine's paths (results.json shows them as placeholders)


def _envs(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "envs").iterdir() if p.is_dir())


def test_same_dependencies_share_one_venv(tmp_path, engine_repo):
    cache = tmp_path / "cache"
    res = _run(tmp_path, engine_repo, cache, "broken", "fixed", "shared")
    a, b = res["a"], res["b"]
    # each side ran its own source ...
    assert a["verdict"]["status"] == "degenerate" and b["verdict"]["status"] == "ok"
    # ... on one venv of the dependencies, built for A and reused by B
    assert a["env"]["base"] == b["env"]["base"] and a["env"]["path"] != b["env"]["path"]
    assert "built for this commit" in a["env"]["facts"]["dependencies"]
    assert "reused" in b["env"]["facts"]["dependencies"]
    assert len(_envs(cache)) == 3
    layer = next(Path(b["env"]["path"]).glob("lib/python*/site-packages/_abbisect_layer.pth"))
    assert layer.read_text().strip().startswith(b["env"]["base"])
    # B has A's build files: A's editable install re-pointed at B's source (no second PEP 660 build), and
    # B ran its own source (its verdict above differs from A's)
    assert "re-pointed the editable install" in Path(b["env"]["log"]).read_text()
    assert "re-pointed" not in Path(a["env"]["log"]).read_text()
    # ... the package in B's venv is B's checkout (asked from outside any worktree: `python -m` in the trial
    # would find the package in its working folder either way)
    where = subprocess.run([b["env"]["python"], "-c", ("import toyengine, importlib.metadata as m; "
                            "print(toyengine.__file__, m.distribution('toyengine').read_text('direct_url.json'))")],
                           cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert where.count(b["spec"]["sha"]) == 2 and a["spec"]["sha"] not in where, where


def test_sharing_can_be_switched_off(tmp_path, engine_repo):
    cache = tmp_path / "cache"
    res = _run(tmp_path, engine_repo, cache, "broken", "fixed", "unshared",
               install={"strategy": "editable", "share_deps": False})
    assert res["a"]["env"]["base"] is None and "dependencies" not in res["a"]["env"]["facts"]
    assert res["a"]["verdict"]["status"] == "degenerate" and res["b"]["verdict"]["status"] == "ok"
    assert len(_envs(cache)) == 2


def _sharedep_wheel(tmp_path: Path) -> Path:
    src = tmp_path / "sharedep-src"
    (src / "sharedep").mkdir(parents=True)
    (src / "sharedep" / "__init__.py").write_text("VALUE = 'from sharedep 1.0'\n")
    (src / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools>=61"]\n'
                                        'build-backend = "setuptools.build_meta"\n[project]\nname = "sharedep"\n'
                                        'version = "1.0"\n[tool.setuptools]\npackages = ["sharedep"]\n')
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(wheels), str(src)], check=True, capture_output=True)
    return wheels


def _add_dependency(repo: Path, _change: str | None, _n: int) -> None:
    py = repo / "pyproject.toml"
    py.write_text(py.read_text().replace('requires-python = ">=3.9"\n',
                                         'requires-python = ">=3.9"\ndependencies = ["sharedep==1.0"]\n'))
    server = repo / "toyengine" / "server.py"
    server.write_text(server.read_text().replace("import toyengine\n", "import toyengine\nimport sharedep  # noqa\n"))


def test_a_changed_dependency_gets_its_own_shared_venv(tmp_path):
    from abbisect.builtin import history

    repo = tmp_path / "engine"
    build_history(repo, [Commit("engine without dependencies", tag="plain")])
    history.commit(repo, Commit("depend on sharedep", tag="withdep"), 1, apply=_add_dependency)
    history.commit(repo, Commit("housekeeping", tag="withdep2"), 2)
    wheels = _sharedep_wheel(tmp_path)
    cache = tmp_path / "cache"
    install = {"strategy": "editable", "find_links": [str(wheels)]}
    res = _run(tmp_path, repo, cache, "plain", "withdep", "dep", install=install)
    assert res["a"]["verdict"]["status"] == res["b"]["verdict"]["status"] == "ok"
    assert res["a"]["env"]["base"] != res["b"]["env"]["base"]  # the dependency changed: its own shared venv
    again = _run(tmp_path, repo, cache, "withdep", "withdep2", "dep2", install=install)
    assert again["a"]["env"]["base"] == again["b"]["env"]["base"] == res["b"]["env"]["base"]
    assert "reused" in again["b"]["env"]["facts"]["dependencies"]


def test_dry_run_shows_the_shared_steps(tmp_path, engine_repo):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, sides={"a": "broken", "b": "fixed"}))
    proc = abbisect("run", str(recipe), "--dry-run", cwd=tmp_path, cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    assert "--no-deps" in proc.stdout and "_abbisect_layer.pth" in proc.stdout
