"""A bisect killed at any stage resumes with the command it printed, to the same answer, no trial run twice.

Every server launch of these tests appends its PID to a per-test marker file (a launch wrapper named in
the recipe, the file named by the recipe's `env`), so "no trial repeated" is counted, not assumed, and
servers orphaned by SIGKILL are ended by their own PIDs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import abbisect, toy_recipe, write_recipe

from abbisect.builtin.history import Commit, build_history

HISTORY = [Commit("v1", tag="v1"), Commit("docs"), Commit("tidy"),
           Commit("Dispatch quantisation to linear layers only", "break_scale"), Commit("more docs"),
           Commit("cleanup"), Commit("release", tag="v2")]

WRAPPER = '''import os, sys, time
with open(os.environ["ABBISECT_TEST_MARK"], "a") as fh:
    fh.write(f"{os.getpid()}\\n")
from toyengine import server
delay = float(os.environ.get("ABBISECT_TEST_QUERY_DELAY", "0"))
post = server.Handler.do_POST
def slow(self):
    time.sleep(delay)
    return post(self)
server.Handler.do_POST = slow
server.main(sys.argv[1:])
'''

TRIAL_LINE = re.compile(r"(old end|new end|candidate) ([0-9a-f]{10}): (environment|launch|query)")


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[Path, list[str]]:
    repo = tmp_path_factory.mktemp("resume") / "engine"
    return repo, build_history(repo, HISTORY)


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("resume-cache")


def recipe_for(tmp: Path, repo: Path) -> tuple[Path, Path]:
    """A toy recipe whose every launch is counted in `mark` (slow enough to interrupt each stage)."""
    mark = tmp / "launches.txt"
    (tmp / "wrap.py").write_text(WRAPPER)
    recipe = toy_recipe(repo, env={"ABBISECT_TEST_MARK": str(mark), "TOYENGINE_LOAD_SECONDS": "1.0",
                                   "ABBISECT_TEST_QUERY_DELAY": "0.4"},
                        bisect={"prefetch": 0})
    recipe["launch"]["command"] = ["{python}", str(tmp / "wrap.py"), "--host", "{host}", "--port", "{port}"]
    return write_recipe(tmp / "r.yaml", recipe), mark


def launches(mark: Path) -> list[int]:
    return [int(line) for line in mark.read_text().split()] if mark.exists() else []


def end_our_servers(mark: Path) -> None:
    for pid in launches(mark):
        try:
            os.killpg(pid, signal.SIGKILL)  # servers run in their own process group
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def env_for(cache: Path) -> dict[str, str]:
    return {**os.environ, "ABBISECT_CACHE_DIR": str(cache)}


def run_printed(command: str, cwd: Path, cache: Path, shim: Path) -> subprocess.CompletedProcess:
    """The printed command, run by a shell exactly as printed (`abbisect` is this checkout's CLI)."""
    shim.mkdir(exist_ok=True)
    exe = shim / "abbisect"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} -m abbisect "$@"\n')
    exe.chmod(0o755)
    env = {**env_for(cache), "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", command + " --json"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, history, module_cache) -> dict:
    """The same bisect, never interrupted: its answer and how many trials it takes."""
    repo, _ = history
    tmp = tmp_path_factory.mktemp("reference")
    recipe, mark = recipe_for(tmp, repo)
    proc = abbisect("bisect", str(recipe), "--good", "v1", "--bad", "v2", "--no-cache", "-o", str(tmp / "out"),
                    "--json", cwd=tmp, cache=module_cache)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert len(launches(mark)) == len(res["steps"])  # every trial launched once
    return res


