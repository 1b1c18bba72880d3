"""What the README and recipes/README.md promise and no other test reached, through the CLI on the toy engine.

Statuses `wrong_answer`, `warned` and `infra_error` (a lost trial process); `verdict.bad_signatures`,
`verdict.degenerate_fraction` and `scoring.warn_severity`; teardown escalating to SIGKILL; `prompts_file` as
.jsonl/.yaml/.json; the default recipe (./abbisect.yaml) and results folder (results/<recipe>/<stamp>/);
crash.log on an internal error; `-- PATHSPEC` through `abbisect bisect`; a real
`abbisect run recipes/demo.yaml`; `engine.repo` as a file:// URL through `abbisect run`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT, abbisect, marked_pids, toy_recipe, write_recipe

from abbisect.builtin.history import Commit, build_history

pytestmark = pytest.mark.e2e

# A launch wrapper around the toy server with misbehaviour on request (environment of the recipe):
# ABBISECT_TEST_IGNORE_TERM ignores SIGTERM; ABBISECT_TEST_LOOP_ON makes answers to prompts containing
# that word a loop (the others stay healthy); ABBISECT_TEST_KILL_TRIAL, in a checkout with the lm_head bug,
# kills the `python -m abbisect.trial` process whose supervisor started the server (a lost worker).
WRAPPER = """import os, signal, sys
if os.environ.get("ABBISECT_TEST_KILL_TRIAL"):
    import toyengine.loader
    pid, trial = os.getppid(), None  # the trial process: above the supervisor that started this server
    while pid > 1 and trial is None:
        if b"abbisect.trial" in open(f"/proc/{pid}/cmdline", "rb").read():
            trial = pid
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    buggy = 'QUANTIZED_MODULES = ("layers",)' in open(toyengine.loader.__file__).read()
    if buggy and trial:
        os.kill(trial, signal.SIGKILL)
if os.environ.get("ABBISECT_TEST_IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
from toyengine import server
loop_on = os.environ.get("ABBISECT_TEST_LOOP_ON")
if loop_on:
    load = server.load_model
    class Looping:
        def __init__(self, model):
            self.model = model
        def steps(self, prompt, max_tokens, temperature=0.0, seed=0, min_tokens=0):
            if loop_on not in prompt:
                yield from self.model.steps(prompt, max_tokens, temperature, seed, min_tokens)
                return
            words = ["spam", " and", " eggs", " spam"] * max_tokens
            for n in range(max_tokens):
                yield words[n], ("length" if n == max_tokens - 1 else None)
        def __getattr__(self, name):
            return getattr(self.model, name)
    server.load_model = lambda checkpoint: Looping(load(checkpoint))
server.main(sys.argv[1:])
"""

# A line every toy server prints at start, made a signature of the recipe's own.
TOY_SIGNATURE = {
    "id": "toy_version",
    "pattern": r"toyengine API server version (\S+)",
    "severity": "warning",
    "meaning": "the toy server started",
}


def check(tmp_path: Path, recipe: dict, ref: str, cache: Path, name: str = "r.yaml") -> tuple[int, dict]:
    """`abbisect check RECIPE REF --json`: the exit code and the trial's result."""
    path = write_recipe(tmp_path / name, recipe)
    proc = abbisect("check", str(path), ref, "--json", cwd=tmp_path, cache=cache)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)["data"]


def wrapped(tmp_path: Path, repo: Path, env: dict[str, str], **overrides) -> dict:
    (tmp_path / "wrap.py").write_text(WRAPPER)
    recipe = toy_recipe(repo, env=env, **overrides)
    recipe["launch"]["command"] = [
        "{python}",
        str(tmp_path / "wrap.py"),
        "--host",
        "{host}",
        "--port",
        "{port}",
    ]
    return recipe


# --- statuses and verdict rules -------------------------------------------------------------------


