"""The posterior search (abbisect/bisect/noisy.py) through the bisect's seam: the real driver, oracle,
posterior, assessors and confirmation over a simulated trial runner (abbisect/testing/seam.py: seeded outcomes of a
history with one planted change) — no git, no venv, no server."""

from __future__ import annotations

import json

import pytest

from abbisect.bisect.bisection import Mode
from abbisect.recipe.status import Outcome
from abbisect.testing import seam


def found(run) -> str | None:
    return run.result.first_new if run.result else None


@pytest.mark.parametrize("slots", [1, 4])
def test_a_one_in_three_crash_is_named_and_confirmed(slots):
    world = seam.World("flaky", 16, 9, seed=2)
    run, _ = seam.bisect(world, seam.recipe_for("flaky"), slots=slots)
    assert found(run) == "c009" and run.mode is Mode.REGRESSION
    assert run.posterior.answer == "c009" and run.posterior.answer_mass >= 0.99
    assert run.confirmation.level == "confirmed"
    # every commit called good or bad is called so truly (a commit not sure is skipped, never guessed)
    for s in run.steps:
        if s.outcome is not Outcome.SKIP:
            assert (s.outcome is Outcome.BAD) == world.after(s.sha), (s.sha, s.outcome, s.evidence)
    if slots > 1:
        assert max(len(r.commits) for r in run.rounds) <= 4
        assert any(len(set(r.commits)) > 1 for r in run.rounds)  # rounds of different commits, not copies


def test_the_report_tells_each_state_as_the_answer_has_it():
    """"Before the change" is what the commits before the answer showed: none of them ever failed, so it reads
    0 %, not a mix with the hypotheses that put the answer itself before the change (they see its crashes)."""
    world = seam.World("flaky", 16, 9, seed=2)
    run, _ = seam.bisect(world, seam.recipe_for("flaky"))
    assert found(run) == "c009"
    seen = {side: [t.verdict.outcome is Outcome.BAD for s in run.steps if world.after(s.sha) is side
                   for t in s.trials] for side in (False, True)}
    assert not any(seen[False]) and sum(seen[True]) >= 3
    states = run.posterior.states
    said = {k: float(v.split()[1].rstrip("%")) / 100 for k, v in (("before", states.before), ("after", states.after))}
    assert said["before"] <= 0.01, states
    assert abs(said["after"] - sum(seen[True]) / len(seen[True])) <= 0.1, states


def test_four_slots_need_fewer_rounds_than_one():
    one, _ = seam.bisect(seam.World("flaky", 16, 5, seed=7), seam.recipe_for("flaky"), slots=1)
    four, _ = seam.bisect(seam.World("flaky", 16, 5, seed=7), seam.recipe_for("flaky"), slots=4)
    assert found(one) == found(four) == "c005"
    assert len(four.rounds) * 2 <= len(one.rounds)


def test_a_batch_bug_seen_in_3_of_8_outputs_is_judged_as_a_rate():
    """On a busy host a batch-only loop shows in about 3 of 8 outputs: under the rules' 50 % cut every launch of
    a bad commit reads "ok" (good), so one launch a commit named a wrong commit or none. Judged as a rate
    against both ends, the planted commit is named and confirmed."""
    world = seam.World("batch", 24, 13, seed=4, batch_share=(0.3, 0.45))
    recipe = seam.recipe_for("batch")
    run, oracle = seam.bisect(world, recipe)
    assert oracle.assessor.kind == "batch"
    after = [t for s in run.steps if world.after(s.sha) for t in s.trials]
    read_good = [t for t in after if t.verdict.outcome is Outcome.GOOD and t.verdict.status == "ok"]
    assert len(read_good) * 2 > len(after), "the rules alone call most launches of a bad commit good"
    assert found(run) == "c013" and run.confirmation.level == "confirmed"


