"""The recipe's fingerprint: a hash of everything in a recipe that can change a trial's result. It keys cached
trials (abbisect/trial/trial_cache.py) and tells a resumed bisect that its recipe changed (state.json).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from abbisect.infra.redact import MASK, secret_names
from abbisect.recipe.schema import QueryOptions, Recipe

# How finished perf trials are judged, not what a pass measures (perf trials are never replayed from the trial
# cache, abbisect/trial/trial_cache.py, but their key is still what they measured).
PERF_NOT_KEYED = {"metric", "launches", "max_launches", "min_effect", "alpha"}
EVAL_NOT_KEYED = {"set", "min_effect", "alpha", "power", "expected_accuracy", "flip_rate"}
NUMERICS_NOT_KEYED = {"min_effect", "deterministic", "max_launches"}
# What is left out of the key (the function's docstring says why, key by key); gpus, query and repeats.passes
# come back in part below.
NOT_KEYED: dict[str, Any] = {
    "sides": True, "description": True, "hardware": True, "bisect": True, "ab": True, "public_env": True,
    "secret_env": True, "gpus": True, "gpu_slots": True, "gpu_share": True,
    "verdict": {"script", "same_failure", "alpha"}, "timeouts": True, "query": True, "repeats": True, "narrow": True,
    "eval": EVAL_NOT_KEYED, "perf": PERF_NOT_KEYED, "numerics": NUMERICS_NOT_KEYED}


def fingerprint(recipe: Recipe, key: bytes | None = None) -> str:
    """Hash of everything that can change a trial's result (16 hex digits).

    It reveals no secret: without `key` (the public fingerprint, in state.json) the value of each secret
    variable of `env` and `install.env` (abbisect/infra/redact.py) is replaced by a constant, so no guess of
    it can be checked against the hash; with `key` (the cache's own random key, for the trial cache) every
    value of `env` and `install.env` is replaced by its HMAC-SHA256 under that key, so a changed secret still
    changes the key, and which names `public_env`/`secret_env` list still does not.

    The rule, key by key: what decides what a trial builds, launches, sends, and how its evidence becomes a
    status and an outcome is in: `name` (the model name a `command` engine is asked for), `engine`, `install`,
    `model`, `launch`, `env`, `prompts` (a `prompts_file` is read into them, so the same prompts inline or in
    a file are one key), `prompt_order`, `sampling`, `api`, `scoring`, `verdict`, `probe`, `query` and
    `repeats.passes` (how the prompts are sent within one launch; left out at their defaults, so a recipe that
    does not use them keeps its key), and how many GPUs a trial sees (or whether it is pinned at all). What
    only names, places, schedules or presents a trial is out: `description`, `hardware`, `sides` (the
    variable), `bisect` (how the search walks), `narrow` (what abbisect narrow tries: each probe's own launch
    is in the key), `ab` (whether A and B run at once), `public_env`/`secret_env` (which values reports show),
    which GPU numbers (placement; the machine key holds the GPU models), the slots' share of a GPU
    (`gpu_share`, placement too: the same commit answers the same prompts at temperature 0 whatever KV cache
    its budget buys; what too little memory can cause — a crash — is reused only from a run that gave the
    server at least as much, see `abbisect/trial/trial_cache.py`), `verdict.script` (it judges a finished
    trial again and never changes what the trial produced), `verdict.same_failure`, `verdict.alpha` (it judges
    finished trials) and the rest of `repeats`
    (how many trials a commit gets and how they are compared, not what one of them produces). `perf` is in by
    the load a pass sends (out: `metric`, `launches`, `max_launches`, `min_effect`, `alpha`, which judge
    finished passes). `eval` is in by its content (`eval.sha256`, the set's hash, filled in when the recipe is
    loaded) and by what is sent (`n`, `seed`, `fewshot`, `api`, `max_tokens`, `concurrency`) and
    `error_threshold` (it makes a side request_errors); out are `eval.set` (where the file lies) and the knobs
    that only judge finished trials against each other (`min_effect`, `alpha`, `power`, `expected_accuracy`,
    `flip_rate`). `numerics` is in by what is asked (`texts`, `continuations`, `top_k`, `concurrency`); out are
    `min_effect`, `deterministic` and `max_launches`, which judge finished trials. `timeouts` are out: they bound
    how long abbisect waits, not what a commit does. The statuses
    that a timeout may have caused (`timeout` by `timeouts.ready`, `build_failed` by `timeouts.build`; see
    `Status.bounded_by`) are reused only from a run that waited at least as long; `request_errors`, from a
    request timeout, is never cached, and `teardown` decides no status.
    """
    data = recipe.model_dump(mode="json", exclude=NOT_KEYED)
    data["gpus"] = None if recipe.gpus is None else len(recipe.gpus)
    for section in ("eval", "perf", "numerics"):  # absent: a recipe without them keeps the key it had before them
        if data[section] is None:
            del data[section]
    if recipe.query != QueryOptions():
        data["query"] = recipe.query.model_dump(mode="json")
    if recipe.repeats.passes != 1:
        data["passes"] = recipe.repeats.passes
    secret = secret_names(recipe.model_dump(mode="json", include={"env", "install", "public_env", "secret_env"}))
    for envmap in (data["env"], data["install"]["env"]):
        for name, value in envmap.items():
            if key is not None:
                envmap[name] = "hmac:" + hmac.new(key, value.encode(), hashlib.sha256).hexdigest()
            elif name in secret:
                envmap[name] = MASK
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