def test_a_missing_expected_answer_is_wrong_answer_and_bad_unless_the_rule_is_dropped(
    tmp_path, engine_repo, cache_dir
):
    prompts = [{"prompt": "The capital of France is", "expect": "(?i)berlin"}, "What is two plus two?"]
    rc, res = check(tmp_path, toy_recipe(engine_repo, prompts=prompts), "fixed", cache_dir)
    v = res["verdict"]
    assert (rc, v["status"], v["outcome"]) == (1, "wrong_answer", "bad"), v
    assert v["reasons"][0] == "1 expected answer(s) missing" and "berlin" in " ".join(v["reasons"][1:])
    assert res["answers"][0]["passed"] is False and "paris" in res["outputs"][0]["text"]
    # the same outputs are good where the recipe does not count a missed answer as bad
    rc, res = check(
        tmp_path,
        toy_recipe(engine_repo, prompts=prompts, verdict={"bad_if": ["degenerate"]}),
        "fixed",
        cache_dir,
        "lenient.yaml",
    )
    assert (rc, res["verdict"]["status"], res["verdict"]["outcome"]) == (0, "wrong_answer", "good")


def test_warn_severity_decides_whether_a_signature_warns(tmp_path, engine_repo, cache_dir):
    rc, res = check(
        tmp_path, toy_recipe(engine_repo, scoring={"signatures": [TOY_SIGNATURE]}), "fixed", cache_dir
    )
    assert (rc, res["verdict"]["status"]) == (0, "ok"), res[
        "verdict"
    ]  # a warning is below the default `error`
    assert "toy_version" in [s["id"] for s in res["signatures"]]
    rc, res = check(
        tmp_path,
        toy_recipe(engine_repo, scoring={"signatures": [TOY_SIGNATURE], "warn_severity": "warning"}),
        "fixed",
        cache_dir,
        "warn.yaml",
    )
    v = res["verdict"]
    assert (rc, v["status"], v["outcome"]) == (1, "warned", "bad"), v
    assert v["reasons"][0].startswith("log signatures: toy_version")


def test_a_bad_signature_is_bad_whatever_its_severity_and_the_rules(tmp_path, engine_repo, cache_dir):
    info = {**TOY_SIGNATURE, "severity": "info"}
    scoring = {"signatures": [info]}
    rc, res = check(
        tmp_path,
        toy_recipe(engine_repo, scoring=scoring, verdict={"bad_if": ["degenerate"]}),
        "fixed",
        cache_dir,
    )
    assert (rc, res["verdict"]["status"], res["verdict"]["outcome"]) == (0, "ok", "good"), res["verdict"]
    rc, res = check(
        tmp_path,
        toy_recipe(
            engine_repo,
            scoring=scoring,
            verdict={"bad_if": ["degenerate"], "bad_signatures": ["toy_version"]},
        ),
        "fixed",
        cache_dir,
        "bad.yaml",
    )
    v = res["verdict"]
    assert (rc, v["status"], v["outcome"]) == (1, "warned", "bad"), v
    assert "toy_version" in v["reasons"][0]


def test_degenerate_fraction_is_the_share_of_looping_outputs_that_makes_a_side_degenerate(
    tmp_path, engine_repo, cache_dir
):
    env = {"ABBISECT_TEST_LOOP_ON": "copper"}  # one prompt of the four loops
    rc, res = check(tmp_path, wrapped(tmp_path, engine_repo, env), "fixed", cache_dir)
    v = res["verdict"]
    assert (rc, v["status"]) == (0, "ok"), v
    assert "1/4 outputs degenerate (below the 50% threshold)" in v["reasons"]
    assert [a["label"] for a in res["analyses"]] == ["healthy", "healthy", "healthy", "degenerate"]
    rc, res = check(
        tmp_path,
        wrapped(tmp_path, engine_repo, env, verdict={"degenerate_fraction": 0.25}),
        "fixed",
        cache_dir,
        "quarter.yaml",
    )
    v = res["verdict"]
    assert (rc, v["status"], v["outcome"]) == (1, "degenerate", "bad"), v
    assert v["reasons"][0] == "1/4 outputs degenerate"


