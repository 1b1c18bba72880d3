"""A launch's label (trial/spec.py): made from its purpose and phase, stored as its text alone, read back whole."""

from __future__ import annotations

import itertools
import json
import pickle

import pytest
from conftest import toy_recipe

from abbisect.infra.serial import dump, load
from abbisect.recipe import parse_recipe
from abbisect.trial.spec import Label, Purpose, TrialSpec


def _spec(side: str | Label) -> TrialSpec:
    recipe = parse_recipe(toy_recipe("/nonexistent"))
    return TrialSpec(recipe, Label.plain(side), "ref", "0" * 40, "subject", "/nonexistent", "/nonexistent", "/out")


def _parts(label: Label) -> tuple[str, Purpose, int | None, int]:
    return label.who, label.purpose, label.part, label.confirmation


@pytest.mark.parametrize(("label", "text"), [
    (Label("candidate"), "candidate"),
    (Label("old end", part=2), "change2 old end"),
    (Label("found", Purpose.CONFIRM), "confirm-found"),
    (Label("old end", Purpose.CONFIRM, confirmation=2), "confirm2-old end"),
    (Label("parent", Purpose.MEASURE, part=3), "change3 confirm-measure-parent"),
    (Label("found", Purpose.MEASURE, part=1), "change1 confirm-measure-found"),
    (Label("found", Purpose.CONFIRM, part=2).again(" again"), "change2 confirm-found again"),
])
def test_a_label_is_made_from_its_parts(label, text):
    assert label == text and str(label) == text


def test_every_label_a_bisect_makes_reads_back_with_its_parts():
    whos = ("candidate", "old end", "new end", "merge base", "parent", "found", "a")
    for who, purpose, part, confirmation in itertools.product(whos, Purpose, (None, 1, 2, 12), (1, 2)):
        if purpose is not Purpose.CONFIRM and confirmation > 1:
            continue  # only a confirmation is numbered
        made = Label(who, purpose, part, confirmation)
        read = Label.stored(str(made))
        assert read == made and _parts(read) == _parts(made), made


def test_a_spec_is_stored_with_its_label_text_alone_and_loaded_with_its_purpose_and_phase():
    spec = _spec(Label("found", Purpose.CONFIRM, part=2))
    data = json.loads(json.dumps(dump(spec)))
    assert data["side"] == "change2 confirm-found"
    assert not {"purpose", "phase", "who", "confirmation"} & set(data)  # state.json and the trial cache keep their form
    back = load(TrialSpec, data)
    assert back == spec and back.purpose is Purpose.CONFIRM and back.phase == 2
    assert pickle.loads(pickle.dumps(spec)).side.purpose is Purpose.CONFIRM


@pytest.mark.parametrize(("stored", "is_fresh", "phase"), [
    ("candidate", False, 1), ("old end retry 1", False, 1), ("change2 candidate", False, 2),
    ("change1 confirm-measure-found", True, 1),
    ("confirm-found", True, 1), ("confirm2-old end", True, 1), ("change3 confirm-measure-parent", True, 3),
    ("confirm-found again", True, 1), ("a", False, 1),
])
def test_a_spec_from_an_earlier_state_json_says_which_search_launched_it(stored, is_fresh, phase):
    """A resumed bisect sorts the launches an earlier abbisect stored (their labels' text only) as it made them."""
    spec = load(TrialSpec, {**dump(_spec("x")), "side": stored})
    assert str(spec.side) == stored
    assert spec.purpose.fresh is is_fresh and spec.phase == phase


def test_a_plain_side_is_a_search_launch_of_the_whole_range():
    spec = _spec("change2 confirm-found")  # a text given, not made: its parts are not read from it
    assert spec.purpose is Purpose.SEARCH and spec.phase == 1 and spec.side == "change2 confirm-found"
