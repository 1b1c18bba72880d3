"""Bugs that show only under load or only sometimes, through the CLI on real toy-engine processes: a batch-only
bug found with concurrent queries and missed without, a flaky crash found from failure rates, a second bug
skipped as "another failure", and a culprit confirmed by a rerun and a revert."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import abbisect, toy_recipe, write_recipe

from abbisect.builtin.history import planted_history

pytestmark = pytest.mark.e2e

PROMPTS = ["What is two plus two?", "Explain what a hash table is.", "List three uses of copper.",
           "Name a prime number."]


def _bisect(tmp_path, cache_dir, recipe: dict, good: str, bad: str, *extra: str, name: str = "out"):
    path = write_recipe(tmp_path / f"{name}.yaml", recipe)
    out = tmp_path / name
    proc = abbisect("bisect", str(path), "--good", good, "--bad", bad, "-o", str(out), "--json", *extra,
                    cwd=tmp_path, cache=cache_dir)
    data = json.loads(proc.stdout)["data"] if proc.stdout.strip() else {}
    return proc, data, (out / "bisect.md").read_text() if (out / "bisect.md").exists() else ""


@pytest.fixture(scope="module")
def batch_history(planted):
    return planted(6, {3: "batch_bug"})


def test_a_batch_only_bug_is_found_with_concurrency_and_missed_without(tmp_path, cache_dir, batch_history):
    repo, shas = batch_history
    sequential = toy_recipe(repo, prompts=PROMPTS)
    proc, data, _ = _bisect(tmp_path, cache_dir, sequential, shas[0], shas[-1], name="seq")
    assert proc.returncode == 3, proc.stderr  # one request at a time both ends are healthy: nothing to bisect
    assert data["mode"] == "no-change"

    batched = toy_recipe(repo, prompts=PROMPTS, query={"concurrency": 6, "repeat": 2})
    proc, data, md = _bisect(tmp_path, cache_dir, batched, shas[0], shas[-1], name="batch")
    assert proc.returncode == 0, proc.stderr
    assert data["first_new"] == shas[3]
    bad_end = next(s for s in data["steps"] if s["sha"] == shas[-1])
    assert bad_end["outcome"] == "bad" and "failed" in bad_end["evidence"], bad_end
    # judged as a rate of bad outputs against both ends (which requests share a batch is chance), confirmed
    assert data["posterior"]["kind"] == "batch" and data["confirmation"]["level"] == "confirmed"
    assert "Fused batched decode kernel" in md


def test_batch_invariance_shows_the_answers_that_change_with_the_batch(tmp_path, cache_dir, batch_history):
    repo, shas = batch_history
    recipe = toy_recipe(repo, prompts=PROMPTS, query={"concurrency": 4, "batch_invariance": True})
    recipe["sampling"]["max_tokens"] = 16
    path = write_recipe(tmp_path / "r.yaml", recipe)
    out = tmp_path / "ab"
    proc = abbisect("run", str(path), "--a", shas[2], "--b", shas[3], "-o", str(out), "--json",
                    cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)["data"]
    assert data["a"]["verdict"]["status"] == "ok", data["a"]["verdict"]
    b = data["b"]["verdict"]
    assert b["outcome"] == "bad" and "also: 4 answer(s) change with the batch at temperature 0" in b["reasons"], b
    assert "p0: differs with 4 in flight from one at a time (from char" in " ".join(b["reasons"])
    # every output of every pass is kept and scored: the one-at-a-time pass and the batched one
    assert sorted(o["batch"] for o in data["b"]["outputs"]) == [1] * 4 + [4] * 4
    md = (out / "report.md").read_text()
    assert "What is two plus two? _(at 4 in flight)_" in md and "p3: differs with 4 in flight" in md


@pytest.fixture(scope="module")
def flaky_history(planted):
    return planted(6, {3: "flaky_crash"})


def test_a_flaky_crash_is_found_from_failure_rates(tmp_path, cache_dir, flaky_history):
    """Every second start of a flaky commit dies (a counter file, so the test is deterministic): launched once,
    a flaky commit may read healthy; with repeats the posterior over where the change is names it and the
    fresh confirmation holds it (one in two keeps the launches few; the benchmarks measure one in three and one
    in ten)."""
    repo, shas = flaky_history
    env = {"TOYENGINE_CRASH_COUNTER": str(tmp_path / "starts"), "TOYENGINE_CRASH_EVERY": "2"}
    recipe = toy_recipe(repo, prompts=PROMPTS[:1], env=env, repeats={"launches": 6}, verdict={"alpha": 0.05})
    recipe["timeouts"]["ready"] = 10
    proc, data, md = _bisect(tmp_path, cache_dir, recipe, shas[0], shas[-1], "--no-cache")
    assert proc.returncode == 0, proc.stderr
    assert data["first_new"] == shas[3], [(s["sha"][:8], s["outcome"], s["evidence"]) for s in data["steps"]]
    ends = {s["role"]: s for s in data["steps"] if s["role"].endswith("end")}
    assert "failed" in ends["new end"]["evidence"] and "95 % interval" in ends["new end"]["evidence"]
    p = data["posterior"]
    assert p["kind"] == "flaky" and p["answer"] == shas[3] and p["answer_mass"] >= 0.99
    assert sum(s["launches"] for s in data["steps"]) == p["launches"]
    c = data["confirmation"]
    assert c["level"] == "confirmed" and c["mass"]["found"] >= 0.99, c
    assert c["found"]["outcome"] == "bad" and c["parent"]["outcome"] == "good"
    assert "### How sure" in md and "**Confirmed**" in md and "| launches |" in md and "### Posterior" in md
    assert (tmp_path / "out" / "posterior.svg").read_text().startswith("<svg")


@pytest.fixture(scope="module")
def two_bugs(planted):
    """An out-of-memory crash at 3 (fixed at 5) inside the range of the bug searched for, a crash at 6."""
    return planted(9, {3: "other_crash", 5: "fix_other_crash", 6: "crash_at_start"})


def test_a_candidate_failing_another_way_is_skipped_and_listed(tmp_path, cache_dir, two_bugs):
    repo, shas = two_bugs
    proc, data, md = _bisect(tmp_path, cache_dir, toy_recipe(repo, prompts=PROMPTS[:1]), shas[0], shas[-1])
    assert proc.returncode == 0, proc.stderr
    assert data["first_new"] == shas[6]
    assert "illegal memory access" in data["failure"]
    other = [s for s in data["steps"] if s["stats"].get("other_failure")]
    assert other and all(s["outcome"] == "skip" and s["sha"] in (shas[3], shas[4]) for s in other), other
    assert "OutOfMemoryError" in other[0]["stats"]["other_failure"]
    assert "Another failure in the range" in md and "OutOfMemoryError" in md

    # Turned off, the out-of-memory crash is taken for the bug and a wrong commit is named.
    off = toy_recipe(repo, prompts=PROMPTS[:1], verdict={"same_failure": False})
    proc, data, _ = _bisect(tmp_path, cache_dir, off, shas[0], shas[-1], name="off")
    assert proc.returncode == 0, proc.stderr
    assert data["first_new"] == shas[3]


@pytest.fixture(scope="module")
def crash_history(tmp_path_factory):
    """A crash at start at 3; at 5 the line that raises is rewritten, the same crash (so reverting 3 on the end
    conflicts)."""
    repo = tmp_path_factory.mktemp("revert") / "engine"
    shas = planted_history(repo, 5, {3: "crash_at_start"})
    server = repo / "toyengine" / "server.py"
    line = '    raise RuntimeError("CUDA error: an illegal memory access was encountered")\n'
    assert line in server.read_text()
    server.write_text(server.read_text().replace(line, '    message = "CUDA error: an illegal memory access was '
                                                 'encountered"\n    raise RuntimeError(message)\n'))
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "Name the crash's message"], check=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    return repo, [*shas, head]


def test_confirm_revert_restores_good_or_says_the_revert_does_not_apply(tmp_path, cache_dir, crash_history):
    repo, shas = crash_history
    before = _git(repo, "for-each-ref")
    recipe = toy_recipe(repo, prompts=PROMPTS[:1])
    proc, data, md = _bisect(tmp_path, cache_dir, recipe, shas[0], shas[4], "--confirm-revert", name="applies")
    assert proc.returncode == 0, proc.stderr
    assert data["first_new"] == shas[3]
    c = data["confirmation"]
    assert c["level"] == "confirmed" and c["launches"] == 1, c  # one launch each: the verdict is a rule
    r = c["revert"]
    assert r["applied"] and r["as_expected"] and r["outcome"] == "good", r
    assert f"reverting {shas[3][:10]} on {shas[4][:10]} restores good" in md

    proc, data, md = _bisect(tmp_path, cache_dir, recipe, shas[0], shas[-1], "--confirm-revert", name="conflict")
    assert proc.returncode == 0, proc.stderr
    r = data["confirmation"]["revert"]
    assert not r["applied"] and r["conflicts"] == ["toyengine/server.py"], r
    assert "does not apply cleanly (conflicts in toyengine/server.py): not tested" in md
    # the user's repository: no branch, tag or worktree left by the revert
    assert _git(repo, "for-each-ref") == before
    assert "abbisect-revert" not in _git(repo, "worktree", "list")


def _git(repo, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


# A launch wrapper whose answer to a prompt about the weather changes at every launch (noise of the engine).
NOISY = """import os, sys
from toyengine import server
load = server.load_model
class Noisy:
    def __init__(self, model):
        self.model = model
    def steps(self, prompt, max_tokens, temperature=0.0, seed=0, min_tokens=0):
        if "weather" in prompt:
            yield "sunny " + os.urandom(4).hex(), "stop"
            return
        yield from self.model.steps(prompt, max_tokens, temperature, seed, min_tokens)
    def __getattr__(self, name):
        return getattr(self.model, name)
server.load_model = lambda checkpoint: Noisy(load(checkpoint))
server.main(sys.argv[1:])
"""


def test_differs_from_good_leaves_out_what_the_good_end_answers_differently_twice(tmp_path, cache_dir):
    repo = tmp_path / "engine"
    shas = planted_history(repo, 6, {4: "break_scale"})
    (tmp_path / "noisy.py").write_text(NOISY)
    recipe = toy_recipe(repo, prompts=["What is the weather like?", *PROMPTS],
                        verdict={"bad_if": ["differs_from_good"]})
    recipe["launch"]["command"] = ["{python}", str(tmp_path / "noisy.py"), "--host", "{host}", "--port", "{port}"]
    proc, data, md = _bisect(tmp_path, cache_dir, recipe, shas[0], shas[-1])
    assert proc.returncode == 0, proc.stderr
    assert data["unstable"] == ["p0"] and data["first_new"] == shas[4], data["steps"]
    good = next(s for s in data["steps"] if s["sha"] == shas[0])
    assert good["launches"] == 2  # the good end ran twice, fresh
    assert "answered 1 prompt(s) differently when run twice (p0)" in md
    assert all("p0" not in s["evidence"] for s in data["steps"])
