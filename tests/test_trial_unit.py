"""A trial is a self-contained unit: its spec and result survive JSON, and it runs in another process."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import toy_recipe

from abbisect import checkout
from abbisect.ab import trial_spec
from abbisect.recipe import parse_recipe
from abbisect.trial import TrialResult


def test_trial_runs_from_a_json_spec_in_another_process(tmp_path, engine_repo, cache_dir):
    recipe = parse_recipe(toy_recipe(engine_repo))
    rev = checkout.resolve(engine_repo, "broken")
    spec = trial_spec(recipe, engine_repo, rev, "remote", cache_dir, tmp_path)
    (tmp_path / "spec.json").write_text(json.dumps(spec.to_dict()))
    proc = subprocess.run([sys.executable, "-m", "abbisect.trial", str(tmp_path / "spec.json")], check=False,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = TrialResult.from_dict(json.loads(proc.stdout))
    assert result.spec == spec
    assert result.verdict.status == "degenerate" and result.verdict.outcome == "bad"
    assert result.analyses[0].label == "degenerate" and result.signatures
    # the round trip is lossless: what an executor sends back is what ran
    assert TrialResult.from_dict(json.loads(json.dumps(result.to_dict(), default=str))) == result
