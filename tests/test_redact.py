"""Secrets never written: the Redactor on its own, then a planted secret through every command on the toy engine."""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path

import pytest
from conftest import abbisect, toy_recipe, write_recipe

from abbisect.infra.logstream import CappedLog
from abbisect.infra.redact import (
    MASK,
    MIN_SECRET,
    Redactor,
    StreamMask,
    expand_env,
    fingerprint_key,
    looks_secret,
    mask_env,
)
from abbisect.infra.serial import dump
from abbisect.score.scanner import LineScanner

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
    # a reference names where the value comes from and holds none of it: a rerun block must keep it
    assert clean["recipe"]["env"]["MY_API"] == "${OUTER_SECRET}" and clean["recipe"]["env"]["PLAIN"] == "visible-value"
    assert clean["n"] == 3


def test_expand_reads_references_only_at_launch():
    assert expand_env({"A": "${X}", "B": "pre-${Y}-post", "C": "$HOME"}, {"X": "1", "Y": "2"}) == {
        "A": "1", "B": "pre-2-post", "C": "$HOME"}
    assert mask_env({"HF_TOKEN": "abc", "A": "${X}", "B": "b", "C": "Bearer x${X}", "API_KEY": "${K}"}) == {
        "HF_TOKEN": MASK, "A": "${X}", "B": "b", "C": MASK, "API_KEY": "${K}"}


def test_guard_keeps_message_type():
    from abbisect.infra.progress import Status

    seen = []
    say = Redactor.from_recipe(recipe_dict(), {}).guard(seen.append)
    say(Status(f"waiting {LITERAL}"))
    say(f"plain {LITERAL}")
    assert isinstance(seen[0], Status) and LITERAL not in seen[0] and LITERAL not in seen[1]


def test_secret_names_by_segments():
    for name in ("HF_TOKEN", "OPENAI_API_KEY", "HFTOKEN", "DB_PASSWORD", "API-KEYS", "GCP_CREDENTIALS",
                 "MY_PASSWD", "aws_secret_access_key", "SGLANG_KEY_CACHE_DTYPE"):
        assert looks_secret(name), name
    for name in ("TOKENIZERS_PARALLELISM", "KEYBOARD_LAYOUT", "PASSWORDLESS", "SECRETARY", "PLAIN"):
        assert not looks_secret(name), name
    red = Redactor.from_recipe({"env": {"TOKENIZERS_PARALLELISM": "false", "HFTOKEN": "hf_0123456789abcdef"}}, {})
    assert red.names == {"HFTOKEN"}


def test_every_value_the_recipe_holds_is_a_source():
    """narrow.passing.env, each narrow switch's env, bisect.over.install.env and the credentials of a URL (a
    pin, an index URL) are secrets as env and install.env are."""
    recipe = {"env": {"PLAIN": "x"},
              "narrow": {"passing": {"env": {"HF_TOKEN": "hf_PASSLITERAL_abcdef123456", "SHORT_TOKEN": "short2x"}},
                         "switches": [{"id": "mine.token", "env": {"SWITCH_TOKEN": "sw_switch_value_0042"}},
                                      {"id": "mine.plain", "env": {"SOME_FLAG": "1"}}]},
              "bisect": {"over": {"repo": "dep", "install": {"env": {"DEP_PASSWORD": "dep_pw_9876543"}}}},
              "install": {"pins": ["pkg @ git+https://builder:pw@git.example.org/pkg.git"]},
              "sides": {"a": {"ref": "v1", "pins": ["https://ghp_sidetoken0123456@example.org/w.whl"]},
                        "b": {"ref": "v2"}}}
    red = Redactor.from_recipe(recipe, {})
    assert red.names == {"HF_TOKEN", "SHORT_TOKEN", "SWITCH_TOKEN", "DEP_PASSWORD"}
    assert set(red.credentials) == {"pw", "ghp_sidetoken0123456"}
    text = ("probe 2 (+ env SHORT_TOKEN=short2x): hf_PASSLITERAL_abcdef123456 + SWITCH_TOKEN=sw_switch_value_0042 "
            "dep_pw_9876543; git+https://builder:pw@git.example.org/pkg.git pw; "
            "https://ghp_sidetoken0123456@example.org/w.whl SOME_FLAG=1")
    assert red.text(text) == ("probe 2 (+ env SHORT_TOKEN=***): *** + SWITCH_TOKEN=*** ***; "
                              "git+https://builder:***@git.example.org/pkg.git pw; https://***@example.org/w.whl "
                              "SOME_FLAG=1")
    mask = StreamMask(red)  # a log fed a byte at a time: the same
    assert b"".join(mask.feed(bytes([c])) for c in text.encode()) + mask.flush() == red.text(text).encode()