def test_a_slowdown_is_found_with_a_drifting_host():
    world = seam.World("perf", 40, 17, seed=3, drift=0.08, drift_period=2)
    run, _ = seam.bisect(world, seam.recipe_for("perf"))
    assert found(run) == "c017" and run.confirmation.level == "confirmed"
    # the ends are measured again as the search goes (rounds with an end beside a candidate)
    ends = {"c000", "c039"}
    assert any(set(r.commits) & ends and set(r.commits) - ends for r in run.rounds[1:])


def test_an_accuracy_drop_is_found_asking_candidates_only_the_telling_items():
    world = seam.World("accuracy", 30, 11, seed=5)
    run, _ = seam.bisect(world, seam.recipe_for("accuracy"))
    assert found(run) == "c011" and run.confirmation.level == "confirmed"
    candidates = [t for s in run.steps if not s.is_end for t in s.trials]
    assert candidates and all(t.spec.items is not None and len(t.spec.items) < 280 for t in candidates)


@pytest.mark.parametrize("rate", [0.0, 0.03])
def test_ends_that_do_not_differ_are_no_change(rate):
    """Never failing, or failing under `repeats.min_effect` apart: nothing to bisect."""
    world = seam.World("flaky", 12, 6, seed=1, rate=rate)
    run, _ = seam.bisect(world, seam.recipe_for("flaky"))
    assert run.mode is Mode.NO_CHANGE and run.result is None
    assert "do not differ" in run.message and run.posterior.no_change >= 0.99


def test_at_the_cap_it_is_not_sure_and_names_nothing():
    """A crash in 1 of 3 launches with at most 2 launches a commit: the posterior cannot settle; the run ends
    ambiguous with the posterior shown, and no commit below the threshold is named (the likeliest one was handed
    to the confirmation, which could not lift it to the threshold either)."""
    world = seam.World("flaky", 12, 6, seed=1)
    run, _ = seam.bisect(world, seam.recipe_for("flaky", repeats={"launches": 2, "max_launches": 2}))
    assert run.result is not None and run.result.outcome == "ambiguous" and run.result.first_new is None
    assert run.posterior.answer is None and max(run.posterior.mass.values()) < 0.99
    assert run.confirmation.level in ("not sure", "not reproduced") and not run.confirmation.held


def test_ends_on_two_branches_search_both_sides_of_their_merge_base():
    """main: base ─ m1 … m6 (the crash planted at m3); a release branch: base ─ r1 ─ r2 ─ r3, good. One posterior
    over both sides finds m3, and the range is the merge base .. main, as git's merge-base rule would have it."""
    parents = {"base": (), **{f"m{i}": (f"m{i - 1}" if i > 1 else "base",) for i in range(1, 7)},
               **{f"r{i}": (f"r{i - 1}" if i > 1 else "base",) for i in range(1, 4)}}
    world = seam.World("flaky", 0, 0, seed=4, parents=parents, planted="m3")
    run, _ = seam.bisect(world, seam.recipe_for("flaky"), ends=("r3", "m6"))
    assert run.merge_bases == ("base",) and found(run) == "m3"
    assert run.old.sha == "base" and run.new.sha == "m6" and run.excluded == ("r3",)
    assert "both sides of their merge base" in run.ends_note and run.confirmation.level == "confirmed"


def test_the_prior_gives_commits_touching_only_docs_less_mass():
    world = seam.World("flaky", 12, 6, seed=3)
    recipe = seam.recipe_for("flaky", bisect={"prior": {"unlikely": ["docs/", "*.md"], "weight": 0.1}})
    paths = {"c003": ("docs/guide.md",), "c004": ("README.md",), "c005": ("docs/a.md", "src/engine.py")}
    run, _ = seam.bisect(world, recipe, paths=paths)
    assert run.posterior.prior == {"c003": 0.1, "c004": 0.1}
    assert found(run) == "c006"


