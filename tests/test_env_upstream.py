"""Upstream-shaped builds: plans read the commit's real tree; SGLang's build by era; generic heavy pins."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import zipfile
from pathlib import Path

import pytest
from conftest import abbisect, toy_recipe, write_recipe

from abbisect.builtin.history import Commit, _git, commit, init_repo
from abbisect.environment import ensure_env
from abbisect.environment.editable import cuda_variant, heavy_pins
from abbisect.recipe import Recipe, make_install
from abbisect.trial.dryrun import env_plan_for, plan_for


def _wheel(dest: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A minimal valid pure-Python wheel, written by hand (no build backend needed)."""
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    files = {**files, f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
              for p, d in files.items()] + [f"{dist}/RECORD,,"]
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as zf:
        for p, d in files.items():
            zf.writestr(p, d)
        zf.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return out


def _history(repo: Path, trees: list[dict[str, str]], tags: dict[int, str] | None = None) -> list[str]:
    """A real git repository whose n-th commit has exactly the files of trees[n] on top of the toy engine."""
    init_repo(repo)
    shas = []
    for n, files in enumerate(trees):
        def apply(root: Path, _change, _n, files=files) -> None:
            for rel, text in files.items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text(text)
        apply(repo, None, n)
        shas.append(commit(repo, Commit(f"era {n}", tag=(tags or {}).get(n)), n, apply=apply))
    return shas


# --- the plan is the run ------------------------------------------------------------------------------

PINNED = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "toyengine"
version = "0.3.0"
requires-python = ">=3.9"
dependencies = ["toy-kernel==1.0", "requests>=1"]

