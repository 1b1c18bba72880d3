"""The trial cache key covers what changes a trial's result and nothing else: each recipe key changed in a
real recipe either keeps the key (the cached trial is reused) or changes it (the trial runs again)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import abbisect, toy_recipe, write_recipe

from abbisect import checkout
from abbisect.recipe import Recipe, load_recipe
from abbisect.recipe.eval import BUILTIN_EVALS
from abbisect.trial.spec import trial_spec
from abbisect.trial.trial_cache import trial_key

PROBE = {"file": "k.py", "kernel": "k", "launcher": "launch", "targets": ["sm_90"], "mode": "compile"}

# (what is changed, the recipe's keys before and after the change, whether the cached trial is reused)
TOKEN = {"env": {"HF_TOKEN": "t"}}
CHANGES = [
    ("name", {}, {"name": "toy-renamed"}, False),
    ("description", {}, {"description": "a note for the reader"}, True),
    ("engine", {}, {"engine": {"kind": "command", "sparse": ["toyengine"]}}, False),
    ("install", {}, {"install": {"strategy": "editable", "env": {"UV_COMPILE_BYTECODE": "1"}}}, False),
    ("model", {}, {"model": "toy-7b"}, False),
    ("launch", {}, {"launch": {"flags": ["--seed", "1"]}}, False),
    ("env", {}, {"env": {"TOYENGINE_MODE": "fast"}}, False),
    ("public_env", TOKEN, {**TOKEN, "public_env": ["HF_TOKEN"]}, True),
    ("secret_env", TOKEN, {**TOKEN, "secret_env": ["OTHER"]}, True),
    ("gpus", {}, {"gpus": [0]}, False),  # pinned or not
    ("gpus count", {"gpus": [0]}, {"gpus": [0, 1]}, False),
    ("gpus numbers", {"gpus": [0]}, {"gpus": [1]}, True),  # placement: the machine key holds the models
    ("gpu_slots", {"gpus": [0]}, {"gpus": [[2], [3]]}, True),
    ("gpu_slots shared", {"gpus": [0]}, {"gpus": {"count": 1, "per_gpu": 4}}, True),  # four slots on GPU 0
    # placement too; a result that is not good is reused only from a share at least as large (trial/trial_cache.py)
    ("gpu_share", {"gpus": {"count": 1, "per_gpu": 2}}, {"gpus": {"count": 1, "per_gpu": 2, "share": 0.3}}, True),
    ("sides", {}, {"sides": {"a": "healthy0", "b": "broken"}}, True),
    ("prompts", {}, {"prompts": ["One more prompt"]}, False),
    ("prompts_file", {}, {"prompts_file": "prompts.txt"}, True),  # the same prompts, read from a file
    ("prompt_order", {}, {"prompt_order": "by_tag"}, False),
    ("sampling", {}, {"sampling": {"seed": 1}}, False),
    ("api", {}, {"api": "completions"}, False),
    ("timeouts.build", {}, {"timeouts": {"build": 301}}, True),
    ("timeouts.ready", {}, {"timeouts": {"ready": 21}}, True),
    ("timeouts.request", {}, {"timeouts": {"request": 21}}, True),
    ("timeouts.teardown", {}, {"timeouts": {"teardown": 6}}, True),
    ("scoring", {}, {"scoring": {"warn_severity": "fatal"}}, False),
    ("verdict", {}, {"verdict": {"degenerate_fraction": 0.25}}, False),
    ("verdict.script", {}, {"verdict": {"script": "python3 judge.py"}}, True),
    ("bisect", {}, {"bisect": {"retries": 2, "prefetch": 0}}, True),
    # what abbisect narrow tries; each probe's own launch is in its key
    ("narrow", {}, {"narrow": {"passing": {"flags": []}, "catalogue": False}}, True),
    ("ab", {}, {"ab": {"parallel": True}}, True),
    ("probe", {}, {"probe": PROBE}, False),
    ("hardware", {}, {"hardware": "one H200"}, True),
    ("query", {}, {"query": {"concurrency": 4}}, False),  # a batch can change the outputs
    ("repeats.passes", {}, {"repeats": {"passes": 2}}, False),  # what one launch sends
    ("repeats", {}, {"repeats": {"launches": 5, "min_effect": 0.3}}, True),  # how many trials, compared how
    ("verdict.same_failure", {}, {"verdict": {"same_failure": False}}, True),  # how a bisect reads a verdict
    ("perf", {}, {"perf": {}}, False),  # a load is measured: a new trial
    ("perf.requests", {"perf": {}}, {"perf": {"requests": 64}}, False),  # what a pass sends
    # which metric decides and how passes are compared judge finished trials
    ("perf.metric", {"perf": {}}, {"perf": {"metric": "tpot_median", "min_effect": 0.05, "launches": 3}}, True),
    ("numerics", {}, {"numerics": {}}, False),  # log-probabilities are asked: a new trial
    ("numerics.texts", {"numerics": {}}, {"numerics": {"texts": ["one text", "another text"], "top_k": 3}}, False),
    ("numerics.min_effect", {"numerics": {}},
     {"numerics": {"min_effect": 0.05, "deterministic": False, "max_launches": 3}}, True),  # they judge
    ("eval", {}, {"eval": {"set": "builtin:arith_facts"}}, False),
    # the same items from a file of the recipe's folder: keyed by the content (eval.sha256), not the place
    ("eval.set", {"eval": {"set": "builtin:arith_facts"}}, {"eval": {"set": "arith.jsonl"}}, True),
    ("eval.concurrency", {"eval": {"set": "builtin:arith_facts"}},
     {"eval": {"set": "builtin:arith_facts", "concurrency": 4}}, False),
    ("eval.n", {"eval": {"set": "builtin:arith_facts"}}, {"eval": {"set": "builtin:arith_facts", "n": 399}}, False),
    # how finished trials are judged against each other, not what a trial produces
    ("eval.min_effect", {"eval": {"set": "builtin:arith_facts"}},
     {"eval": {"set": "builtin:arith_facts", "min_effect": 0.05, "flip_rate": 0.0}, "verdict": {"alpha": 0.01}}, True),
]


def _recipe(tmp_path: Path, repo: Path, change: dict) -> Recipe:
    base = toy_recipe(repo)
    data = {**base, **change}
    for key in ("engine", "install", "launch", "sampling", "timeouts"):
        if key in change:
            data[key] = {**base.get(key, {}), **change[key]}
    if "prompts_file" in change:
        (tmp_path / "prompts.txt").write_text("\n".join(p if isinstance(p, str) else p["prompt"]
                                                        for p in base["prompts"][1:]) + "\n")
        data["prompts"] = base["prompts"][:1]
    if change.get("eval", {}).get("set") == "arith.jsonl":
        (tmp_path / "arith.jsonl").write_bytes((BUILTIN_EVALS / "arith_facts.jsonl").read_bytes())
    return load_recipe(write_recipe(tmp_path / "r.yaml", data))[0]


def _key(recipe: Recipe, repo: Path, cache: Path, out: Path) -> str:
    spec = trial_spec(recipe, repo, checkout.resolve(repo, "healthy0"), "a", cache, out)
    return trial_key(spec, "machine")


def test_every_recipe_key_is_decided():
    """A new recipe key needs a row above: is it part of what a trial produces, or not?"""
    assert {name.split(" ")[0].split(".")[0] for name, *_ in CHANGES} == set(Recipe.model_fields)
    assert {name for name, *_ in CHANGES if name.startswith("timeouts.")} == {
        f"timeouts.{k}" for k in Recipe.model_fields["timeouts"].annotation.model_fields}


@pytest.mark.parametrize(("name", "before", "after", "reused"), CHANGES, ids=[c[0] for c in CHANGES])
def test_a_changed_key_reuses_or_invalidates_the_cached_trial(name, before, after, reused, tmp_path, engine_repo,
                                                              cache_dir):
    old = _key(_recipe(tmp_path, engine_repo, before), engine_repo, cache_dir, tmp_path)
    new = _key(_recipe(tmp_path, engine_repo, after), engine_repo, cache_dir, tmp_path)
    assert (new == old) is reused, f"changing {name} {'invalidated' if reused else 'reused'} the cached trial"


@pytest.mark.e2e
def test_a_new_teardown_timeout_reuses_both_cached_sides(tmp_path, engine_repo, cache_dir):
    """`timeouts.teardown` changed between two `abbisect run`s: the second takes both sides from the cache."""
    data = toy_recipe(engine_repo, sides={"a": "healthy0", "b": "broken"},
                      env={"ABBISECT_TEST_FINGERPRINT": str(tmp_path)})  # a key of this test's own
    runs = []
    for n, teardown in enumerate((5, 9)):
        recipe = write_recipe(tmp_path / "r.yaml", {**data, "timeouts": {**data["timeouts"], "teardown": teardown}})
        proc = abbisect("run", str(recipe), "-o", str(tmp_path / f"o{n}"), "--json", cwd=tmp_path, cache=cache_dir)
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads(proc.stdout)["data"])
    first, second = runs
    assert not first["a"]["cached"] and not first["b"]["cached"]
    assert second["a"]["cached"] and second["b"]["cached"]
    assert [second[s]["verdict"] for s in "ab"] == [first[s]["verdict"] for s in "ab"]


@pytest.mark.e2e
def test_a_cached_timeout_stands_only_for_a_run_that_would_not_wait_longer(tmp_path, engine_repo, cache_dir):
    """timeouts.ready is not in the key, yet a server that needs 4 s to load, timed out at 2 s (confirmed by
    the second side) and cached, is tried again when the ready timeout grows to 20 s, and then it is ok."""
    data = toy_recipe(engine_repo, sides={"a": "healthy0", "b": "healthy0"},
                      env={"TOYENGINE_LOAD_SECONDS": "4", "ABBISECT_TEST_FINGERPRINT": str(tmp_path)})
    runs = []
    for n, ready in enumerate((2, 1, 20)):
        recipe = write_recipe(tmp_path / "r.yaml", {**data, "timeouts": {**data["timeouts"], "ready": ready}})
        proc = abbisect("run", str(recipe), "-o", str(tmp_path / f"o{n}"), "--json", cwd=tmp_path, cache=cache_dir)
        assert proc.returncode == 0, proc.stderr
        res = json.loads(proc.stdout)["data"]
        runs.append([(res[s]["verdict"]["status"], res[s]["cached"]) for s in "ab"])
    assert runs[0] == [("timeout", False), ("timeout", False)]  # the second attempt confirms it: stored
    assert runs[1] == [("timeout", True), ("timeout", True)]  # a shorter wait would time out too
    assert runs[2] == [("ok", False), ("ok", True)]  # a longer one might not: run again, and kept
