"""Every recipe under recipes/ loads, validates and dry-runs through the CLI (exit 0), without cloning."""

from __future__ import annotations

import functools
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from conftest import cli
from test_env_upstream import _history
from test_env_upstream_vllm import TREE, _publish, _Quiet

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
RECIPES = sorted(RECIPES_DIR.glob("*.yaml"))
PYPROJECT_SGLANG = (
    '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
    '[project]\nname = "sglang"\nversion = "0.0.1"\ndependencies = [{deps}]\n'
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


# A recipe on the built-in vLLM history builds it first (the wheel downloaded, ~30 commits made): the e2e tier.
@pytest.mark.parametrize("recipe", [
    pytest.param(p, id=p.stem, marks=pytest.mark.e2e if "builtin:vllm-cpu" in p.read_text() else ())
    for p in RECIPES])
def test_recipe_dry_runs(recipe: Path, cache: Path, tmp_path: Path) -> None:
    out = cli("run", "--dry-run", str(recipe), "--cache-dir", str(cache), cwd=tmp_path, cache=cache, timeout=600)
    assert out.returncode == 0, out.stderr  # probe recipes too: a failing dry-run is a failure, never a skip
    plan = out.stdout
    assert plan.startswith(f"recipe: {yaml.safe_load(recipe.read_text())['name']}")
    assert "side A:" in plan and "side B:" in plan
    assert "install (" in plan


def test_every_recipe_says_what_hardware_it_needs() -> None:
    for recipe in RECIPES:
        data = yaml.safe_load(recipe.read_text())
        if data["name"] in ("demo",) or "probe" in data:
            continue
        assert data.get("hardware"), f"{recipe.name}: no hardware: line"


def _local(recipe: str, repo: Path, tmp: Path, **install) -> Path:
    """A recipe of recipes/ whose engine is a local git repository (and install keys overridden)."""
    data = yaml.safe_load((RECIPES_DIR / recipe).read_text())
    data["engine"]["repo"] = str(repo)
    data["install"].update(install)
    path = tmp / recipe
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _dry_run(recipe: Path, cache: Path) -> str:
    out = cli("run", "--dry-run", str(recipe), "--cache-dir", str(cache), cwd=recipe.parent, cache=cache, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _side(plan: str, side: str) -> list[str]:
    """The plan's lines of one side (from its "side X:" line up to the next side or the launch line)."""
    lines = plan.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"side {side}:"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    return lines[start:end]


def test_read_pins_installs_the_commits_heavy_pins_first(tmp_path: Path, cache: Path) -> None:
    """The SGLang seed recipe on a local engine whose python/pyproject.toml pins torch and two kernels."""
    pyproject = PYPROJECT_SGLANG.format(
        deps='"requests>=2", "torch==2.9.1", "sgl-kernel==0.3.16", "flashinfer_python==0.5.2"'
    )
    shas = _history(
        tmp_path / "sglang",
        [
            {"python/pyproject.toml": pyproject, "python/sglang/__init__.py": ""},
            {"python/sglang/__init__.py": "# main\n"},
        ],
        tags={0: "v0.5.18"},
    )
    plan = _dry_run(_local("sglang-fp8-lmhead-loop.yaml", tmp_path / "sglang", tmp_path), cache)
    for side, sha in (("A", shas[0]), ("B", shas[1])):
        lines = _side(plan, side)
        assert lines[0].endswith(f"→ {sha} era {0 if side == 'A' else 1}"), lines[0]
        steps = [line.strip() for line in lines if line.strip().startswith("$ ")]
        heavy = [
            i
            for i, st in enumerate(steps)
            if st.endswith(" flashinfer_python==0.5.2 sgl-kernel==0.3.16 torch==2.9.1")
        ]
        checkout = [
            i for i, st in enumerate(steps) if " -e " in st and st.rstrip("'").endswith(f"/{sha}/python")
        ]
        deps = [i for i, st in enumerate(steps) if "'requests>=2'" in st]
        assert heavy and deps and checkout and heavy[0] < deps[0] < checkout[0], steps
        assert "requests" not in steps[heavy[0]]  # only the exact pins of compiled packages go first


def test_vllm_wheels_plan_passes_each_commits_full_sha(tmp_path: Path, cache: Path) -> None:
    """The vLLM seed recipe on a local engine and a local wheel index laid out as vLLM's."""
    repo = tmp_path / "vllm"
    shas = _history(repo, [TREE, {**TREE, "README": "main\n"}], tags={0: "v0.32.0"})
    index = tmp_path / "index"
    for sha in shas:
        _publish(index, sha, {None: None})
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(index)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        plan = _dry_run(_local("vllm-mla-fp8kv-sm120.yaml", repo, tmp_path, wheel_index=url), cache)
    finally:
        server.shutdown()
        server.server_close()
    for side, sha in (("A", shas[0]), ("B", shas[1])):
        lines = _side(plan, side)
        install = [line for line in lines if "VLLM_USE_PRECOMPILED=1" in line]
        assert len(install) == 1, lines
        assert f"VLLM_PRECOMPILED_WHEEL_LOCATION={url}/{sha}/vllm-0.11.2.dev3%2Bg{sha[:9]}-" in install[0]
        assert install[0].rstrip("'").endswith(f"/{sha}"), install[0]  # that commit's checkout
    assert "--kv-cache-dtype fp8" in plan
