"""Seed 002 as a dependency A/B: the recipe dry-runs anywhere with DeepGEMM as the one variable, and the
catalogue names the kernel and the template parameters nvcc printed."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO_ROOT, abbisect

from abbisect.score import load_catalogue, scan_text

SEED_LOG = """[2026-02-27 10:01:02 TP0] Compiling JIT kernel sm100_fp8_mqa_logits
sm100_fp8_mqa_logits.cuh(283): error: static assertion failed with "Invalid kNumWeightsInReg"
          static_assert(kNumWeightsInReg <= kNumHeads and kNumWeightsInReg % 4 == 0, "Invalid kNumWeightsInReg");
          ^
          detected during instantiation of "void deep_gemm::sm100_fp8_mqa_logits<...>(...)"
          [with kNumHeads=32U, kHeadDim=128U, ...]
"""


@pytest.mark.e2e
def test_seed_recipe_is_a_dependency_ab_that_dry_runs(tmp_path):
    recipe = REPO_ROOT / "recipes" / "sglang-deepgemm-static-assert.yaml"
    proc = abbisect("run", str(recipe), "--dry-run", cwd=tmp_path, cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "side A: main" in out and "pins sgl-deep-gemm==0.1.4" in out
    assert "side B: main" in out and "pins sgl-deep-gemm==0.2.5" in out
    # the pin is the last build step of each side, after SGLang itself
    steps = [line.strip() for line in out.splitlines() if line.strip().startswith("$ ")]
    assert steps[2].endswith("sgl-deep-gemm==0.1.4") and steps[5].endswith("sgl-deep-gemm==0.2.5")
    assert "-e '<worktree of main>/python'" in steps[1]
    # the command line replaces a side's pins
    proc = abbisect("run", str(recipe), "--dry-run", "--b-pin", "sgl-deep-gemm==0.2.0", cwd=tmp_path,
                    cache=tmp_path / "cache")
    assert proc.returncode == 0 and "pins sgl-deep-gemm==0.2.0" in proc.stdout


@pytest.mark.e2e
def test_engine_commit_variant_dry_runs(tmp_path):
    recipe = REPO_ROOT / "recipes" / "sglang-deepgemm-static-assert-engine.yaml"
    proc = abbisect("run", str(recipe), "--dry-run", cwd=tmp_path, cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    assert "side A: v0.5.18" in proc.stdout and "; pins" not in proc.stdout


def test_catalogue_names_the_kernel_and_its_template_parameters():
    found = {m.id: m for m in scan_text(SEED_LOG, load_catalogue())}
    specific = found["deepgemm_mqa_logits_static_assert"]
    assert specific.groups == ("Invalid kNumWeightsInReg",) and specific.severity == "fatal"
    assert "min(52, kNumHeads)" in specific.hint and "sgl-deep-gemm" in specific.hint
    assert found["deepgemm_template_instantiation"].groups == ("32", "128")
    assert found["static_assertion_failed"].line_no == specific.line_no  # the generic row still matches
    other = 'foo.cuh(10): error: static assertion failed with "Invalid threads"'
    assert {m.id for m in scan_text(other, load_catalogue())} == {"static_assertion_failed"}


@pytest.mark.e2e
def test_bad_pin_is_one_line(tmp_path):
    recipe = REPO_ROOT / "recipes" / "sglang-deepgemm-static-assert.yaml"
    proc = abbisect("run", str(recipe), "--dry-run", "--a-pin", "==1.0", cwd=tmp_path, cache=Path(tmp_path))
    assert proc.returncode == 2 and "is not a requirement" in proc.stderr and "Traceback" not in proc.stderr
