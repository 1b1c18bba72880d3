"""A damaged state.json: whatever is wrong in it — a step's outcome, a result of the wrong type, a recipe
value out of its range, a key abbisect never writes, the version as a string — is one line naming what is wrong
(a usage error: exit 2 through the CLI), read before anything runs; a state copied from another bisect's folder is
refused, naming both. And no write of the state loses a step an interrupted run recorded.

A real state is made by the real driver over the simulated trial runner (abbisect/testing/seam.py), then damaged."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from abbisect.bisect.state import STATE_FILE, resume
from abbisect.infra.errors import UserError
from abbisect.testing import seam


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> dict:
    """The state.json of a statistical bisect interrupted after 10 launches."""
    out = tmp_path_factory.mktemp("state") / "20260101-000000"
    with pytest.raises(KeyboardInterrupt):
        seam.bisect(seam.cut(seam.World("flaky", 16, 9, seed=2), 10), seam.recipe_for("flaky"), out=out)
    return json.loads((out / STATE_FILE).read_text())


def _set(path: tuple, value) -> Callable[[dict], None]:
    def change(st: dict) -> None:
        *head, last = path
        for key in head:
            st = st[key]
        st[last] = value
    return change


DAMAGE = [
    pytest.param(_set(("steps", 0, "outcome"), "sorta"), "step 0", id="unknown-outcome"),
    pytest.param(_set(("steps", 1, "result"), 7), "step 1", id="result-of-the-wrong-type"),
    pytest.param(_set(("steps", 1, "result", "verdict"), "ok"), "step 1", id="verdict-of-the-wrong-type"),
    pytest.param(_set(("steps", 0, "seconds"), "a while"), "step 0", id="seconds-not-a-number"),
    pytest.param(_set(("steps", 0, "colour"), "red"), "'colour'", id="extra-key-in-a-step"),
    pytest.param(_set(("recipe", "timeouts", "ready"), -5), "recipe", id="out-of-range-recipe-value"),
    pytest.param(_set(("recipe", "bisect", "retries"), "twice"), "recipe", id="wrong-typed-recipe-value"),
    pytest.param(_set(("recipe", "flavour"), "mild"), "recipe", id="extra-key-in-the-recipe"),
    pytest.param(_set(("extra",), 1), "'extra'", id="extra-key"),
    pytest.param(_set(("version",), "1"), 'version is "1"', id="version-as-a-string"),
    pytest.param(_set(("version",), True), "version is true", id="version-as-a-boolean"),
    pytest.param(_set(("folder",), 3), "'folder'", id="folder-of-the-wrong-type"),
]


def _resume_damaged(tmp_path: Path, state: dict, change: Callable[[dict], None], name: str = "20260101-000000"):
    folder = tmp_path / name
    folder.mkdir()
    damaged = copy.deepcopy(state)
    change(damaged)
    (folder / STATE_FILE).write_text(json.dumps(damaged))
    return folder, lambda: resume(folder, None, {}, {}, None)


def test_the_undamaged_state_resumes(tmp_path, state):
    _, go = _resume_damaged(tmp_path, state, lambda st: None)
    resumed = go()
    assert sum(1 + len(s.get("more") or ()) for s in resumed.replay.values()) == 10


@pytest.mark.parametrize(("change", "named"), DAMAGE)
def test_a_damaged_state_is_one_line_naming_what_is_wrong(tmp_path, state, change, named):
    folder, go = _resume_damaged(tmp_path, state, change)
    with pytest.raises(UserError) as caught:
        go()
    line = str(caught.value)
    assert "\n" not in line and len(line) < 400, line
    assert line.startswith(f"--resume {folder}: ") and named in line and "start the bisect again" in line, line


def test_a_state_copied_from_another_bisect_is_refused_naming_both(tmp_path, state):
    _, go = _resume_damaged(tmp_path, state, lambda st: None, name="20260202-120000")
    with pytest.raises(UserError) as caught:
        go()
    line = str(caught.value)
    assert "\n" not in line and "another bisect" in line, line
    assert "20260101-000000" in line and "20260202-120000" in line, line


def _launches(folder: Path) -> set[tuple[str, str, int]]:
    """Every launch state.json records: (commit, label, attempt)."""
    steps = json.loads((folder / STATE_FILE).read_text())["steps"]
    return {(s["sha"], t["spec"]["side"], t["spec"]["attempt"]) for s in steps
            for t in [s["result"], *(s.get("more") or ())]}


KINDS = [  # (the world, the recipe, the label of the launches the bisect is cut at, after how many of them)
    pytest.param(lambda: seam.World("flaky", 16, 9, seed=2), lambda: seam.recipe_for("flaky"), "candidate", 4,
                 id="search"),
    pytest.param(lambda: seam.World("flaky", 16, 9, seed=2), lambda: seam.recipe_for("flaky"), "confirm", 3,
                 id="confirmation"),
    pytest.param(lambda: seam.World("perf", 24, 8, seed=1, changes=((8, 0.12), (18, 0.12))),
                 lambda: seam.recipe_for("perf"), "change2", 2, id="changes-part"),
]


@pytest.mark.parametrize(("world", "recipe", "label", "after"), KINDS)
def test_a_resume_cut_or_crashed_before_its_first_launch_keeps_every_recorded_launch(tmp_path, world, recipe, label,
                                                                                      after):
    """Cut (Ctrl-C) at each kind of launch — the search, the confirmation, the search of a part for another
    change —, then resumed and cut again, or crashed, before its first new launch ends: every write of the state
    still holds every launch recorded, and the last resume runs none of them again."""
    folder = tmp_path / "20260101-000000"
    rec = recipe()
    with pytest.raises(KeyboardInterrupt):
        seam.bisect(seam.cut(world(), after, label), rec, out=folder)
    recorded = _launches(folder)
    assert sum(1 for _, side, _ in recorded if side.startswith(label)) == after

    def crash(spec):
        raise RuntimeError("a bug in the middle of a launch")

    for stop in (seam.cut(world(), 0), seam._before_each(world(), crash)):
        with pytest.raises((KeyboardInterrupt, RuntimeError)):
            seam.bisect(stop, rec, out=folder, replay=resume(folder, None, {}, {}, None).replay)
        assert _launches(folder) == recorded
    again = world()
    asked = seam.asked(again)
    run, _ = seam.bisect(again, rec, out=folder, replay=resume(folder, None, {}, {}, None).replay)
    assert run.result is not None and run.result.first_new is not None
    assert asked and not {(s, a) for s, _, a in recorded} & {(spec.sha, spec.attempt) for spec in asked}, \
        "a recorded launch ran again"
    assert recorded <= _launches(folder)
