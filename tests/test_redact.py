"""Secrets never written: the Redactor on its own, then a planted secret through every command on the toy engine."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from conftest import abbisect, toy_recipe, write_recipe

from abbisect.infra.redact import MASK, Redactor, expand_env, mask_env
from abbisect.infra.serial import dump

LITERAL = "hf_planted_secret_123"
FROM_ENV = "ref_planted_secret_789"
BUILD = "pw_planted_build_456"


def recipe_dict(**extra) -> dict:
    return {"env": {"HF_TOKEN": LITERAL, "MY_API": "${OUTER_SECRET}", "VLLM_CPU_KVCACHE_SPACE": "4",
                    "SGLANG_KEY_DTYPE": "fp8", "PLAIN": "visible-value"},
            "install": {"env": {"BUILD_PASSWORD": BUILD}}, **extra}


def test_secret_names_references_and_public():
    red = Redactor.from_recipe(recipe_dict(public_env=["SGLANG_KEY_DTYPE"]), {"OUTER_SECRET": FROM_ENV})
    assert red.names == {"HF_TOKEN", "MY_API", "BUILD_PASSWORD"}
    text = (f"HF_TOKEN={LITERAL} MY_API={FROM_ENV} echo {FROM_ENV}; BUILD_PASSWORD: {BUILD} "
            "SGLANG_KEY_DTYPE=fp8 PLAIN=visible-value VLLM_CPU_KVCACHE_SPACE=4")
    clean = red.text(text)
    for secret in (LITERAL, FROM_ENV, BUILD):
        assert secret not in clean
    assert f"HF_TOKEN={MASK}" in clean and f"MY_API={MASK}" in clean and f"BUILD_PASSWORD: {MASK}" in clean
    assert "SGLANG_KEY_DTYPE=fp8" in clean and "PLAIN=visible-value" in clean and "VLLM_CPU_KVCACHE_SPACE=4" in clean


def test_secret_env_forces_and_default_masks_key_names():
    red = Redactor.from_recipe(recipe_dict(secret_env=["PLAIN"]), {})
    assert {"PLAIN", "SGLANG_KEY_DTYPE"} <= red.names
    assert "visible-value" not in red.text("x visible-value y")


def test_data_masks_keys_and_strings():
    red = Redactor.from_recipe(recipe_dict(), {"OUTER_SECRET": FROM_ENV})
    data = {"recipe": recipe_dict(), "launch": {"env": {"HF_TOKEN": LITERAL}, "argv": ["--token", LITERAL]},
            "log_tail": [f"loaded with {FROM_ENV}"], "n": 3}
    clean = red.data(data)
    assert LITERAL not in repr(clean) and FROM_ENV not in repr(clean) and BUILD not in repr(clean)
    assert clean["recipe"]["env"]["MY_API"] == MASK and clean["recipe"]["env"]["PLAIN"] == "visible-value"
    assert clean["n"] == 3


def test_expand_reads_references_only_at_launch():
    assert expand_env({"A": "${X}", "B": "pre-${Y}-post", "C": "$HOME"}, {"X": "1", "Y": "2"}) == {
        "A": "1", "B": "pre-2-post", "C": "$HOME"}
    assert mask_env({"HF_TOKEN": "abc", "A": "${X}", "B": "b"}) == {"HF_TOKEN": MASK, "A": MASK, "B": "b"}


def test_guard_keeps_message_type():
    from abbisect.infra.progress import Status

    seen = []
    say = Redactor.from_recipe(recipe_dict(), {}).guard(seen.append)
    say(Status(f"waiting {LITERAL}"))
    say(f"plain {LITERAL}")
    assert isinstance(seen[0], Status) and LITERAL not in seen[0] and LITERAL not in seen[1]


# The server prints the secret (scrubbing must catch it) and a hash of it (proof it received the real value).
_SERVER = ("import hashlib, os, runpy, sys; "
           "print('token', os.environ['HF_TOKEN'], os.environ['MY_API'], flush=True); "
           "print('sha', hashlib.sha256((os.environ['HF_TOKEN'] + os.environ['MY_API']).encode()).hexdigest()[:16],"
           " flush=True); "
           "sys.argv = ['toyengine', *sys.argv[1:]]; runpy.run_module('toyengine.server', run_name='__main__')")


def _grep_tree(root: Path, secrets: tuple[str, ...]) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            hits += [f"{path}: {s}" for s in secrets if s.encode() in data]
    return hits


def test_planted_secret_is_never_written(tmp_path, engine_repo):
    cache = tmp_path / "cache"
    work = tmp_path / "work"
    work.mkdir()
    recipe = toy_recipe(engine_repo, sides={"a": "healthy0", "b": "broken"},
                        env={"HF_TOKEN": LITERAL, "MY_API": "${OUTER_SECRET}", "PLAIN": "visible-value"},
                        install={"strategy": "editable", "env": {"BUILD_PASSWORD": BUILD}})
    recipe["launch"]["command"] = ["{python}", "-c", _SERVER, "--host", "{host}", "--port", "{port}"]
    (tmp_path / "recipe").mkdir()
    path = write_recipe(tmp_path / "recipe" / "r.yaml", recipe)  # the user's own file holds the literal
    env = {"OUTER_SECRET": FROM_ENV}
    secrets = (LITERAL, FROM_ENV, BUILD)
    runs = [("run", str(path), "--dry-run"), ("run", str(path), "--json", "-o", str(work / "ab")),
            ("run", str(path), "-o", str(work / "ab2")),
            ("bisect", str(path), "--good", "healthy0", "--bad", "broken", "--json", "-o", str(work / "bis")),
            ("bisect", str(path), "--good", "healthy0", "--bad", "broken", "-o", str(work / "bis2")),
            ("check", str(path), "broken", "--json")]
    outputs = []
    for args in runs:
        proc = abbisect(*args, cwd=work, cache=cache, env=env, timeout=300)
        assert proc.returncode in (0, 1, 3), (args, proc.stderr)
        outputs.append(proc.stdout + proc.stderr)
        assert not [s for s in secrets if s in proc.stdout + proc.stderr], (args, proc.stdout, proc.stderr)
    assert "visible-value" in (work / "ab" / "report.md").read_text()  # non-secret values stay visible
    assert _grep_tree(work, secrets) == []
    assert _grep_tree(cache, secrets) == []
    # ... and yet the server received the real values
    want = hashlib.sha256((LITERAL + FROM_ENV).encode()).hexdigest()[:16]
    logs = [p.read_text() for p in (work / "ab").rglob("server.log")]
    assert logs and all(f"sha {want}" in log and f"token {MASK} {MASK}" in log for log in logs)
    assert os.environ.get("OUTER_SECRET") is None


def test_trial_seam_prints_no_secret(tmp_path, engine_repo, cache_dir):
    """`python -m abbisect.trial SPEC.json` (what executors run elsewhere) prints the result without secrets."""
    import json
    import subprocess
    import sys

    from abbisect import checkout
    from abbisect.recipe import parse_recipe
    from abbisect.trial.spec import trial_spec

    recipe = parse_recipe(toy_recipe(engine_repo, env={"HF_TOKEN": LITERAL}))
    spec = trial_spec(recipe, engine_repo, checkout.resolve(engine_repo, "fixed"), "remote", cache_dir, tmp_path)
    (tmp_path / "spec.json").write_text(json.dumps(dump(spec)))
    proc = subprocess.run([sys.executable, "-m", "abbisect.trial", str(tmp_path / "spec.json")], check=False,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert LITERAL not in proc.stdout + proc.stderr
    # the seam prints the bare result (no --json envelope): test_trial_unit reads it the same way
    assert json.loads(proc.stdout)["launch"]["env"]["HF_TOKEN"] == MASK