def test_a_mask_replaces_exactly_the_value():
    """narrow's differences, in a code span: neither the `)` nor the closing backtick is swallowed, and a
    reference stays a reference."""
    red = Redactor.from_recipe({"env": {"HF_TOKEN": "${HF_TOKEN}", "DB_PASSWORD": "p)ss w0rd"},
                                "narrow": {"passing": {"env": {"HF_TOKEN": "hf_PASSLITERAL_abcdef123456"}}}},
                               {"HF_TOKEN": "hf_from_the_environment_77"})
    shown = "`env HF_TOKEN=${HF_TOKEN} (instead of HF_TOKEN=hf_PASSLITERAL_abcdef123456)`"
    assert red.text(shown) == "`env HF_TOKEN=${HF_TOKEN} (instead of HF_TOKEN=***)`"
    assert red.text("`HF_TOKEN=hf_from_the_environment_77`, [DB_PASSWORD=p)ss w0rd]") == (
        "`HF_TOKEN=***`, [DB_PASSWORD=***]")
    assert red.text("UNKNOWN_TOKEN=1 HF_TOKEN=unknown)value` DB_PASSWORD='other';") == (
        "UNKNOWN_TOKEN=1 HF_TOKEN=***)value` DB_PASSWORD='***';")  # not known: up to a closing bracket
    assert red.data({"env": {"HF_TOKEN": "${HF_TOKEN}"}, "argv": ["HF_TOKEN=${HF_TOKEN}"]}) == {
        "env": {"HF_TOKEN": "${HF_TOKEN}"}, "argv": ["HF_TOKEN=${HF_TOKEN}"]}
    # a command of the recipe (its launch wrapper) names the variables without their values: it stays runnable
    command = """printf 'DB_PASSWORD=%s HF_TOKEN=%-8s\\n' "$DB_PASSWORD" "$HF_TOKEN"; HF_TOKEN=$HF_TOKEN x"""
    assert red.data({"command": [command, "HF_TOKEN=${HF_TOKEN:-none}"]}) == {
        "command": [command, "HF_TOKEN=${HF_TOKEN:-none}"]}
    assert red.text("DB_PASSWORD=%sabc HF_TOKEN=$") == "DB_PASSWORD=*** HF_TOKEN=***"
    assert red.env({"HF_TOKEN": "${HF_TOKEN}", "DB_PASSWORD": "p)ss w0rd"}) == {"HF_TOKEN": "${HF_TOKEN}",
                                                                                "DB_PASSWORD": MASK}


def test_the_named_rule_applies_to_every_string_of_structured_data():
    """narrow.json's labels and changes, results.json's strings: a short value under its own name is masked,
    and nothing else of the string."""
    red = Redactor.from_recipe({"name": "demo", "env": {"SHORT_TOKEN": "short2x", "LABEL": "${X}"}}, {"X": "demo"})
    data = {"label": "+ env SHORT_TOKEN=short2x, + --seed 1", "change": "+ SHORT_TOKEN=short2x",
            "evidence": 'launched with {"SHORT_TOKEN": "short2x"}', "name": "demo", "sha": "5e2d09c870",
            "prompt": "Is short2x a word?"}
    assert red.data(data) == {"label": "+ env SHORT_TOKEN=***, + --seed 1", "change": "+ SHORT_TOKEN=***",
                              "evidence": 'launched with {"SHORT_TOKEN": "***"}', "name": "demo",
                              "sha": "5e2d09c870", "prompt": "Is short2x a word?"}


