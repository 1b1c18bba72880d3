"""`abbisect run` end to end through the CLI on the toy engine's real git history, venvs and servers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import abbisect, marked_pids, run_ab, toy_recipe, write_recipe

pytestmark = pytest.mark.e2e


def test_broken_vs_fixed(tmp_path, engine_repo, cache_dir):
    res, out = run_ab(tmp_path, engine_repo, cache_dir, "broken", "fixed")
    a, b = res["a"], res["b"]
    assert a["verdict"]["status"] == "degenerate" and a["verdict"]["outcome"] == "bad"
    assert b["verdict"]["status"] == "ok" and b["verdict"]["outcome"] == "good"
    assert all(x["label"] == "degenerate" for x in a["analyses"])
    assert all(x["label"] == "healthy" for x in b["analyses"])
    assert "need analysis there" in a["outputs"][0]["text"]
    assert "paris" in b["outputs"][0]["text"]
    # the load-log warning is found with its captured parameter, and shown as disappearing in B
    sig = [s for s in a["signatures"] if s["id"] == "param_not_found"]
    assert sig and sig[0]["groups"][0] == "lm_head.weight_scale"
    assert "param_not_found" in res["signature_diff"]["disappeared"]
    assert res["same_launch"] is True
    assert a["answers"][0]["passed"] is False and b["answers"][0]["passed"] is True

    report = (out / "report.md").read_text()
    for needle in ("abbisect A/B: `toy`", "`broken`", "`fixed`", "identical on both sides", "**degenerate**",
                   "**ok**", "need analysis there", "<details>", "abbisect run", "param_not_found"):
        assert needle in report, needle
    csv = pd.read_csv(out / "outputs.csv")
    assert len(csv) == 8 and set(csv["side"]) == {"a", "b"}
    assert (out / f"a-{a['spec']['sha'][:10]}" / "server.log").read_text().count("not found in params_dict") == 1
    assert (out / f"b-{b['spec']['sha'][:10]}" / "build.log").is_file()
    assert json.loads((out / "results.json").read_text())["b"]["verdict"]["status"] == "ok"


def test_fixed_vs_fixed_is_identical(tmp_path, engine_repo, cache_dir):
    res, _ = run_ab(tmp_path, engine_repo, cache_dir, "fixed", "healthy0")
    assert res["a"]["verdict"]["status"] == res["b"]["verdict"]["status"] == "ok"
    assert all(d["identical"] for d in res["divergences"])
    # the same commits again: the trial results come from the cache (never pay twice) ...
    (tmp_path / "again").mkdir()
    again, _ = run_ab(tmp_path / "again", engine_repo, cache_dir, "fixed", "fixed")
    assert again["a"]["cached"] and again["b"]["cached"]
    # ... and with --no-cache they run again, on the venv already built for that commit
    recipe = write_recipe(tmp_path / "nc.yaml", toy_recipe(engine_repo, sides={"a": "fixed", "b": "healthy0"}))
    proc = abbisect("run", str(recipe), "-o", str(tmp_path / "nc"), "--json", "--no-cache", cwd=tmp_path,
                    cache=cache_dir)
    fresh = json.loads(proc.stdout)["data"]
    assert not fresh["a"]["cached"] and fresh["a"]["env"]["reused"] and fresh["b"]["env"]["reused"]


def test_install_failure_is_an_outcome(tmp_path, engine_repo, cache_dir):
    res, out = run_ab(tmp_path, engine_repo, cache_dir, "noinstall", "fixed")
    assert res["a"]["verdict"]["status"] == "build_failed"
    assert res["a"]["verdict"]["outcome"] == "skip"
    assert res["a"]["launch"] is None and res["b"]["verdict"]["status"] == "ok"
    assert "build_failed" in (out / "report.md").read_text()


def test_crash_at_start(tmp_path, engine_repo, cache_dir):
    res, out = run_ab(tmp_path, engine_repo, cache_dir, "crash", "fixed")
    a = res["a"]
    assert a["verdict"]["status"] == "crashed_at_startup" and a["verdict"]["outcome"] == "bad"
    assert a["launch"]["returncode"] not in (0, None)
    assert "illegal memory access" in a["first_exception"][1]
    assert any("Traceback" in line for line in a["launch"]["log_tail"])
    assert "illegal memory access" in (out / "report.md").read_text()


def test_never_ready_times_out(tmp_path, engine_repo, cache_dir):
    res, _ = run_ab(tmp_path, engine_repo, cache_dir, "hang", "fixed", timeouts={"build": 300, "ready": 3,
                                                                                 "request": 10, "teardown": 5})
    a = res["a"]
    assert a["verdict"]["status"] == "timeout" and a["verdict"]["outcome"] == "skip"
    assert a["launch"]["teardown"]["leftover_pids"] == []


def test_flag_drift_is_untestable(tmp_path, engine_repo, cache_dir):
    res, _ = run_ab(tmp_path, engine_repo, cache_dir, "flagdrift", "fixed")
    a = res["a"]
    assert a["verdict"]["status"] == "flag_rejected" and a["verdict"]["outcome"] == "skip"
    assert any("--seed" in r for r in a["verdict"]["reasons"])


def test_bad_ref_exits_2(tmp_path, engine_repo, cache_dir):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, sides={"a": "nope-not-a-ref", "b": "fixed"}))
    proc = abbisect("run", str(recipe), "-o", str(tmp_path / "o"), cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 2
    assert "nope-not-a-ref" in proc.stderr and str(engine_repo) in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_existing_output_folder_is_not_overwritten(tmp_path, engine_repo, cache_dir):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, sides={"a": "fixed", "b": "fixed"}))
    proc = abbisect("run", str(recipe), "-o", str(out), cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 2 and "not empty" in proc.stderr
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_user_checkout_untouched(tmp_path, engine_repo, cache_dir):
    def state():
        git = ["git", "-C", str(engine_repo)]
        return (subprocess.run([*git, "rev-parse", "HEAD"], check=False, capture_output=True, text=True).stdout,
                subprocess.run([*git, "status", "--porcelain"], check=False, capture_output=True, text=True).stdout,
                (engine_repo / "toyengine" / "loader.py").read_text())
    (engine_repo / "scratch.txt").write_text("uncommitted work")
    before = state()
    run_ab(tmp_path, engine_repo, cache_dir, "broken", "healthy0")
    assert state() == before
    (engine_repo / "scratch.txt").unlink()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_killed_run_leaves_no_server(tmp_path, engine_repo, cache_dir, sig, test_mark):
    mark = test_mark
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, sides={"a": "fixed", "b": "fixed"},
                                                          env={"TOYENGINE_LOAD_SECONDS": "60",
                                                               "ABBISECT_TEST_MARK": mark}))
    # the "fixed" venv exists from other tests or is built now; wait until the server is up, then kill abbisect
    proc = subprocess.Popen([sys.executable, "-m", "abbisect", "run", str(recipe), "-o", str(tmp_path / "o")],
                            cwd=tmp_path, env={**os.environ, "ABBISECT_CACHE_DIR": str(cache_dir)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not marked_pids(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    servers = marked_pids(mark)
    assert servers, "the server never started"
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert proc.returncode != 0
    # gone with abbisect (a zombie awaiting its reaper is gone too); a loaded machine may take a moment
    assert not _alive(servers, within=10.0), "a server process survived"


def _alive(pids: list[int], within: float) -> list[int]:
    """Those of `pids` still running (not a zombie) after up to `within` seconds."""
    def running(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False

    deadline = time.monotonic() + within
    while (left := [p for p in pids if running(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_gpu_hygiene_is_skipped_with_a_notice_without_nvml(tmp_path, engine_repo, cache_dir):
    # A GPU abbisect cannot count (no NVML, no nvidia-smi) is refused before anything runs, unless stated.
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, sides={"a": "fixed", "b": "fixed"}, gpus=[0]))
    out = tmp_path / "out"
    proc = abbisect("run", str(recipe), "--output", str(out), "--json", cwd=tmp_path, cache=cache_dir,
                    env={"ABBISECT_GPU_COUNT": "1"})
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    for side in ("a", "b"):
        extras = res[side]["extras"]
        if not extras["gpu_before"]["skipped"]:
            pytest.skip("this machine has NVML: the hygiene check runs for real (tests/test_gpu_hygiene.py)")
        assert extras["gpu_before"]["notice"] and extras["gpu_after"]["skipped"]
    assert "Same-GPU hygiene" in (out / "report.md").read_text()


def test_completions_api(tmp_path, engine_repo, cache_dir):
    res, _ = run_ab(tmp_path, engine_repo, cache_dir, "broken", "fixed", api="completions")
    assert res["a"]["verdict"]["status"] == "degenerate" and res["b"]["verdict"]["status"] == "ok"
    assert res["b"]["outputs"][0]["finish_reason"] == "stop" and res["b"]["outputs"][0]["completion_tokens"] > 3