def test_a_resumed_search_rebuilds_the_posterior_and_runs_no_launch_twice(tmp_path):
    recipe = seam.recipe_for("flaky")
    whole, _ = seam.bisect(seam.World("flaky", 16, 9, seed=2), recipe, out=tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        seam.bisect(seam.cut(seam.World("flaky", 16, 9, seed=2), 10), recipe, out=tmp_path / "cut")
    state = json.loads((tmp_path / "cut" / "state.json").read_text())
    recorded = {s["sha"]: s for s in state["steps"]}
    done = {(s["sha"], 1 + len(s.get("more") or ())) for s in state["steps"]}
    assert sum(n for _, n in done) == 10
    world = seam.World("flaky", 16, 9, seed=2)
    asked = seam.asked(world)
    resumed, _ = seam.bisect(world, recipe, out=tmp_path / "cut", replay=recorded)
    assert found(resumed) == found(whole) == "c009"
    replayed = {(sha, a) for sha, n in done for a in range(n)}
    assert asked and not replayed & {(spec.sha, spec.attempt) for spec in asked}, "a recorded launch ran again"
    assert all(s.replayed for s in resumed.steps if s.sha in recorded)
    # the same seeded launches after the resume: the same search as the uninterrupted one
    assert [s.sha for s in resumed.steps] == [s.sha for s in whole.steps]
    assert resumed.posterior.mass == pytest.approx(whole.posterior.mass, abs=1e-6)


def test_the_confirmation_counts_the_search_and_a_resume_inside_it_runs_no_fresh_launch_twice(tmp_path):
    """The contract: the found commit and its parent are judged on their search launches and at
    least the recipe's launches of each, fresh; a resume in the middle of the confirmation keeps the fresh
    launches it made and ends as the run that was never cut."""
    recipe = seam.recipe_for("flaky")
    whole, _ = seam.bisect(seam.World("flaky", 16, 9, seed=2), recipe, out=tmp_path / "whole")
    c = whole.confirmation.counted
    assert found(whole) == "c009" and whole.confirmation.level == "confirmed" and c.mass.found >= 0.99
    launches = whole.confirmation.launches
    assert launches >= 6 and c.parent_launches >= 6 and c.counted + c.parent_counted > 0
    steps = {s.sha: s for s in whole.steps}
    labels = [t.spec.side for sha in ("c008", "c009") for t in steps[sha].trials]
    assert labels.count("confirm-found") == launches and labels.count("confirm-parent") == c.parent_launches
    assert sum(not lab.startswith(("confirm", "change")) for lab in labels) == c.counted + c.parent_counted
    assert whole.launches == sum(len(s.trials) for s in whole.steps)  # every launch is in the run's steps
    with pytest.raises(KeyboardInterrupt):
        seam.bisect(seam.cut(seam.World("flaky", 16, 9, seed=2), 5, "confirm"), recipe, out=tmp_path / "cut")
    state = json.loads((tmp_path / "cut" / "state.json").read_text())
    recorded = {s["sha"]: s for s in state["steps"]}
    world = seam.World("flaky", 16, 9, seed=2)
    asked = seam.asked(world)
    resumed, _ = seam.bisect(world, recipe, out=tmp_path / "cut", replay=recorded)
    fresh = [(spec.sha, spec.attempt) for spec in asked if spec.side.startswith("confirm")]
    assert found(resumed) == "c009" and resumed.confirmation.level == "confirmed"
    assert c.control_launches == 0  # a confirmation that holds launches no control
    assert len(fresh) == launches + c.parent_launches + c.control_launches - 5, fresh
    assert resumed.confirmation.launches == launches and resumed.confirmation.counted.mass == c.mass


def _first_confirmation(run) -> list[tuple[str, str]]:
    return [(s.sha, t.spec.side) for s in run.steps for t in s.trials if t.spec.side.startswith("confirm-")]


def test_a_confirmation_ends_once_its_answer_loses_the_lead_and_the_search_goes_on():
    """A wrong answer handed over at half the mass: the confirmation launches it and its parent fresh a pair a
    round and ends as soon as it is no longer the likeliest commit — not after the recipe's six launches of each —
    and the search goes on with those launches as evidence, to the right commit. When the parent did worse in its
    fresh launches than the commits before the change did in the search, the old end is launched again as a
    control: it behaves as in the search, so the host did not change."""
    recipe = seam.recipe_for("flaky", bisect={"changes": "one"})
    said: list[str] = []
    run, _ = seam.bisect(seam.World("flaky", 20, 13, seed=3), recipe, say=said.append)
    assert found(run) == "c013" and run.confirmation.level == "confirmed" and run.confirmation.counted.attempt == 2
    assert _first_confirmation(run) == [("c019", "confirm-found"), ("c018", "confirm-parent")]
    assert any(m.startswith("confirmation 1:") and "not reproduced; searching on" in m for m in said)
    said.clear()
    run, _ = seam.bisect(seam.World("flaky", 24, 11, seed=3), recipe, say=said.append)
    assert found(run) == "c011" and run.confirmation.level == "confirmed"
    first = _first_confirmation(run)
    assert first.count(("c000", "confirm-old end")) == 2 and len(first) == 4, first
    assert any("the host did not change" in m for m in said)
    assert run.confirmation.counted.control_launches == 0  # the second confirmation held: no control


def test_the_guard_drops_the_search_launches_of_a_commit_its_fresh_ones_disagree_with():
    """The host turns busy between the search and the confirmation: every fresh launch is 8 % slower. The found
    commit's and its parent's fresh passes differ from theirs in the search, so only the fresh ones count; both
    ran on the same busy host, so the answer still holds, on them alone — and the report says so. A host that
    crashes every launch once the search is over: the parent crashes in its fresh launches, so the old end is
    launched again as a control; it crashes too, where the commits before the change never did in the search: the
    host changed, and nothing is named."""
    from abbisect.report.bisect import render_bisect

    run, _ = seam.bisect(seam.World("perf", 24, 11, seed=3, busy_confirm=0.08), seam.recipe_for("perf"))
    c = run.confirmation.counted
    assert found(run) == "c011" and run.confirmation.level == "confirmed", run.confirmation.sentence
    assert c.guard["parent"] and c.guard["found"] and "differ from its" in c.guard["parent"]
    assert c.counted == c.parent_counted == 0
    assert "⚠ Guard: the parent's launches in the search no longer count" in render_bisect(run, ["abbisect bisect"])
    broken, _ = seam.bisect(seam.World("flaky", 16, 9, seed=2, busy_confirm=1.0), seam.recipe_for("flaky"))
    c = broken.confirmation.counted
    assert broken.confirmation.level == "host changed" and found(broken) is None and c.control_launches >= 2
    assert "no longer behaves as the commits before the change did in the search" in c.guard["old end"]


def test_the_report_shows_the_posterior_a_picture_and_an_svg():
    import xml.etree.ElementTree as ET

    from abbisect.report.bisect import bisect_json, headline, render_bisect
    from abbisect.report.posterior import svg

    run, _ = seam.bisect(seam.World("flaky", 16, 9, seed=2), seam.recipe_for("flaky"))
    md = render_bisect(run, ["abbisect bisect r.yaml --good c000 --bad c015"])
    assert "### Posterior" in md and "holding **" in md and "`posterior.svg`" in md
    picture = md.split("### Posterior", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    marked = [line for line in picture.splitlines() if "◀" in line]
    assert len(marked) == 1 and marked[0].startswith("c009")
    assert "Before the change: fails" in md and "Every launch counted, the search's and the fresh ones" in md
    data = bisect_json(run)
    assert data["posterior"]["answer"] == "c009" and data["posterior"]["mass"]["c009"] >= 0.99
    tree = ET.fromstring(svg(run))
    bars = [e for e in tree.iter("{http://www.w3.org/2000/svg}rect")]
    assert len(bars) == len(run.posterior.order) and any(b.get("fill") == "#c0392b" for b in bars)
    # not sure: the headline says so, with the likeliest commits, and names none
    cut, _ = seam.bisect(seam.World("flaky", 12, 6, seed=1), seam.recipe_for("flaky", repeats={"launches": 2,
                                                                                              "max_launches": 2}))
    assert headline(cut).startswith("Not sure: no commit holds 99% of the posterior")
    assert "**Not sure**" in render_bisect(cut, ["abbisect bisect r.yaml"])
