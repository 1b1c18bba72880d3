"""How a commit's trials become its outcome (abbisect/assess), through the `Assessor` seam with trials made as
the pipeline makes them (a verdict, a launch, per-pass outcomes, perf passes) — no process, no server."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from abbisect.ab import LaunchesAssessed, SideAssessed
from abbisect.assess import assessor_for
from abbisect.assess.base import Worse, against_ends
from abbisect.assess.differs import Differs, differing
from abbisect.assess.flaky import Flaky
from abbisect.assess.one_trial import Rules
from abbisect.bisect.ends import judged_against_ends
from abbisect.infra.serial import dump, load
from abbisect.launch.server import Ready
from abbisect.query.chat import Completion
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome, Status
from abbisect.stats.decide import Call
from abbisect.trial.spec import Extras, LaunchInfo, Timings, TrialResult, TrialSpec
from abbisect.verdict.rules import Verdict


def recipe(**overrides) -> Recipe:
    return Recipe.model_validate({"name": "fake", "engine": {"kind": "command", "repo": "/nonexistent"},
                                  "launch": {"command": ["serve"]}, "prompts": ["p"], **overrides})


def launch() -> LaunchInfo:
    return LaunchInfo(("serve",), {}, Ready.READY, 0.1, None, "server.log", (), {}, {})


def trial(rec: Recipe, sha: str, n: int, status: Status = Status.OK, outcome: Outcome = Outcome.GOOD,
          reasons: tuple[str, ...] = ("fake",), **extras: Any) -> TrialResult:
    spec = TrialSpec(rec, "x", sha, sha, "", "/nonexistent", "/nonexistent", str(Path("/nonexistent") / sha))
    return TrialResult(spec.again(n), None, launch(), (), (), (), (), None, Verdict(status, outcome, reasons), Timings(),
                       Extras(**extras))


def flaky_launches(rec: Recipe, sha: str, bad_passes: list[int]) -> list[TrialResult]:
    """One launch per entry, each with `passes` passes of which the given number failed."""
    passes = rec.repeats.passes
    return [trial(rec, sha, i, pass_outcomes=(Outcome.BAD,) * k + (Outcome.GOOD,) * (passes - k))
            for i, k in enumerate(bad_passes)]


# --- flaky: the cap counts launches ------------------------------------------------------------------


def test_flaky_cap_compares_launches_with_launches_not_observations():
    """The cap counts launches: with `launches: 2, passes: 5` it is 16 launches, and an unsure candidate goes on
    past 4 launches (20 observations ≥ 16 would stop it were observations, launches × passes, compared with it)."""
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


# --- perf: failed requests are evidence ----------------------------------------------

PERF = {"metric": "output_throughput", "requests": 8, "warmup": 0, "concurrency": 2, "passes": 3,
        "launches": 1, "max_launches": 2}


def perf_trial(rec: Recipe, sha: str, n: int, errors: list[str | None], passes: int = 3, tokens_s: float = 100.0):
    """A launch as the pipeline makes it: `passes` passes of the records given (None: a request answered in
    full), each reduced by measure's own `record`, and the verdict the trial's evidence gives."""
    from abbisect.environment import EnvResult
    from abbisect.query.load import RequestRecord, Workload, summarise
    from abbisect.query.measure import Conditions, PerfRun, record
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
                                                   tuple(record(result, rec.perf, Conditions()) for _ in range(passes)))))
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
    assert compared.call is Call.DIFFERENT and compared.worse is Worse.B
    assert compared.text.startswith("B's requests failed (3/3 perf pass(es) failed their requests")
    assert compared.to_dict()["comparison"] == {"call": "different", "reason": "request_errors"}
    # A commit that served no pass for another reason is untestable, with that reason.
    crashed = trial(rec, "x", 0, Status.CRASHED_AT_STARTUP, Outcome.BAD, ("server exited before ready: boom",))
    assert a.alone([crashed]).evidence == "untestable: no pass was measured (server exited before ready: boom)"


# --- a comparison: typed, written once with the keys results.json and bisect.json carry ---------------------------


def test_a_comparison_carries_its_call_worse_side_and_words_and_is_written_with_the_reports_keys():
    rec = recipe(repeats={"launches": 3})
    a = assessor_for(rec)
    old = [trial(rec, "old", i) for i in range(12)]
    new = [trial(rec, "new", i, Status.CRASHED_AT_STARTUP, Outcome.BAD) for i in range(12)]
    compared = a.compare(old, new)
    assert compared.call is Call.DIFFERENT and compared.worse is Worse.B and compared.kind == "flaky"
    written = compared.to_dict()
    assert list(written) == ["kind", "comparison", "text", "worse"], written
    assert written["comparison"]["call"] == "different" and written["worse"] == "b"
    assert written["text"] == compared.text and written["comparison"]["k_b"] == 12
    assert a.compare(new, old).worse is Worse.A and a.compare(old, old).worse is None
    # a rule on one trial compares nothing: each side's verdict says it all
    rules = assessor_for(recipe()).compare(old[:1], new[:1])
    assert rules.call is None and rules.worse is None and "comparison" not in rules.to_dict()


def test_an_ab_keeps_its_comparison_typed_and_results_json_reads_it_back():
    """Over several launches a side, the A/B's assessment holds the `Comparison` itself: results.json writes it as
    `to_dict` does and reads it back with its call, worse side and words; an earlier file's {} reads as nothing
    compared."""
    rec = recipe(repeats={"launches": 3})
    a = assessor_for(rec)
    old = [trial(rec, "old", i) for i in range(12)]
    new = [trial(rec, "new", i, Status.CRASHED_AT_STARTUP, Outcome.BAD) for i in range(12)]
    compared = a.compare(old, new)
    sides = [SideAssessed(s.outcome, s.evidence, s.stats) for s in a.settle_ends(old, new, names="A and B")]
    assessed = LaunchesAssessed(a.kind, 12, sides[0], sides[1], compared)
    written = json.loads(json.dumps(dump(assessed)))
    assert written["comparison"] == json.loads(json.dumps(compared.to_dict()))
    back = load(LaunchesAssessed, written).comparison
    assert (back.kind, back.call, back.worse, back.text) == (compared.kind, Call.DIFFERENT, Worse.B, compared.text)
    assert json.loads(json.dumps(back.to_dict())) == written["comparison"]
    assert load(LaunchesAssessed, {**written, "comparison": {}}).comparison.text == ""


# --- differs from the good end: an assessor like the others -------------------------------------------------


def answered(rec: Recipe, sha: str, texts: list[str], status: Status = Status.OK,
             outcome: Outcome = Outcome.GOOD) -> TrialResult:
    """A trial whose prompts p0, p1, … were answered with `texts`."""
    outputs = tuple(Completion(f"p{i}", f"prompt {i}", t, "stop", 1, 1, 0.1) for i, t in enumerate(texts))
    return replace(trial(rec, sha, 0, status, outcome), outputs=outputs)


DIFFERS = {"verdict": {"bad_if": ["differs_from_good"]}}


def test_differs_from_good_is_the_bisects_assessor_and_judges_one_trial_against_the_ends():
    rec = recipe(prompts=["a", "b", "c"], **DIFFERS)
    a = assessor_for(rec, bisect=True)
    assert isinstance(a, Differs) and against_ends(a) and not a.statistical and a.kind == "differs_from_good"
    # an A/B, `check` and narrow judge a commit alone, by the rules
    assert isinstance(assessor_for(rec), Rules) and not against_ends(assessor_for(rec))
    assert not against_ends(assessor_for(recipe(repeats={"launches": 3}), bisect=True))  # weighed in a posterior
    assert "compares each commit with the good end (differs_from_good)" in judged_against_ends(rec)
    good, bad = [answered(rec, "good", ["x", "y", "z"])], [answered(rec, "bad", ["x", "Y", "Z"])]
    assert a.against([answered(rec, "c", ["x", "Y", "Z"])], good, bad).outcome is Outcome.BAD
    like_good = a.against([answered(rec, "c", ["x", "y", "z"])], good, bad)
    assert like_good.outcome is Outcome.GOOD and like_good.evidence.startswith("outputs resemble the good end")
    crashed = answered(rec, "c", [], Status.CRASHED_AT_STARTUP, Outcome.SKIP)
    assert a.against([crashed], good, bad).outcome is Outcome.SKIP  # the rules' verdict: untestable
    # the ends: the named good end is the reference, the other bad exactly when some output differs from it
    ref, other = a.settle_ends(good, bad)
    assert (ref.outcome, ref.evidence) == (Outcome.GOOD, "the named good end (reference outputs)")
    assert (other.outcome, other.evidence) == (Outcome.BAD, "outputs differ from the good end on p1, p2")
    same = a.settle_ends(good, [answered(rec, "new", ["x", "y", "z"])])[1]
    assert (same.outcome, same.evidence) == (Outcome.GOOD, "outputs identical to the good end")


def test_differs_from_good_leaves_what_the_good_end_answers_differently_twice_out_of_every_comparison():
    rec = recipe(prompts=["a", "b", "c"], **DIFFERS)
    good, again = answered(rec, "good", ["x", "y", "z"]), answered(rec, "good", ["x", "y", "z!"])
    unstable = frozenset(differing(again, good))
    assert unstable == {"p2"}
    a = Differs(unstable)
    parent, found = [answered(rec, "p", ["x", "y", "z"])], [answered(rec, "f", ["x", "Y", "zz"])]
    compared = a.compare(parent, found)
    assert (compared.call, compared.worse, compared.differing) == (Call.DIFFERENT, Worse.B, ("p1",))
    quiet = a.compare(parent, [answered(rec, "f", ["x", "y", "zz"])])  # only the noisy prompt changed
    assert quiet.call is Call.SAME and quiet.worse is None and not quiet.differing
    assert Differs().compare(parent, [answered(rec, "f", ["x", "y", "zz"])]).differing == ("p2",)
    assert a.settle_ends([good, again], [answered(rec, "new", ["x", "y", "q"])])[1].outcome is Outcome.GOOD
