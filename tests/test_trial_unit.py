"""A trial is a self-contained unit: its spec and result survive JSON, and it runs in another process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import toy_recipe

from abbisect import checkout
from abbisect.infra.serial import dump, load
from abbisect.recipe import parse_recipe
from abbisect.trial.spec import TrialResult, trial_spec


@pytest.mark.e2e
def test_trial_runs_from_a_json_spec_in_another_process(tmp_path, engine_repo, cache_dir):
    recipe = parse_recipe(toy_recipe(engine_repo))
    rev = checkout.resolve(engine_repo, "broken")
    spec = trial_spec(recipe, engine_repo, rev, "remote", cache_dir, tmp_path)
    (tmp_path / "spec.json").write_text(json.dumps(dump(spec)))
    proc = subprocess.run([sys.executable, "-m", "abbisect.trial", str(tmp_path / "spec.json")], check=False,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = load(TrialResult, json.loads(proc.stdout))
    assert result.spec == spec
    assert result.verdict.status == "degenerate" and result.verdict.outcome == "bad"
    assert result.analyses[0].label == "degenerate" and result.signatures
    # the round trip is lossless: what an executor sends back is what ran
    assert load(TrialResult, json.loads(json.dumps(dump(result), default=str))) == result


def test_neutral_launch_hides_the_port_wherever_the_template_puts_it():
    """Two sides of an A/B launch on different ports; the report must still see identical commands."""
    from types import SimpleNamespace as NS

    from abbisect.ab import neutral_launch

    def result(port: str, flag: bool):
        template = ["{python}", "server.py", "--port" if flag else "{port}", *(["{port}"] if flag else []), "2048"]
        argv = ("/venv/bin/python", "server.py", *(["--port"] if flag else []), port, "2048")
        return NS(launch=NS(argv=argv, env={"A": "1"}), env=NS(path="/venv"),
                  spec=NS(recipe=NS(launch=NS(command=template))))

    for flag in (True, False):
        a, b = neutral_launch(result("54085", flag)), neutral_launch(result("39987", flag))
        assert a == b and "$PORT" in a and "54085" not in a


def test_the_server_may_write_its_bytecode_into_the_commits_venv(monkeypatch):
    """The caller's PYTHONDONTWRITEBYTECODE stays out of the server's environment (the venv is abbisect's own:
    the engine's next process reads its bytecode instead of compiling again); a recipe's env can set it."""
    from abbisect.trial.pipeline import server_env

    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    recipe = parse_recipe(toy_recipe("/nonexistent"))
    assert "PYTHONDONTWRITEBYTECODE" not in server_env(recipe, {}, "/venv")
    assert server_env(recipe, {"PYTHONDONTWRITEBYTECODE": "1"}, "/venv")["PYTHONDONTWRITEBYTECODE"] == "1"


@pytest.mark.e2e
def test_a_launch_leaves_the_engines_bytecode_in_the_cache(tmp_path, engine_repo):
    """A real launch under PYTHONDONTWRITEBYTECODE=1: the toy engine's modules are compiled once, into the cache
    (its environment's bytecode folder, abbisect/launch/bytecode.py), none beside the worktree's sources."""
    from conftest import abbisect, write_recipe

    cache = tmp_path / "cache"
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo))
    proc = abbisect("check", str(recipe), "fixed", "--json", cwd=tmp_path, cache=cache,
                    env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert [p for p in cache.glob("envs/*/bytecode/**/toyengine/*.pyc")], "no bytecode of the engine in the cache"
    assert not [p for p in cache.rglob("toyengine/__pycache__/*.pyc")], "bytecode beside the engine's sources"