PEM = ("-----BEGIN PRIVATE KEY-----\n"
       "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n"
       "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n"
       "NMoSfm76oqFvAp8Gy0iz5sxjZmSnXyCdPEovGhLa0VzMaQ8s+CLOyS56YyCFGeJZ\n"
       "qgtzJ6GR3eqoYSW9b9UMvkBpZODSctWSNGj3P7jRFDO5VoTwCQAWbFnOjDfH5Ulg\n"
       "p2PKSQnSJP3AJLQNFNe7br1XbrhV//eO+t51mIpGSDCUv3E0DDFcWDTH9cXDTTlR\n"
       "ZVEiR2BwpZOOkE/Z0/BVnhZYL71oZV34bKfWjQIt6V/isSMahdsAASACp4ZTGtwi\n"
       "VuNd9tybAgMBAAE=\n"
       "-----END PRIVATE KEY-----\n")


def _pem_forms() -> list[str]:
    body = PEM.strip()
    return [body, body.replace("\n", "\\n"), *[ln for ln in body.splitlines() if len(ln) >= MIN_SECRET]]


def test_short_values_are_masked_only_where_named_and_structure_is_never_rewritten():
    """"false", "09c8" and "demo" occur in prompts, patterns, shas and names: only their NAME=value forms
    and the values under their names are masked."""
    sha = "5e2d09c87051d13ff0f7a1b2c3d4e5f60718293a"
    red = Redactor.from_recipe({"name": "demo", "env": {"TOKENIZERS_PARALLELISM": "false", "MY_TOKEN": "09c8",
                                                        "LABEL": "${X}", "DB_PASSWORD": "hunter2"}}, {"X": "demo"})
    text = (f"Is it false that {sha} is demo? MY_TOKEN=09c8 LABEL=demo DB_PASSWORD: hunter2 "
            "{'DB_PASSWORD': 'hunter2'} \"MY_TOKEN\": \"09c8\" TOKENIZERS_PARALLELISM=false")
    clean = red.text(text)
    assert clean == (f"Is it false that {sha} is demo? MY_TOKEN={MASK} LABEL={MASK} DB_PASSWORD: {MASK} "
                     f"{{'DB_PASSWORD': '{MASK}'}} \"MY_TOKEN\": \"{MASK}\" TOKENIZERS_PARALLELISM=false")
    data = {"name": "demo", "sha": sha, "out_dir": f"/r/b-{sha[:10]}", "prompts": [
        {"prompt": "Is it false that the sky is green?", "expect": "(?i)true|false"}],
        "recipe": {"env": {"MY_TOKEN": "09c8", "LABEL": "${X}", "TOKENIZERS_PARALLELISM": "false"}},
        "launch": {"env": {"DB_PASSWORD": "hunter2", "PLAIN": "demo"}}}
    masked = red.data(data)
    assert masked["recipe"]["env"] == {"MY_TOKEN": MASK, "LABEL": "${X}", "TOKENIZERS_PARALLELISM": "false"}
    assert masked["launch"]["env"] == {"DB_PASSWORD": MASK, "PLAIN": "demo"}
    assert {k: masked[k] for k in ("name", "sha", "out_dir", "prompts")} == {
        k: data[k] for k in ("name", "sha", "out_dir", "prompts")}


