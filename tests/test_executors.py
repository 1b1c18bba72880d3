"""Executors through real trials of the toy engine: local slots in parallel (processes), and a real local
Ray cluster whose custom resource stands in for GPU slots; a lost worker is retried or is infra_error."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from conftest import marked_pids, toy_recipe

from abbisect import checkout
from abbisect.infra.errors import UserError
from abbisect.recipe import parse_recipe
from abbisect.trial.executors import LocalParallel, Slot, on_slot, parse_gpus, slots_for
from abbisect.trial.pipeline import run_trial
from abbisect.trial.spec import trial_spec


def _specs(tmp_path, engine_repo, cache_dir, refs, **over):
    recipe = parse_recipe(toy_recipe(engine_repo, **over))
    revs = [checkout.resolve(engine_repo, r) for r in refs]
    return [trial_spec(recipe, engine_repo, rev, f"t{n}", cache_dir, tmp_path / "out") for n, rev in enumerate(revs)]


def _overlap(a: dict, b: dict) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


def test_slots_and_gpu_lists():
    assert parse_gpus("0,1,2,3") == [[0], [1], [2], [3]]
    assert parse_gpus("0+1,2+3") == [[0, 1], [2, 3]]
    for bad in ("0,0", "a,b", ""):
        with pytest.raises(UserError):
            parse_gpus(bad)
    assert [s.gpus for s in slots_for([[0, 1], [2, 3]], 1)] == [(0, 1), (2, 3)]
    assert [s.gpus for s in slots_for([], 3)] == [None, None, None]
    # four slots sharing GPU 0 (--gpus 0x4): each knows its share and its neighbours
    assert parse_gpus("0x4") == [[0], [0], [0], [0]]
    shared = slots_for(parse_gpus("0x2,1x2"), 1, 0.45)
    assert [(s.gpus, s.share, s.shared_with, s.shared) for s in shared] == [
        ((0,), 0.45, (1,), True), ((0,), 0.45, (0,), True), ((1,), 0.45, (3,), True), ((1,), 0.45, (2,), True)]
    assert shared[0].label() == "slot 0 (GPU 0, share 0.45)"
    assert not any(s.shared for s in slots_for([[0], [1]], 1)) and not slots_for([], 2)[0].shared


@pytest.mark.e2e
def test_local_parallel_runs_slots_at_once(tmp_path, engine_repo, cache_dir):
    # a second of loading each, so two trials run at the same time only if the slots really are parallel
    specs = _specs(tmp_path, engine_repo, cache_dir, ["broken", "fixed"], env={"TOYENGINE_LOAD_SECONDS": "1.5"})
    ex = LocalParallel(slots_for([], 2))
    seen: list[str] = []
    try:
        futures = [ex.submit(s, slot, seen.append) for s, slot in zip(specs, ex.slots)]
        results = [f.result(timeout=300) for f in futures]
    finally:
        ex.shutdown()
    assert [r.verdict.status for r in results] == ["degenerate", "ok"]
    where = [r.extras["placement"] for r in results]
    assert [w["slot"] for w in where] == [0, 1] and _overlap(*where)
    assert any(line.startswith("slot 1:") for line in seen)


@pytest.mark.e2e
def test_gpu_slot_pins_the_trial(tmp_path, engine_repo, cache_dir):
    """On a CPU machine the slot's GPU is still what the trial pins (hygiene is skipped with its notice)."""
    (spec,) = _specs(tmp_path, engine_repo, cache_dir, ["fixed"])
    result = run_trial(on_slot(spec, Slot(0, (3,))))
    assert result.spec.recipe.gpus == [3]
    assert result.extras["gpu_before"]["skipped"] and result.extras["gpu_before"]["notice"]


