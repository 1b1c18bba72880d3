"""Eval sets through real servers: the toy engine of a planted history (healthy, arith_drift, batch_bug) and a
stand-in that fails requests on purpose (tests/echo_server.py), over real HTTP at real concurrency; the
recipe's `eval:` section and its power plan through the CLI."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import REPO_ROOT, abbisect, toy_recipe, write_recipe
from test_toyengine import ARITH_WRONG_UNDER_DRIFT, server

from abbisect.builtin import history
from abbisect.infra.errors import UserError
from abbisect.infra.serial import dump, load
from abbisect.query.evals import EvalRun, EvalSet, ask_eval, build_request, pair, plan_lines, run_eval
from abbisect.recipe import load_recipe
from abbisect.recipe.eval import Eval, EvalItem
from abbisect.score.answers import extract, graded, reference
from abbisect.stats import Call, compare_paired

PLANTED = {2: "batch_bug", 3: "fix_batch_bug", 4: "arith_drift"}


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> dict[str, Path]:
    """"healthy", "batch_bug" and "arith_drift": trees of a planted history's commits (git archive)."""
    root = tmp_path_factory.mktemp("toy-evals")
    shas = history.planted_history(root / "repo", 5, PLANTED)
    out = {}
    for name, sha in (("healthy", shas[0]), ("batch_bug", shas[2]), ("arith_drift", shas[4])):
        tar = subprocess.run(["git", "-C", str(root / "repo"), "archive", "--format=tar", sha], check=True,
                             capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
            tf.extractall(root / name, filter="data")
        out[name] = root / name
    return out


@pytest.fixture(scope="module")
def builtin() -> EvalSet:
    return EvalSet.load("builtin:arith_facts")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def standin() -> Iterator[str]:
    """tests/echo_server.py as a real process: its base URL."""
    port = _port()
    proc = subprocess.Popen([sys.executable, str(REPO_ROOT / "tests" / "echo_server.py"), "--host", "127.0.0.1",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        yield base
    finally:
        proc.kill()
        proc.wait()


def _set(tmp_path: Path, items: list[dict], name: str = "set.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


# --- reading answers ---------------------------------------------------------------------------------


def _item(**fields) -> EvalItem:
    return EvalItem.model_validate({"id": "x", "prompt": "q", **fields})


def test_extraction_rules_read_what_they_promise():
    assert extract("last_number", "3 + 4 is 7. so 1,234 apples") == "1234"
    assert extract("last_number", "it costs $7.50.") == "7.5" and extract("last_number", "minus -3") == "-3"
    assert extract("last_number", "no digits") is None
    assert extract("regex:#### (-?[\\d,]+)", "work… #### 1,234") == "1,234"
    assert graded(_item(answer="1234", extract="regex:#### (-?[\\d,]+)"), "work… #### 1,234") is True
    assert graded(_item(answer="paris", extract="regex:\\bparis\\b"), "It is Paris.") is True
    mc = _item(choices=["trout", "whale", "eagle", "frog"], answer="B")
    assert [extract("choice", t, mc.choices) for t in ("The answer is (B).", "B. whale", "(C) eagle", "a whale",
                                                       "A hash table", "Answer: D")] == ["B", "B", "C", "B", None, "D"]
    assert reference(_item(choices=["trout", "whale"], answer=1)) == "B"  # an index, as lm-eval's docs give it
    assert reference(_item(choices=["trout", "whale"], answer="whale")) == "B"
    assert graded(mc, None) is None  # no output: a failed request, not a wrong answer
    assert graded(mc, "") is False
    with pytest.raises(ValueError, match="unknown extract rule"):
        extract("first_word", "x")
    with pytest.raises(ValueError, match="none of the choices"):
        _item(choices=["a", "b"], answer="E")


def test_sampling_is_a_seeded_prefix_and_fewshot_never_shows_the_item(builtin):
    ten, fifty = builtin.sample(10, seed=3), builtin.sample(50, seed=3)
    assert fifty[:10] == ten and builtin.sample(10, seed=4) != ten
    assert sorted(i.id for i in builtin.sample(None, 3)) == sorted(i.id for i in builtin.items)
    for item in ten:
        shots = builtin.shots(item, 5, seed=1)
        assert len(shots) == 5 and item.id not in {s.id for s in shots}
        assert shots == builtin.shots(item, 5, seed=1)
    six = EvalSet("six", tuple(_item(id=f"q{i}", answer=str(i)) for i in range(6)), "")
    for item in six.items:  # 5 examples of 6 items: the other 5, whatever the draw
        assert {s.id for s in six.shots(item, 5, seed=2)} == {i.id for i in six.items} - {item.id}
    req = build_request(ten[0], builtin.shots(ten[0], 2, seed=1))
    roles = [r for r, _ in req.messages]
    assert roles == ["user", "assistant", "user", "assistant", "user"] and req.messages[-1][1] == ten[0].prompt
    assert req.messages[1][1] == builtin.shots(ten[0], 2, seed=1)[0].answer
    assert req.text.endswith(ten[0].prompt) and req.text.count("\n\n") == 2


# --- real servers ------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_the_builtin_set_is_answered_fully_by_a_healthy_toy_commit(toy, builtin):
    with server(toy["healthy"]) as base:
        run = run_eval(base, "toy-model", builtin, builtin.sample(), max_tokens=32, concurrency=8, timeout=20)
    assert run.n == 400 and run.n_errors == 0 and run.n_correct == 400 and run.accuracy == 1.0
    assert run.peak_in_flight == 8 and run.size == 400 and run.name == "builtin:arith_facts"
    item = next(i for i in run.items if i.id == "arith-001")
    assert (item.prompt, item.reference, item.extracted, item.correct) == ("What is 16 + 10?", "26", "26", True)
    again = load(EvalRun, json.loads(json.dumps(dump(run))))  # TrialResult.extras["eval"] round-trips
    assert again == run


@pytest.mark.e2e
def test_arith_drift_flips_thirty_of_the_340_sums_and_the_paired_test_sees_it(toy, builtin):
    section = load_recipe(write_recipe(Path(toy["healthy"].parent / "r.yaml"), {
        "name": "acc", "engine": {"kind": "command", "repo": "builtin:demo"}, "launch": {"command": ["x"]},
        "sampling": {"max_tokens": 32}, "eval": {"set": "builtin:arith_facts", "concurrency": 8}}))[0].eval
    assert section is not None
    with server(toy["healthy"]) as good, server(toy["arith_drift"]) as bad:
        a = ask_eval(good, "toy-model", section, timeout=20)
        b = ask_eval(bad, "toy-model", section, timeout=20)
    paired = pair(a, b)
    assert paired.n == 400 and not paired.gained and not (paired.only_a or paired.errors_b)
    assert len(paired.lost) == ARITH_WRONG_UNDER_DRIFT and all(i.startswith("arith-") for i in paired.lost)
    wrong = b.by_id()[paired.lost[0]]
    assert wrong.correct is False and int(wrong.extracted or 0) == int(wrong.reference) + 1
    cmp = compare_paired(paired.a, paired.b, min_change=section.min_effect)
    assert cmp.call is Call.DIFFERENT and cmp.lost == 30 and cmp.p < 1e-8


@pytest.mark.e2e
def test_concurrency_really_sends_that_many_at_once(tmp_path, toy):
    items = [{"id": f"s{i}", "prompt": "SLOW: 0.2", "answer": "0.2"} for i in range(16)]
    slow = EvalSet.load(str(_set(tmp_path, items)))
    for concurrency in (1, 8):
        with standin() as base:
            run = run_eval(base, "echo", slow, slow.items, concurrency=concurrency, timeout=10)
            peak = httpx.get(base + "/stats").json()["peak_in_flight"]
        assert run.n_correct == 16 and peak == concurrency == run.peak_in_flight
        assert run.wall_s >= 16 / concurrency * 0.2 * 0.95
    # The batched path is the workload: batch_bug is healthy one at a time and breaks at 4 and more in flight.
    sums = EvalSet.load(str(_set(tmp_path, [{"id": f"a{n}", "prompt": f"What is {n} + {n}?", "answer": str(2 * n)}
                                            for n in range(1, 13)], "sums.jsonl")))
    with server(toy["batch_bug"]) as base:
        alone = run_eval(base, "toy-model", sums, sums.items, max_tokens=32, concurrency=1, timeout=20)
        batched = run_eval(base, "toy-model", sums, sums.items, max_tokens=32, concurrency=8, timeout=20)
    assert alone.n_correct == 12
    assert batched.n_errors == 0 and batched.n_correct < 6
    assert any("for for for" in i.answer for i in batched.items)


def test_failed_requests_are_errors_apart_never_wrong_answers(tmp_path):
    items = [{"id": "right", "prompt": "ECHO: 7", "answer": "7"},
             {"id": "wrong", "prompt": "ECHO: 8", "answer": "9"},
             {"id": "empty", "prompt": "ECHO: ", "answer": "0"},  # a finished, empty answer: wrong
             {"id": "http500", "prompt": "FAIL: 1", "answer": "1"},
             {"id": "timeout", "prompt": "SLEEP: 5", "answer": "5"},
             {"id": "dropped", "prompt": "DROP: 1", "answer": "1"},
             {"id": "aborted", "prompt": "ABORT: 1", "answer": "1"}]
    faulty = EvalSet.load(str(_set(tmp_path, items)))
    with standin() as base:
        run = run_eval(base, "echo", faulty, faulty.items, concurrency=4, timeout=1.0)
    got = {i.id: i for i in run.items}
    assert {k: v.correct for k, v in got.items()} == {"right": True, "wrong": False, "empty": False,
                                                      "http500": None, "timeout": None, "dropped": None,
                                                      "aborted": None}
    assert got["http500"].error.startswith("HTTP 500") and "timed out" in got["timeout"].error
    assert "disconnect" in got["dropped"].error.lower() and "finish_reason 'abort'" in got["aborted"].error
    assert got["wrong"].error is None and got["empty"].error is None
    assert (run.n_errors, run.n_correct, run.n_graded) == (4, 1, 3) and run.accuracy == pytest.approx(1 / 3)
    assert [i.id for i in run.errors()] == ["http500", "timeout", "dropped", "aborted"]
    assert run.request_errors(0.5) and not run.request_errors(4 / 7)
    # A failed request is not compared: a side that failed on an item says nothing about that item.
    healthy = EvalRun("set", tuple(i.__class__(i.id, True, "", None, i.reference) for i in run.items))
    paired = pair(healthy, run)
    assert paired.ids == ("right", "wrong", "empty") and paired.lost == ("wrong", "empty")
    assert paired.errors_b == ("http500", "timeout", "dropped", "aborted") and not paired.errors_a


def test_a_dead_server_leaves_the_rest_not_sent(tmp_path, builtin):
    with standin() as base:
        run = run_eval(base, "echo", builtin, builtin.sample(5), alive=lambda: False, timeout=2)
    assert run.n_errors == 5 and all(i.error == "not sent: the server had exited" for i in run.items)


# --- the recipe section ------------------------------------------------------------------------------


def _eval_recipe(tmp_path: Path, engine_repo: Path, **section) -> Path:
    data = toy_recipe(engine_repo, sides={"a": "healthy0", "b": "fixed"}, eval={"set": "builtin:arith_facts",
                                                                                 **section})
    return write_recipe(tmp_path / "acc.yaml", data)


@pytest.mark.e2e
def test_an_under_powered_recipe_is_refused_before_anything_is_built(tmp_path, engine_repo):
    cache = tmp_path / "cache"
    recipe = _eval_recipe(tmp_path, engine_repo, n=100)
    for args in (["run", str(recipe), "-o", str(tmp_path / "out")], ["run", str(recipe), "--dry-run"],
                 ["bisect", str(recipe), "--good", "healthy0", "--bad", "fixed", "-o", str(tmp_path / "bis")]):
        proc = abbisect(*args, cwd=tmp_path, cache=cache)
        assert proc.returncode == 2, proc.stderr
        line = proc.stderr.strip()
        assert len(line.splitlines()) == 1 and "Traceback" not in line
        assert "under-powered: 100 items find a drop of 3 points with 9 % power, under the 80 % asked" in line
        assert "361 items would (eval.n; the set has 400)" in line and "raise eval.min_effect to 0.087" in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "bis").exists()
    assert not cache.exists()  # refused before the cache was even opened: no checkout, no venv, no server
    check = abbisect("check", str(recipe), "healthy0", cwd=tmp_path, cache=cache)
    assert check.returncode == 128 and "under-powered" in check.stderr  # stops `git bisect run`, blames nothing
    # The whole set (400 items) reaches 80 % at a 3-point drop; so does n: 100 for a drop of 9 points.
    ok = abbisect("run", str(_eval_recipe(tmp_path, engine_repo)), "--dry-run", cwd=tmp_path, cache=cache)
    assert ok.returncode == 0, ok.stderr
    for section in ({"n": 100, "min_effect": 0.09}, {"n": 100, "power": 0}):
        assert load_recipe(_eval_recipe(tmp_path, engine_repo, **section))[0].eval is not None


def test_the_plan_line_names_n_power_and_the_detectable_drop(tmp_path, engine_repo):
    rec = load_recipe(_eval_recipe(tmp_path, engine_repo))[0]
    assert rec.eval is not None and rec.eval.sha256 and rec.eval.api == "chat" and rec.eval.max_tokens == 48
    plan = rec.eval.check_plan(400)
    assert plan is not None and plan.n == 400 and plan.needed_n == 361 and plan.enough
    assert plan.describe() == ("power plan: 400 items find a drop of 3 points with 85 % power (80 % asked; 361 "
                               "items reach 80 %); the smallest drop found with 80 % power is 2.8 points "
                               "(accuracy 0.8, A-vs-A flips 1 %, alpha 0.05, exact McNemar)")
    # What a dry run shows (trial/dryrun.py's render_plan is to print these lines).
    head = f"eval: builtin:arith_facts ({rec.eval.sha256[:12]}), 400 of 400 items (seed 0), chat API, max_tokens 48"
    assert plan_lines(rec.eval) == [f"{head}, 8 in flight", plan.describe()]
    fewer = load_recipe(_eval_recipe(tmp_path, engine_repo, n=200, fewshot=3, min_effect=0.06))[0].eval
    assert fewer is not None and plan_lines(fewer)[0].endswith("200 of 400 items (seed 0), chat API, max_tokens 48, "
                                                               "8 in flight, 3-shot")
    assert plan_lines(fewer)[1].startswith("power plan: 200 items find a drop of 6 points with")


BAD_SETS = [
    ([{"id": "a", "prompt": "q", "answer": "1"}, {"id": "a", "prompt": "r", "answer": "2"}],
     "line 2: id 'a' again (first on line 1)"),
    ([{"id": "a", "prompt": "q"}], "line 1: answer: Field required"),
    ([{"id": "a", "prompt": "q", "answer": "1", "extract": "regex:(unclosed"}], "line 1: extract: bad extract regex"),
    ([{"id": "a", "prompt": "q", "messages": [{"role": "user", "content": "q"}], "answer": "1"}],
     "give prompt (a string) or messages"),
    ([{"id": "a", "prompt": "q", "choices": ["x", "y"], "answer": "C"}], "is none of the choices"),
]


@pytest.mark.e2e
def test_a_bad_eval_set_is_one_line_naming_the_line(tmp_path, engine_repo):
    def recipe(items: list[dict]) -> Path:
        _set(tmp_path, items, "bad.jsonl")
        data = toy_recipe(engine_repo, sides={"a": "healthy0", "b": "fixed"}, eval={"set": "bad.jsonl", "power": 0})
        return write_recipe(tmp_path / "r.yaml", data)

    for items, says in BAD_SETS:
        with pytest.raises(UserError) as err:
            load_recipe(recipe(items))
        assert "r.yaml: 'eval.set': bad.jsonl: line " in str(err.value) and says in str(err.value), err.value
    proc = abbisect("run", str(recipe(BAD_SETS[0][0])), "--dry-run", cwd=tmp_path, cache=tmp_path / "cache")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "'eval.set': bad.jsonl: line 2: id 'a' again (first on line 1)" in proc.stderr


@pytest.mark.e2e
def test_a_set_is_read_from_the_recipes_folder_and_pinned_by_its_hash(tmp_path, engine_repo):
    (tmp_path / "evals").mkdir()
    items = [json.loads(line) for line in (REPO_ROOT / "abbisect/builtin/evals/arith_facts.jsonl").open()]
    _set(tmp_path / "evals", items, "mine.jsonl")
    data = toy_recipe(engine_repo, eval={"set": "evals/mine.jsonl"})
    rec = load_recipe(write_recipe(tmp_path / "r.yaml", data))[0]
    builtin = load_recipe(_eval_recipe(tmp_path, engine_repo))[0]
    assert rec.eval is not None and builtin.eval is not None
    assert rec.eval.set == str(tmp_path / "evals" / "mine.jsonl") and rec.eval.sha256 == builtin.eval.sha256
    assert EvalSet.of(rec.eval).name == "mine.jsonl"
    pinned = {**data, "eval": {"set": "evals/mine.jsonl", "sha256": rec.eval.sha256}}
    _set(tmp_path / "evals", items[:-1], "mine.jsonl")  # the file changed under the recipe
    proc = abbisect("run", str(write_recipe(tmp_path / "r.yaml", pinned)), "--dry-run", cwd=tmp_path,
                    cache=tmp_path / "cache")
    assert proc.returncode == 2 and "mine.jsonl changed: its sha256 is" in proc.stderr, proc.stderr
    with pytest.raises(Exception, match="no built-in eval set 'builtin:nope' \\(built in: builtin:arith_facts\\)"):
        load_recipe(write_recipe(tmp_path / "r2.yaml", toy_recipe(engine_repo, eval={"set": "builtin:nope"})))
    assert yaml.safe_load((tmp_path / "r.yaml").read_text())["eval"]["sha256"] == rec.eval.sha256
    assert Eval(set="x.jsonl").api is None  # filled in from the recipe's own api when the recipe is read
