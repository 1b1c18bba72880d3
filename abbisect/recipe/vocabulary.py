"""One name per concept in the recipe a user writes: the table of the concepts several sections share, the one
key each has, and the names it had before (refused when a recipe is loaded, with one line naming the new key).

tests/test_vocabulary.py walks every field of the recipe's models against this table. A section may carry a
copy of a one key (`perf.alpha`, `eval.max_tokens`, `gpu_slots`): such a field is `derived` (strict.py), filled
by `Recipe` from the one key and refused in a recipe file, so a user meets each concept under one name.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Concept:
    """A concept of the recipe: `name` is what every key of it is called; `keys` where a user writes it (a
    section's own when its scale is the section's); `synonyms` the other names it could be given (a field by
    one of them is a second name for it); `old` the recipe keys it had before, each refused naming its new key."""

    meaning: str
    name: str
    keys: tuple[str, ...]
    synonyms: tuple[str, ...] = ()
    old: tuple[tuple[str, str], ...] = ()  # (old key, its new key)


CONCEPTS: tuple[Concept, ...] = (
    Concept("the significance level of a statistical verdict", "alpha", ("verdict.alpha",),
            ("significance", "significance_level", "p_value"),
            (("repeats.alpha", "verdict.alpha"), ("perf.alpha", "verdict.alpha"), ("eval.alpha", "verdict.alpha"))),
    Concept("the smallest effect that matters (on the verdict's own scale)", "min_effect",
            ("repeats.min_effect", "perf.min_effect", "eval.min_effect", "numerics.min_effect"),
            ("min_difference", "min_drop", "min_change", "min_delta", "threshold_effect"),
            (("repeats.min_difference", "repeats.min_effect"), ("eval.min_drop", "eval.min_effect"))),
    Concept("how much a commit is measured at most while its verdict is not sure (in launches)", "max_launches",
            ("repeats.max_launches", "perf.max_launches", "numerics.max_launches"),
            ("max_passes", "max_runs", "max_trials"),
            (("perf.max_passes", "perf.max_launches"),)),
    Concept("output tokens a request (prompts, eval, perf load)", "max_tokens", ("sampling.max_tokens",),
            ("max_new_tokens", "output_tokens"),
            (("perf.max_tokens", "sampling.max_tokens"), ("eval.max_tokens", "sampling.max_tokens"))),
    Concept("the seed of everything random (sampling, eval items, perf load)", "seed", ("sampling.seed",),
            ("random_seed",), (("perf.seed", "sampling.seed"), ("eval.seed", "sampling.seed"))),
    Concept("requests in flight", "concurrency", ("query.concurrency", "eval.concurrency", "perf.concurrency",
                                     "numerics.concurrency"),
            ("max_concurrency", "in_flight", "parallel_requests"), (("perf.max_concurrency", "perf.concurrency"),)),
    Concept("run abbisect narrow at a bisect's answer (--narrow)", "then_narrow", ("bisect.then_narrow",),
            ("narrow_after", "after_bisect"), (("bisect.narrow", "bisect.then_narrow"),)),
    Concept("the GPUs a trial sees, its slots and their memory share", "gpus", ("gpus",),
            ("gpu_slots", "gpu_share", "devices"), (("gpu_slots", "gpus"), ("gpu_share", "gpus"))),
)

RENAMED: dict[str, str] = {old: new for c in CONCEPTS for old, new in c.old}


def _keys(data: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for k, v in data.items():
        key = f"{prefix}{k}"
        yield key
        if isinstance(v, dict) and not prefix:  # the renamed keys are at most a section deep
            yield from _keys(v, f"{key}.")


def renamed_key(data: dict[str, Any]) -> str | None:
    """One line naming a renamed key the recipe still writes and the key to write instead (None: none)."""
    for key in _keys(data):
        if key in RENAMED:
            if RENAMED[key] == "gpus":
                return (f"'{key}' is derived from 'gpus': write gpus: [[0], [1]] or gpus: {{count: N, per_trial: "
                        "T, per_gpu: P, share: S}} (recipes/README.md)")
            return f"'{key}' is '{RENAMED[key]}' now: one name per concept (recipes/README.md)"
    return None


def writable(schema: Any) -> Any:
    """A JSON Schema of the recipe without the derived fields (a user never writes them; loading refuses them)."""
    if isinstance(schema, dict):
        props = schema.get("properties")
        kept = {k: writable(v) for k, v in schema.items() if k != "properties"}
        if isinstance(props, dict):
            kept["properties"] = {k: writable(v) for k, v in props.items()
                                  if not (isinstance(v, dict) and "derived_from" in v)}
        return kept
    if isinstance(schema, list):
        return [writable(v) for v in schema]
    return schema