def test_values_of_8_to_11_characters_are_masked_as_whole_values_only():
    word = "k3yb0ard9"  # 9 characters: may occur inside a longer word by chance
    red = Redactor.from_recipe({"env": {"DB_PASSWORD": word}}, {})
    assert red.text(f"a {word}, ({word}) x{word} {word}9 '{word}'") == (
        f"a {MASK}, ({MASK}) x{word} {word}9 '{MASK}'")
    assert red.data({"argv": ["--pw", word], "id": f"run-{word}", "sha": f"ab{word}cd"}) == {
        "argv": ["--pw", MASK], "id": f"run-{MASK}", "sha": f"ab{word}cd"}


def test_a_value_of_12_characters_or_more_is_masked_wherever_it_is():
    """Two processes writing one log put a letter right after the value (interleaved lines): still masked."""
    token = "hf_TESTSECRET_abcdefghijklmnop"
    twelve = "abcdefghijkl"
    red = Redactor.from_recipe({"env": {"HF_TOKEN": token, "OTHER_KEY": twelve}}, {})
    assert red.text(f"tok={token}reqreq x{token} {token}9 '{token}'") == f"tok={MASK}reqreq x{MASK} {MASK}9 '{MASK}'"
    assert red.text(f"id-{twelve}z and {twelve[:-1]}z") == f"id-{MASK}z and {twelve[:-1]}z"
    assert red.data({"argv": ["--token", token], "id": f"run-{token}x"}) == {"argv": ["--token", MASK],
                                                                              "id": f"run-{MASK}x"}
    mask = StreamMask(red)  # cut anywhere in a stream, a letter after it in the next chunk
    got = b"".join(mask.feed(bytes([c])) for c in f"tok={token}reqreq\n".encode()) + mask.flush()
    assert got == f"tok={MASK}reqreq\n".encode()


def test_a_multi_line_value_is_masked_raw_escaped_and_line_by_line():
    red = Redactor.from_recipe({"env": {"TLS_KEY": PEM}}, {})
    lines = PEM.strip().splitlines()
    text = "\n".join([f"loaded {PEM}", repr({"key": PEM}), json.dumps({"tls": PEM}),
                      *(f"2026-01-01 INFO server: {ln}" for ln in lines)])
    clean = red.text(text)
    for form in _pem_forms():
        assert form not in clean, form
    assert clean.count(MASK) == 3 + len(lines)


def _chunks(data: bytes, rng: random.Random, most: int) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        n = rng.randint(1, most)
        out.append(data[i:i + n])
        i += n
    return out


def test_stream_mask_catches_a_value_cut_anywhere_and_holds_back_only_what_may_be_one():
    token = "sk_split_0123456789abcdef"
    red = Redactor.from_recipe({"env": {"API_KEY": token, "TLS_KEY": PEM, "DB_PASSWORD": "hunter2"}}, {})
    pieces = [f"{token}\n", "DB_PASSWORD=hunter2 ok\n", PEM, repr({"k": PEM}) + "\n", "INFO ready on :8000\n",
              f"x{token}y\n", "API_KEY=", "sk_", "DB_PASS", "\n"]
    rng = random.Random(7)
    for _ in range(200):
        data = "".join(rng.choice(pieces) for _ in range(12)).encode()
        want = red.text(data.decode()).encode()
        mask = StreamMask(red)
        got = b"".join(mask.feed(c) for c in _chunks(data, rng, rng.choice((3, 40, 500)))) + mask.flush()
        assert got == want
    mask = StreamMask(red)
    assert mask.feed(b"INFO ready on :8000\n") == b"INFO ready on :8000\n"  # nothing held: a ready line waits for nothing
    assert mask.feed(b"key " + token[:9].encode()) == b"key "  # may be the token: held
    assert mask.feed(token[9:].encode() + b"\n") == MASK.encode() + b"\n"
    assert mask.feed(b"DB_PASSWORD=hun") == b""
    assert mask.feed(b"ter2\n") == b"DB_PASSWORD=***\n"
    assert mask.feed(b"tail sk_sp") == b"tail " and mask.flush() == b"sk_sp"  # not a secret after all


