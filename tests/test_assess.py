"""How a commit's trials become its outcome (abbisect/assess), through the `Assessor` seam with trials made as
the pipeline makes them (a verdict, a launch, per-pass outcomes, perf passes) — no process, no server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from abbisect.assess import assessor_for
from abbisect.assess.flaky import Flaky
from abbisect.launch.server import Ready
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome, Status
from abbisect.trial.spec import Extras, LaunchInfo, TrialResult, TrialSpec
from abbisect.verdict.rules import Verdict


def recipe(**overrides) -> Recipe:
    return Recipe.model_validate({"name": "fake", "engine": {"kind": "command", "repo": "/nonexistent"},
                                  "launch": {"command": ["serve"]}, "prompts": ["p"], **overrides})


def launch() -> LaunchInfo:
    return LaunchInfo(("serve",), {}, Ready.READY, 0.1, None, "server.log", (), {}, {})


def trial(rec: Recipe, sha: str, n: int, status: Status = Status.OK, outcome: Outcome = Outcome.GOOD,
          reasons: tuple[str, ...] = ("fake",), **extras: Any) -> TrialResult:
    spec = TrialSpec(rec, "x", sha, sha, "", "/nonexistent", "/nonexistent", str(Path("/nonexistent") / sha))
    return TrialResult(spec.again(n), None, launch(), (), (), (), (), None, Verdict(status, outcome, reasons), {},
                       Extras(**extras))


def flaky_launches(rec: Recipe, sha: str, bad_passes: list[int]) -> list[TrialResult]:
    """One launch per entry, each with `passes` passes of which the given number failed."""
    passes = rec.repeats.passes
    return [trial(rec, sha, i, pass_outcomes=(Outcome.BAD,) * k + (Outcome.GOOD,) * (passes - k))
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
    assert found.outcome is Outcome.SKIP and found.stats["observations"] == 20
    assert found.wanted == 2, found  # 4 launches of a cap of 16: two more, as launches come
    at_cap = a.against(flaky_launches(rec, "cand", [1, 0] * 8), good, bad)
    assert at_cap.wanted == 0 and "not sure after 16 launches" in at_cap.evidence, at_cap  # the cap
    # The ends, not sure of each other after 2 launches each (10 observations): two more each, not none.
    ends = a.settle_ends(flaky_launches(rec, "old", [0, 1]), flaky_launches(rec, "new", [1, 1]))
    assert ends[0].wanted == ends[1].wanted == 2 and "after 2 launches" in ends[0].evidence, ends


def test_flaky_calls_are_read_from_the_enum_and_an_empty_sample_is_untestable():
    rec = recipe(repeats={"launches": 3})
    a = assessor_for(rec)
    old = [trial(rec, "old", i) for i in range(12)]
    new = [trial(rec, "new", i, Status.CRASHED_AT_STARTUP, Outcome.BAD) for i in range(12)]
    first, second = a.settle_ends(old, new)
    assert (first.outcome, second.outcome) == (Outcome.GOOD, Outcome.BAD) and "different" in second.evidence
    alike = a.settle_ends([trial(rec, "old", i) for i in range(40)], [trial(rec, "new", i) for i in range(40)])
    assert alike[0].wanted == 0 and "fail alike" in alike[0].evidence
    empty = a.alone([])
    assert empty.outcome is Outcome.SKIP and empty.evidence == "untestable: no trial"


# --- perf: failed requests are evidence (issue 34 items 1 and 6) ----------------------------------------------

PERF = {"metric": "output_throughput", "requests": 8, "warmup": 0, "concurrency": 2, "passes": 3,
        "launches": 1, "max_launches": 2}


def perf_trial(rec: Recipe, sha: str, n: int, errors: list[str | None], passes: int = 3, tokens_s: float = 100.0):
    """A launch as the pipeline makes it: `passes` passes of the records given (None: a request answered in
    full), each reduced by measure's own `record`, and the verdict the trial's evidence gives."""
    from abbisect.environment import EnvResult
    from abbisect.query.load import RequestRecord, Workload, summarise
    from abbisect.query.measure import PerfRun, record
    from abbisect.trial.pipeline import TrialRecord, _signals
    from abbisect.verdict.rules import judge

    assert rec.perf is not None
    load = Workload(requests=len(errors), input_words=4, max_concurrency=2, max_tokens=10)
    done = [RequestRecord(i, 0.0, 0.0, e is None, e, 200, *((0.01, 0.1, 0.01) if e is None else (None, None, None)),
                          output_tokens=10 if e is None else None) for i, e in enumerate(errors)]
    result = summarise("m", load, tuple(done), 0, sum(e is None for e in errors) * 10 / tokens_s or 1.0)
    spec = TrialSpec(rec, "x", sha, sha, "", "/nonexistent", "/nonexistent", f"/nonexistent/{sha}").again(n)
    trial = TrialRecord(spec, EnvResult(True, "k", "/venv", "python", True, 0.0, "log", ()), launch(),
                        extras=Extras(perf=PerfRun(load, rec.perf.metric,
                                                   tuple(record(result, rec.perf, {}) for _ in range(passes)))))
    trial.verdict = judge(_signals(rec, trial), rec.verdict)
    return trial.result()


TIMEOUT = "timeout: not answered in full within 60 s"
ERROR_EVENT = 'error in stream: {"message": "detokenizer: lost the state of this sequence", "code": 500}'


def test_a_pass_over_the_error_threshold_fails_and_makes_the_trial_request_errors_named_by_its_first_error():
    rec = recipe(perf=PERF)
    for first, errors in ((TIMEOUT, [TIMEOUT] * 8), (ERROR_EVENT, [None, None] + [ERROR_EVENT] * 6)):
        t = perf_trial(rec, "bad", 0, errors)
        assert t.verdict.status is Status.REQUEST_ERRORS and t.verdict.outcome is Outcome.BAD
        fails = len([e for e in errors if e])
        assert t.verdict.reasons[:2] == ("3/3 perf pass(es) failed their requests while the server stayed up",
                                         f"perf pass 1: {fails}/8 requests failed (over 5%); first: {first}")
        seen = assessor_for(rec).alone([t])
        assert seen.outcome is Outcome.BAD and first in seen.evidence and "no pass was measured" not in seen.evidence
    # one failure in 32 is under perf.error_threshold (5 %): a measured pass, its failure counted and shown
    fine = perf_trial(rec, "good", 0, [None] * 31 + [TIMEOUT])
    assert fine.verdict.status is Status.OK and assessor_for(rec).alone([fine]).stats == {"passes": 3}
    from abbisect.assess.perf import pass_errors

    assert pass_errors([fine]).describe() == f"3 of 96 in 3 passes (per pass: 1, 1, 1); first: {TIMEOUT}"
    # The recipe may call request_errors untestable: then it is skipped, and says why.
    lenient = recipe(perf=PERF, verdict={"skip_if": ["build_failed", "request_errors"]})
    skipped = assessor_for(lenient).alone([perf_trial(lenient, "bad", 0, [TIMEOUT] * 8)])
    assert skipped.outcome is Outcome.SKIP and skipped.evidence.startswith("request_errors: ") and TIMEOUT in \
        skipped.evidence


def test_failing_requests_decide_the_ends_and_a_candidate_that_answers_is_like_the_good_end():
    rec = recipe(perf=PERF)
    a = assessor_for(rec)
    good = [perf_trial(rec, "good", 0, [None] * 8)]
    bad = [perf_trial(rec, "bad", 0, [ERROR_EVENT] * 8)]  # every stream fails: bad, never "untestable"
    old, new = a.settle_ends(good, bad)
    assert (old.outcome, new.outcome, old.wanted, new.wanted) == (Outcome.GOOD, Outcome.BAD, 0, 0)
    seen = a.against([perf_trial(rec, "cand", 0, [None] * 8, tokens_s=80.0)], good, bad)
    assert seen.outcome is Outcome.GOOD and "its requests answered (the bad end's failed)" in seen.evidence
    assert a.against([perf_trial(rec, "cand", 0, [None, None] + [ERROR_EVENT] * 6)], good, bad).outcome is Outcome.BAD
    compared = a.compare(good, bad)
    assert compared["comparison"]["call"] == "different" and compared["worse"] == "b"
    assert compared["text"].startswith("B's requests failed (3/3 perf pass(es) failed their requests")
    # A commit that served no pass for another reason is untestable, with that reason.
    crashed = trial(rec, "x", 0, Status.CRASHED_AT_STARTUP, Outcome.BAD, ("server exited before ready: boom",))
    assert a.alone([crashed]).evidence == "untestable: no pass was measured (server exited before ready: boom)"