def interrupt(cmd: list[str], cwd: Path, cache: Path, trial: int, stage: str, sig: int,
              mark: Path) -> tuple[str, str]:
    """Start the bisect; send `sig` as the `trial`-th trial (0 = the first end) enters `stage` (for the
    ready wait: once its server has started, as counted in `mark`)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env_for(cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    seen: list[str] = []
    lines: list[str] = []
    hit = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)
            m = TRIAL_LINE.search(line)
            if m and not hit.is_set():
                key = f"{m[1]} {m[2]}"
                if key not in seen:
                    seen.append(key)
                if len(seen) == trial + 1 and m[3] == stage:
                    hit.set()
                    deadline = time.monotonic() + 20
                    while stage == "launch" and len(launches(mark)) <= trial and time.monotonic() < deadline:
                        time.sleep(0.02)
                    proc.send_signal(sig)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc.wait(timeout=300)
    reader.join(timeout=30)
    assert hit.is_set(), "".join(lines)
    assert proc.returncode != 0
    return "".join(lines), seen[trial]


CASES = [  # (trial index, stage, signal): the ends are trials 0 and 1
    pytest.param(0, "launch", signal.SIGINT, id="first-end-ready-wait-sigint"),
    pytest.param(1, "query", signal.SIGKILL, id="second-end-query-sigkill"),
    pytest.param(2, "environment", signal.SIGINT, id="candidate-build-sigint"),
    pytest.param(2, "environment", signal.SIGKILL, id="candidate-build-sigkill"),
    pytest.param(3, "launch", signal.SIGKILL, id="candidate-ready-wait-sigkill"),
    pytest.param(3, "query", signal.SIGINT, id="candidate-query-sigint"),
]


@pytest.mark.e2e
@pytest.mark.parametrize("trial,stage,sig", CASES)
def test_interrupted_bisect_resumes_without_repeating_a_trial(tmp_path, history, module_cache, reference,
                                                              trial, stage, sig):
    repo, _ = history
    recipe, mark = recipe_for(tmp_path, repo)
    # A build can only be interrupted where one happens: a cache of its own for those cases.
    cache = tmp_path / "cache" if stage == "environment" else module_cache
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "abbisect", "bisect", str(recipe), "--good", "v1", "--bad", "v2", "--no-cache",
           "-o", str(out)]
    try:
        err, interrupted = interrupt(cmd, tmp_path, cache, trial, stage, sig, mark)
        state = json.loads((out / "state.json").read_text())
        recorded = [s["sha"] for s in state["steps"]]
        assert len(recorded) == trial  # every trial before the interrupted one, and nothing of it
        before = launches(mark)
        assert len(before) == trial + (stage in ("launch", "query"))
        if sig == signal.SIGINT:
            printed = re.search(r"abbisect: interrupted; resume with: (.+)", err)[1]
            assert err.count("abbisect: interrupted") == 1, err  # said once, with the command that resumes
        else:  # nothing is printed on SIGKILL: the command printed at the start is the one to use
            printed = re.search(r"if interrupted, resume with: (.+)\)", err)[1]
        assert printed == f"abbisect bisect --resume {out}" and "--no-cache" not in printed

        again = run_printed(printed, tmp_path, cache, tmp_path / "bin")
        assert again.returncode == 0, again.stderr
        res = json.loads(again.stdout)["data"]
        assert res["first_new"] == reference["first_new"] and res["mode"] == reference["mode"]
        assert [s["sha"] for s in res["steps"]] == [s["sha"] for s in reference["steps"]]
        replayed = [s["sha"] for s in res["steps"] if s["replayed"]]
        assert replayed == recorded
        # No trial repeated: the resumed run launched exactly the trials that had not finished.
        after = launches(mark)
        assert len(after) - len(before) == len(res["steps"]) - len(recorded)
        # bisect.json counts the whole bisect's launches; those before the resume apart
        assert res["launches"] == len(res["steps"]) and res["before"]["launches"] == len(recorded)
        assert interrupted.endswith(res["steps"][trial]["sha"][:10])
    finally:
        end_our_servers(mark)


@pytest.mark.e2e
def test_resume_needs_nothing_else_and_checks_what_is_repeated(tmp_path, history, module_cache, reference):
    """A finished bisect resumed replays every trial (no launch, the original's counted); repeated arguments must
    agree."""
    repo, shas = history
    recipe, mark = recipe_for(tmp_path, repo)
    out = tmp_path / "out"
    first = abbisect("bisect", str(recipe), "--good", "v1", "--bad", "v2", "-o", str(out), cwd=tmp_path,
                     cache=module_cache)
    assert first.returncode == 0, first.stderr
    n = len(launches(mark))
    again = abbisect("bisect", "--resume", str(out), "--json", cwd=tmp_path / "..", cache=module_cache)
    assert again.returncode == 0, again.stderr
    res = json.loads(again.stdout)["data"]
    assert res["launches"] == res["before"]["launches"] == n and all(s["replayed"] for s in res["steps"])
    assert len(launches(mark)) == n
    assert (out / "bisect.md").read_text().count("(before the resume)") == len(res["steps"])
    assert res["first_new"] == reference["first_new"] == shas[3]
    agreeing = abbisect("bisect", str(recipe), "--resume", str(out), "--good", "v1", "--bad", shas[-1],
                        cwd=tmp_path, cache=module_cache)
    assert agreeing.returncode == 0, agreeing.stderr
    for extra in (["--good", shas[1]], ["--first-parent"], ["--retries", "2"], ["-o", str(tmp_path / "x")]):
        proc = abbisect("bisect", "--resume", str(out), *extra, cwd=tmp_path, cache=module_cache)
        assert proc.returncode == 2 and "differs from the interrupted bisect" in proc.stderr, (extra, proc.stderr)
    changed = write_recipe(tmp_path / "other.yaml", {**toy_recipe(repo), "prompts": ["Something else?"]})
    proc = abbisect("bisect", str(changed), "--resume", str(out), cwd=tmp_path, cache=module_cache)
    assert proc.returncode == 2 and "the recipe" in proc.stderr
    missing = abbisect("bisect", "--resume", str(tmp_path / "nowhere"), cwd=tmp_path, cache=module_cache)
    assert missing.returncode == 2 and "no state.json" in missing.stderr


@pytest.mark.e2e
def test_state_is_written_before_the_ends_are_tested(tmp_path, history, module_cache):
    repo, shas = history
    recipe, mark = recipe_for(tmp_path, repo)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "abbisect", "bisect", str(recipe), "--good", "v1", "--bad", "v2", "-o", str(out)]
    try:
        interrupt(cmd, tmp_path, module_cache, 0, "environment", signal.SIGKILL, mark)
        state = json.loads((out / "state.json").read_text())
        assert state["steps"] == [] and state["good"]["sha"] == shas[0] and state["bad"]["sha"] == shas[-1]
        assert state["recipe"]["name"] == "toy" and state["options"]["no_cache"] is False
    finally:
        end_our_servers(mark)


@pytest.mark.e2e
def test_secrets_stay_out_of_state_and_resume_reads_the_recipe_again(tmp_path, history, module_cache):
    repo, shas = history
    secret = "hf_resume_secret_value_42"
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo, env={"HF_TOKEN": secret}))
    out = tmp_path / "out"
    first = abbisect("bisect", str(recipe), "--good", "v1", "--bad", "v2", "-o", str(out), cwd=tmp_path,
                     cache=module_cache)
    assert first.returncode == 0, first.stderr
    state = (out / "state.json").read_text()
    assert secret not in state and json.loads(state)["masked"] is True
    again = abbisect("bisect", "--resume", str(out), "--json", cwd=tmp_path, cache=module_cache)
    assert again.returncode == 0, again.stderr
    res = json.loads(again.stdout)["data"]
    assert res["launches"] == res["before"]["launches"] and res["first_new"] == shas[3]
    # state.json's fingerprint is the public one (secret values replaced by a constant, so no guess can be
    # checked against it): a rotated secret still resumes; any other change does not.
    write_recipe(recipe, toy_recipe(repo, env={"HF_TOKEN": "another-value"}))
    rotated = abbisect("bisect", "--resume", str(out), "--json", cwd=tmp_path, cache=module_cache)
    assert rotated.returncode == 0, rotated.stderr
    write_recipe(recipe, toy_recipe(repo, env={"HF_TOKEN": secret, "TOYENGINE_MODE": "other"}))
    changed = abbisect("bisect", "--resume", str(out), cwd=tmp_path, cache=module_cache)
    assert changed.returncode == 2 and "not the recipe the bisect started with" in changed.stderr


@pytest.mark.e2e
def test_interrupted_lazy_bisect_resumes_lazily_without_repeating_a_trial(tmp_path, history, module_cache):
    """`--ends lazy` interrupted at its second candidate's query: the printed command resumes it in lazy mode
    (no end tested, since the answer does not rest on one), the same answer, the finished trial replayed."""
    repo, _ = history
    recipe, mark = recipe_for(tmp_path, repo)
    ref = abbisect("bisect", str(recipe), "--good", "v1", "--bad", "v2", "--no-cache", "--ends", "lazy",
                   "-o", str(tmp_path / "ref"), "--json", cwd=tmp_path, cache=module_cache)
    assert ref.returncode == 0, ref.stderr
    reference = json.loads(ref.stdout)["data"]
    assert reference["ends"]["mode"] == "lazy" and all(s["role"] == "candidate" for s in reference["steps"])
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "abbisect", "bisect", str(recipe), "--good", "v1", "--bad", "v2", "--no-cache",
           "--ends", "lazy", "-o", str(out)]
    try:
        err, interrupted = interrupt(cmd, tmp_path, module_cache, 1, "query", signal.SIGINT, mark)
        recorded = [s["sha"] for s in json.loads((out / "state.json").read_text())["steps"]]
        assert len(recorded) == 1
        before = launches(mark)
        again = run_printed(re.search(r"abbisect: interrupted; resume with: (.+)", err)[1], tmp_path, module_cache,
                            tmp_path / "bin")
        assert again.returncode == 0, again.stderr
        res = json.loads(again.stdout)["data"]
        assert res["ends"]["mode"] == "lazy" and res["first_new"] == reference["first_new"]
        assert [s["sha"] for s in res["steps"]] == [s["sha"] for s in reference["steps"]]
        assert [s["sha"] for s in res["steps"] if s["replayed"]] == recorded
        assert len(launches(mark)) - len(before) == res["launches"] - res["before"]["launches"] == len(res["steps"]) - 1
        assert interrupted.endswith(res["steps"][1]["sha"][:10])
    finally:
        end_our_servers(mark)