def test_capped_log_is_masked_before_the_cap_and_the_scanner(tmp_path):
    """A secret across the head/tail boundary and across the tail's trimmed start: no part of it is kept, and
    the scanner's last line and the first exception are clean too."""
    token = "sk_cap_0123456789abcdefghij"
    red = Redactor.from_recipe({"env": {"API_KEY": token}}, {})
    for cut in range(1, len(token)):
        log = CappedLog(tmp_path / "server.log", cap=200, mask=red.stream(), scanner=LineScanner())
        log.write(b"h" * (99 - cut) + b" " + token[:cut].encode())
        log.write(token[cut:].encode() + b"\n" + b"m" * 300 + b"\n")
        log.write(b"RuntimeError: bad key " + token.encode() + b"\n" + b"t" * (70 - cut) + b"\n" + token[:cut].encode())
        log.write(token[cut:].encode() + b"\n")
        log.close()
        data = (tmp_path / "server.log").read_bytes()
        assert not any(token[i:i + 6].encode() in data for i in range(len(token) - 5)), (cut, data)
        scanned = log.scanner
        assert isinstance(scanned, LineScanner)
        assert scanned.last_line == MASK and scanned.first_exception == (3, f"RuntimeError: bad key {MASK}")
        assert b"elided" in data


def test_fingerprint_hides_secret_values():
    """The public fingerprint (state.json) is the same whatever the secret; the cache's keyed one tells two
    secrets apart; neither can be checked against a guess without the cache's key."""
    from abbisect.recipe import Recipe
    from abbisect.recipe.fingerprint import fingerprint

    def recipe(password: str, **extra) -> Recipe:
        return Recipe.model_validate({"name": "demo", "engine": {"kind": "command", "repo": "/x"},
                                      "launch": {"command": ["serve"]}, "prompts": ["hi"],
                                      "env": {"DB_PASSWORD": password, "PLAIN": "1"},
                                      **extra})

    assert fingerprint(recipe("hunter2")) == fingerprint(recipe("hunter3"))
    assert fingerprint(recipe("hunter2", env={"DB_PASSWORD": "hunter2", "PLAIN": "2"})) != fingerprint(recipe("hunter2"))
    key = b"k" * 32
    assert fingerprint(recipe("hunter2"), key) != fingerprint(recipe("hunter3"), key)
    assert fingerprint(recipe("hunter2"), key) == fingerprint(recipe("hunter2", public_env=["DB_PASSWORD"]), key)
    assert fingerprint(recipe("hunter2"), key) != fingerprint(recipe("hunter2"), b"o" * 32)
    public = fingerprint(recipe("hunter2"))
    assert [g for g in ("letmein", "hunter2", "123456") if _old_fingerprint(recipe(g)) == public] == []


def _old_fingerprint(recipe) -> str:
    """The fingerprint as it was computed before (sha256 over the recipe with its real values): what an
    attacker holding state.json would try guesses against."""
    data = recipe.model_dump(mode="json", exclude={"sides": True, "description": True, "hardware": True,
                                                   "bisect": True, "ab": True, "public_env": True,
                                                   "secret_env": True, "gpus": True, "gpu_slots": True,
                                                   "verdict": {"script"}, "timeouts": True})
    data["gpus"] = None if recipe.gpus is None else len(recipe.gpus)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def test_fingerprint_key_is_private_and_made_once(tmp_path):
    from abbisect.infra.cache import Cache

    where = Cache(tmp_path).fingerprint_key
    key = fingerprint_key(where)
    assert len(key) == 32 and fingerprint_key(where) == key
    assert where == tmp_path / "fingerprint.key" and where.stat().st_mode & 0o777 == 0o600


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


@pytest.mark.e2e
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


@pytest.mark.e2e
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
