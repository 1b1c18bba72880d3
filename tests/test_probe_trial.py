"""A kernel probe as a trial: A/B and bisect a Triton tile change through the CLI, no GPU needed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from conftest import abbisect, write_recipe
from triton_kernels import GEMM_WITH_LAUNCHER

from abbisect.builtin.history import _git

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None,
    reason="the probe cross-compiles with triton and drives the launcher with CPU torch: "
           "pip install 'triton==3.6.0' torch (the test extra has both)")]

KERNEL = GEMM_WITH_LAUNCHER


@pytest.fixture(scope="module")
def kernel_repo(tmp_path_factory) -> tuple[Path, list[str]]:
    """v1 fits sm_120; "tune" moves to 3 stages of 128-wide K tiles (131,072 B on sm_120); later commits keep it."""
    repo = tmp_path_factory.mktemp("kernels") / "engine"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    shas = []
    steps = [("v1: tiled GEMM", KERNEL, "v1"), ("docs", None, None),
             ("Tune matmul: 3 stages, BLOCK_K=128", KERNEL.replace("STAGES = 2", "STAGES = 3")
              .replace("BLOCK_K = 64", "BLOCK_K = 128"), None), ("more docs", None, None), ("tidy", None, "v2")]
    for n, (msg, text, tag) in enumerate(steps):
        if text is not None:
            (repo / "gemm_kernel.py").write_text(text)
        (repo / "NOTES.txt").write_text(f"{n}\n")
        _git(repo, "add", "-A")
        date = f"@{1_767_225_600 + 3600 * n} +0000"
        _git(repo, "commit", "-q", "-m", msg, env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
        if tag:
            _git(repo, "tag", tag)
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return repo, shas


def probe_recipe(repo: Path) -> dict:
    t = {"tensor": [512, 512], "dtype": "float16"}
    return {
        "name": "gemm-smem",
        "engine": {"kind": "command", "repo": str(repo)},
        # the venv sees this interpreter's triton and CPU torch; the command checks that it really does
        "install": {"strategy": "command", "system_site_packages": True,
                    "commands": ["{python} -c 'import triton, torch'"]},
        "probe": {"file": "gemm_kernel.py", "kernel": "matmul_kernel", "launcher": "matmul", "args": [t, t, t],
                  "targets": ["sm_90", "sm_120"], "mode": "compile", "bad_if": {"not_fits": ["sm_120"]}},
        "sides": {"a": "v1", "b": "v2"},
    }


def test_probe_ab_and_bisect(tmp_path, kernel_repo, cache_dir):
    repo, shas = kernel_repo
    recipe = write_recipe(tmp_path / "r.yaml", probe_recipe(repo))
    proc = abbisect("run", str(recipe), "-o", str(tmp_path / "ab"), "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert res["a"]["verdict"]["status"] == "ok" and res["b"]["verdict"]["status"] == "does_not_fit"
    assert any("131,072" in r and "101,376" in r for r in res["b"]["verdict"]["reasons"])
    rows = {(r["target"]): r["shared_bytes"] for r in res["b"]["extras"]["probe"]["rows"]}
    assert rows == {"sm_90": 196608, "sm_120": 131072}
    report = (tmp_path / "ab" / "report.md").read_text()
    assert "kernel probe" in report and "131,072" in report

    proc = abbisect("bisect", str(recipe), "--good", "v1", "--bad", "v2", "-o", str(tmp_path / "bis"), "--json",
                    cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["data"]["first_new"] == shas[2]


def test_a_probe_that_does_not_fit_is_cached_and_reused(tmp_path, kernel_repo):
    """does_not_fit is the commit's truth (its compiled kernel is too large): the second run takes it from the
    trial cache instead of compiling again, and says so."""
    repo, _ = kernel_repo
    cache = tmp_path / "cache"
    recipe = write_recipe(tmp_path / "r.yaml", probe_recipe(repo))
    runs = []
    for n in (1, 2):
        proc = abbisect("run", str(recipe), "-o", str(tmp_path / f"ab{n}"), "--json", cwd=tmp_path, cache=cache)
        assert proc.returncode == 0, proc.stderr
        runs.append((json.loads(proc.stdout)["data"], proc.stderr))
    (first, _), (second, log) = runs
    assert first["b"]["verdict"]["status"] == "does_not_fit" and not first["b"]["cached"]
    assert second["b"]["verdict"] == first["b"]["verdict"] and second["b"]["cached"]
    assert "cached result from a run at" in log and ": does_not_fit" in log
    assert second["b"]["extras"]["probe"] == first["b"]["extras"]["probe"]
    assert second["b"]["timings"] == first["b"]["timings"]  # the original run's, not a new compile's
