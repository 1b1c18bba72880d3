"""Per-slot GPU hygiene (abbisect/gpu/sharing.py) against NVML answers recorded on an H200
(tests/data/nvml/h200_shared.json, through tests/nvml_recorded.py: the NVML boundary only).

The servers are real processes carrying a launch's supervisor token, as a real launch's processes do, so which
slot a listed PID belongs to is read from /proc and the ledgers as in a bisect."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import toy_recipe
from nvml_recorded import RecordedNvml, tape

from abbisect import checkout
from abbisect.gpu.sharing import (
    SLACK_MIB,
    Ledgers,
    SharedSlot,
    SlotPlace,
    WholeGpu,
    guard_for,
    need_mib,
)
from abbisect.infra.serial import dump
from abbisect.infra.supervisor import TOKEN_VAR
from abbisect.recipe import parse_recipe
from abbisect.trial.pipeline import run_trial
from abbisect.trial.slots import Slot, on_slot
from abbisect.trial.spec import TrialSpec, trial_spec

H200_TOTAL = 143_771
SHARE = 0.22  # four slots on one GPU, the default share


class FakeClock:
    """Time that moves only when hygiene sleeps between two looks."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def _server(token: str) -> subprocess.Popen:
    """A stand-in server process of one launch: it carries the launch's token in its environment."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            env={**os.environ, TOKEN_VAR: token})
    deadline = time.monotonic() + 30
    while TOKEN_VAR.encode() not in Path(f"/proc/{proc.pid}/environ").read_bytes():  # exec'd
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return proc


@pytest.fixture
def four_slots(tmp_path):
    """Slots 0, 1, 3 each with a running server, slot 2 with its previous server still running; every launch in
    its slot's ledger, as `SharedSlot.started` writes it."""
    ledgers = Ledgers(tmp_path / "gpu-slots" / "run")
    procs = {}
    for name, slot in (("slot0", 0), ("slot1", 1), ("slot3", 3), ("slot2_prev", 2)):
        token = uuid.uuid4().hex
        procs[name] = _server(token)
        ledgers.record(slot, token, [procs[name].pid], sha=f"commit-{name}")
    yield ledgers, {name: p.pid for name, p in procs.items()}
    for p in procs.values():
        p.kill()
        p.wait()


def _slot2(ledgers: Ledgers, nvml: RecordedNvml, clock: FakeClock, lines: list[str]) -> SharedSlot:
    return SharedSlot([0], SHARE, SlotPlace(2, "run", (0, 1, 3)), ledgers, "c2", lines.append, nvml=nvml,
                      clock=clock, sleep=clock.sleep)


