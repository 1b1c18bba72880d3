"""Every status, one row each: the evidence that produces it, its outcome under the default verdicts and
under a recipe that flips it; and the rules a recipe may name, derived from the same statuses."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pydantic import ValidationError

from abbisect.recipe import Verdicts
from abbisect.recipe.status import BAD_RULES, SKIP_RULES, Status
from abbisect.trial.slots import infra_result
from abbisect.verdict.rules import PROBE_STATUS, Signals, judge, status_of

_HEALTHY = {"build_ok": True, "build_error": None, "ready": "ready", "rejected_flags": (), "first_exception": None,
            "n_outputs": 4, "n_errors": 0, "degenerate": (), "late_loops": (), "answer_misses": (),
            "serious_signatures": (), "bad_signatures": ()}


def evidence(**kw) -> Signals:
    return Signals(**{**_HEALTHY, **kw})


@dataclass(frozen=True)
class Row:
    status: Status
    evidence: Signals
    default: str  # the outcome under Verdicts()
    flipped_by: dict  # a recipe's verdict section that changes it
    flipped: str  # the outcome under that recipe
    reason: str = ""  # a fragment of the first reason


ROWS = [
    Row(Status.BUILD_FAILED, evidence(build_ok=False, build_error="uv exited 1", ready=None, n_outputs=0),
        "skip", {"skip_if": []}, "good", "venv build failed: uv exited 1"),
    Row(Status.FLAG_REJECTED, evidence(ready="exited", rejected_flags=("--seed",), n_outputs=0),
        "skip", {"skip_if": []}, "good", "rejected flag(s) --seed"),
    Row(Status.CRASHED_AT_STARTUP, evidence(ready="exited", first_exception="ImportError: x", n_outputs=0),
        "bad", {"skip_if": ["crashed_at_startup"]}, "skip", "server exited before ready: ImportError: x"),
    Row(Status.TIMEOUT, evidence(ready="timeout", n_outputs=0),
        "skip", {"skip_if": [], "bad_if": ["timeout"]}, "bad", "never became ready"),
    Row(Status.CRASHED_WHILE_SERVING, evidence(exited_while_serving=True, exit_code=-9, crash_prompt="p2",
                                               n_errors=2, request_errors=()),
        "bad", {"skip_if": ["crashed_while_serving"]}, "skip", "server exited (code -9) while serving prompt p2"),
    Row(Status.REQUEST_ERRORS, evidence(n_errors=1, request_errors=("p1: HTTP 500",)),
        "bad", {"bad_if": [], "skip_if": ["request_errors"]}, "skip", "1/4 request(s) failed"),
    Row(Status.DEGENERATE, evidence(degenerate=("p0: loop", "p1: loop")),
        "bad", {"bad_if": ["signature"]}, "good", "2/4 outputs degenerate"),
    Row(Status.WRONG_ANSWER, evidence(answer_misses=("p0: expected /paris/",)),
        "bad", {"bad_if": ["degenerate"]}, "good", "1 expected answer(s) missing"),
    Row(Status.WARNED, evidence(serious_signatures=("cuda_oom (line 3)",)),
        "bad", {"bad_if": ["degenerate"]}, "good", "log signatures: cuda_oom (line 3)"),
    Row(Status.BATCH_VARIANT, evidence(batch_variant=("p1: differs with 8 in flight from one at a time",)),
        "good", {"bad_if": ["batch_variant"]}, "bad", "1 answer(s) change with the batch"),
    Row(Status.OK, evidence(late_loops=("p3: late loop",)),
        "good", {"bad_if": list(BAD_RULES), "skip_if": list(SKIP_RULES)}, "good", "loop late"),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.status.value for r in ROWS])
def test_status_and_outcome_of_each_status(row: Row):
    status, reasons = status_of(row.evidence, Verdicts().degenerate_fraction)
    assert status is row.status and row.reason in reasons[0]
    default = judge(row.evidence, Verdicts())
    assert (default.status, default.outcome) == (row.status, row.default)
    assert default.outcome == row.status.default  # the status's own record of its default agrees
    flipped = judge(row.evidence, Verdicts(**row.flipped_by))
    assert (flipped.status, flipped.outcome) == (row.status, row.flipped)


def test_a_signature_the_recipe_names_is_bad_whatever_bad_if_says():
    ev = evidence(bad_signatures=("nan_detected (line 9)",))
    assert judge(ev, Verdicts(bad_if=[])).outcome == "bad"
    assert judge(ev, Verdicts(bad_if=[], skip_if=[])).status is Status.WARNED


def test_statuses_not_decided_from_evidence():
    """infra_error comes from the executor (or a probe that measured nothing), does_not_fit from a probe."""
    from abbisect.recipe import parse_recipe
    from abbisect.trial.spec import TrialSpec

    recipe = parse_recipe({"name": "t", "engine": {"kind": "command", "repo": "builtin:demo"},
                           "launch": {"command": ["serve"]}, "prompts": ["hi"]})
    spec = TrialSpec(recipe, "a", "HEAD", "0" * 40, "s", "/repo", "/cache", "/out")
    lost = infra_result(spec, "the trial process exited with -9").verdict
    assert (lost.status, lost.outcome) == (Status.INFRA_ERROR, "skip") and lost.outcome == Status.INFRA_ERROR.default
    assert {outcome: (s, s.default) for outcome, s in PROBE_STATUS.items()} == {
        "good": (Status.OK, "good"), "bad": (Status.DOES_NOT_FIT, "bad"), "skip": (Status.INFRA_ERROR, "skip")}


def test_the_table_covers_every_status():
    produced = {r.status for r in ROWS} | {Status.INFRA_ERROR, *PROBE_STATUS.values()}
    assert produced == set(Status)


def test_statuses_keep_their_strings():
    """A str enum: results.json, CSV and markdown show the same words as before the enum."""
    import json

    assert [s.value for s in Status] == ["build_failed", "flag_rejected", "crashed_at_startup", "timeout",
                                         "crashed_while_serving", "infra_error", "request_errors", "degenerate",
                                         "wrong_answer", "warned", "batch_variant", "ok", "does_not_fit"]
    assert json.dumps([Status.WARNED]) == '["warned"]' and f"{Status.OK}" == "ok" and Status.OK == "ok"


def test_cacheable_statuses():
    """What the trial cache keeps: facts about the commit, not what the machine may have caused."""
    assert {s for s in Status if s.cacheable} == {
        Status.OK, Status.DEGENERATE, Status.WRONG_ANSWER, Status.WARNED, Status.BATCH_VARIANT, Status.CRASHED_AT_STARTUP,
        Status.BUILD_FAILED, Status.FLAG_REJECTED, Status.TIMEOUT, Status.DOES_NOT_FIT}
    assert {s for s in Status if s.confirm_first} == {Status.TIMEOUT}


@pytest.mark.parametrize("status", [s for s in Status if s.rule], ids=lambda s: s.value)
def test_recipe_rules_follow_the_statuses(status: Status):
    """bad_if / skip_if accept a status's rule exactly where the status may take that outcome."""
    for key, outcome in (("bad_if", "bad"), ("skip_if", "skip")):
        if outcome in status.may:
            Verdicts(**{key: [status.rule]})
        else:
            with pytest.raises(ValidationError, match=f"unknown rule '{status.rule}'"):
                Verdicts(**{key: [status.rule]})
    assert status.default in status.may


def test_defaults_as_documented():
    v = Verdicts()
    assert sorted(v.bad_if) == sorted(["degenerate", "signature", "crashed_at_startup", "answer_mismatch",
                                       "crashed_while_serving", "request_errors"])
    assert sorted(v.skip_if) == sorted(["build_failed", "flag_rejected", "infra_error", "timeout"])
    assert "differs_from_good" in BAD_RULES and "differs_from_good" not in SKIP_RULES
