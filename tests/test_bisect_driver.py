"""The bisect driver through its seam: every ends policy and round policy over a fake `sha → verdict` function
and an in-memory history — no git, no venv, no server, so every combination runs in milliseconds.

The fake is the real interface (`Variable`, the oracle's fetch), not a mock of the driver: the driver, the
policies and the pure search run as they do in a real bisect. A few end-to-end CLI tests on real processes
stay in test_bisect_cli.py, test_bisect_lazy_ends.py and test_bisect_slots.py.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from abbisect.bisect.bisection import BisectRun, EndsMode, Mode, Role
from abbisect.bisect.driver import Driver
from abbisect.bisect.oracle import Oracle
from abbisect.bisect.search import bisect as git_bisect
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome, Status
from abbisect.testing.fakes import FakeHistory, line
from abbisect.trial.executors import Slot
from abbisect.trial.spec import Timings, TrialResult, TrialSpec
from abbisect.verdict.rules import Verdict

STATUS = {Outcome.GOOD: Status.OK, Outcome.BAD: Status.DEGENERATE, Outcome.SKIP: Status.BUILD_FAILED}


def recipe(**bisect) -> Recipe:
    return Recipe.model_validate({"name": "fake", "engine": {"kind": "command", "repo": "/nonexistent"},
                                  "launch": {"command": ["serve"]}, "prompts": ["p"], "bisect": bisect})


class Verdicts:
    """The fake trial runner: each commit's outcome from a table; counts what was asked."""

    def __init__(self, outcomes: dict[str, Outcome], cached: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.outcomes, self.cached, self.asked = outcomes, set(cached), []

    def fetch(self, spec: TrialSpec, progress, runner) -> TrialResult:
        self.asked.append(spec.sha)
        outcome = self.outcomes[spec.sha]
        return TrialResult(spec, None, None, (), (), (), (), None, Verdict(STATUS[outcome], outcome, ("fake",)),
                           Timings(),
                           cached=spec.sha in self.cached)

    def holds(self, spec: TrialSpec) -> bool:
        return spec.sha in self.cached


def bisect_fake(parents, outcomes, good: str, bad: str, tmp_path: Path, slots: int = 1, cached=(), **options):
    rec = recipe(**options)
    var = FakeHistory(parents, rec)
    verdicts = Verdicts(outcomes, set(cached))
    said: list[str] = []
    slot_list = [Slot(i, None) for i in range(slots)]
    oracle = Oracle(rec, var, tmp_path, verdicts.fetch, verdicts.holds, said.append, prefetch=0, slots=slot_list)
    g, b = var.resolve_ends(good, bad)
    old, new, bases = var.order_ends(g, b)
    run = BisectRun(rec, var.repo, g, b, old, new, var, merge_bases=bases)
    return Driver(oracle, said.append).run(run), verdicts, said


POLICIES = [pytest.param(ends, slots, id=f"{ends}-{slots}slot") for ends in ("first", "lazy") for slots in (1, 2, 3, 4)]


@pytest.mark.parametrize(("ends", "slots"), POLICIES)
@pytest.mark.parametrize("direction", ["regression", "fix"])
def test_every_policy_finds_the_first_changed_commit(tmp_path, ends, slots, direction):
    parents = line(40)
    shas = list(parents)
    first = 23
    before, after = ((Outcome.GOOD, Outcome.BAD) if direction == "regression" else (Outcome.BAD, Outcome.GOOD))
    outcomes = {s: before if i < first else after for i, s in enumerate(shas)}
    good, bad = (shas[0], shas[-1]) if direction == "regression" else (shas[-1], shas[0])
    run, verdicts, _ = bisect_fake(parents, outcomes, good, bad, tmp_path, slots, ends=ends)
    assert run.mode is (Mode.REGRESSION if direction == "regression" else Mode.FIX)
    assert run.result is not None and run.result.first_new == shas[first]
    assert run.ends_mode is (EndsMode.LAZY if ends == "lazy" and slots == 1 else EndsMode.FIRST)
    assert len(verdicts.asked) == len(set(verdicts.asked)), "no commit is tested twice"
    assert run.found_parent == shas[first - 1] and run.commits[shas[first]].subject == f"subject of {shas[first]}"
    if slots > 1:
        assert run.rounds and max(len(r.commits) for r in run.rounds) <= slots


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize(("ends", "slots"), POLICIES)
def test_with_skips_the_answer_is_the_pure_searchs(tmp_path, seed, ends, slots):
    """Random untestable commits: sequential or multisection, ends first or lazy, the driver ends where the
    pure search (git's own choice of commits) ends: the same commit, or the same set of candidates."""
    rng = random.Random(seed)
    n = rng.randint(3, 30)
    parents = line(n)
    shas = list(parents)
    first = rng.randint(1, n - 1)
    outcomes = {s: Outcome.GOOD if i < first else Outcome.BAD for i, s in enumerate(shas)}
    for s in shas[1:-1]:
        if rng.random() < 0.25:
            outcomes[s] = Outcome.SKIP
    run, _, _ = bisect_fake(parents, outcomes, shas[0], shas[-1], tmp_path, slots, ends=ends)
    graph = FakeHistory(parents, recipe()).graph(shas[-1], [shas[0]])
    mark = {Outcome.GOOD: "old", Outcome.BAD: "new", Outcome.SKIP: "skip"}
    expected = git_bisect(graph, shas[-1], [shas[0]], lambda s: mark[outcomes[s]])
    assert run.result is not None and run.result.outcome == expected.outcome
    if expected.outcome == "found":
        assert run.result.first_new == expected.first_new
    else:
        assert set(run.result.candidates) == set(expected.candidates)


@pytest.mark.parametrize("ends", ["first", "lazy"])
def test_swapped_ends_are_said_with_the_verdicts_observed(tmp_path, ends):
    """--good names the new end that tests bad, --bad the old end that tests good (the demo's `--good v0.2
    --bad v0.1`): the console and the run say --good is actually bad and --bad is good, never the reverse."""
    parents = line(12)
    shas = list(parents)
    outcomes = {s: Outcome.GOOD if i < 5 else Outcome.BAD for i, s in enumerate(shas)}
    run, _, said = bisect_fake(parents, outcomes, good=shas[-1], bad=shas[0], tmp_path=tmp_path, ends=ends)
    assert run.mode is Mode.REGRESSION and run.result is not None and run.result.first_new == shas[5]
    expected = f"--good {shas[-1]} is actually bad and --bad {shas[0]} is good"
    assert run.mislabelled == expected
    assert any(line.startswith(f"{expected}: searching for the commit that broke it") for line in said), said
    assert not any("is actually good" in line for line in said)


def test_ends_as_labelled_say_nothing_about_a_mislabel(tmp_path):
    parents = line(12)
    shas = list(parents)
    outcomes = {s: Outcome.GOOD if i < 5 else Outcome.BAD for i, s in enumerate(shas)}
    run, _, said = bisect_fake(parents, outcomes, shas[0], shas[-1], tmp_path)
    assert run.mislabelled == "" and not any("actually" in line for line in said)


@pytest.mark.parametrize(("ends", "slots"), POLICIES)
@pytest.mark.parametrize(("end_outcomes", "mode"), [((Outcome.GOOD, Outcome.GOOD), Mode.NO_CHANGE),
                                                    ((Outcome.BAD, Outcome.BAD), Mode.NO_CHANGE),
                                                    ((Outcome.SKIP, Outcome.BAD), Mode.UNTESTABLE_END),
                                                    ((Outcome.GOOD, Outcome.SKIP), Mode.UNTESTABLE_END)])
def test_ends_that_show_no_change_or_cannot_be_tested_stop_the_run(tmp_path, ends, slots, end_outcomes, mode):
    parents = line(16)
    shas = list(parents)
    outcomes = {s: end_outcomes[0] if i < 8 else end_outcomes[1] for i, s in enumerate(shas)}
    outcomes[shas[0]], outcomes[shas[-1]] = end_outcomes
    run, _, _ = bisect_fake(parents, outcomes, shas[0], shas[-1], tmp_path, slots, ends=ends)
    assert run.mode is mode and run.mode.stopped
    assert sorted(s.sha for s in run.steps if s.is_end) == [shas[0], shas[-1]]
    if ends == "first":  # commits tested beside the ends are no evidence once the ends show no change
        assert all(not s.needed for s in run.steps if not s.is_end)


def test_lazy_ends_test_an_end_only_when_the_answer_rests_on_it(tmp_path):
    parents = line(20)
    shas = list(parents)
    inside = {s: Outcome.GOOD if i < 10 else Outcome.BAD for i, s in enumerate(shas)}
    run, verdicts, _ = bisect_fake(parents, inside, shas[0], shas[-1], tmp_path, ends="lazy")
    assert run.result is not None and run.result.first_new == shas[10]
    assert shas[0] not in verdicts.asked and shas[-1] not in verdicts.asked
    # the change at the first commit after the old end: the old end is its parent, so it is tested
    at_start = {s: Outcome.GOOD if i < 1 else Outcome.BAD for i, s in enumerate(shas)}
    run, verdicts, _ = bisect_fake(parents, at_start, shas[0], shas[-1], tmp_path, ends="lazy")
    assert run.result is not None and run.result.first_new == shas[1] and shas[0] in verdicts.asked


def test_lazy_ends_use_ends_the_trial_cache_holds(tmp_path):
    parents = line(20)
    shas = list(parents)
    outcomes = {s: Outcome.GOOD if i < 10 else Outcome.BAD for i, s in enumerate(shas)}
    run, verdicts, _ = bisect_fake(parents, outcomes, shas[0], shas[-1], tmp_path, ends="lazy",
                                   cached={shas[0], shas[-1]})
    assert verdicts.asked[:2] == [shas[0], shas[-1]] and any("from the trial cache" in e for e in run.ends_lazy)


def test_a_lazy_end_that_contradicts_its_label_hands_over_to_ends_first(tmp_path):
    parents = line(20)
    shas = list(parents)
    outcomes = {s: Outcome.GOOD if i < 1 else Outcome.BAD for i, s in enumerate(shas)}
    # named the other way round: the search by labels ends at the old end, which is then tested and contradicts
    run, _, said = bisect_fake(parents, outcomes, good=shas[-1], bad=shas[0], tmp_path=tmp_path, ends="lazy")
    assert run.result is not None and run.result.first_new == shas[1] and run.mode is Mode.REGRESSION
    assert any("against its label" in line for line in said)
    assert run.mislabelled.startswith(f"--good {shas[-1]} is actually bad")


def test_three_slots_test_a_commit_beside_the_ends(tmp_path):
    parents = line(30)
    shas = list(parents)
    outcomes = {s: Outcome.GOOD if i < 20 else Outcome.BAD for i, s in enumerate(shas)}
    run, _, _ = bisect_fake(parents, outcomes, shas[0], shas[-1], tmp_path, slots=3)
    beside = [s for s in run.steps if s.round == 0 and s.role is Role.CANDIDATE]
    assert len(beside) == 1 and beside[0].needed
    no_change = {s: Outcome.GOOD for s in shas}
    run, _, _ = bisect_fake(parents, no_change, shas[0], shas[-1], tmp_path, slots=3)
    beside = [s for s in run.steps if s.round == 0 and s.role is Role.CANDIDATE]
    assert run.mode is Mode.NO_CHANGE and beside and not any(s.needed for s in beside)


def branches() -> dict[str, tuple[str, ...]]:
    """base ─ m1 ─ m2 ─ m3 (main) and base ─ r1 ─ r2 (a release branch)."""
    return {"base": (), "m1": ("base",), "m2": ("m1",), "m3": ("m2",), "r1": ("base",), "r2": ("r1",)}


@pytest.mark.parametrize(("base_outcome", "searched"), [(Outcome.GOOD, "m3"), (Outcome.BAD, "r2")])
def test_ends_on_two_branches_test_their_merge_base_and_search_the_side_that_changed(tmp_path, base_outcome,
                                                                                     searched):
    parents = branches()
    outcomes = {"base": base_outcome, "m1": Outcome.GOOD, "m2": Outcome.BAD, "m3": Outcome.BAD,
                "r1": Outcome.BAD, "r2": Outcome.GOOD}
    if base_outcome is Outcome.GOOD:
        outcomes.update(r1=Outcome.GOOD, r2=Outcome.GOOD)
    else:
        outcomes.update(m1=Outcome.BAD, m2=Outcome.BAD, m3=Outcome.BAD)
    run, _, _ = bisect_fake(parents, outcomes, good="r2", bad="m3", tmp_path=tmp_path)
    assert [s.role for s in run.steps[:3]] == [Role.GOOD_END, Role.BAD_END, Role.MERGE_BASE]
    assert run.new.sha == searched and run.old.sha == "base"
    assert run.result is not None and run.result.first_new == ("m2" if searched == "m3" else "r2")


def test_a_merge_base_with_neither_verdict_stops_the_run(tmp_path):
    outcomes = {"base": Outcome.SKIP, "m1": Outcome.BAD, "m2": Outcome.BAD, "m3": Outcome.BAD,
                "r1": Outcome.GOOD, "r2": Outcome.GOOD}
    run, _, _ = bisect_fake(branches(), outcomes, good="r2", bad="m3", tmp_path=tmp_path)
    assert run.mode is Mode.UNTESTABLE_MERGE_BASE and run.mode.ending == "untestable-end"


def test_a_flaky_commit_is_skipped_by_retries(tmp_path):
    parents = line(10)
    shas = list(parents)
    outcomes = {s: Outcome.GOOD if i < 5 else Outcome.BAD for i, s in enumerate(shas)}
    rec = recipe()
    var = FakeHistory(parents, rec)
    flips = {"n": 0}

    def runner(spec, progress):  # every retry of c005 disagrees with its first trial
        flips["n"] += 1
        outcome = Outcome.GOOD if spec.sha == shas[5] else outcomes[spec.sha]
        return TrialResult(spec, None, None, (), (), (), (), None, Verdict(STATUS[outcome], outcome, ()), Timings())

    verdicts = Verdicts(outcomes)
    oracle = Oracle(rec, var, tmp_path, verdicts.fetch, verdicts.holds, lambda m: None, runner=runner, retries=1,
                    prefetch=0)
    g, b = var.resolve_ends(shas[0], shas[-1])
    run = Driver(oracle, lambda m: None).run(BisectRun(rec, var.repo, g, b, g, b, var))
    step = run.step_of(shas[5])
    assert step is not None and step.outcome is Outcome.SKIP and step.evidence.startswith("flaky")
    assert run.result is not None and run.result.outcome == "ambiguous" and shas[5] in run.result.candidates


def test_a_resumed_run_replays_recorded_steps_without_testing_them(tmp_path):
    parents = line(16)
    shas = list(parents)
    outcomes = {s: Outcome.GOOD if i < 9 else Outcome.BAD for i, s in enumerate(shas)}
    first, _, _ = bisect_fake(parents, outcomes, shas[0], shas[-1], tmp_path)
    rec = recipe()
    var = FakeHistory(parents, rec)
    again = Verdicts(outcomes)
    from abbisect.infra.serial import dump

    replay = {s.sha: dump(s) for s in first.steps[:3]}
    oracle = Oracle(rec, var, tmp_path, again.fetch, again.holds, lambda m: None, prefetch=0)
    g, b = var.resolve_ends(shas[0], shas[-1])
    run = Driver(oracle, lambda m: None).run(BisectRun(rec, var.repo, g, b, g, b, var), replay)
    assert run.result is not None and run.result.first_new == first.result.first_new  # type: ignore[union-attr]
    assert not set(again.asked) & set(replay) and all(s.replayed for s in run.steps[:3])


def test_a_bisect_report_renders_without_git(tmp_path, monkeypatch):
    """Renderers are pure: everything bisect.md shows (subjects, links, the decisive A/B) was gathered when the
    search ended, so rendering works with no git on PATH at all."""
    from abbisect.report.bisect import bisect_json, headline, render_bisect

    parents = line(12)
    shas = list(parents)
    outcomes = {s: Outcome.GOOD if i < 7 else Outcome.BAD for i, s in enumerate(shas)}
    run, _, _ = bisect_fake(parents, outcomes, shas[-1], shas[0], tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-programs-here"))
    text = render_bisect(run, ["abbisect bisect r.yaml --good x --bad y"])
    assert headline(run) in text and f"subject of {shas[7]}" in text
    assert "The ends were named the other way round" in text and "is actually bad" in text
    assert bisect_json(run)["first_new"] == shas[7]
