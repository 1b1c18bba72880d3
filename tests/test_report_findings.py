"""The statistical bisect's renderers as pure functions: report/posterior.py (the picture, the section, the SVG),
report/changes.py (the headline and the changes table) and report/bisect.py's How sure and bisect.json, over
typed results built here (bisect/findings.py) — no search, no CLI. What a search makes of a history is
tests/test_bisect_noisy.py's and test_changes.py's; this is what the report makes of a result."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

from abbisect.assess.base import Comparison
from abbisect.bisect.bisection import BisectRun, Mode, Role, Step
from abbisect.bisect.findings import (
    Change,
    Changes,
    Confirmation,
    Counted,
    EffectShown,
    Ended,
    Judged,
    Level,
    Masses,
    PartSearched,
    PosteriorSummary,
    Round,
    States,
)
from abbisect.bisect.gitlog import CommitLinks
from abbisect.bisect.search import SearchResult
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome
from abbisect.report import changes, posterior
from abbisect.report.bisect import bisect_json, found_block, headline, how_sure_block
from abbisect.testing.fakes import FakeHistory, line

RECIPE = Recipe.model_validate({"name": "pure", "engine": {"kind": "command", "repo": "/nonexistent"},
                                "launch": {"command": ["serve"]}, "prompts": ["p0"], "repeats": {"launches": 6}})


def run_of(tested: dict[str, Role], **fields) -> BisectRun:
    """A finished bisect of c000..c011 whose `tested` commits each have a step (no trial: rendering needs none)."""
    history = FakeHistory(line(12), RECIPE)
    old, new = history.rev("c000"), history.rev("c011")
    run = BisectRun(RECIPE, Path("/nonexistent"), old, new, old, new, history, mode=Mode.REGRESSION, **fields)
    run.steps = [Step(n, sha, role, Outcome.GOOD, "ok", f"0/6 failed; after the change with probability {n}%", 1.0,
                      False) for n, (sha, role) in enumerate(tested.items())]
    return run


def summary(**changed) -> PosteriorSummary:
    base = PosteriorSummary(
        kind="flaky", threshold=0.99, launches=40, old="c000", rounds=12, budget=60, culprits=11,
        order=("c001", "c004", "c005", "c006", "c009"), mass={"c001": 0.0, "c004": 0.002, "c005": 0.993,
                                                               "c006": 0.001, "c009": 0.0},
        no_change=0.004, entropy_bits=0.1, answer="c005", answer_mass=0.993, likeliest="c005",
        likely=(("c005", 0.993), (None, 0.004)), prior={}, unlikely=(),
        states=States("fails 0.0% (± 1.0%) of launches", "fails 40.0% (± 9.0%) of launches"),
        after={"c004": 0.003, "c005": 0.998})
    return replace(base, **changed)


def confirmation(level: Level = Level.CONFIRMED, counted: bool = True) -> Confirmation:
    return Confirmation(
        level, "its parent is like the old end", Judged("c004", Outcome.GOOD, "0/9 failed"),
        Judged("c005", Outcome.BAD, "4/8 failed"), launches=6, compared=Comparison("flaky", "failed 0/9 → 4/8"),
        counted=Counted(7, 0, 2, 3, 4, 1, {"parent": "its fresh launches differ", "found": None},
                        Masses(0.993, 0.002, 0.004)) if counted else None)


ENDS = {"c000": Role.OLD_END, "c011": Role.NEW_END}


def test_the_picture_marks_the_answer_once_and_shows_every_launched_commit():
    run = run_of({**ENDS, "c004": Role.CANDIDATE, "c005": Role.CANDIDATE}, posterior=summary())
    lines = posterior.picture(run, summary()).splitlines()
    assert lines[0].startswith("c000") and "old end" in lines[0] and lines[-1].startswith("no change")
    marked = [row for row in lines if "◀" in row]
    assert len(marked) == 1 and marked[0].startswith("c005") and "99.3%" in marked[0]
    # a commit launched, or holding 0.5 % or more, has a row; the others (c001, c006, c009) do not
    assert [row[:4] for row in lines[1:-1]] == ["c004", "c005"]
    # the picture of a part of the range starts at the part's own old end, and marks its likeliest when none holds
    part = posterior.picture(run, summary(old="c001", answer=None, answer_mass=None, likeliest="c004"))
    assert part.startswith("c001  old end") and [row[:4] for row in part.splitlines() if "◀" in row] == ["c004"]


def test_the_posterior_section_says_the_answer_or_what_is_likeliest():
    named = "\n".join(posterior.block(run_of(ENDS, posterior=summary())))
    assert "The change is at `c005`, holding **99.3%** of the posterior (a commit is named at 99% or more)" in named
    assert "after 40 launches in 12 rounds (at most 60) over 11 candidate commits" in named
    assert "Before the change: fails 0.0% (± 1.0%) of launches; after it: fails 40.0%" in named
    assert "Prior: every candidate commit alike." in named
    unsure = summary(answer=None, answer_mass=None, prior={"c004": 0.1}, unlikely=("docs/**",))
    shown = "\n".join(posterior.block(run_of(ENDS, posterior=unsure)))
    assert "**Not sure**: no commit holds 99% of the posterior; the likeliest are `c005` 99.3%, no change 0.4%" in shown
    assert "Prior: 1 commit(s) touching only `docs/**` weigh 0.1 of the others a priori (`c004`)" in shown
    assert posterior.block(run_of(ENDS)) == []  # a rule on one trial: no posterior


def test_the_svg_has_a_bar_a_commit_and_the_answer_in_red():
    run = run_of({**ENDS, "c005": Role.CANDIDATE}, posterior=summary())
    bars = list(ET.fromstring(posterior.svg(run)).iter("{http://www.w3.org/2000/svg}rect"))
    assert len(bars) == 5 and [b.get("fill") for b in bars].count("#c0392b") == 1


def effect(value: float, share: float | None = None) -> EffectShown:
    return EffectShown(value, value - 0.01, value + 0.01, 0.95, "log ratio of tpot_median", True,
                       f"{value:+.1%} [{value - 0.01:+.1%}, {value + 0.01:+.1%}]", value > 0, share)


def two_changes(accounted: bool = True) -> Changes:
    part = summary(old="c005", answer="c009", likeliest="c009")
    first = Change("c005", "c004", 1, effect(0.06, 0.6), Level.CONFIRMED, None, CommitLinks("https://x/c005"))
    second = Change("c009", "c008", 2, effect(0.04, 0.4), Level.CONFIRMED, part, CommitLinks())
    return Changes(effect(0.1), (first, second), effect(0.0, 0.0), accounted, True,
                   "2 changes account for the ends' difference", 3, 168,
                   (PartSearched("c005", "c011", 2, Ended.CONFIRMED, 9),), first, confirmation())


def test_the_changes_headline_and_table_tell_each_change_and_what_is_left():
    run = run_of({**ENDS, "c004": Role.CANDIDATE, "c005": Role.CANDIDATE}, changes=two_changes())
    assert changes.headline(run) == ("2 changes account for the ends' difference: `c005` (+6.0%), "
                                     "`c009` (+4.0%)")
    text = "\n".join(changes.block(run))
    assert "| 1 | [`c005`](https://x/c005) |" in text and "| 2 | `c009` |" in text
    assert "| regression | +6.0% [+5.0%, +7.0%] | 60% |" in text and "**not accounted for**" in text
    assert "`c005`..`c011` | confirmed | 9 |" in text and "Posterior of search 2, which named `c009`" in text
    assert text.split("Posterior of search 2", 1)[1].split("```text\n", 1)[1].startswith("c005  old end")
    unsure = run_of(ENDS, changes=replace(two_changes(), accounted=False, said="about 30% is not accounted for"))
    assert changes.headline(unsure) == "2 changes: `c005` (+6.0%), `c009` (+4.0%); about 30% is not accounted for"
    assert changes.headline(run_of(ENDS)) is None and changes.block(run_of(ENDS)) == []


def test_how_sure_says_the_level_the_launches_and_the_guard():
    found = SearchResult("found", "c005", ("c005",), 0, ())
    text = "\n".join(how_sure_block(run_of(ENDS, result=found, confirmation=confirmation())))
    assert ("**Confirmed**: its parent is like the old end (fresh launches: 6 of the found commit, 7 of its parent; "
            "counted with them from the search: 2 and 3).") in text
    assert "Parent vs found, run again: failed 0/9 → 4/8." in text and "the found commit holds 99.3%" in text
    assert "⚠ Guard: the parent's launches in the search no longer count" in text and "found's" not in text
    rule = "\n".join(how_sure_block(run_of(ENDS, result=found, confirmation=confirmation(counted=False))))
    assert "(6 fresh launch(es) each)." in rule and "counted with them" not in rule and "Guard" not in rule
    changed = run_of(ENDS, result=SearchResult("ambiguous", None, ("c005",), 0, ()),
                     confirmation=confirmation(Level.HOST_CHANGED))
    assert how_sure_block(changed)[2] == "**Host changed**: its parent is like the old end."
    assert headline(changed).startswith("Not confirmed: the host changed")


def test_bisect_json_writes_each_result_with_its_keys():
    run = run_of(ENDS, result=SearchResult("found", "c005", ("c005",), 0, ()), confirmation=confirmation(),
                 posterior=summary(), changes=two_changes(), rounds=[Round(0, ("c000", "c011"), 1.5, 10)])
    run.commits = {sha: FakeHistory(line(12), RECIPE).info(sha) for sha in ("c000", "c005", "c011")}
    data = json.loads(json.dumps(bisect_json(run), default=str))
    c = data["confirmation"]
    assert list(c) == ["launches", "parent_launches", "control_launches", "counted", "parent_counted", "rounds",
                       "attempt", "level", "held", "sentence", "compared", "guard", "mass", "parent", "found"]
    assert c["level"] == "confirmed" and c["held"] is True and c["found"] == {"sha": "c005", "outcome": "bad",
                                                                              "evidence": "4/8 failed"}
    assert list(Confirmation.json(confirmation(counted=False))) == ["launches", "level", "held", "compared",
                                                                    "sentence", "parent", "found"]
    assert data["posterior"]["likely"] == [["c005", 0.993], [None, 0.004]] and data["posterior"]["answer"] == "c005"
    assert data["changes"]["primary"] == "c005" and data["changes"]["primary_sign"] == "regression"
    assert data["changes"]["parts"] == [{"old": "c005", "new": "c011", "phase": 2, "outcome": "confirmed",
                                         "launches": 9}]
    assert data["changes"]["changes"][1]["posterior"]["old"] == "c005"
    assert data["rounds"] == [{"round": 0, "commits": ["c000", "c011"], "seconds": 1.5, "remaining": 10}]
    bare = json.loads(json.dumps(bisect_json(run_of(ENDS)), default=str))
    assert bare["confirmation"] == {} and bare["posterior"] is None and bare["changes"] is None
    assert [c["links"] for c in data["changes"]["changes"]] == [{"commit": "https://x/c005"}, {}]


def test_the_answers_links_are_written_with_the_keys_there_are_and_shown():
    """The found commit's GitHub links, gathered when the search ended: bisect.json's "links" has a key for each
    link there is (its parent's page among them; none without a GitHub remote), and the found table links the sha
    and the compare view with its parent."""
    home = "https://github.com/o/r"
    links = CommitLinks(f"{home}/commit/c005", f"{home}/compare/c004...c005", None, f"{home}/commit/c004")
    run = run_of(ENDS, result=SearchResult("found", "c005", ("c005",), 0, ()), found_parent="c004", links=links)
    run.commits = {sha: FakeHistory(line(12), RECIPE).info(sha) for sha in ("c000", "c005", "c011")}
    data = json.loads(json.dumps(bisect_json(run), default=str))
    assert data["links"] == {"commit": f"{home}/commit/c005", "compare": f"{home}/compare/c004...c005",
                             "parent": f"{home}/commit/c004"}
    assert bisect_json(run_of(ENDS))["links"] == {}
    table = "\n".join(found_block(run))
    assert f"[`c005`]({home}/commit/c005)" in table and f"[c004…c005]({home}/compare/c004...c005)" in table
