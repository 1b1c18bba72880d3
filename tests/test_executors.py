"""Executors through real trials of the toy engine: local slots in parallel (processes), and a real local
Ray instance whose custom resource stands in for GPU slots; a lost worker is retried or is infra_error.
(A cluster of several nodes that share no folder: tests/test_cluster.py.)"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from conftest import marked_pids, toy_recipe

from abbisect import checkout
from abbisect.infra.errors import UserError
from abbisect.infra.serial import dump
from abbisect.recipe import parse_recipe
from abbisect.trial.executors import LocalParallel
from abbisect.trial.pipeline import run_trial
from abbisect.trial.provenance import Placement
from abbisect.trial.slots import Slot, on_slot, parse_gpus, slots_for
from abbisect.trial.spec import trial_spec


def _specs(tmp_path, engine_repo, cache_dir, refs, **over):
    recipe = parse_recipe(toy_recipe(engine_repo, **over))
    revs = [checkout.resolve(engine_repo, r) for r in refs]
    return [trial_spec(recipe, engine_repo, rev, f"t{n}", cache_dir, tmp_path / "out") for n, rev in enumerate(revs)]


def _overlap(a: Placement, b: Placement) -> bool:
    return a.start < b.end and b.start < a.end


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
    where = [r.extras.placement for r in results]
    assert [w.slot for w in where] == [0, 1] and _overlap(*where)
    assert any(line.startswith("slot 1:") for line in seen)


@pytest.mark.e2e
def test_gpu_slot_pins_the_trial(tmp_path, engine_repo, cache_dir):
    """On a CPU machine the slot's GPU is still what the trial pins (hygiene is skipped with its notice)."""
    (spec,) = _specs(tmp_path, engine_repo, cache_dir, ["fixed"])
    result = run_trial(on_slot(spec, Slot(0, (3,))))
    assert result.spec.recipe.gpus == [3]
    before = dump(result.extras.gpu_before)  # as the trial's result writes it
    assert before["skipped"] and before["notice"]


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


@pytest.fixture(scope="module")
def ray_node(tmp_path_factory):
    """A real local Ray instance, started here; `abbisect_slot` stands in for the GPUs of a slot. Its workers
    build in a cache of their own (ABBISECT_CACHE_DIR of the node), not the spec's: a node of a cluster has
    only its own."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'abbisect[ray]')")
    node_cache = tmp_path_factory.mktemp("ray-node-cache")
    ray.init(num_cpus=2, resources={"abbisect_slot": 2}, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", ""),
                                       "ABBISECT_CACHE_DIR": str(node_cache)}})
    yield node_cache
    ray.shutdown()


@pytest.mark.e2e
def test_ray_runs_trials_as_tasks(tmp_path, engine_repo, cache_dir, ray_node):
    from abbisect.trial.cluster import RayExecutor

    specs = _specs(tmp_path, engine_repo, cache_dir, ["broken", "fixed"], env={"TOYENGINE_LOAD_SECONDS": "1.5"})
    ex = RayExecutor(slots_for([], 2), resource="abbisect_slot")
    results = [f.result(timeout=300) for f in [ex.submit(s, slot, lambda m: None) for s, slot in zip(specs, ex.slots)]]
    assert [r.verdict.status for r in results] == ["degenerate", "ok"]
    assert all(r.extras.placement.executor == "ray" for r in results)
    assert _overlap(*(r.extras.placement for r in results))
    # built on the node, in its own cache; the logs came back into the run's trial folders
    assert all(r.env and r.env.path.startswith(str(ray_node)) for r in results)
    assert all(r.extras.placement.node.cache == str(ray_node) for r in results)
    for r in results:
        assert r.launch and Path(r.launch.log_path) == Path(r.spec.out_dir) / "server.log"
        assert Path(r.launch.log_path).read_text().strip() and (Path(r.spec.out_dir) / "build.log").is_file()
        assert r.spec.cache_dir == str(cache_dir)


def _ray_worker_of(pid: int) -> int | None:
    """The Ray worker a trial's server descends from (its process title starts with ray::)."""
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            title = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        if title.startswith(b"ray::"):
            return pid
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return None


@pytest.mark.e2e
@pytest.mark.parametrize("retries,expected", [(2, "ok"), (0, "infra_error")])
def test_ray_worker_lost_mid_trial(tmp_path, engine_repo, cache_dir, ray_node, retries, expected, test_mark):
    """Kill the worker running a trial: the trial is sent again; without retries it is infra_error (skip),
    never the commit's verdict."""
    from abbisect.trial.cluster import RayExecutor

    (spec,) = _specs(tmp_path, engine_repo, cache_dir, ["fixed"],
                     env={"TOYENGINE_LOAD_SECONDS": "3", "ABBISECT_TEST_MARK": test_mark})
    ex = RayExecutor(slots_for([], 1), resource="abbisect_slot", retries=retries)
    lines: list[str] = []
    future = ex.submit(spec, ex.slots[0], lines.append)
    deadline = time.monotonic() + 120
    while not marked_pids(test_mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = {w for p in marked_pids(test_mark) if (w := _ray_worker_of(p))}
    assert len(workers) == 1, workers
    os.kill(workers.pop(), signal.SIGKILL)
    result = future.result(timeout=300)
    assert result.verdict.status == expected
    lost = result.extras.placement.lost
    assert len(lost) == 1 and "WorkerCrashedError" in lost[0].error
    if expected == "infra_error":
        assert result.verdict.outcome == "skip" and "Ray could not run the trial" in result.verdict.reasons[0]
    else:
        assert any("lost mid-trial" in line and "sent again" in line for line in lines)
