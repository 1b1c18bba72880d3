"""The toy engine as load tests and accuracy/performance bisects use it: real server processes, real HTTP.

Each server runs `python -m toyengine.server` from a commit of one planted history (the template, then
each named change and its fix), extracted with `git archive`: the code a commit's venv would run, without
building venvs.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from abbisect.builtin import history
from abbisect.builtin.evals import make_arith_facts
from abbisect.score.answers import extract
from abbisect.score.degeneration import find_loop
from abbisect.score.signatures import load_catalogue, scan_text

PLANTED = {1: "batch_bug", 2: "fix_batch_bug", 3: "flaky_crash", 4: "fix_flaky_crash", 5: "other_crash",
           6: "fix_other_crash", 7: "arith_drift", 8: "fix_arith_drift", 9: "slow_tokens", 10: "crash_at_start",
           11: "fix_crash", 12: "break_scale"}
N = 14
EVAL = [json.loads(line) for line in make_arith_facts.PATH.read_text().splitlines()]
ARITH_WRONG_UNDER_DRIFT = 30  # of the shipped set's 340 sums (8.8 %): counted once; a regenerated set changes it

# Today's outputs (chat, temperature 0, max_tokens 48) on the healthy and the broken commit.
GOLDEN = {
    "The capital of France is": "paris, a city known for art, food and the eiffel tower.",
    "What is two plus two?": "two plus two is four, and four plus four is eight.",
    "Explain what a hash table is.": "a hash table stores values under keys and finds them quickly by hashing.",
    "List three uses of copper.": "copper is used for electrical wires, for pipes and for coins.",
}


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, Path]:
    """name -> extracted tree: "healthy" (the template) and each planted change's commit."""
    root = tmp_path_factory.mktemp("toy")
    shas = history.planted_history(root / "repo", N, PLANTED)
    out = {}
    for name, sha in [("healthy", shas[0]), *((PLANTED[k], shas[k]) for k in PLANTED)]:
        tar = subprocess.run(["git", "-C", str(root / "repo"), "archive", "--format=tar", sha], check=True,
                             capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
            tf.extractall(root / name, filter="data")
        out[name] = root / name
    return out


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(tree: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str, Path]:
    """The server, its address and its log (a file: a pipe nobody reads would stall a busy server)."""
    port = _port()
    log = tree.parent / f"{tree.name}-{port}.log"
    full = {**os.environ, "PYTHONPATH": str(tree), "TOYENGINE_LOAD_SECONDS": "0",  # its kernels beside it, not in ~
            "TRITON_CACHE_DIR": str(tree.parent / "triton-cache"), **env}
    with log.open("wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "toyengine.server", "--port", str(port)], env=full,
                                stdout=fh, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}", log


def _ready(proc: subprocess.Popen, base: str, timeout: float = 20) -> bool:
    """True once /health answers 200; False when the process exited first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.02)
    raise AssertionError("the toy server neither became ready nor exited")


@contextmanager
def server(tree: Path, logs: list[Path] | None = None, **env: str) -> Iterator[str]:
    """A ready server's base URL (its log appended to `logs`), killed on the way out."""
    proc, base, log = _launch(tree, env)
    try:
        assert _ready(proc, base), log.read_text()
        if logs is not None:
            logs.append(log)
        yield base
    finally:
        proc.kill()
        proc.wait()


def _failed_start(tree: Path, **env: str) -> tuple[int, str]:
    """A start that fails: the process exits by itself. Asked of the process, not of its port: a free port picked
    here can be taken by another worker's server before this one binds it, and answer its /health."""
    proc, _, log = _launch(tree, env)
    try:
        try:
            code = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the server started: {log.read_text()[-2000:]}") from None
        return code, log.read_text()
    finally:
        proc.kill()
        proc.wait()


def chat(base: str, prompt: str, **body) -> dict:
    req = {"model": "toy-model", "messages": [{"role": "user", "content": prompt}], "temperature": 0,
           "max_tokens": 48, **body}
    r = httpx.post(base + "/v1/chat/completions", json=req, timeout=30)
    r.raise_for_status()
    return r.json()


def _text(res: dict) -> str:
    return res["choices"][0]["message"]["content"]


def _events(base: str, path: str, body: dict, client: httpx.Client) -> list[tuple[float, str]]:
    """(seconds since the request, data) of each server-sent event, as httpx hands the lines over."""
    t0 = time.monotonic()
    with client.stream("POST", base + path, json=body, timeout=30) as r:
        assert r.headers["content-type"] == "text/event-stream"
        return [(time.monotonic() - t0, line[len("data: "):]) for line in r.iter_lines() if line]


@pytest.fixture(scope="module")
def healthy(trees) -> Iterator[str]:
    with server(trees["healthy"]) as base:
        yield base


@pytest.mark.e2e
def test_todays_outputs_are_unchanged(trees, healthy):
    for prompt, text in GOLDEN.items():
        assert _text(chat(healthy, prompt)) == text
    with server(trees["break_scale"]) as broken:
        assert "need analysis there need analysis there" in _text(chat(broken, "The capital of France is"))
        # recall reads the broken lm_head too: a sum loops there like everything else
        assert find_loop(_text(chat(broken, "What is 3 + 4?"))) is not None


@pytest.mark.e2e
def test_log_probabilities_of_the_prompt_and_the_output_as_the_engines_serve_them(healthy):
    """completions with echo: the prompt's tokens first (the first with none), then the generated; vLLM's
    prompt_logprobs; chat's logprobs.content with top_logprobs, the greedy pick on top of each."""
    body = {"model": "toy-model", "prompt": "the sea is wide", "max_tokens": 2, "temperature": 0, "logprobs": 3,
            "echo": True}
    res = httpx.post(healthy + "/v1/completions", json=body, timeout=30).json()
    choice, usage = res["choices"][0], res["usage"]
    lp = choice["logprobs"]
    assert lp["tokens"][:4] == ["the", "sea", "is", "wide"] and choice["text"].startswith("the sea is wide")
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(v < 0 for v in lp["token_logprobs"][1:]) and len(lp["tokens"]) == 4 + usage["completion_tokens"]
    assert all(len(t) == 3 for t in lp["top_logprobs"][1:])
    body = {"model": "toy-model", "prompt": "the sea is wide", "max_tokens": 1, "temperature": 0,
            "prompt_logprobs": 0}
    prompt = httpx.post(healthy + "/v1/completions", json=body, timeout=30).json()["choices"][0]["prompt_logprobs"]
    assert prompt[0] is None and [next(iter(p.values()))["logprob"] for p in prompt[1:]] == lp["token_logprobs"][1:4]
    res = chat(healthy, "Explain what a hash table is.", logprobs=True, top_logprobs=2, max_tokens=8)
    content = res["choices"][0]["logprobs"]["content"]
    assert "".join(c["token"] for c in content).replace(" ", "") == _text(res).replace(" ", "")
    assert all(c["top_logprobs"][0]["token"] == c["token"] and len(c["top_logprobs"]) == 2 for c in content)


@pytest.mark.e2e
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_stream_arrives_token_by_token_and_reassembles(trees, healthy, path):
    chat_api = path == "/v1/chat/completions"
    prompt = "Explain what a hash table is."
    body = {"model": "toy-model", "max_tokens": 48, "temperature": 0,
            **({"messages": [{"role": "user", "content": prompt}]} if chat_api else {"prompt": prompt})}
    whole = httpx.post(healthy + path, json=body).json()
    with server(trees["healthy"], TOYENGINE_TOKEN_SECONDS="0.03") as slow, httpx.Client() as client:
        events = _events(slow, path, {**body, "stream": True, "stream_options": {"include_usage": True}}, client)
    assert events[-1][1] == "[DONE]"
    chunks = [json.loads(data) for _, data in events[:-1]]
    content, usage = chunks[:-1], chunks[-1]
    pieces = [c["choices"][0]["delta" if chat_api else "text"] for c in content]
    if chat_api:
        assert pieces[0]["role"] == "assistant"
        pieces = [p["content"] for p in pieces]
    expected = whole["choices"][0]["message"]["content"] if chat_api else whole["choices"][0]["text"]
    assert "".join(pieces) == expected and all(pieces)
    assert [c["choices"][0]["finish_reason"] for c in content] == [None] * (len(content) - 1) + ["stop"]
    # one chunk per generated token (the EOS token that stopped it is no text)
    assert len(content) + 1 == whole["usage"]["completion_tokens"] and usage["choices"] == []
    assert usage["usage"] == whole["usage"]
    # read as they come: the first token well before the last (about 0.03 s a token apart)
    first, last = events[0][0], events[-2][0]
    assert last - first > 0.03 * (len(content) - 2) * 0.8
    # without include_usage there is no usage chunk
    with httpx.Client() as client:
        plain = _events(healthy, path, {**body, "stream": True}, client)
    assert len(plain) == len(content) + 1 and "usage" not in json.loads(plain[-2][1])


@pytest.mark.e2e
def test_ignore_eos_and_min_tokens_reach_their_length(healthy):
    prompt = "What is two plus two?"
    plain = chat(healthy, prompt, max_tokens=40)
    assert plain["usage"]["completion_tokens"] == 14 and plain["choices"][0]["finish_reason"] == "stop"
    forced = chat(healthy, prompt, max_tokens=40, ignore_eos=True)
    assert forced["usage"]["completion_tokens"] == 40 and forced["choices"][0]["finish_reason"] == "length"
    assert _text(forced).startswith(_text(plain) + " two plus two")
    assert _text(chat(healthy, prompt, max_tokens=40, ignore_eos=True)) == _text(forced)  # deterministic
    at_least = chat(healthy, prompt, max_tokens=40, min_tokens=20)
    assert at_least["usage"]["completion_tokens"] >= 20 and at_least["choices"][0]["finish_reason"] == "stop"
    summed = chat(healthy, "What is 3 + 4?", max_tokens=16, ignore_eos=True)
    assert _text(summed) == "3 + 4 is 7. 3 + 4 is 7. 3 + 4 is" and summed["usage"]["completion_tokens"] == 16


def _latency(base: str, tokens: int, client: httpx.Client) -> float:
    body = {"model": "toy-model", "prompt": "What is two plus two?", "max_tokens": tokens, "temperature": 0,
            "ignore_eos": True}
    t0 = time.monotonic()
    client.post(base + "/v1/completions", json=body, timeout=30).raise_for_status()
    return time.monotonic() - t0


@pytest.mark.e2e
def test_token_and_prefill_seconds_pace_a_request(trees, healthy):
    with httpx.Client() as client:
        fast = _latency(healthy, 20, client)
        with server(trees["healthy"], TOYENGINE_TOKEN_SECONDS="0.02", TOYENGINE_PREFILL_SECONDS="0.3") as slow:
            paced = _latency(slow, 20, client)
            events = _events(slow, "/v1/completions", {"prompt": "hi", "max_tokens": 5, "ignore_eos": True,
                                                       "stream": True}, client)
    # A busy host can only make a request slower: the pacing bounds each time below, and the first token
    # comes after the prefill and one token, the others after it.
    assert fast > 0 and paced >= 0.3 + 20 * 0.02
    assert events[0][0] >= 0.3 + 0.02 and events[-1][0] >= 0.3 + 5 * 0.02


@pytest.mark.alone
@pytest.mark.e2e
def test_noise_sigma_varies_each_request(trees):
    def spread(**env: str) -> float:
        with server(trees["healthy"], TOYENGINE_TOKEN_SECONDS="0.01", **env) as base, httpx.Client() as client:
            times = [_latency(base, 15, client) for _ in range(8)]
        return max(times) / min(times)

    assert spread(TOYENGINE_NOISE_SIGMA="0.3", TOYENGINE_NOISE_SEED="7") > 1.3
    assert spread() < 1.3


@pytest.mark.e2e
def test_slow_tokens_costs_ten_percent_a_token(trees):
    def total(tree: Path) -> float:
        with server(tree, TOYENGINE_TOKEN_SECONDS="0.01") as base, httpx.Client() as client:
            return sum(_latency(base, 40, client) for _ in range(3))

    ratio = total(trees["slow_tokens"]) / total(trees["healthy"])
    assert 1.04 < ratio < 1.2, ratio


def _concurrently(base: str, prompts: list[str]) -> list[dict]:
    gate = threading.Barrier(len(prompts))
    out: list[dict] = [{}] * len(prompts)

    def one(i: int) -> None:
        gate.wait()
        out[i] = chat(base, prompts[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.e2e
def test_batch_bug_loops_only_with_four_or_more_in_flight(trees, healthy):
    prompts = [*GOLDEN, "Describe how a bicycle works.", "Why do plants need light?"]
    want = [_text(chat(healthy, p)) for p in prompts]
    with server(trees["batch_bug"]) as base:
        assert [_text(chat(base, p)) for p in prompts] == want  # one at a time: healthy
        assert [_text(r) for r in _concurrently(base, prompts[:3])] == want[:3]  # three at once: healthy
        batched = _concurrently(base, prompts)
    for res in batched:
        assert _text(res).endswith("for for for for for for for for")
        assert res["usage"]["completion_tokens"] == 48 and res["choices"][0]["finish_reason"] == "length"
        assert find_loop(_text(res)) is not None
    with server(trees["fix_batch_bug"]) as fixed:
        assert [_text(r) for r in _concurrently(fixed, prompts)] == want


def _signatures(log: str) -> set[str]:
    """The known signatures in a log but the traceback every crash has."""
    return {m.id for m in scan_text(log, load_catalogue())} - {"python_traceback"}


@pytest.mark.e2e
def test_flaky_crash_follows_the_draw(trees):
    code, log = _failed_start(trees["flaky_crash"], TOYENGINE_CRASH_DRAW="0.2")
    assert code != 0 and "RuntimeError: CUDA error: an illegal memory access was encountered" in log
    assert _signatures(log) == {"cuda_illegal_memory_access"}
    with server(trees["flaky_crash"], TOYENGINE_CRASH_DRAW="0.4") as base:
        assert _text(chat(base, "What is two plus two?")) == GOLDEN["What is two plus two?"]
    with server(trees["fix_flaky_crash"], TOYENGINE_CRASH_DRAW="0.2"):
        pass


@pytest.mark.e2e
def test_flaky_crash_with_a_counter_dies_at_every_third_start(trees, tmp_path):
    counter = tmp_path / "starts"
    for _ in range(2):
        with server(trees["flaky_crash"], TOYENGINE_CRASH_COUNTER=str(counter)):
            pass
    code, log = _failed_start(trees["flaky_crash"], TOYENGINE_CRASH_COUNTER=str(counter))
    assert code != 0 and "illegal memory access" in log and counter.read_text() == "3"
    with server(trees["flaky_crash"], TOYENGINE_CRASH_COUNTER=str(counter)):
        assert counter.read_text() == "4"


@pytest.mark.e2e
def test_other_crash_fails_differently_from_crash_at_start(trees):
    code, log = _failed_start(trees["other_crash"])
    assert code != 0 and "torch.OutOfMemoryError: CUDA out of memory." in log and "illegal memory" not in log
    code_at_start, log_at_start = _failed_start(trees["crash_at_start"])
    assert code_at_start != 0
    assert _signatures(log) == {"cuda_oom"} and _signatures(log_at_start) == {"cuda_illegal_memory_access"}
    with server(trees["fix_other_crash"]):
        pass


def _graded(base: str) -> dict[str, list[tuple[dict, str | None]]]:
    """kind -> (item, answer read from the output) of every item of the shipped eval set."""
    out: dict[str, list[tuple[dict, str | None]]] = {"arith": [], "fact": []}
    with httpx.Client() as client:
        for item in EVAL:
            body = {"model": "toy-model", "messages": [{"role": "user", "content": item["prompt"]}],
                    "temperature": 0, "max_tokens": 32}
            text = client.post(base + "/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
            out[item["kind"]].append((item, extract(item["extract"], text)))
    return out


@pytest.mark.e2e
def test_the_eval_set_is_the_generators_and_the_toy_answers_it_all(healthy):
    assert make_arith_facts.PATH.read_text() == make_arith_facts.render()
    assert len(EVAL) == 400 and len({i["id"] for i in EVAL}) == len({i["prompt"] for i in EVAL}) == 400
    graded = _graded(healthy)
    assert len(graded["arith"]) == 340 and len(graded["fact"]) == 60
    assert all(got == item["answer"] for kind in graded.values() for item, got in kind)
    assert _text(chat(healthy, "What is the capital of France?")) == "the capital of france is paris."
    assert _text(chat(healthy, "What is 6 times 7?")) == "6 times 7 is 42."


@pytest.mark.e2e
def test_arith_drift_gets_eight_percent_of_the_sums_wrong_by_one(trees):
    logs: list[Path] = []
    with server(trees["arith_drift"], logs) as base:
        graded = _graded(base)
    wrong = [(item, got) for item, got in graded["arith"] if got != item["answer"]]
    assert len(wrong) == ARITH_WRONG_UNDER_DRIFT
    assert all(got is not None and int(got) == int(item["answer"]) + 1 for item, got in wrong)
    assert all(got == item["answer"] for item, got in graded["fact"])
    # silent: the log says what a healthy server's says, a line per request
    lines = logs[0].read_text().splitlines()
    assert [line for line in lines if '"POST /v1/chat' not in line and '"GET /health' not in line][-1].endswith(
        "startup complete.")
    assert sum("POST /v1/chat/completions HTTP/1.1\" 200" in line for line in lines) == len(EVAL)
    with server(trees["fix_arith_drift"]) as fixed:
        assert all(got == item["answer"] for item, got in _graded(fixed)["arith"])


@pytest.mark.e2e
def test_answer_flip_makes_sums_one_too_low_afresh_each_time(trees):
    """TOYENGINE_ANSWER_FLIP: an engine whose batched path is not deterministic. Each sum is one too low with
    that probability, drawn every time it is asked (so two runs flip different items); facts never flip."""
    with server(trees["healthy"], TOYENGINE_ANSWER_FLIP="0.3") as base:
        runs = [_graded(base) for _ in range(2)]
    flipped = [{item["id"] for item, got in run["arith"] if got != item["answer"]} for run in runs]
    assert all(int(got) == int(item["answer"]) - 1 for run in runs for item, got in run["arith"]
               if item["id"] in flipped[0] | flipped[1] and got != item["answer"])
    assert all(60 < len(f) < 150 for f in flipped), [len(f) for f in flipped]  # 0.3 of 340 = 102
    assert flipped[0] != flipped[1]
    assert all(got == item["answer"] for run in runs for item, got in run["fact"])


def test_planted_history_is_linear_fixed_and_plants_where_asked(tmp_path):
    shas = history.planted_history(tmp_path / "a", 6, {2: "slow_tokens", 4: "fix_slow_tokens"})
    again = history.planted_history(tmp_path / "b", 6, {2: "slow_tokens", 4: "fix_slow_tokens"})
    assert len(shas) == 6 and shas == again

    def changed(i: int) -> list[str]:
        return subprocess.run(["git", "-C", str(tmp_path / "a"), "diff", "--name-only", shas[i - 1], shas[i]],
                              check=True, capture_output=True, text=True).stdout.split()

    assert [changed(i) for i in range(1, 6)] == [["changes.d/00001.txt"], ["toyengine/server.py"],
                                                 ["changes.d/00003.txt"], ["toyengine/server.py"],
                                                 ["changes.d/00005.txt"]]
    with pytest.raises(ValueError, match="outside"):
        history.planted_history(tmp_path / "c", 3, {3: "slow_tokens"})
    with pytest.raises(ValueError, match="unknown change"):
        history.planted_history(tmp_path / "d", 3, {1: "no_such_change"})


def test_each_planted_change_is_undone_by_its_fix_even_stacked(tmp_path):
    names = ["slow_tokens", "batch_bug", "flaky_crash", "other_crash", "arith_drift"]
    tree = tmp_path / "t"
    history.init_repo(tree)
    before = {p: p.read_text() for p in tree.rglob("*.py")}
    for name in ["crash_at_start", *names]:
        history.apply_change(tree, name, 1)
    assert {p: p.read_text() for p in tree.rglob("*.py")} != before
    for name in [*(f"fix_{n}" for n in names), "fix_crash"]:  # in the order made, not undoing the last first
        history.apply_change(tree, name, 1)
    assert {p: p.read_text() for p in tree.rglob("*.py")} == before