@pytest.mark.e2e
@pytest.mark.parametrize("when", ["launching", "loading"])
def test_cancel_kills_the_trial_process_and_its_server(tmp_path, engine_repo, cache_dir, when, test_mark):
    """Stopped as its server is being started (the trial has just said "launch") or while it loads: the
    trial process goes, and so does its server."""
    mark = test_mark
    (spec,) = _specs(tmp_path, engine_repo, cache_dir, ["hang"], env={"ABBISECT_TEST_MARK": mark},
                     timeouts={"build": 300, "ready": 120, "request": 20, "teardown": 5})
    ex = LocalParallel(slots_for([], 1))
    lines: list[str] = []
    future = ex.submit(spec, ex.slots[0], lines.append)
    deadline = time.monotonic() + 120
    while not any("launch" in line for line in lines) and time.monotonic() < deadline:
        time.sleep(0.01)
    while when == "loading" and not marked_pids(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    first = ex.workers[0].proc
    ex.cancel(future)
    result = future.result(timeout=60)
    assert result.verdict.status == "infra_error" and "cancelled" in result.verdict.reasons[0]
    assert first.wait(timeout=30) is not None
    deadline = time.monotonic() + 20
    while marked_pids(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not marked_pids(mark), "the cancelled trial's server survived"
    # the slot's next process is started at once (warm for the next round), and the next trial runs in it
    deadline = time.monotonic() + 30
    while (0 not in ex.workers or ex.workers[0].proc is first) and time.monotonic() < deadline:
        time.sleep(0.1)
    spare = ex.workers[0].proc
    assert spare is not first and spare.poll() is None
    (ok,) = _specs(tmp_path, engine_repo, cache_dir, ["fixed"])
    try:
        assert ex.submit(ok, ex.slots[0], lines.append).result(timeout=300).verdict.status == "ok"
        assert ex.workers[0].proc is spare
    finally:
        ex.shutdown()
    assert spare.wait(timeout=30) is not None  # shut down with the executor, not replaced
    assert ex.workers == {}


ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'abbisect[ray]')")


@pytest.fixture(scope="module")
def ray_cluster():
    """A real local Ray instance; `abbisect_slot` stands in for the GPUs of a slot."""
    ray.init(num_cpus=2, resources={"abbisect_slot": 2}, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
    yield
    ray.shutdown()


@pytest.mark.e2e
def test_ray_runs_trials_as_tasks(tmp_path, engine_repo, cache_dir, ray_cluster):
    from abbisect.trial.executors import RayExecutor

    specs = _specs(tmp_path, engine_repo, cache_dir, ["broken", "fixed"], env={"TOYENGINE_LOAD_SECONDS": "1.5"})
    ex = RayExecutor(slots_for([], 2), resource="abbisect_slot")
    results = [f.result(timeout=300) for f in [ex.submit(s, slot, lambda m: None) for s, slot in zip(specs, ex.slots)]]
    assert [r.verdict.status for r in results] == ["degenerate", "ok"]
    assert all(r.extras["placement"]["executor"] == "ray" for r in results)
    assert _overlap(*(r.extras["placement"] for r in results))


@pytest.mark.e2e
@pytest.mark.parametrize("retries,expected", [(2, "ok"), (0, "infra_error")])
def test_ray_worker_lost_mid_trial(tmp_path, engine_repo, cache_dir, ray_cluster, retries, expected):
    """Kill the worker running a trial: Ray retries it elsewhere; without retries it is infra_error (skip),
    never the commit's verdict."""
    from abbisect.trial.executors import RayExecutor

    (spec,) = _specs(tmp_path, engine_repo, cache_dir, ["fixed"], env={"TOYENGINE_LOAD_SECONDS": "3"})
    ex = RayExecutor(slots_for([], 1), resource="abbisect_slot", retries=retries)
    pid_file = tmp_path / "worker.pid"
    ex.pid_files[spec.sha] = str(pid_file)
    future = ex.submit(spec, ex.slots[0], lambda m: None)
    deadline = time.monotonic() + 120
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    first = int(pid_file.read_text())
    pid_file.unlink()
    os.kill(first, signal.SIGKILL)
    result = future.result(timeout=300)
    assert result.verdict.status == expected
    if expected == "infra_error":
        assert result.verdict.outcome == "skip" and "Ray could not run the trial" in result.verdict.reasons[0]
    else:
        assert Path(pid_file).exists() and int(pid_file.read_text()) != first
