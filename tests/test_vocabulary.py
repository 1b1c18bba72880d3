"""One name per concept in the recipe: every field of the recipe's models is walked against the table
of concepts (abbisect/recipe/vocabulary.py); an old name is refused naming the new key."""

from __future__ import annotations

import json
from typing import Any, get_args

import pytest
from pydantic import BaseModel

from abbisect.infra.errors import UserError
from abbisect.recipe import parse_recipe
from abbisect.recipe.schema import Recipe
from abbisect.recipe.vocabulary import CONCEPTS, RENAMED, writable


def _models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models(arg)]


def _fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, bool, str | None]]:
    """(dotted key, name, whether it is a section, the one key it is derived from) for every field, depth first."""
    out = []
    for name, field in model.model_fields.items():
        name = field.alias or name
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        derived = extra.get("derived_from")
        inner = _models(field.annotation)
        out.append((prefix + name, name, bool(inner), derived if isinstance(derived, str) else None))
        if derived is None:
            for sub in inner:
                out += _fields(sub, f"{prefix}{name}.")
    return out


FIELDS = _fields(Recipe)
SETTABLE = [f for f in FIELDS if f[3] is None]
DERIVED = [f for f in FIELDS if f[3] is not None]


def test_the_walk_sees_the_whole_recipe():
    keys = {k for k, *_ in SETTABLE}
    assert len(keys) > 150
    assert {"verdict.alpha", "perf.metric", "eval.set", "install.wheel", "bisect.over.versions.from",
            "narrow.passing.flags", "probe.args.view.of"} <= keys
    assert {"perf.alpha", "eval.seed", "gpu_slots"} <= {k for k, *_ in DERIVED}


@pytest.mark.parametrize("concept", CONCEPTS, ids=lambda c: c.name)
def test_each_concept_has_one_name_and_its_keys(concept):
    names = {concept.name, *concept.synonyms}
    found = {k for k, name, _, _ in SETTABLE if name in names}
    assert found == set(concept.keys), (f"{concept.meaning}: written as {sorted(found)}, the table says "
                                        f"{sorted(concept.keys)}")
    assert {k.rsplit(".", 1)[-1] for k in found} == {concept.name}


# Names that are a section in one place and a value in another, each for a reason that is not two concepts.
BOTH = {"engine": "a signature's `engine` names the engine kind that `engine.kind` gives",
        "ready": "`timeouts` names each step it times (`launch.ready` is how ready is told)",
        "bad_if": "a probe's own `bad_if` section holds its rules, as `verdict.bad_if` lists the trial's",
        "narrow": "a probe's tensor view names torch's Tensor.narrow (dim, start, length)"}


def test_a_name_is_a_section_or_a_value_never_both():
    """`narrow` was a bisect option (a bool) beside the `narrow` section: the kind of clash this finds."""
    kinds: dict[str, set[bool]] = {}
    for _, name, section, _ in SETTABLE:
        kinds.setdefault(name, set()).add(section)
    assert sorted(n for n, k in kinds.items() if len(k) > 1 and n not in BOTH) == []
    assert sorted(n for n, k in kinds.items() if len(k) > 1) == sorted(BOTH)  # every exemption still needed


def test_synonyms_are_no_other_concepts_name():
    names = [c.name for c in CONCEPTS]
    assert len(names) == len(set(names))
    for c in CONCEPTS:
        assert not set(c.synonyms) & set(names), c


@pytest.mark.parametrize("key, derived_from", [(k, d) for k, _, _, d in DERIVED])
def test_a_derived_field_is_filled_from_its_key_and_refused_as_written(key, derived_from):
    assert derived_from in {k for c in CONCEPTS for k in c.keys}
    assert RENAMED.get(key) == derived_from, f"{key} is derived from {derived_from} but not refused by loading"


MINIMAL = {"name": "t", "engine": {"kind": "command", "repo": "/x"}, "launch": {"command": ["serve"]},
           "prompts": ["p"]}


def _with(key: str, value: Any) -> dict:
    doc: dict = {k: (dict(v) if isinstance(v, dict) else v) for k, v in MINIMAL.items()}
    head, _, leaf = key.rpartition(".")
    (doc.setdefault(head, {}) if head else doc)[leaf] = value
    return doc


@pytest.mark.parametrize("old, new", sorted(RENAMED.items()))
def test_an_old_name_is_refused_naming_the_new_key(old, new):
    with pytest.raises(UserError) as err:
        parse_recipe(_with(old, 1), "r.yaml")
    message = str(err.value)
    assert "\n" not in message and f"'{old}'" in message and f"'{new}'" in message


def test_the_one_keys_reach_every_section():
    rec = parse_recipe({**MINIMAL, "sampling": {"max_tokens": 9, "seed": 4}, "verdict": {"alpha": 0.02},
                        "eval": {"set": "builtin:arith_facts", "power": 0}, "repeats": {"launches": 1}})
    assert rec.eval is not None
    assert (rec.eval.max_tokens, rec.eval.seed, rec.eval.alpha, rec.repeats.alpha) == (9, 4, 0.02, 0.02)
    perf = parse_recipe({**MINIMAL, "sampling": {"max_tokens": 7, "seed": 3}, "perf": {"requests": 2}}).perf
    assert perf is not None and (perf.max_tokens, perf.seed, perf.alpha) == (7, 3, 0.01)  # alpha: perf's own default
    again = Recipe.model_validate(parse_recipe({**MINIMAL, "verdict": {"alpha": 0.03}}).model_dump(by_alias=True))
    assert again.repeats.alpha == 0.03  # a dump validates again (a bisect's state, a report's recipe)


def test_the_schema_for_editors_offers_no_derived_field():
    schema = json.dumps(writable(Recipe.model_json_schema()))
    assert "derived_from" in json.dumps(Recipe.model_json_schema()) and "derived_from" not in schema
    assert '"min_effect"' in schema and '"then_narrow"' in schema and '"gpu_slots"' not in schema
