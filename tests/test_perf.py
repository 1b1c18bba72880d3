"""A performance verdict through the CLI on real toy-engine processes: an A/B of a planted +10 % per-token
cost, an A-vs-A that comes out same with its noise floor, a bisect that names the slowing commit (interrupted
and resumed, without measuring a finished commit again), and the placements and commands a performance verdict
refuses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from conftest import REPO_ROOT, abbisect, toy_recipe, write_recipe

from abbisect.builtin.history import PERF_DEMO_SLOW

DEMO = REPO_ROOT / "recipes" / "perf-demo.yaml"


def _run(tmp_path, cache_dir, recipe, *args: str, name: str = "out"):
    out = tmp_path / name
    proc = abbisect("run", str(recipe), "-o", str(out), "--json", *args, cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["data"], out


def _passes(trial: dict) -> list[dict]:
    return trial["extras"]["perf"]["passes"]


@pytest.mark.alone
@pytest.mark.e2e
def test_a_performance_ab_finds_the_planted_slowdown(tmp_path, cache_dir):
    data, out = _run(tmp_path, cache_dir, DEMO)
    s = data["assessment"]
    assert s["kind"] == "perf" and s["a"]["outcome"] == "good" and s["b"]["outcome"] == "bad", s
    cmp = s["comparison"]["comparison"]
    assert cmp["call"] == "different" and 0.05 < cmp["change"] < 0.2, cmp  # tpot_median: +10 % planted
    assert data["schema"] == "abbisect/run/v1" and not data["same_commit"]
    # every launch measured its passes under the same pinned load, alternating sides
    a, b = [data["a"], *data["more_a"]], [data["b"], *data["more_b"]]
    assert len(a) == len(b) >= 2 and all(len(_passes(t)) == 5 for t in a + b)
    assert a[0]["extras"]["perf"]["workload"] == b[0]["extras"]["perf"]["workload"]
    assert all(p["errors"] == 0 and p["completed"] == 24 for t in a + b for p in _passes(t))
    assert all("load1" in p["conditions"] and "cpu_mhz" in p["conditions"] for p in _passes(a[0]))
    starts = sorted((t["extras"]["server_times"]["launched"], side) for side, ts in (("a", a), ("b", b)) for t in ts)
    assert [side for _, side in starts][:4] == ["a", "b", "a", "b"]
    md = (out / "report.md").read_text()
    assert "### Performance" in md and "| **tpot_median** (lower is better) |" in md and "**different**" in md
    assert (out / "perf.svg").read_text().startswith("<svg") and "Every pass of tpot_median" in md
    # Each side's launches on its own JIT caches: warm after the side's first launch, and the report says how
    # each side started (and warns if one side started cold where the other did not).
    jit = {side: [t["launch"]["jit"] for t in ts] for side, ts in (("a", a), ("b", b))}
    assert all(len({j["folder"] for j in js}) == 1 and {j["start"] for j in js[1:]} == {"warm"} for js in jit.values())
    assert jit["a"][0]["folder"] != jit["b"][0]["folder"]
    assert "`launch.jit_cache: commit`" in md and "Launches started: A " in md
    unlike = [j["start"] for j in jit["a"]].count("cold") != [j["start"] for j in jit["b"]].count("cold")
    assert ("did not start alike" in md) == unlike


@pytest.mark.alone
@pytest.mark.e2e
def test_a_vs_a_is_never_different_and_says_the_noise_floor(tmp_path, cache_dir):
    """Same on a quiet machine (benchmarks/RESULTS.md: 20 A-vs-As of 20). On a busy one (this suite beside an
    engine on 2 cores) launches measured at different moments can differ by a few percent, and the honest
    answer is not sure after the cap, with the passes that would settle it: never different."""
    data, out = _run(tmp_path, cache_dir, DEMO, "--a", "v1.0", "--b", "v1.0")
    assert data["same_commit"]
    cmp = data["assessment"]["comparison"]["comparison"]
    assert cmp["call"] in ("same", "unsure"), cmp
    if cmp["call"] == "unsure":
        passes = {s: sum(len(_passes(t)) for t in (data[s], *data[f"more_{s}"])) for s in "ab"}
        assert passes == {"a": 30, "b": 30}, passes  # perf.max_launches × passes of the demo, each side
        assert "not sure" in (out / "report.md").read_text()
    assert {data["assessment"][s]["outcome"] for s in "ab"} == {"good"}
    md = (out / "report.md").read_text()
    assert "A-vs-A noise floor of tpot_median" in md and "Smallest change these settings find" in md
    # B's launches are its own: none of them is a replay of A's
    assert not any(t["cached"] for t in (data["b"], *data["more_b"]))


@pytest.fixture(scope="module")
def slow_history(planted):
    return planted(10, {6: "slow_tokens"})


def _perf_recipe(tmp_path, repo):
    demo = yaml.safe_load(DEMO.read_text())
    recipe = toy_recipe(repo, env=demo["env"], public_env=demo["public_env"], perf=demo["perf"],
                        prompts=demo["prompts"])
    return write_recipe(tmp_path / "perf.yaml", recipe)


@pytest.mark.alone
@pytest.mark.e2e
def test_a_resumed_performance_bisect_names_the_slowing_commit_and_measures_no_finished_commit_again(
        tmp_path, cache_dir, slow_history):
    """Interrupted once a candidate is measured, then resumed: the resumed bisect names the slowing commit,
    confirmed, with every trial's measurement and the report's performance sections, and reads each commit measured
    before the interruption from its record instead of measuring it again. (A performance bisect is never served
    from the trial cache, so an uninterrupted one here would measure every commit once more for the same answer;
    an uninterrupted bisect of the toy engine's slowdowns: tests/test_bisect_changes.py, two in one range.)"""
    repo, shas = slow_history
    path = _perf_recipe(tmp_path, repo)
    out = tmp_path / "bis"
    proc = subprocess.Popen([sys.executable, "-m", "abbisect", "bisect", str(path), "--good", shas[0], "--bad",
                             shas[-1], "-o", str(out)], cwd=tmp_path, start_new_session=True,
                            env={**os.environ, "ABBISECT_CACHE_DIR": str(cache_dir)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # the ends are settled and a candidate has been measured
            if (out / "state.json").exists() and len(json.loads((out / "state.json").read_text())["steps"]) >= 3:
                break
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    before = json.loads((out / "state.json").read_text())["steps"]
    assert len(before) >= 3
    again = abbisect("bisect", "--resume", str(out), "--json", cwd=tmp_path, cache=cache_dir)
    assert again.returncode == 0, again.stderr
    data = json.loads(again.stdout)["data"]
    assert data["first_new"] == shas[6], [(s["sha"][:8], s["outcome"], s["evidence"][:80]) for s in data["steps"]]
    c = data["confirmation"]
    assert c["level"] == "confirmed" and c["mass"]["found"] >= 0.99, c
    assert data["posterior"]["kind"] == "perf" and data["posterior"]["answer"] == shas[6]
    assert all(t["perf"].startswith("tpot_median ") for t in data["trials"])
    md = (out / "bisect.md").read_text()
    assert "### Performance" in md and "tpot_median along the tested commits" in md and "**Confirmed**" in md
    done = {s["sha"] for s in before}
    replayed = [s for s in data["steps"] if s["sha"] in done]
    assert replayed and all(s["replayed"] for s in replayed)
    # a finished commit's passes are the ones measured before the interruption, not new ones
    after = {s["sha"]: s for s in json.loads((out / "state.json").read_text())["steps"]}
    assert all(s["result"]["extras"]["perf"]["passes"] for s in after.values())  # every step's samples are saved
    for step in before:
        assert _passes(after[step["sha"]]["result"]) == _passes(step["result"])


@pytest.mark.e2e
def test_a_performance_verdict_refuses_trials_that_would_share_the_machine(tmp_path, cache_dir, slow_history):
    repo, shas = slow_history
    path = _perf_recipe(tmp_path, repo)
    proc = abbisect("bisect", str(path), "--good", shas[0], "--bad", shas[-1], "--slots", "2", cwd=tmp_path,
                    cache=cache_dir)
    assert proc.returncode == 2 and "measures one trial at a time on a CPU machine" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    shared = abbisect("bisect", str(path), "--good", shas[0], "--bad", shas[-1], "--gpus", "0x2", cwd=tmp_path,
                      cache=cache_dir, env={"ABBISECT_GPU_COUNT": "1"})
    assert shared.returncode == 2 and "cannot share a GPU between slots" in shared.stderr, shared.stderr
    check = abbisect("check", str(path), shas[0], cwd=tmp_path, cache=cache_dir)
    assert check.returncode == 128 and "a performance verdict compares two" in check.stderr, check.stderr


def test_the_demo_history_slows_at_its_documented_commit(tmp_path, cache_dir):
    from abbisect.builtin.history import ensure_perf_demo_repo

    repo = ensure_perf_demo_repo(cache_dir)
    log = subprocess.run(["git", "-C", str(repo), "log", "--format=%s", "--reverse"], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    assert len(log) == 40 and "sampler" in log[PERF_DEMO_SLOW].lower()


# --- failed requests are evidence; abbisect's own client makes none ---------------------------

SMALL_PERF = {"metric": "output_throughput", "requests": 8, "warmup": 1, "concurrency": 2, "input_words": 8,
              "passes": 3, "launches": 1, "max_launches": 2}
SMALL_SAMPLING = {"temperature": 0, "max_tokens": 8, "seed": 0}  # the load's tokens a request too


@pytest.fixture(scope="module")
def stream_history(planted):
    """8 commits: from commit 5 on, streams end in an error event (3 in 4, or as TOYENGINE_STREAM_ERROR_RATE says)."""
    return planted(8, {5: "stream_errors"})


def _small(tmp_path, repo, **perf):
    return write_recipe(tmp_path / "perf.yaml", toy_recipe(repo, perf={**SMALL_PERF, **perf}, sampling=SMALL_SAMPLING))


@pytest.mark.e2e
@pytest.mark.parametrize("rate", ["0.75", "1"], ids=["3-in-4-streams-fail", "every-stream-fails"])
def test_a_side_whose_streams_fail_is_request_errors_and_bad_never_a_timing_or_a_skip(tmp_path, cache_dir,
                                                                                      stream_history, rate):
    """A side whose streams end in an error event 3 times in 4 is request errors and bad, never judged 'good, not
    sure −2.6 %' from the requests that got through; one whose streams all fail is bad, never skipped as untestable."""
    repo, shas = stream_history
    path = _small(tmp_path, repo)
    out = tmp_path / "out"
    proc = abbisect("run", str(path), "--a", shas[0], "--b", shas[-1], "-o", str(out), "--json", cwd=tmp_path,
                    cache=cache_dir, env={"TOYENGINE_STREAM_ERROR_RATE": rate})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)["data"]
    s = data["assessment"]
    assert (s["a"]["outcome"], s["b"]["outcome"]) == ("good", "bad"), s
    assert data["b"]["verdict"]["status"] == "request_errors" and data["a"]["verdict"]["status"] == "ok"
    assert s["b"]["evidence"].startswith("request_errors: 3/3 perf pass(es) failed their requests"), s["b"]
    passes = _passes(data["b"])
    assert all(p["failed"] and p["errors"] >= 6 for p in passes), passes  # of 8 measured requests each
    assert all(p["first_error"].startswith("error in stream: ") for p in passes)
    assert not any(p["failed"] for p in _passes(data["a"]))
    md = (out / "report.md").read_text()
    errors = sum(p["errors"] for p in passes)
    row = next(line for line in md.splitlines() if line.startswith("| failed requests"))
    assert f"| 0 of 24 in 3 passes | {errors} of 24 in 3 passes (per pass: " in row, row
    assert "First failed request: B: error in stream: " in md and "detokenizer: lost the state" in md


@pytest.mark.e2e
def test_a_performance_bisect_stops_at_the_commit_that_breaks_streaming(tmp_path, cache_dir, stream_history):
    """The bad end's streams all fail: it is bad (request_errors), not untestable, and the bisect names the commit
    where streams start failing instead of stepping around it."""
    repo, shas = stream_history
    path = _small(tmp_path, repo)
    out = tmp_path / "bis"
    proc = abbisect("bisect", str(path), "--good", shas[0], "--bad", shas[-1], "-o", str(out), "--json",
                    cwd=tmp_path, cache=cache_dir, env={"TOYENGINE_STREAM_ERROR_RATE": "1"})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)["data"]
    assert data["first_new"] == shas[5], [(s["sha"][:8], s["outcome"], s["evidence"][:90]) for s in data["steps"]]
    assert data["confirmation"]["level"] == "confirmed", data["confirmation"]
    failing = [t for t in data["trials"] if "failed requests" in t["perf"]]
    assert failing and all(t["perf"].startswith("output_throughput not measured; failed requests: 24 of 24 in 3 passes")
                           for t in failing), [t["perf"] for t in data["trials"]]
    md = (out / "bisect.md").read_text()
    chart = md.split("along the tested commits")[1].split("```")[1]
    assert f"{shas[5][:10]} candidate  bad   not measured:" in chart, chart
    assert "failed requests 24 of 24 in 3 passes (per pass: 8, 8, 8; 3 failed); first: error in stream: " in chart


@pytest.mark.e2e
def test_the_load_client_closes_its_connections_so_the_server_logs_no_reset(tmp_path, cache_dir, stream_history):
    """abbisect's load client closes kept-alive connections at the end of a stream: a reset would make the server
    print a ConnectionResetError traceback, `python_traceback` match it and the side read "warned". A real pass
    on the toy engine (HTTP/1.1, kept alive, as vLLM's and SGLang's servers), 4 requests in flight."""
    repo, shas = stream_history
    path = _small(tmp_path, repo, requests=32, concurrency=4, warmup=4, passes=3, max_launches=1)
    out = tmp_path / "out"
    proc = abbisect("run", str(path), "--a", shas[0], "--b", shas[0], "-o", str(out), "--json", cwd=tmp_path,
                    cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)["data"]
    for side in ("a", "b"):
        trial = data[side]
        assert trial["verdict"]["status"] == "ok", trial["verdict"]
        assert [s["id"] for s in trial["signatures"] if s["severity"] != "info"] == [] == \
            [s for s in trial["signatures"] if s["id"] == "python_traceback"]
        assert trial["launch"]["client_gone"] == 0  # nothing to take back: no reset happened at all
        assert sum(p["completed"] for p in _passes(trial)) == 96
    logs = list(out.glob("*/server.log"))
    assert len(logs) == 2
    for log in logs:
        text = log.read_text()
        assert text.count('"POST /v1/chat/completions HTTP/1.1" 200') >= 3 * 36  # the passes and their warm-ups
        assert "ConnectionResetError" not in text and "Traceback" not in text, text[-3000:]


@pytest.mark.e2e
@pytest.mark.parametrize(("sig", "code", "said"), [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130,
                                                                                          "interrupted")])
def test_a_signal_during_a_perf_pass_ends_with_the_one_clean_line(tmp_path, cache_dir, stream_history, sig, code,
                                                                  said):
    """A signal during a pass ends with the one clean line ("terminated; resume with …"), never followed by an
    asyncio traceback (SystemExit(143) raised inside the pass's event loop, "Task exception was never retrieved")."""
    repo, shas = stream_history
    # A client kept busy (an unpaced server, 4 streams of 64 tokens in flight): the signal lands while the
    # pass's own code runs, not while its loop waits.
    recipe = toy_recipe(repo, perf={**SMALL_PERF, "requests": 300, "concurrency": 4},
                        sampling={**SMALL_SAMPLING, "max_tokens": 64})
    path = write_recipe(tmp_path / "perf.yaml", recipe)
    proc = subprocess.Popen([sys.executable, "-m", "abbisect", "bisect", str(path), "--good", shas[0], "--bad",
                             shas[4], "-o", str(tmp_path / "bis")], cwd=tmp_path,
                            env={**os.environ, "ABBISECT_CACHE_DIR": str(cache_dir)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:  # the first pass measured: the second one is running
        seen.append(line)
        if "perf pass 1/" in line:
            break
    time.sleep(0.5)
    proc.send_signal(sig)
    seen.append(proc.stderr.read())
    proc.wait(timeout=60)
    err = "".join(seen)
    assert proc.returncode == code, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"abbisect: {said}; resume with: abbisect bisect --resume "), err
    assert "Traceback" not in err and "Task" not in err and "SystemExit" not in err, err