def test_the_previous_server_still_holding_4gib_waits_then_goes(four_slots, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    ledgers, pids = four_slots
    nvml, clock, lines = RecordedNvml(tape(), "slot2_previous_holds_4gib_then_releases", pids), FakeClock(), []
    guard = _slot2(ledgers, nvml, clock, lines)
    rep = dump(guard.before())  # as the trial's result writes it
    assert guard.refusal is None
    assert not rep["busy"] and rep["waited_s"] == 1.5 and rep["own"] == []
    # the first look named the previous server and its 4 GiB; it waited until NVML no longer listed it
    assert f"slot 2's previous server still holds GPU memory: PID {pids['slot2_prev']} (4,096 MiB on GPU 0)" in lines[0]
    assert [(p["pid"], p["mib"], p["slot"]) for p in rep["others"]] == [
        (pids["slot0"], 2665, 0), (pids["slot1"], 2665, 1), (pids["slot3"], 2665, 3)]
    assert rep["free_mib"] == [H200_TOTAL - 618 - 3 * 2665] and rep["need_mib"] == [need_mib(SHARE, H200_TOTAL)]
    assert rep["mode"] == "per-slot" and rep["slot"] == 2 and rep["share"] == SHARE


def test_another_slots_server_holding_memory_does_not_block_slot_2(four_slots, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    ledgers, pids = four_slots
    nvml, clock, lines = RecordedNvml(tape(), "other_slots_hold_30gib_each", pids), FakeClock(), []
    rep = dump(_slot2(ledgers, nvml, clock, lines).before())
    free = H200_TOTAL - 618 - 90_000
    assert free >= need_mib(SHARE, H200_TOTAL)  # 53,153 MiB free: the share fits beside them
    assert not rep["busy"] and rep["waited_s"] == 0 and clock.t == 0  # no wait at all
    assert sorted(p["slot"] for p in rep["others"]) == [0, 1, 3] and rep["foreign"] == []
    assert "slot 2: previous server gone, share free" in lines[-1]


def test_a_share_that_never_comes_free_leaves_the_trial_untested(four_slots, monkeypatch):
    """Another program holds 120 GiB: slot 2 waits the bounded 120 s, then the trial is infra_error (skip),
    never a launch into an out-of-memory crash that a bisect would call bad."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    ledgers, pids = four_slots
    stranger = _server("not-a-launch-of-this-run")
    try:
        nvml = RecordedNvml(tape(), "another_program_holds_120gib", {**pids, "foreign": stranger.pid})
        clock, lines = FakeClock(), []
        guard = _slot2(ledgers, nvml, clock, lines)
        rep = dump(guard.before())
    finally:
        stranger.kill()
        stranger.wait()
    free = H200_TOTAL - 618 - 120_000 - 2665
    assert rep["busy"] and rep["waited_s"] >= 120
    assert [p["pid"] for p in rep["foreign"]] == [stranger.pid] and [p["slot"] for p in rep["others"]] == [0]
    assert guard.refusal is not None
    assert guard.refusal.status == "infra_error" and guard.refusal.outcome == "skip"
    assert (f"GPU 0: {free:,} MiB free, slot 2's share needs {need_mib(SHARE, H200_TOTAL):,} "
            f"({SHARE:g} of {H200_TOTAL:,} MiB, less {SLACK_MIB:,} slack)") in guard.refusal.reasons[0]


def test_after_teardown_waits_until_the_trials_own_server_is_gone(tmp_path, monkeypatch):
    """The trial's server is recorded when it starts and when NVML lists it; once it has exited (gone from
    /proc) NVML still lists it for a moment: `after` waits for that, and not for slot 0's server."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    ledgers = Ledgers(tmp_path / "gpu-slots" / "run")
    other_token, token = uuid.uuid4().hex, uuid.uuid4().hex
    other, own = _server(other_token), _server(token)
    ledgers.record(0, other_token, [other.pid])
    try:
        nvml = RecordedNvml(tape(), "own_server_lingers_after_teardown", {"slot0": other.pid, "own": own.pid})
        clock, lines = FakeClock(), []
        guard = SharedSlot([0], 0.45, SlotPlace(1, "run", (0,)), ledgers, "c1", lines.append, nvml=nvml,
                           clock=clock, sleep=clock.sleep)
        guard.started(SimpleNamespace(token=token, pid=own.pid))
        during = dump(guard.during())
        assert [p["pid"] for p in during["own"]] == [own.pid] and during["busy"]  # it sees its own server
        own.kill()
        own.wait()  # gone from /proc; NVML lists it for two more looks
        after = dump(guard.after())
    finally:
        other.kill()
        other.wait()
    assert not after["busy"] and after["waited_s"] == 1.0 and after["own"] == []
    assert [p["pid"] for p in after["others"]] == [other.pid]
    assert "own server gone after 1s" in lines[-1]


def test_the_ledger_keeps_each_launch_and_its_pids(tmp_path):
    ledgers = Ledgers(tmp_path / "l")
    for n in range(10):
        ledgers.record(3, f"t{n}", [1000 + n], sha=f"s{n}")
    ledgers.record(3, "t9", [2000, 1009])  # a PID seen later joins its launch once
    launches = ledgers.launches(3)
    assert [x["token"] for x in launches] == [f"t{n}" for n in range(2, 10)]  # the last eight
    assert [p for p, _ in launches[-1]["pids"]] == [1009, 2000] and ledgers.launches(0) == []


def test_a_slot_alone_on_its_gpus_keeps_whole_gpu_hygiene(tmp_path):
    say = [].append
    assert guard_for(None, None, None, tmp_path, "s", say) is None  # no GPUs: nothing asked of NVML
    assert isinstance(guard_for([0], None, None, tmp_path, "s", say), WholeGpu)
    assert isinstance(guard_for([0], 0.5, SlotPlace(0, "r", ()), tmp_path, "s", say), WholeGpu)
    assert isinstance(guard_for([0], 0.45, SlotPlace(0, "r", (1,)), tmp_path, "s", say), SharedSlot)
    # and an unshared slot's spec has no place: its trial checks the whole GPU, as before
    recipe = parse_recipe({"name": "x", "engine": {"kind": "command", "repo": "."}, "launch": {"command": ["a"]},
                           "prompts": ["p"], "gpus": [[0], [1]]})
    spec = TrialSpec(recipe, "a", "ref", "0" * 40, "subject", ".", str(tmp_path), str(tmp_path))
    placed = on_slot(spec, Slot(1, (1,)), run="r")
    assert placed.slot is None and placed.recipe.gpus == [1] and placed.recipe.gpu_share is None


@pytest.mark.e2e
def test_a_trial_on_a_shared_slot_waits_for_its_slots_previous_server(tmp_path, engine_repo, cache_dir,
                                                                      monkeypatch):
    """The pipeline through its hygiene hook, in this process, the toy engine on slot 2 of four sharing GPU 0:
    NVML (recorded) lists slot 2's previous server for three looks, then not; the trial launches after that
    wait, gets its share in its argv ({gpu_share}) and records what was checked."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    recipe = parse_recipe(toy_recipe(engine_repo, gpus={"count": 1, "per_gpu": 4}, launch={
        "command": ["{python}", "-m", "toyengine.server", "--host", "{host}", "--port", "{port}",
                    "--model", "toy-{gpu_share}"], "flags": ["--seed", "0"], "ready": {"http": "/health"}}))
    spec = trial_spec(recipe, engine_repo, checkout.resolve(engine_repo, "fixed"), "t", cache_dir, tmp_path / "out")
    placed = on_slot(spec, Slot(2, (0,), SHARE, (0, 1, 3)), run=f"test-{uuid.uuid4().hex[:6]}")
    ledgers = Ledgers(Path(cache_dir) / "gpu-slots" / placed.slot.run)
    procs = {}
    try:
        for name, slot in (("slot0", 0), ("slot1", 1), ("slot3", 3), ("slot2_prev", 2)):
            token = uuid.uuid4().hex
            procs[name] = _server(token)
            ledgers.record(slot, token, [procs[name].pid])
        nvml = RecordedNvml(tape(), "slot2_previous_holds_4gib_then_releases", {n: p.pid for n, p in procs.items()})
        monkeypatch.setitem(sys.modules, "pynvml", nvml)
        result = run_trial(placed)
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
    assert result.verdict.status == "ok", result.verdict.reasons
    assert result.launch is not None and "toy-0.22" in result.launch.argv
    before, after = dump(result.extras.gpu_before), dump(result.extras.gpu_after)
    assert before["mode"] == "per-slot" and not before["busy"] and 0.5 <= before["waited_s"] < 10
    assert sorted(p["slot"] for p in before["others"]) == [0, 1, 3] and before["own"] == []
    assert after["mode"] == "per-slot" and not after["busy"]
    # the trial's own launch is in slot 2's ledger now, beside the previous one
    assert len(ledgers.launches(2)) == 2 and ledgers.launches(2)[-1]["sha"] == spec.sha


@pytest.mark.e2e
def test_a_trial_whose_share_never_comes_free_is_not_launched(tmp_path, engine_repo, cache_dir, monkeypatch):
    """The pipeline's hook: slot 1's share is never free (another program holds 120 GiB of the recorded H200):
    after the wait (ABBISECT_GPU_SLOT_WAIT_S, 1 s here) the trial is infra_error with the reason, no server was
    started and nothing of it is cached."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("ABBISECT_GPU_SLOT_WAIT_S", "1")
    recipe = parse_recipe(toy_recipe(engine_repo, gpus={"count": 1, "per_gpu": 2}))
    spec = trial_spec(recipe, engine_repo, checkout.resolve(engine_repo, "fixed"), "t", cache_dir, tmp_path / "out")
    placed = on_slot(spec, Slot(1, (0,), 0.45, (0,)), run=f"test-{uuid.uuid4().hex[:6]}")
    monkeypatch.setitem(sys.modules, "pynvml", RecordedNvml(tape(), "another_program_holds_120gib"))
    result = run_trial(placed)
    assert result.verdict.status == "infra_error" and result.verdict.outcome == "skip"
    assert "GPU slot 1: not ready for a launch after 1" in result.verdict.reasons[0]
    assert "slot 1's share needs 63,672" in result.verdict.reasons[0]
    assert result.launch is None and not (Path(placed.out_dir) / "server.log").exists()
    before = dump(result.extras.gpu_before)
    assert before["busy"] and [p["mib"] for p in before["foreign"]] == [120_000, 2665]  # slot 0 has no ledger here
    assert not result.verdict.status.cacheable


def test_a_per_slot_check_is_read_once_and_told_in_one_cell():
    """The bisect report's per-slot cell: what a trial wrote (`SlotReport`, as JSON) read back once, as a trial's
    result, then told — busy or ok, the wait, the slot's own and the other slots' servers with their MiB, the free
    memory."""
    from abbisect.gpu.hygiene import HygieneReport
    from abbisect.gpu.sharing import GpuProcess, SlotReport
    from abbisect.infra.serial import load
    from abbisect.report.bisect import _check_cell, slot_check
    from abbisect.trial.spec import Extras

    def read(check: SlotReport | HygieneReport):  # written with the trial's result, read back with it
        return load(Extras, {"gpu_before": dump(check)}).gpu_before

    written = read(SlotReport(False, "", True, 1, 0.5, "before", devices=(0,), free_mib=(5000,),
                              own=(GpuProcess(11, 1024, 0, 1),), others=(GpuProcess(12, None, 0, 0),), waited_s=2.0))
    assert _check_cell(slot_check(written)) == "BUSY, waited 2 s; own: 11 (1,024 MiB); other slots: 12 (? MiB); free 5,000 MiB"
    skipped = read(SlotReport(True, "no NVML", False, 0, None, "after"))
    assert _check_cell(slot_check(skipped)) == "no NVML"
    whole = read(HygieneReport(False, "", False))
    assert isinstance(whole, HygieneReport) and dump(whole) == dump(HygieneReport(False, "", False))
    assert slot_check(None) is None and slot_check(whole) is None  # a whole-GPU check
    assert _check_cell(None) == "—"