def test_a_lost_trial_process_is_infra_error_and_never_a_verdict(tmp_path, cache_dir, test_mark):
    """`--executor local` runs each trial in a process of its own; one that dies is infra_error (skip)."""
    repo = tmp_path / "engine"
    build_history(
        repo,
        [
            Commit("v1", tag="v1"),
            Commit("Dispatch quantisation to linear layers only", "break_scale", tag="v2"),
        ],
    )
    mark = test_mark
    recipe = write_recipe(
        tmp_path / "r.yaml",
        wrapped(tmp_path, repo, {"ABBISECT_TEST_KILL_TRIAL": "1", "ABBISECT_TEST_MARK": mark}),
    )
    proc = abbisect(
        "bisect",
        str(recipe),
        "--good",
        "v1",
        "--bad",
        "v2",
        "--executor",
        "local",
        "--slots",
        "1",
        "-o",
        str(tmp_path / "out"),
        "--json",
        cwd=tmp_path,
        cache=cache_dir,
    )
    assert proc.returncode == 4, proc.stderr  # an end could not be tested
    steps = {s["role"]: s for s in json.loads(proc.stdout)["data"]["steps"]}
    assert (steps["old end"]["status"], steps["old end"]["outcome"]) == ("ok", "good")
    new = steps["new end"]
    assert (new["status"], new["outcome"]) == ("infra_error", "skip"), new
    assert "the trial process on slot" in new["evidence"] and "exited with -9" in new["evidence"]
    deadline = time.monotonic() + 20  # the orphaned server is ended by its watchdog
    while marked_pids(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marked_pids(mark) == []


# --- teardown -------------------------------------------------------------------------------------


@pytest.mark.alone
def test_a_server_that_ignores_sigterm_is_killed_after_the_grace(tmp_path, engine_repo, cache_dir, test_mark):
    mark = test_mark
    recipe = wrapped(
        tmp_path,
        engine_repo,
        {"ABBISECT_TEST_IGNORE_TERM": "1", "ABBISECT_TEST_MARK": mark},
        timeouts={"build": 300, "ready": 20, "request": 20, "teardown": 2},
    )
    path = write_recipe(tmp_path / "r.yaml", recipe)
    t = time.monotonic()
    proc = abbisect("check", str(path), "fixed", "--json", "--no-cache", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    teardown = json.loads(proc.stdout)["data"]["launch"]["teardown"]
    assert teardown["signal"] == "SIGKILL" and teardown["leftover_pids"] == [], teardown
    assert 2 <= teardown["seconds"] < 20 and time.monotonic() - t > 2  # the grace was given, then SIGKILL
    assert marked_pids(mark) == []


def test_a_server_that_stops_on_sigterm_is_not_killed(tmp_path, engine_repo, cache_dir):
    recipe = wrapped(
        tmp_path, engine_repo, {}, timeouts={"build": 300, "ready": 20, "request": 20, "teardown": 2}
    )
    proc = abbisect(
        "check",
        str(write_recipe(tmp_path / "r.yaml", recipe)),
        "fixed",
        "--json",
        "--no-cache",
        cwd=tmp_path,
        cache=cache_dir,
    )
    assert json.loads(proc.stdout)["data"]["launch"]["teardown"]["signal"] == "SIGTERM"


# --- prompts files --------------------------------------------------------------------------------

PROMPTS = [
    {"prompt": "The capital of France is", "expect": "(?i)paris", "id": "france"},
    "What is two plus two?",
]


@pytest.mark.parametrize("suffix", [".jsonl", ".yaml", ".json"])
def test_prompts_file_formats(tmp_path, engine_repo, cache_dir, suffix):
    path = tmp_path / f"prompts{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    elif suffix == ".json":
        path.write_text(json.dumps(PROMPTS))
    else:
        path.write_text(yaml.safe_dump(PROMPTS))
    recipe = toy_recipe(engine_repo, prompts=["Explain what a hash table is."], prompts_file=path.name)
    rc, res = check(tmp_path, recipe, "fixed", cache_dir)
    assert rc == 0, res["verdict"]
    asked = [(o["prompt_id"], o["prompt"]) for o in res["outputs"]]
    assert [p for _, p in asked] == [
        "Explain what a hash table is.",
        "The capital of France is",
        "What is two plus two?",
    ]  # the recipe's prompts, then the file's
    assert asked[1][0] == "france"
    assert [a and a["passed"] for a in res["answers"]] == [None, True, None]  # the file's expect is checked
    wrong = tmp_path / f"wrong{suffix}"
    wrong.write_text(path.read_text().replace("paris", "berlin"))
    rc, res = check(tmp_path, {**recipe, "prompts_file": wrong.name}, "fixed", cache_dir, "wrong-recipe.yaml")
    assert (rc, res["verdict"]["status"]) == (1, "wrong_answer")


# --- defaults -------------------------------------------------------------------------------------


def test_run_without_arguments_takes_abbisect_yaml_and_writes_under_results(tmp_path, engine_repo, cache_dir):
    write_recipe(tmp_path / "abbisect.yaml", toy_recipe(engine_repo, sides={"a": "broken", "b": "fixed"}))
    # first the plan: were ./abbisect.yaml missed, the fallback is the built-in vllm-cpu recipe (a real vLLM)
    plan = abbisect("run", "--dry-run", cwd=tmp_path, cache=cache_dir, timeout=120)
    assert plan.returncode == 0 and plan.stdout.startswith("recipe: toy"), plan.stdout + plan.stderr
    proc = abbisect("run", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    (folder,) = (tmp_path / "results" / "toy").iterdir()
    time.strptime(folder.name[:16], "%Y%m%dT%H%M%SZ")  # a UTC stamp
    report = (folder / "report.md").read_text()
    assert "`broken`" in report and "`fixed`" in report and "**degenerate**" in report
    assert str(folder.relative_to(tmp_path)) in proc.stdout + proc.stderr
    # a second run gets a folder of its own
    assert abbisect("run", cwd=tmp_path, cache=cache_dir).returncode == 0
    assert len(list((tmp_path / "results" / "toy").iterdir())) == 2


def test_no_recipe_and_no_abbisect_yaml_is_a_one_line_error(tmp_path, cache_dir):
    proc = abbisect("bisect", "--good", "v1", "--bad", "v2", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 2 and "abbisect.yaml" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_engine_repo_as_a_git_url_is_cloned_once_into_the_cache(tmp_path, engine_repo, cache_dir):
    url = f"file://{engine_repo}"

    def registered() -> list[str]:
        return subprocess.run(["git", "-C", str(engine_repo), "worktree", "list", "--porcelain"], capture_output=True,
                              text=True, check=True).stdout.split("\n\n")

    before = registered()  # the session's repository: other tests use it as a local checkout
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(url, sides={"a": "broken", "b": "fixed"}))
    proc = abbisect("run", str(recipe), "-o", str(tmp_path / "out"), "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert res["a"]["verdict"]["status"] == "degenerate" and res["b"]["verdict"]["status"] == "ok"
    clones = [p for p in (cache_dir / "repos").iterdir() if (p / "HEAD").exists() or (p / ".git").exists()]
    assert clones, list((cache_dir / "repos").iterdir())
    # the repository behind the URL is only read: this run registered no worktree in it
    assert registered() == before


# --- crash.log ------------------------------------------------------------------------------------

# An internal error (a bug of ours), caused on purpose: the plan renderer raises. Everything else is the
# real CLI, as the console script calls it.
CRASHING_CLI = (
    "import abbisect.trial.dryrun\n"
    "def boom(*a, **k):\n"
    "    raise RuntimeError('planted bug 4711')\n"
    "abbisect.trial.dryrun.render_plan = boom\n"
    "from abbisect.cli import main\n"
    "main()\n"
)


def test_an_internal_error_keeps_its_traceback_in_crash_log(tmp_path, engine_repo):
    cache = tmp_path / "cache"
    cache.mkdir()  # (a cache that does not exist yet sends it to the temp folder, as one not writable does)
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, sides={"a": "fixed", "b": "broken"}))
    proc = subprocess.run(
        [sys.executable, "-c", CRASHING_CLI, "run", "--dry-run", str(recipe)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "ABBISECT_CACHE_DIR": str(cache)},
    )
    assert proc.returncode == 70, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert (
        line
        == f"abbisect: internal error: RuntimeError: planted bug 4711 (traceback in {cache / 'crash.log'})"
    )
    log = (cache / "crash.log").read_text()
    assert "abbisect run --dry-run" in log.splitlines()[0] and "Traceback (most recent call last)" in log
    assert log.rstrip().endswith("RuntimeError: planted bug 4711")


# --- -- PATHSPEC through bisect -------------------------------------------------------------------


@pytest.fixture(scope="module")
def pathspec_history(tmp_path_factory) -> tuple[Path, list[str]]:
    """v1, two notes, the bug (toyengine/loader.py), two notes, v2: notes live in changes.d/."""
    repo = tmp_path_factory.mktemp("pathspec") / "engine"
    return repo, build_history(
        repo,
        [
            Commit("v1", tag="v1"),
            Commit("notes 1"),
            Commit("notes 2"),
            Commit("Dispatch quantisation to linear layers only", "break_scale"),
            Commit("notes 3"),
            Commit("notes 4"),
            Commit("v2", tag="v2"),
        ],
    )


def test_pathspec_limits_the_candidates_to_commits_that_touch_it(tmp_path, pathspec_history, cache_dir):
    repo, shas = pathspec_history
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo))
    proc = abbisect(
        "bisect",
        str(recipe),
        "--good",
        "v1",
        "--bad",
        "v2",
        "-o",
        str(tmp_path / "out"),
        "--json",
        "--",
        "toyengine",
        cwd=tmp_path,
        cache=cache_dir,
    )
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert res["first_new"] == shas[3]
    tested = [s["sha"] for s in res["steps"]]
    assert tested[:2] == [shas[0], shas[-1]] and set(tested[2:]) <= {shas[3]}  # only commits touching it
    # without the pathspec the notes commits are candidates too, and some are tested
    proc = abbisect(
        "bisect",
        str(recipe),
        "--good",
        "v1",
        "--bad",
        "v2",
        "-o",
        str(tmp_path / "all"),
        "--json",
        cwd=tmp_path,
        cache=cache_dir,
    )
    full = json.loads(proc.stdout)["data"]
    assert full["first_new"] == shas[3] and len(full["steps"]) > len(tested)
    assert {s["sha"] for s in full["steps"]} - set(tested) <= {shas[1], shas[2], shas[4], shas[5]}


