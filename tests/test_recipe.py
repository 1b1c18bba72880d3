"""Bad recipes are refused before anything runs: one line naming the key, exit code 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT, cli, toy_recipe, write_recipe

from abbisect.recipe import Recipe


def refuse(tmp_path, cache_dir, recipe: dict | str, *needles: str):
    path = tmp_path / "bad.yaml"
    if isinstance(recipe, str):
        path.write_text(recipe)
    else:
        write_recipe(path, recipe)
    proc = cli("run", str(path), "--dry-run", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_unknown_key(tmp_path, engine_repo, cache_dir):
    r = toy_recipe(engine_repo)
    r["launch"]["flagz"] = ["--x"]
    refuse(tmp_path, cache_dir, r, "unknown key 'launch.flagz'")


def test_wrong_type(tmp_path, engine_repo, cache_dir):
    refuse(tmp_path, cache_dir, toy_recipe(engine_repo, sampling={"max_tokens": "lots"}), "'sampling.max_tokens'",
           "integer")


def test_wrong_enum(tmp_path, engine_repo, cache_dir):
    refuse(tmp_path, cache_dir, toy_recipe(engine_repo, api="grpc"), "'api'", "'chat'")


def test_missing_repo_dir(tmp_path, engine_repo, cache_dir):
    r = toy_recipe(engine_repo)
    r["engine"]["repo"] = "no/such/dir"
    refuse(tmp_path, cache_dir, r, "'engine.repo'", "no such directory")


def test_missing_prompts_file(tmp_path, engine_repo, cache_dir):
    r = toy_recipe(engine_repo, prompts_file="prompts.txt")
    del r["prompts"]
    refuse(tmp_path, cache_dir, r, "'prompts_file'", "prompts.txt")


def test_bad_regex(tmp_path, engine_repo, cache_dir):
    refuse(tmp_path, cache_dir, toy_recipe(engine_repo, prompts=[{"prompt": "x", "expect": "(unclosed"}]),
           "'prompts.0.expect'", "regular expression")


def test_not_yaml(tmp_path, cache_dir):
    refuse(tmp_path, cache_dir, "name: [unclosed\n", "not valid YAML")


def test_missing_recipe_file(tmp_path, cache_dir):
    proc = cli("run", "nowhere.yaml", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 2 and "recipe not found" in proc.stderr


def test_missing_sides(tmp_path, engine_repo, cache_dir):
    refuse(tmp_path, cache_dir, toy_recipe(engine_repo), "no sides")


def test_unknown_verdict_rule(tmp_path, engine_repo, cache_dir):
    refuse(tmp_path, cache_dir, toy_recipe(engine_repo, verdict={"bad_if": ["ugly"]}), "'verdict.bad_if'", "ugly")


def test_prompts_file_is_read(tmp_path, engine_repo, cache_dir):
    (tmp_path / "prompts.txt").write_text("first prompt\n\nsecond prompt\n")
    r = toy_recipe(engine_repo, prompts_file="prompts.txt", sides={"a": "fixed", "b": "broken"})
    del r["prompts"]
    proc = cli("run", str(write_recipe(tmp_path / "r.yaml", r)), "--dry-run", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    assert "p0: 'first prompt'" in proc.stdout and "p1: 'second prompt'" in proc.stdout
    assert "$VENV/bin/python -m toyengine.server" in proc.stdout and "uv" in proc.stdout


def _keys(model: type, prefix: str = "") -> set[str]:
    keys = set()
    for name, field in model.model_fields.items():
        name = field.alias or name  # `from` is spelled `from_` in Python
        keys.add(prefix + name)
        for arg in (*getattr(field.annotation, "__args__", ()), field.annotation):
            if isinstance(arg, type) and hasattr(arg, "model_fields"):
                keys |= _keys(arg, prefix + name + ".")
    return keys


def test_every_key_is_documented():
    doc = (REPO_ROOT / "recipes" / "README.md").read_text()
    documented = set(re.findall(r"`([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)`", doc))
    probe_doc = (REPO_ROOT / "docs" / "probe.md").read_text()  # the probe's keys: its annotated example
    missing = sorted(k for k in _keys(Recipe) if k not in documented
                     and not (k.startswith("probe.") and f"{k.rsplit('.', 1)[1]}:" in probe_doc))
    assert not missing, f"recipes/README.md lacks: {missing}"


@pytest.mark.parametrize("name", ["demo.yaml"])
def test_shipped_recipe_validates(name, tmp_path, cache_dir):
    proc = cli("run", str(Path(REPO_ROOT / "recipes" / name)), "--dry-run", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr


def test_unknown_threshold(tmp_path, engine_repo, cache_dir):
    refuse(tmp_path, cache_dir, toy_recipe(engine_repo, scoring={"thresholds": {"min_repeatz": 3}}),
           "'scoring.thresholds'", "min_repeatz", "min_repeats")


def test_bad_probe_section(tmp_path, engine_repo, cache_dir):
    recipe = toy_recipe(engine_repo, probe={"file": "k.py", "kernel": "k", "grid": [1], "targets": ["sm_999"]})
    refuse(tmp_path, cache_dir, recipe, "sm_999")
