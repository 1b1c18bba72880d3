"""Results written by an earlier abbisect still load, and are written back the same.

tests/data/v1 holds files as abbisect wrote them before its results were serialised by pydantic (only the
machine's paths made neutral): a trial cache entry (a degenerate side), `abbisect run`'s results.json (a
healthy side against one whose build failed), and a bisect's state.json and bisect.json.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from abbisect.ab import ABResult
from abbisect.bisect.bisection import Step, StepStats
from abbisect.bisect.gitlog import CommitInfo
from abbisect.bisect.state import load_state
from abbisect.environment import EnvResult
from abbisect.infra.serial import dump, load
from abbisect.query.chat import Completion
from abbisect.recipe import FLAT_INSTALL_DEFAULTS
from abbisect.score import OutputAnalysis, SignatureMatch
from abbisect.trial.spec import Extras, LaunchInfo, TrialResult, TrialSpec
from abbisect.verdict.rules import Verdict

DATA = Path(__file__).parent / "data" / "v1"
# Fields results and steps gained since these files were written, at the value an old result reads as.
ADDED_SINCE_V1 = {
    "links": {}, "needed": True,
    "cut": False,  # Completion.cut (ABBISECT_ANSWER_CAP_BYTES)
    "pass_no": 0, "batch": 1, "copy": 0,  # Completion: which pass, at what concurrency, which copy of a prompt
    "chunk": 0, "slot": None, "attempt": 0,  # TrialSpec: the eval part asked, the GPU slot, a repeat's launch
    "items": None,  # TrialSpec: the eval items a bisect asks a candidate
    "trial_rounds": [],  # Step: the round of each launch of a statistical search
    "posterior": None,  # bisect.json: a statistical search's posterior
    "assessment": {}, "more_a": [], "more_b": [], "same_commit": False,  # ABResult: repeats and their statistics
    "commits": {},  # ABResult: each side's commit (date, parents), as results.json names no local repository
    "more": [], "stats": {},  # Step: a commit's further launches and their statistics
    "base_reused": None,  # EnvResult: whether the shared venv of the dependencies was found built
    "schema": "abbisect/run/v1",  # results.json names its format
    "client_gone": 0,  # LaunchInfo: tracebacks of abbisect's own client going away, not counted
    "jit": None,  # LaunchInfo: its JIT caches (launch/jit.py), unknown in a result from before
}


def read(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def as_written(data: object) -> object:
    """What a writer puts on disk (the writers call json.dumps with default=str), read back."""
    return json.loads(json.dumps(data, default=str))


def same_as_written(new: object, old: object, in_recipe: bool = False, key: str = "") -> bool:
    """Written back as the earlier writer wrote it: equal, except that a recipe written today also carries
    the keys added to the recipe since, at their defaults, its install section only the keys of its own
    strategy (the earlier flat section's keys of other strategies, at their defaults, are dropped), and a
    result the keys in ADDED_SINCE_V1."""
    if isinstance(old, dict):
        if not isinstance(new, dict):
            return False
        added = {k for k in set(new) - set(old) if k in ADDED_SINCE_V1 and new[k] == ADDED_SINCE_V1[k]}
        if not in_recipe and set(new) - added != set(old):
            return False
        dropped = {k for k, v in old.items() if key == "install" and k not in new
                   and FLAT_INSTALL_DEFAULTS.get(k, object()) == v}
        return all(k in dropped or (k in new and same_as_written(new[k], v, in_recipe or k == "recipe", k))
                   for k, v in old.items())
    if isinstance(old, list):
        return (isinstance(new, list) and len(new) == len(old)
                and all(same_as_written(n, o, in_recipe, key) for n, o in zip(new, old, strict=True)))
    return new == old


def check_trial(data: dict) -> TrialResult:
    r = load(TrialResult, data)
    assert isinstance(r.spec, TrialSpec) and isinstance(r.verdict, Verdict)
    assert isinstance(r.verdict.reasons, tuple) and r.verdict.reasons
    assert r.env is None or (isinstance(r.env, EnvResult) and isinstance(r.env.steps, tuple))
    assert r.launch is None or (isinstance(r.launch, LaunchInfo) and isinstance(r.launch.argv, tuple))
    assert isinstance(r.outputs, tuple) and all(isinstance(o, Completion) for o in r.outputs)
    assert all(isinstance(a, OutputAnalysis) and isinstance(a.evidence, tuple) for a in r.analyses)
    assert all(isinstance(s, SignatureMatch) and isinstance(s.groups, tuple) for s in r.signatures)
    assert len(r.answers) == len(r.outputs) or not r.outputs
    # written back exactly as the earlier writer wrote it, and read again to the same object
    assert same_as_written(as_written(dump(r)), {k: v for k, v in data.items() if k != "stored"})
    assert load(TrialResult, as_written(dump(r))) == r
    return r


def test_a_trial_cache_entry_loads_and_round_trips():
    data = read("trial-cache-entry.json")
    r = check_trial(data)
    assert r.verdict.status == "degenerate" and r.verdict.outcome == "bad"
    assert r.analyses[0].loop is not None and r.analyses[0].loop.repeats > 1
    assert r.answers[0] is not None and not r.answers[0].passed and r.answers[1] is None
    assert r.signatures and r.first_exception is None and r.launch.returncode is None


def test_fields_an_older_writer_left_out_or_wrote_as_lists():
    data = read("trial-cache-entry.json")
    del data["extras"], data["cached"]
    data["first_exception"] = [12, "RuntimeError: CUDA error"]
    r = load(TrialResult, data)
    assert r.extras == Extras() and r.cached is False
    assert r.first_exception == (12, "RuntimeError: CUDA error")
    assert as_written(dump(r))["first_exception"] == [12, "RuntimeError: CUDA error"]


def test_run_results_load_with_a_failed_build_beside_a_healthy_side():
    data = read("run-results.json")
    ab = load(ABResult, data)
    for side in ("a", "b"):
        check_trial(data[side])
    assert ab.a.verdict.status == "ok" and ab.b.verdict.status == "build_failed"
    assert ab.b.launch is None and ab.b.outputs == () and ab.b.env.ok is False and ab.b.env.error
    assert ab.divergences == ()
    assert same_as_written(as_written(ab.to_dict()), data)


def test_bisect_state_resumes_from_what_the_earlier_writer_saved(tmp_path):
    shutil.copy(DATA / "bisect-state.json", tmp_path / "state.json")
    state = load_state(tmp_path)
    steps = [load(Step, s) for s in state["steps"]]
    assert [s.status for s in steps] == ["ok", "degenerate", "ok"]
    for s, raw in zip(steps, state["steps"]):
        assert isinstance(s.result, TrialResult) and s.result.spec.sha == s.sha
        check_trial(raw["result"])
        assert same_as_written(as_written(dump(s)), raw)


def test_bisect_json_steps_and_commit():
    data = read("bisect.json")
    for raw in data["steps"]:
        step = load(Step, raw)
        assert step.result is None
        assert same_as_written(as_written(dump(step, exclude={"result"})), raw)
    commit = load(CommitInfo, data["commit"])
    assert isinstance(commit.parents, tuple) and as_written(dump(commit)) == data["commit"]


def test_a_steps_stats_are_one_object_the_assessors_keys_then_the_bisects():
    """A step's stats on disk (state.json, bisect.json) as when they were a dict: the assessor's keys first, then
    those the bisect adds that it has; read back into their typed fields, the rest the assessor's."""
    raw = {"passes": 25, "metric": "tpot_median", "vs_good": {"call": "same"}, "p_after": 0.0, "launches": 5,
           "mass": 0.0}
    stats = load(StepStats, raw)
    assert stats == StepStats({"passes": 25, "metric": "tpot_median", "vs_good": {"call": "same"}}, p_after=0.0,
                              launches=5, mass=0.0)
    assert list(dump(stats).items()) == list(raw.items())
    skipped = StepStats(other_failure="OutOfMemoryError")
    assert dump(skipped) == {"other_failure": "OutOfMemoryError"} and load(StepStats, dump(skipped)) == skipped
    assert dump(StepStats()) == {} and load(StepStats, {}) == StepStats()


def test_a_file_that_is_not_a_result_is_refused():
    data = read("trial-cache-entry.json")
    del data["verdict"]
    with pytest.raises(ValueError, match="verdict"):
        load(TrialResult, data)
