"""How a commit's trials become its outcome (abbisect/assess), through the `Assessor` seam with trials made as
the pipeline makes them (a verdict, a launch, per-pass outcomes, perf passes) — no process, no server."""

from __future__ import annotations

from pathlib import Path

from abbisect.assess import assessor_for
from abbisect.assess.flaky import Flaky
from abbisect.recipe import Recipe
from abbisect.trial.spec import LaunchInfo, TrialResult, TrialSpec
from abbisect.verdict.rules import Verdict
from abbisect.verdict.status import Outcome, Status


def recipe(**overrides) -> Recipe:
    return Recipe.model_validate({"name": "fake", "engine": {"kind": "command", "repo": "/nonexistent"},
                                  "launch": {"command": ["serve"]}, "prompts": ["p"], **overrides})


def launch() -> LaunchInfo:
    return LaunchInfo(("serve",), {}, "ready", 0.1, None, "server.log", (), {}, {})


def trial(rec: Recipe, sha: str, n: int, status: Status = Status.OK, outcome: Outcome = Outcome.GOOD,
          reasons: tuple[str, ...] = ("fake",), **extras) -> TrialResult:
    spec = TrialSpec(rec, "x", sha, sha, "", "/nonexistent", "/nonexistent", str(Path("/nonexistent") / sha))
    return TrialResult(spec.again(n), None, launch(), (), (), (), (), None, Verdict(status, outcome, reasons), {},
                       extras)


def flaky_launches(rec: Recipe, sha: str, bad_passes: list[int]) -> list[TrialResult]:
    """One launch per entry, each with `passes` passes of which the given number failed."""
    passes = rec.repeats.passes
    return [trial(rec, sha, i, pass_outcomes=[Outcome.BAD] * k + [Outcome.GOOD] * (passes - k))
            for i, k in enumerate(bad_passes)]


# --- flaky: the cap counts launches ------------------------------------------------------------------


def test_flaky_cap_compares_launches_with_launches_not_observations():
    """Issue 34: with `launches: 2, passes: 5` the cap is 16 launches, but observations (launches × passes)
    were compared with it, so an unsure candidate stopped after 4 launches (20 observations ≥ 16)."""
    rec = recipe(repeats={"launches": 2, "passes": 5})
    a = assessor_for(rec)
    assert isinstance(a, Flaky) and (a.first, a.cap) == (2, 16)
    good = flaky_launches(rec, "good", [0, 0, 0, 0])
    bad = flaky_launches(rec, "bad", [2, 1, 2, 2])
    candidate = flaky_launches(rec, "cand", [1, 0, 1, 0])  # 2 in 20: between the ends, not sure
    found = a.against(candidate, good, bad)
    assert found.outcome is Outcome.SKIP and found.stats["runs"] == 20
    assert found.more == 2, found  # 4 launches of a cap of 16: two more, as launches come
    at_cap = a.against(flaky_launches(rec, "cand", [1, 0] * 8), good, bad)
    assert at_cap.more == 0 and "not sure after 16 launches" in at_cap.evidence, at_cap  # the cap
    # The ends, not sure of each other after 2 launches each (10 observations): two more each, not none.
    ends = a.settle_ends(flaky_launches(rec, "old", [0, 1]), flaky_launches(rec, "new", [1, 1]))
    assert ends[0].more == ends[1].more == 2 and "after 2 launches" in ends[0].evidence, ends


def test_flaky_calls_are_read_from_the_enum_and_an_empty_sample_is_untestable():
    rec = recipe(repeats={"launches": 3})
    a = assessor_for(rec)
    old = [trial(rec, "old", i) for i in range(12)]
    new = [trial(rec, "new", i, Status.CRASHED_AT_STARTUP, Outcome.BAD) for i in range(12)]
    first, second = a.settle_ends(old, new)
    assert (first.outcome, second.outcome) == (Outcome.GOOD, Outcome.BAD) and "different" in second.evidence
    alike = a.settle_ends([trial(rec, "old", i) for i in range(40)], [trial(rec, "new", i) for i in range(40)])
    assert alike[0].more == 0 and "fail alike" in alike[0].evidence
    empty = a.alone([])
    assert empty.outcome is Outcome.SKIP and empty.evidence == "untestable: no trial"
