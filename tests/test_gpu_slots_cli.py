"""GPU slots through the real CLI: a GPU this machine lacks, or shares that cannot fit, are one usage
line before anything runs (exit 2; 128 under check); --dry-run says the slots and shares; a bisect on slots
sharing one GPU finds the commit the one-slot bisect finds.

"This machine" is either the machine the tests run on (a CPU machine: no GPU at all) or an H200 as NVML
answered on one (tests/nvml_shim/pynvml.py first on PYTHONPATH reads the recorded answers of
tests/data/nvml/h200_shared.json: only the NVML boundary is recorded, the CLI is abbisect's own)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import abbisect, toy_recipe, write_recipe

from abbisect import checkout
from abbisect.commands.endings import EXIT_CODES

pytestmark = pytest.mark.e2e

SHIM = Path(__file__).with_name("nvml_shim")
TAPE = Path(__file__).with_name("data") / "nvml" / "h200_shared.json"


def _no_gpu_here() -> bool:
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return shutil.which("nvidia-smi") is None and not os.environ.get("ABBISECT_GPU_COUNT")
    return False


needs_a_cpu_machine = pytest.mark.skipif(not _no_gpu_here(), reason="this machine has NVIDIA tooling")


def one_h200(scenario: str = "idle", log: Path | None = None) -> dict[str, str]:
    """The environment of a CLI call that sees one H200 through NVML (recorded answers)."""
    env = {"PYTHONPATH": os.pathsep.join([str(SHIM), os.environ.get("PYTHONPATH", "")]),
           "ABBISECT_TEST_NVML_TAPE": str(TAPE), "ABBISECT_TEST_NVML_SCENARIO": scenario}
    return {**env, "ABBISECT_TEST_NVML_LOG": str(log)} if log else env


def _recipe(tmp_path: Path, repo: Path, name: str = "g", **over) -> Path:
    return write_recipe(tmp_path / f"{name}.yaml", toy_recipe(repo, name=name, **over))


def _usage_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("abbisect:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


COMMANDS = [("run", ["--a", "healthy0", "--b", "fixed"]), ("bisect", ["--good", "healthy0", "--bad", "broken"]),
            ("check", ["fixed"])]


@needs_a_cpu_machine
@pytest.mark.parametrize(("command", "args"), COMMANDS, ids=[c for c, _ in COMMANDS])
def test_a_gpu_on_a_machine_without_gpus_is_one_usage_line(tmp_path, engine_repo, command, args):
    recipe = _recipe(tmp_path, engine_repo, gpus=[1])
    cache = tmp_path / "cache"
    proc = abbisect(command, str(recipe), *args, cwd=tmp_path, cache=cache, timeout=120)
    assert proc.returncode == EXIT_CODES[command]["usage"] == (128 if command == "check" else 2)
    line = _usage_line(proc)
    assert "gpus: GPU 1 named, but this machine has no GPU" in line and "ABBISECT_GPU_COUNT" in line
    assert not cache.exists(), "the cache was opened before the check"


@pytest.mark.parametrize(("command", "args"), COMMANDS, ids=[c for c, _ in COMMANDS])
def test_gpus_the_h200_machine_lacks_are_one_usage_line(tmp_path, engine_repo, command, args):
    """The machine of the issue: one H200, a recipe with four one-GPU slots; each trial on slots 1-3 used to
    print a traceback and be recorded as infra_error."""
    recipe = _recipe(tmp_path, engine_repo, gpus=[[0], [1], [2], [3]])
    cache = tmp_path / "cache"
    proc = abbisect(command, str(recipe), *args, cwd=tmp_path, cache=cache, env=one_h200(), timeout=120)
    assert proc.returncode == (128 if command == "check" else 2)
    assert ("gpus: GPU 1, 2, 3 are not on this machine: it has 1 GPU(s) (0: NVIDIA H200, 143,771 MiB, "
            "143,153 free) as NVML sees them") in _usage_line(proc)
    assert not cache.exists()


def test_shares_that_do_not_fit_in_the_free_memory_now_are_refused(tmp_path, engine_repo):
    recipe = _recipe(tmp_path, engine_repo, gpus={"count": 1, "per_gpu": 4})
    proc = abbisect("bisect", str(recipe), "--good", "healthy0", "--bad", "broken", cwd=tmp_path,
                    cache=tmp_path / "cache", env=one_h200("another_program_holds_120gib"), timeout=120)
    assert proc.returncode == 2
    line = _usage_line(proc)
    assert "the 4 slot(s) on GPU 0 need 4 × 0.22 of its 143,771 MiB" in line and "20,488 MiB free now" in line
    assert "120,000 MiB" in line and "gpus.share" in line


def test_the_share_flag_given_twice_is_refused(tmp_path, engine_repo):
    """vLLM gets --gpu-memory-utilization from abbisect when slots share a GPU: a recipe that passes it too is
    refused (dry run included: it is the recipe's fault, not the machine's)."""
    recipe = _recipe(tmp_path, engine_repo, engine={"kind": "vllm", "repo": str(engine_repo)}, model="m",
                     launch={"flags": ["--gpu-memory-utilization", "0.5"]})
    for extra in ([], ["--dry-run"]):
        proc = abbisect("bisect", str(recipe), "--good", "healthy0", "--bad", "broken", "--gpus", "0x4", *extra,
                        cwd=tmp_path, cache=tmp_path / "cache", env=one_h200(), timeout=120)
        assert proc.returncode == 2
        assert ("launch.flags passes --gpu-memory-utilization 0.5 and gpus gives each slot a share of 0.22: say it "
                "once") in _usage_line(proc)
    alone = abbisect("run", str(recipe), "--a", "healthy0", "--b", "fixed", "--dry-run", cwd=tmp_path,
                     cache=tmp_path / "cache", env=one_h200(), timeout=120)
    assert alone.returncode == 0, alone.stderr  # no share asked for: the recipe's own flag is the only one
    assert "--gpu-memory-utilization 0.5" in alone.stdout


def test_dry_run_says_the_slots_and_shares(tmp_path, engine_repo):
    recipe = _recipe(tmp_path, engine_repo, launch={
        "command": ["{python}", "-m", "toyengine.server", "--host", "{host}", "--port", "{port}", "--model",
                    "toy-{gpu_share}"], "ready": {"http": "/health"}})
    proc = abbisect("bisect", str(recipe), "--good", "healthy0", "--bad", "broken", "--gpus", "0x4", "--dry-run",
                    cwd=tmp_path, cache=tmp_path / "cache", env=one_h200(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert ("gpus: 4 slots — 4 on GPU 0; each server takes 0.22 of each GPU's memory ({gpu_share} = 0.22 in "
            "launch.command); hygiene per slot") in out
    assert "on this machine: 1 GPU(s) (0: NVIDIA H200" in out and "a run stops here" not in out
    assert "toy-0.22" in out  # the launch line as each slot's server gets it
    vllm = _recipe(tmp_path, engine_repo, name="v", engine={"kind": "vllm", "repo": str(engine_repo)}, model="m",
                   gpus={"count": 1, "per_gpu": 2, "share": 0.4})
    proc = abbisect("run", str(vllm), "--a", "healthy0", "--b", "fixed", "--dry-run", cwd=tmp_path,
                    cache=tmp_path / "cache", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--gpu-memory-utilization 0.4" in proc.stdout and "(--gpu-memory-utilization 0.4)" in proc.stdout
    if _no_gpu_here():  # what this machine lacks is said, not fatal, in a dry run
        assert "on this machine a run stops here (exit 2): gpus: GPU 0 named, but this machine has no GPU" in proc.stdout


def test_a_recipe_without_gpus_never_asks_nvml(tmp_path, engine_repo):
    log = tmp_path / "nvml-calls.log"
    recipe = _recipe(tmp_path, engine_repo)
    for command, args in (("run", ["--a", "healthy0", "--b", "fixed"]),
                          ("bisect", ["--good", "healthy0", "--bad", "broken", "--slots", "4"])):
        proc = abbisect(command, str(recipe), *args, "--dry-run", cwd=tmp_path, cache=tmp_path / "cache",
                        env=one_h200(log=log), timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "gpus:" not in proc.stdout
    assert not log.exists(), log.read_text()
    with_gpus = _recipe(tmp_path, engine_repo, name="w", gpus=[0])  # the shim itself is asked, and logs it
    proc = abbisect("run", str(with_gpus), "--a", "healthy0", "--b", "fixed", "--dry-run", cwd=tmp_path,
                    cache=tmp_path / "cache", env=one_h200(log=log), timeout=120)
    assert proc.returncode == 0 and "nvmlInit" in log.read_text()


def test_slot_options_that_cannot_work_are_refused(tmp_path, engine_repo):
    recipe = _recipe(tmp_path, engine_repo, gpus=[0])
    run = ("bisect", str(recipe), "--good", "healthy0", "--bad", "broken")
    same = abbisect(*run, "--slots", "3", cwd=tmp_path, cache=tmp_path / "c", env=one_h200(), timeout=120)
    assert same.returncode == 2 and "--gpus 0x3" in _usage_line(same)  # three trials pinning one GPU, whole
    ray = abbisect(*run, "--gpus", "0x2", "--executor", "ray", cwd=tmp_path, cache=tmp_path / "c", env=one_h200(),
                   timeout=120)
    assert ray.returncode == 2 and "local executor" in _usage_line(ray)
    over = abbisect(*run, "--gpus", "0x4@0.3", cwd=tmp_path, cache=tmp_path / "c", timeout=120)
    assert over.returncode == 2 and "0.3 × 4 slots on one GPU = 1.20" in _usage_line(over)
    bad = write_recipe(tmp_path / "b.yaml", toy_recipe(engine_repo, gpus={"count": 1, "per_gpu": 4, "share": 0.3}))
    proc = abbisect("run", str(bad), "--dry-run", cwd=tmp_path, cache=tmp_path / "c", timeout=120)
    assert proc.returncode == 2 and "gpus.share 0.3 × gpus.per_gpu 4 = 1.20" in _usage_line(proc)


def test_two_slots_sharing_one_gpu_find_the_commit_one_slot_finds(tmp_path, engine_repo, cache_dir):
    """`--gpus 0x2` on the recorded H200: both slots pin GPU 0, each server gets 0.45 (here through {gpu_share}
    in the toy engine's --model), the ends run at once, and every trial records its per-slot check (the trial
    processes read the same recorded NVML: an idle H200, the toy servers run on the CPU) in bisect.md."""
    recipe = _recipe(tmp_path, engine_repo, name="shared", launch={
        "command": ["{python}", "-m", "toyengine.server", "--host", "{host}", "--port", "{port}", "--model",
                    "toy-{gpu_share}"], "flags": ["--seed", "0"], "ready": {"http": "/health"}})
    out = tmp_path / "res"
    proc = abbisect("bisect", str(recipe), "--good", "healthy0", "--bad", "fixed~1", "--gpus", "0x2", "-o",
                    str(out), "--no-cache", cwd=tmp_path, cache=cache_dir, env=one_h200())
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((out / "bisect.json").read_text())
    assert res["first_new"] == checkout.resolve(engine_repo, "broken").sha
    assert res["slots"] == 2 and res["executor"] == "local"
    assert "2 slot(s) on the local executor: slot 0 (GPU 0, share 0.45), slot 1 (GPU 0, share 0.45)" in proc.stderr
    for t in res["trials"]:
        assert t["placement"]["gpus"] == [0] and t["placement"]["share"] == 0.45
        before, after = t["gpu"]["before"], t["gpu"]["after"]
        assert before["mode"] == "per-slot" and before["slot"] == t["placement"]["slot"] and not before["skipped"]
        assert not before["busy"] and before["free_mib"] == [143_153] and before["need_mib"] == [63_672]
        assert after["when"] == "after" and not after["busy"]
    state = json.loads((out / "state.json").read_text())
    argvs = [s["result"]["launch"]["argv"] for s in state["steps"] if s["result"]["launch"]]
    assert argvs and all("toy-0.45" in a for a in argvs)
    assert "GPU hygiene per slot (slots share a GPU)" in (out / "bisect.md").read_text()
