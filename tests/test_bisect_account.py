"""What a bisect says of itself stays true: `bisect.max_changes` is a whole number from 1
to 16; a resumed bisect counts the launches and the time of its every run; a finished bisect rendered again (every
step replayed) says the rounds, launches and builds the original said; with two changes the answer is the one with
the larger effect, whichever the whole range's search met first, and bisect.md says so. Through the bisect's seam
(abbisect/testing/seam.py: the real driver, oracle, posterior search and confirmation over simulated trials)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import toy_recipe

from abbisect.bisect.bisection import Mode
from abbisect.bisect.state import spent_of
from abbisect.infra.errors import UserError
from abbisect.recipe import parse_recipe
from abbisect.report.bisect import headline, render_bisect
from abbisect.testing import seam

FLAKY = {"commits": 16, "culprit": 9, "seed": 2}


@pytest.mark.parametrize("value", [True, False, 2.0, "3", 0, 17])
def test_max_changes_is_a_whole_number_from_1_to_16(value):
    with pytest.raises(UserError, match=r"bisect\.max_changes"):
        parse_recipe(toy_recipe(Path("demo"), bisect={"max_changes": value}))
    assert parse_recipe(toy_recipe(Path("demo"), bisect={"max_changes": 16})).bisect.max_changes == 16


def _recorded(out: Path) -> tuple[dict, dict]:
    state = json.loads((out / "state.json").read_text())
    return {s["sha"]: s for s in state["steps"]}, state


def _said(md: str) -> str:
    return next(line for line in md.splitlines() if "commits tested," in line)


def test_a_resumed_bisect_counts_the_launches_and_time_of_its_every_run(tmp_path):
    recipe = seam.recipe_for("flaky")
    whole, _ = seam.bisect(seam.World("flaky", **FLAKY), recipe, out=tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        seam.bisect(seam.cut(seam.World("flaky", **FLAKY), 20), recipe, out=tmp_path / "cut")
    recorded, state = _recorded(tmp_path / "cut")
    assert state["spent"]["launches"] == 20 and state["spent"]["wall_s"] > 0
    world = seam.World("flaky", **FLAKY)
    asked = seam.asked(world)
    resumed, _ = seam.bisect(world, recipe, out=tmp_path / "cut", replay=recorded,
                             before=spent_of(tmp_path / "cut", state))
    assert len(asked) == whole.launches - 20  # the launches after the resume …
    assert resumed.launches == whole.launches  # … and the ones before it, counted once
    assert resumed.wall_s >= state["spent"]["wall_s"]
    said = _said(render_bisect(resumed, []))
    assert f"{whole.launches} server launches" in said and "(the runs before the resume included)" in said


def test_a_finished_bisect_rendered_again_says_what_the_original_said(tmp_path):
    recipe = seam.recipe_for("perf")
    world = {"commits": 48, "culprit": 18, "seed": 1, "changes": ((18, 0.12), (38, -0.05))}
    whole, _ = seam.bisect(seam.World("perf", **world), recipe, out=tmp_path / "run")
    recorded, state = _recorded(tmp_path / "run")
    again_world = seam.World("perf", **world)
    asked = seam.asked(again_world)
    again, _ = seam.bisect(again_world, recipe, out=tmp_path / "run", replay=recorded,
                           before=spent_of(tmp_path / "run", state))
    assert asked == []  # every launch replayed
    assert again.posterior.rounds == whole.posterior.rounds
    assert again.posterior.launches == whole.posterior.launches
    assert (again.launches, again.builds) == (whole.launches, whole.builds)
    rounds = f"launches in {whole.posterior.rounds} rounds"
    assert rounds in render_bisect(whole, []) and rounds in render_bisect(again, [])


def test_with_two_changes_the_answer_is_the_one_with_the_larger_effect():
    """Two changes of one size (+6 % each): the whole range's search meets either first, from seed to seed. The
    answer — the found commit, its kind, How sure, the headline — is the change with the larger effect (the
    oldest of equal ones), and bisect.md says why. Seeds are tried until one history meets the change with the
    smaller effect first (the case this is about; which seed that is depends on the search's path, not asserted)."""
    case = None
    for seed in range(12):
        world = seam.World("perf", 48, 18, seed=seed, changes=((18, 0.06), (38, 0.06)))
        run, _ = seam.bisect(world, seam.recipe_for("perf"))
        rows = run.changes.changes
        if [r.sha for r in rows] != ["c018", "c038"]:
            continue
        larger = max(rows, key=lambda r: (abs(r.effect.value), -int(r.sha[1:])))
        assert run.result.first_new == larger.sha and run.mode is Mode.REGRESSION
        assert run.confirmation.found.sha == larger.sha  # How sure speaks of the answer
        assert headline(run) == f"The commit that broke it: `{larger.sha}` (the largest effect of the 2 changes named)"
        md = render_bisect(run, [])
        assert f"The found commit below, whose kind the exit code tells, is `{larger.sha}`: of the changes " \
               "named, the one with the largest effect." in md
        first = min(rows, key=lambda r: r.phase)  # the change the search met first
        if first.sha != larger.sha:
            case = seed
            break
    assert case is not None, "no seed met the smaller change first: the case is not exercised"