[tool.setuptools]
packages = ["toyengine"]
"""


@pytest.mark.e2e
def test_dry_run_plans_the_env_key_and_steps_the_real_run_builds(tmp_path: Path) -> None:
    links = tmp_path / "links"
    _wheel(links, "toy-kernel", "1.0", {"toy_kernel/__init__.py": b"BUILD = 'cu13'\n"})
    repo = tmp_path / "engine"
    _history(repo, [{}, {"pyproject.toml": PINNED}])
    recipe_d = toy_recipe(repo, install={"strategy": "editable", "read_pins": True, "find_links": [str(links)]},
                          prompts=["The capital of France is"], sides={"a": "main", "b": "main"})
    recipe = write_recipe(tmp_path / "r.yaml", recipe_d)
    cache = tmp_path / "cache"

    dry = abbisect("run", str(recipe), "--dry-run", cwd=tmp_path, cache=cache)
    assert dry.returncode == 0, dry.stderr
    planned_key = re.search(r"env key ([0-9a-f]{20})", dry.stdout).group(1)
    planned_steps = [ln.strip()[2:] for ln in dry.stdout.splitlines() if ln.strip().startswith("$ ")]
    assert any("toy-kernel==1.0" in s for s in planned_steps), dry.stdout  # the heavy pins read from the tree

    real = abbisect("run", str(recipe), "--json", "--output", str(tmp_path / "out"), cwd=tmp_path, cache=cache)
    assert real.returncode == 0, real.stderr
    env = json.loads(real.stdout)["data"]["a"]["env"]
    assert env["ok"], env
    assert env["key"] == planned_key
    assert list(env["steps"]) == planned_steps[: len(env["steps"])]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["a"]["env"]["key"] == planned_key

    # The trial cache's key uses the same plan: a second run is a cache hit, not a rebuild.
    again = abbisect("run", str(recipe), "--json", "--output", str(tmp_path / "out2"), cwd=tmp_path, cache=cache)
    assert json.loads(again.stdout)["data"]["a"]["cached"] is True


def test_plan_for_reads_the_commit_not_the_working_tree(tmp_path: Path) -> None:
    repo = tmp_path / "engine"
    old, new = _history(repo, [{"pyproject.toml": PINNED}, {"pyproject.toml": PINNED.replace("1.0", "2.0")}])
    recipe = Recipe.model_validate(toy_recipe(repo, install={"strategy": "editable", "read_pins": True}))
    cache = tmp_path / "cache"
    key_old, steps_old = plan_for(recipe, repo, old, cache)
    key_new, steps_new = plan_for(recipe, repo, new, cache)
    assert key_old != key_new
    assert "toy-kernel==1.0" in steps_old[1].argv and "toy-kernel==2.0" in steps_new[1].argv
    # the same plan from the commit's worktree (what the build sees)
    wt = tmp_path / "wt"
    _git(repo, "worktree", "add", "--detach", str(wt), old)
    assert env_plan_for(recipe, wt, old, cache).key == key_old


# --- generic heavy pins and the CUDA variant ------------------------------------------------------------

MAIN_DEPS = {"project": {"name": "sglang", "dependencies": [
    "aiohttp", "cuda-python>=13.0", "flashinfer_python[cu13]==0.6.15.post1", "humming-kernels[cu13]==0.1.10",
    "nvidia-cutlass-dsl[cu13]==4.6.2", "quack-kernels==0.6.4", "sgl-deep-ep==0.1.0",
    "sgl-deep-gemm==0.1.5.post2", "sglang-kernel==0.4.6.post1", "tilelang==0.1.11", "torch==2.13.0",
    "torchao==0.17.0", "openai==2.6.1", "numba==0.65.1", "kernels>=0.14.1,<0.15", "torchvision",
    "av==16.1.0 ; sys_platform == 'linux' and platform_machine == 'aarch64'"]}}


def test_heavy_pins_are_every_exact_pin_of_a_compiled_or_cuda_package() -> None:
    pins = heavy_pins(MAIN_DEPS)
    assert pins == sorted(["flashinfer_python[cu13]==0.6.15.post1", "humming-kernels[cu13]==0.1.10",
                           "nvidia-cutlass-dsl[cu13]==4.6.2", "quack-kernels==0.6.4", "sgl-deep-ep==0.1.0",
                           "sgl-deep-gemm==0.1.5.post2", "sglang-kernel==0.4.6.post1", "tilelang==0.1.11",
                           "torch==2.13.0", "torchao==0.17.0"])
    assert cuda_variant(MAIN_DEPS) == "cu13"
    v056 = {"project": {"name": "sglang", "dependencies": ["torch==2.9.1", "sgl-kernel==0.3.19",
                                                          "flashinfer_python==0.5.3", "nvidia-cudnn-cu12==9.16"]}}
    assert cuda_variant(v056) == "cu12"
    assert cuda_variant({"project": {"dependencies": ["torch==2.8.0+cu128"]}}) == "cu12"
    assert cuda_variant({"project": {"dependencies": ["torch==2.8.0"]}}) is None
    # an optional group is read only when the recipe asks for it (SGLang's old python[all] layout)
    grouped = {"project": {"name": "sglang", "dependencies": ["requests"], "optional-dependencies": {
        "srt": ["sgl-kernel==0.1.0", "torch==2.5.1"], "all": ["sglang[srt]"], "hip": ["torch==2.5.1+rocm6"]}}}
    assert heavy_pins(grouped) == []
    assert heavy_pins(grouped, ("all",)) == ["sgl-kernel==0.1.0", "torch==2.5.1"]


# --- SGLang's build by era ---------------------------------------------------------------------------------

def _pyproject(requires: list[str], dynamic: bool, deps: str = '"torch==2.9.1", "sgl-kernel==0.3.19"') -> str:
    version = 'dynamic = ["version"]' if dynamic else 'version = "0.5.6.post2"'
    return (f"[build-system]\nrequires = {json.dumps(requires)}\nbuild-backend = \"setuptools.build_meta\"\n\n"
            f"[project]\nname = \"sglang\"\n{version}\ndependencies = [{deps}]\n")


SETUP_WITH_SWITCH = 'import os\nBUILD = os.environ.get("SGLANG_BUILD_RUST_EXTS", "all")\n'
ERAS = [
    # 0: before setuptools-scm (static version)
    {"python/pyproject.toml": _pyproject(["setuptools>=61", "wheel"], False),
     "python/sglang/version.py": '__version__ = "0.5.6.post2"\n'},
    # 1: setuptools-scm, no Rust
    {"python/pyproject.toml": _pyproject(["setuptools>=61", "setuptools-scm>=8.0", "wheel"], True),
     "python/sglang/version.py": "from sglang._version import __version__\n"},
    # 2: Rust extensions, no switch
    {"python/pyproject.toml": _pyproject(["setuptools>=61", "setuptools-scm>=8.0", "setuptools-rust>=1.10"], True)
     + '\n[[tool.setuptools-rust.ext-modules]]\ntarget = "sglang.srt.grpc._core"\n'},
    # 3: Rust extensions that SGLANG_BUILD_RUST_EXTS=none turns off; CUDA 13 pins
    {"python/pyproject.toml": _pyproject(["setuptools>=61", "setuptools-rust>=1.10", "setuptools-scm>=8.0"], True,
                                         '"torch==2.13.0", "flashinfer_python[cu13]==0.6.15", "cuda-python>=13.0"'),
     "python/setup.py": SETUP_WITH_SWITCH},
]


@pytest.fixture()
def sglang_repo(tmp_path: Path) -> tuple[Path, list[str]]:
    repo = tmp_path / "sglang"
    return repo, _history(repo, ERAS)


def _plan(repo: Path, sha: str, cache: Path, **install):
    recipe = Recipe.model_validate({"name": "s", "engine": {"kind": "sglang", "repo": str(repo), "subdir": "python"},
                                    "model": "m", "prompts": ["p"],
                                    "install": {"strategy": "editable", "read_pins": True, **install}})
    return env_plan_for(recipe, repo, sha, cache)


def _checkout_env(plan) -> dict[str, str]:
    return next(s for s in plan.steps if s.desc == "install checkout").env


def test_sglang_build_by_era(sglang_repo, tmp_path: Path, monkeypatch) -> None:
    repo, shas = sglang_repo
    cache = tmp_path / "cache"
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no cargo here (asserted below)
    assert shutil.which("cargo") is None

    pre_scm = _plan(repo, shas[0], cache)
    assert pre_scm.blocker is None and _checkout_env(pre_scm) == {}
    assert pre_scm.facts["cuda"] == "not stated by the pins"

    scm = _plan(repo, shas[1], cache)
    assert scm.blocker is None
    # no tag in this repository: the version setuptools-scm would have made up is replaced by ours
    assert _checkout_env(scm) == {"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_SGLANG": f"0.0.0.dev0+g{shas[1][:9]}"}

    rust = _plan(repo, shas[2], cache)
    assert rust.blocker and rust.blocker.startswith("needs cargo:")
    assert rust.facts["rust"] == "needs cargo, not on PATH"

    switch = _plan(repo, shas[3], cache)
    assert switch.blocker is None
    assert _checkout_env(switch)["SGLANG_BUILD_RUST_EXTS"] == "none"
    assert switch.facts["dependencies"].startswith("shared venv ")  # static dependencies: shared
    assert {k: v for k, v in switch.facts.items() if k != "dependencies"} == {
        "cuda": "cu13", "rust": "skipped (SGLANG_BUILD_RUST_EXTS=none)"}
    assert _plan(repo, shas[3], cache).key != _plan(repo, shas[3], cache, extras=["x"]).key

    # the blocked era is untestable with its reason, without building anything
    install = make_install(strategy="editable", read_pins=True)
    env = ensure_env(repo, shas[2], install, "python", cache, timeout=60)
    assert not env.ok and env.error.startswith("needs cargo:") and not Path(env.path).exists()


def test_sglang_rust_without_switch_builds_when_cargo_is_there(sglang_repo, tmp_path: Path, monkeypatch) -> None:
    repo, shas = sglang_repo
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cargo").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "cargo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    with_cargo = _plan(repo, shas[2], tmp_path / "c")
    assert with_cargo.blocker is None and with_cargo.facts["rust"] == "built with cargo"
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert _plan(repo, shas[2], tmp_path / "c").key != with_cargo.key  # gaining cargo changes the venv


def test_sglang_rust_switched_off_keys_the_same_with_or_without_cargo(sglang_repo, tmp_path: Path,
                                                                      monkeypatch) -> None:
    """SGLANG_BUILD_RUST_EXTS=none: cargo is never used, so its presence must not change the venv (a cache miss
    across machines); a switch the recipe turns on uses cargo again."""
    repo, shas = sglang_repo
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cargo").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "cargo").chmod(0o755)
    keys = {}
    for where, path in (("cargo", f"{bin_dir}{os.pathsep}/usr/bin:/bin"), ("none", "/usr/bin:/bin")):
        monkeypatch.setenv("PATH", path)
        keys[where] = (_plan(repo, shas[3], tmp_path / "c").key,
                       _plan(repo, shas[3], tmp_path / "c", env={"SGLANG_BUILD_RUST_EXTS": "all"}).key)
    assert keys["cargo"][0] == keys["none"][0]
    assert keys["cargo"][1] != keys["none"][1]


def test_sglang_version_from_tags_when_there_are_some(sglang_repo, tmp_path: Path) -> None:
    repo, shas = sglang_repo
    _git(repo, "tag", "v0.5.18", shas[1])
    scm = _plan(repo, shas[3], tmp_path / "c")
    assert _checkout_env(scm)["SETUPTOOLS_SCM_PRETEND_VERSION_FOR_SGLANG"] == f"0.5.19.dev2+g{shas[3][:7]}"
    assert _checkout_env(_plan(repo, shas[1], tmp_path / "c"))["SETUPTOOLS_SCM_PRETEND_VERSION_FOR_SGLANG"] == "0.5.18"


def test_heavy_pins_from_the_commits_own_index_come_first_from_that_index(sglang_repo, tmp_path: Path) -> None:
    repo, _ = sglang_repo
    sourced = _pyproject(["setuptools>=61", "setuptools-scm>=8.0"], True, '"torch==2.9.1", "sglang-kernel==0.4.1"') + (
        '\n[[tool.uv.index]]\nname = "pypi"\nurl = "https://pypi.org/simple"\ndefault = true\n'
        '\n[[tool.uv.index]]\nname = "torch-cu130"\nurl = "https://download.pytorch.org/whl/cu130"\nexplicit = true\n'
        '\n[tool.uv.sources]\ntorch = { index = "torch-cu130" }\n'
        'sglang-kernel = [{ index = "torch-cu130", marker = "sys_platform == \'nonexistent\'" }]\n')
    sha = commit(repo, Commit("sourced torch"), 9, apply=lambda root, _c, _n: (root / "python" / "pyproject.toml")
                 .write_text(sourced))
    plan = _plan(repo, sha, tmp_path / "c")
    heavy = [s for s in plan.steps if s.desc.startswith("install the commit's heavy pins")]
    assert [s.desc for s in heavy] == ["install the commit's heavy pins from https://download.pytorch.org/whl/cu130",
                                       "install the commit's heavy pins"]
    assert heavy[0].argv[-3:] == ("--extra-index-url", "https://download.pytorch.org/whl/cu130", "torch==2.9.1")
    assert heavy[1].argv[-1] == "sglang-kernel==0.4.1"  # its source's marker does not hold here
    assert plan.facts["cuda"] == "cu13"


def test_wheel_templates_fill_from_the_commit_or_make_it_untestable(sglang_repo, tmp_path: Path) -> None:
    repo, shas = sglang_repo
    tpl = "https://w.invalid/{sha}/sglang-{version}+g{short:9}-py3-none-any.whl"
    install = make_install(strategy="wheel", wheel_url_template=tpl)
    from abbisect.environment.store import env_plan

    static = env_plan(tmp_path / "wt", shas[0], install, "python", tmp_path, git_dir=repo)
    assert static.blocker is None
    assert f"https://w.invalid/{shas[0]}/sglang-0.5.6.post2+g{shas[0][:9]}-py3-none-any.whl" in static.steps[1].argv
    scm = env_plan(tmp_path / "wt", shas[1], install, "python", tmp_path, git_dir=repo)  # no tag, no stated version
    assert scm.blocker == f"cannot fill {{version}} for {shas[1][:12]} from its tree"
    _git(repo, "tag", "v0.5.7", shas[0])
    from abbisect.environment import tree

    tree._describe.cache_clear()
    tagged = env_plan(tmp_path / "wt", shas[1], install, "python", tmp_path, git_dir=repo)
    assert tagged.blocker is None and f"sglang-0.5.8.dev1+g{shas[1][:7]}+g" in " ".join(tagged.steps[1].argv)