def test_pathspec_that_no_commit_of_the_range_touches_ends_with_no_single_commit(
    tmp_path, pathspec_history, cache_dir
):
    """The change is outside the paths: no commit is named (exit 5), none is tested beyond the ends."""
    repo, shas = pathspec_history
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo))
    proc = abbisect(
        "bisect",
        str(recipe),
        "--good",
        "v1",
        "--bad",
        "v2",
        "-o",
        str(tmp_path / "out"),
        "--json",
        "--",
        "pyproject.toml",
        cwd=tmp_path,
        cache=cache_dir,
    )
    assert proc.returncode == 5, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert res["first_new"] is None and [s["sha"] for s in res["steps"]] == [shas[0], shas[-1]]


# --- the demo recipe, for real --------------------------------------------------------------------


def test_demo_recipe_runs_for_real(tmp_path, cache_dir):
    out = tmp_path / "out"
    proc = abbisect(
        "run",
        str(REPO_ROOT / "recipes" / "demo.yaml"),
        "-o",
        str(out),
        "--json",
        cwd=tmp_path,
        cache=cache_dir,
    )
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    a, b = res["a"], res["b"]
    assert (a["verdict"]["status"], a["verdict"]["outcome"]) == ("degenerate", "bad"), a["verdict"]
    assert (b["verdict"]["status"], b["verdict"]["outcome"]) == ("ok", "good"), b["verdict"]
    assert "param_not_found" in res["signature_diff"]["disappeared"]
    assert [x and x["passed"] for x in b["answers"]] == [True, True, None, None, None, None]
    report = (out / "report.md").read_text()
    assert "abbisect A/B: `demo`" in report and "`v0.2`" in report and "`main`" in report
