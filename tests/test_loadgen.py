"""The load generator against a real HTTP server with known timings (tests/sse_standin.py, in a thread).

Every check holds on a machine as busy as it gets: a timing is bounded below by the server's sleeps (it
can't be shorter), and above only by events — what the server recorded (when each answer was written in full,
how many requests it had open at once) and what the client's own records must add up to (intervals of one
slot don't overlap, a pass's requests lie inside its wall time). How close the timings come to the sleeps on a
quiet machine is what benchmarks measure, not tests.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from sse_standin import Behaviour, StandIn

from abbisect.query.load import CUT_MARKER, TEXT_CAP, Summary, Workload, run_pass, schedule
from abbisect.query.workload import VOCABULARY


@pytest.fixture
def standin() -> Iterator[Callable[[Behaviour], StandIn]]:
    started: list[StandIn] = []

    def start(behaviour: Behaviour) -> StandIn:
        server = StandIn(behaviour)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_ttft_tpot_itl_e2e_match_the_servers_sleeps(standin, api):
    """8 tokens: the first after 0.15 s (the chat role chunk comes at once and is no token), then one
    every 0.03 s → TTFT 0.15, ITL and TPOT 0.03, E2E 0.15 + 7 × 0.03 = 0.36."""
    server = standin(Behaviour(first_sleep=0.15, token_sleep=0.03, tokens=8))
    w = Workload(requests=4, prompts=("hello",), max_concurrency=2, warmup=1, api=api, max_tokens=8)
    result = run_pass(server.url, "m", w, timeout=10)
    assert result.errors == 0 and result.completed == 4
    for r in result.records:
        assert r.ok and r.output_tokens == 8 and r.content_chunks == 8
        assert 0.15 <= r.ttft_s < r.e2e_s and r.e2e_s >= 0.36  # the role chunk is no token; the sleeps bound below
        # one gap may be short when the chunk before it was read late; together they span the decode
        assert len(r.itl_s) == 7 and all(gap > 0 for gap in r.itl_s)
        assert math.isclose(sum(r.itl_s), r.e2e_s - r.ttft_s)
        assert math.isclose(r.tpot_s, (r.e2e_s - r.ttft_s) / 7)
        assert r.text == "tok " * 8 and not r.text_cut and r.finish_reason == "length"
    assert result.itl.n == 28 and result.ttft.n == result.e2e.n == 4
    assert result.ttft.median >= 0.15 and result.e2e.median >= 0.36
    assert result.output_tokens == 32
    assert math.isclose(result.output_throughput, 32 / result.wall_s)
    assert math.isclose(result.request_throughput, 4 / result.wall_s)
    # two slots: two rounds of 0.36 s at least, and no more request time than two slots hold
    assert result.wall_s >= 0.72 and sum(r.e2e_s for r in result.records) <= 2 * result.wall_s
    assert server.seen.peak <= 2


def test_concurrency_eight_runs_the_requests_at_once(standin):
    """8 requests of 0.2 s: one at a time takes 1.6 s at least, eight at a time are all open at once; each
    request's own latency is its own (waiting for a slot is not server time): one at a time, the requests'
    latencies are disjoint intervals inside the pass, so they add up to no more than its wall time."""
    walls, peaks = {}, {}
    for cap in (1, 8):
        # eight at a time: the server answers none until all eight are open (an event, not a race)
        server = standin(Behaviour(first_sleep=0.2, tokens=1, gate=cap))
        result = run_pass(server.url, "m", Workload(requests=8, prompts=("x",), max_concurrency=cap), timeout=20)
        assert result.completed == 8
        assert all(r.e2e_s >= 0.2 for r in result.records)
        walls[cap], peaks[cap] = result.wall_s, server.seen.peak
        if cap == 1:
            order = sorted(result.records, key=lambda r: r.sent_s)
            assert all(b.sent_s >= a.sent_s + a.e2e_s for a, b in itertools.pairwise(order))
            assert sum(r.e2e_s for r in result.records) <= result.wall_s
    assert peaks == {1: 1, 8: 8}
    assert walls[1] >= 1.6


def test_poisson_schedule_is_seeded_and_has_the_rate():
    w = Workload(requests=4000, input_words=1, request_rate=20, seed=7)
    offsets = schedule(w)
    assert offsets == schedule(Workload(requests=4000, input_words=1, request_rate=20, seed=7))
    assert offsets != schedule(Workload(requests=4000, input_words=1, request_rate=20, seed=8))
    gaps = np.diff(offsets)
    assert offsets[0] == 0 and (gaps > 0).all()
    assert abs(gaps.mean() - 1 / 20) < 0.05 / 20 * 1.5  # the mean of 3999 exponential gaps: sd ≈ 1.6 %
    assert abs(np.std(gaps) - 1 / 20) < 0.1 / 20  # exponential: sd = mean
    assert schedule(Workload(requests=3, input_words=1, max_concurrency=2)) == (0.0, 0.0, 0.0)


def test_requests_are_sent_on_the_seeded_schedule(standin):
    """The same seed sends at the same offsets, run after run; the server sees the schedule's gaps."""
    server = standin(Behaviour(tokens=2))
    w = Workload(requests=8, prompts=("x",), request_rate=25, seed=3)
    runs = []
    for _ in range(2):
        first = len(server.seen.arrivals)
        result = run_pass(server.url, "m", w, timeout=10)
        assert result.completed == 8
        runs.append(result)
        assert [r.scheduled_s for r in result.records] == list(schedule(w))
        assert all(r.sent_s >= r.scheduled_s for r in result.records)  # never early; late only by the load
        # sent in the schedule's order, and the server saw them in that order
        assert [r.index for r in sorted(result.records, key=lambda r: r.sent_s)] == list(range(8))
        assert len(server.seen.arrivals[first:]) == 8 and server.seen.arrivals[first:] == sorted(
            server.seen.arrivals[first:])
    assert [r.scheduled_s for r in runs[0].records] == [r.scheduled_s for r in runs[1].records]
    other = run_pass(server.url, "m", Workload(requests=8, prompts=("x",), request_rate=25, seed=4), timeout=10)
    assert [r.scheduled_s for r in other.records] != [r.scheduled_s for r in runs[0].records]


def test_a_rate_launches_requests_whatever_the_earlier_ones_do(standin):
    """At 50 requests/s with answers of 0.5 s, later requests go out before the first ones end; a
    concurrency cap as well makes arrivals wait for a slot."""
    w = Workload(requests=6, prompts=("x",), request_rate=50, seed=1)
    # The server answers none until all six are open: a client that waited for an answer before sending
    # the next request would leave it at one open.
    gated = standin(Behaviour(first_sleep=0.5, tokens=1, gate=6))
    result = run_pass(gated.url, "m", w, timeout=20)
    assert result.completed == 6 and gated.seen.peak == 6  # all six open at once
    assert all(r.sent_s >= r.scheduled_s for r in result.records)

    server = standin(Behaviour(first_sleep=0.5, tokens=1))
    capped = run_pass(server.url, "m", Workload(requests=6, prompts=("x",), request_rate=50, seed=1,
                                                 max_concurrency=2), timeout=10)
    assert capped.completed == 6 and server.seen.peak == 2
    assert max(r.sent_s for r in capped.records) >= 1.0  # the 5th and 6th waited two rounds
    assert capped.wall_s >= 1.5 and all(r.e2e_s >= 0.5 for r in capped.records)


def test_warmup_requests_are_sent_first_and_not_counted(standin):
    server = standin(Behaviour(first_sleep=0.1, tokens=1))
    w = Workload(requests=4, input_words=5, max_concurrency=1, warmup=3, seed=2)
    result = run_pass(server.url, "m", w, timeout=10)
    after = time.perf_counter()
    texts = w.texts()
    assert len(server.seen.bodies) == 7
    assert [b["messages"][0]["content"] for b in server.seen.bodies] == texts  # warm-up first, in order
    assert [r.index for r in result.records] == [0, 1, 2, 3] and result.completed == 4
    # The wall time is the four measured requests' (0.4 s at least), and it starts after the last warm-up
    # answer was written: it fits between that event and the pass's return.
    assert 0.4 <= result.wall_s <= after - server.seen.ends[2]
    assert result.warmup_errors == 0


def test_warmup_failures_are_counted_apart(standin):
    server = standin(Behaviour(tokens=1))
    w = Workload(requests=2, prompts=("FAIL", "FAIL", "ok", "ok"), max_concurrency=2, warmup=2)
    result = run_pass(server.url, "m", w, timeout=10)
    assert result.warmup_errors == 2 and result.errors == 0 and result.completed == 2


def test_errors_are_counted_apart_and_carry_no_timings(standin):
    server = standin(Behaviour(first_sleep=0.05, token_sleep=0.01, tokens=4))
    w = Workload(requests=10, prompts=("ok", "FAIL", "ok", "BREAK", "ok", "ERROR", "ok", "NODONE", "ok", "OLDERROR"),
                 max_concurrency=5)
    result = run_pass(server.url, "m", w, timeout=10)
    assert result.completed == 5 and result.errors == 5
    by_kind = {r.index: r for r in result.records}
    assert by_kind[1].status == 500 and by_kind[1].error.startswith("HTTP 500: ")
    assert "stand-in failure" in by_kind[1].error
    assert by_kind[3].error.startswith("broken stream: ")
    assert by_kind[5].error.startswith("error in stream: ")
    assert by_kind[7].error == "broken stream: it ended before [DONE]"
    assert by_kind[9].error.startswith("error in stream: ") and "stand-in error" in by_kind[9].error
    for r in result.records:
        if r.index % 2:
            assert not r.ok
            assert (r.ttft_s, r.e2e_s, r.tpot_s, r.itl_s, r.output_tokens) == (None, None, None, (), None)
        else:
            assert r.ok and r.error is None
    assert result.ttft.n == result.e2e.n == result.tpot.n == 5 and result.itl.n == 15
    assert result.output_tokens == 20
    assert math.isclose(result.request_throughput, 5 / result.wall_s)


def test_a_trickling_server_is_cut_at_the_whole_request_deadline(standin):
    """A byte every 0.05 s never trips a per-read timeout; the whole-request deadline of 1 s ends it."""
    server = standin(Behaviour(trickle_s=0.05, trickle_for=20))
    result = run_pass(server.url, "m", Workload(requests=2, prompts=("TRICKLE", "ok"), max_concurrency=2),
                      timeout=1.0)
    slow, fast = result.records
    assert not slow.ok and slow.error.startswith("timeout: ") and slow.ttft_s is None
    assert fast.ok and result.errors == 1
    assert result.wall_s >= 1.0
    # the client gave up while the server still trickled (it would for 20 s): the server saw it close
    deadline = time.monotonic() + 10
    while not server.seen.trickles_cut and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.seen.trickles_cut == 1


def test_a_malformed_event_or_no_server_is_an_error(standin):
    server = standin(Behaviour(tokens=4))
    garbage = run_pass(server.url, "m", Workload(requests=1, prompts=("GARBAGE",), max_concurrency=1), timeout=5)
    assert garbage.errors == 1 and garbage.records[0].error.startswith("bad event: ")
    server.close()
    gone = run_pass(server.url, "m", Workload(requests=2, prompts=("x",), max_concurrency=2), timeout=5)
    assert gone.errors == 2 and all(r.error.startswith("cannot connect: ") for r in gone.records)
    assert gone.ttft == Summary(0, None, None, None, None) and gone.request_throughput == 0


def test_no_content_is_an_error(standin):
    server = standin(Behaviour(tokens=0))
    result = run_pass(server.url, "m", Workload(requests=1, prompts=("x",), max_concurrency=1), timeout=5)
    assert result.errors == 1 and result.records[0].error == "no content in the stream"


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_the_body_carries_the_pinned_parameters(standin, api):
    server = standin(Behaviour(tokens=1))
    w = Workload(requests=1, prompts=("the prompt",), max_concurrency=1, max_tokens=7, min_tokens=7, api=api)
    run_pass(server.url, "served-name", w, timeout=5)
    body, path = server.seen.bodies[0], server.seen.paths[0]
    assert body["ignore_eos"] is True and body["max_tokens"] == 7 and body["min_tokens"] == 7
    assert body["temperature"] == 0 and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True} and body["model"] == "served-name"
    if api == "chat":
        assert path == "/v1/chat/completions" and body["messages"] == [{"role": "user", "content": "the prompt"}]
    else:
        assert path == "/v1/completions" and body["prompt"] == "the prompt"
    run_pass(server.url, "m", Workload(requests=1, prompts=("p",), max_concurrency=1, ignore_eos=False), timeout=5)
    assert "ignore_eos" not in server.seen.bodies[1] and "min_tokens" not in server.seen.bodies[1]


def test_output_tokens_come_from_usage_else_from_chunks(standin):
    """Five chunks of three tokens each: usage says 15 (TPOT over 14 gaps); without usage, 5 chunks."""
    w = Workload(requests=1, prompts=("x",), max_concurrency=1)
    with_usage = run_pass(standin(Behaviour(tokens=5, tokens_per_chunk=3, token_sleep=0.01)).url, "m", w, 5)
    r = with_usage.records[0]
    assert (r.output_tokens, r.tokens_from, r.content_chunks) == (15, "usage", 5)
    assert r.prompt_tokens == 1
    assert math.isclose(r.tpot_s, (r.e2e_s - r.ttft_s) / 14)
    without = run_pass(standin(Behaviour(tokens=5, tokens_per_chunk=3, usage=False)).url, "m", w, 5)
    r = without.records[0]
    assert (r.output_tokens, r.tokens_from, r.content_chunks, r.prompt_tokens) == (5, "chunks", 5, None)


def test_kept_text_is_capped_with_a_marker(standin):
    w = Workload(requests=1, prompts=("x",), max_concurrency=1)
    long = run_pass(standin(Behaviour(tokens=6, piece="y" * 1000)).url, "m", w, 5).records[0]
    assert long.text == "y" * TEXT_CAP + CUT_MARKER and long.text_cut and long.content_chunks == 6
    exact = run_pass(standin(Behaviour(tokens=2, piece="z" * (TEXT_CAP // 2))).url, "m", w, 5).records[0]
    assert exact.text == "z" * TEXT_CAP and not exact.text_cut


def test_a_pass_is_plain_json(standin):
    server = standin(Behaviour(tokens=3))
    result = run_pass(server.url, "m", Workload(requests=3, prompts=("ok", "FAIL", "ok"), max_concurrency=2), timeout=5)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["completed"] == 2 and data["errors"] == 1 and len(data["records"]) == 3
    assert data["workload"]["max_concurrency"] == 2 and data["ttft"]["n"] == 2
    assert data["records"][0]["itl_s"] == list(result.records[0].itl_s) and len(data["records"][0]["itl_s"]) == 2
    assert data["records"][1]["error"].startswith("HTTP 500")


def test_synthetic_prompts_are_seeded_fixed_length_and_distinct():
    w = Workload(requests=20, input_words=64, max_concurrency=1, warmup=5, seed=11)
    texts = w.texts()
    assert len(texts) == 25 and len(set(texts)) == 25
    assert all(len(t.split()) == 64 and set(t.split()) <= set(VOCABULARY) for t in texts)
    assert texts == Workload(requests=20, input_words=64, max_concurrency=1, warmup=5, seed=11).texts()
    assert texts != Workload(requests=20, input_words=64, max_concurrency=1, warmup=5, seed=12).texts()
    cycled = Workload(requests=3, prompts=("a", "b"), max_concurrency=1, warmup=1).texts()
    assert cycled == ["a", "b", "a", "b"]


@pytest.mark.parametrize("bad", [
    {"requests": 0, "prompts": ("x",), "max_concurrency": 1},
    {"requests": 1, "max_concurrency": 1},
    {"requests": 1, "prompts": ("x",), "input_words": 3, "max_concurrency": 1},
    {"requests": 1, "prompts": ("x",)},
    {"requests": 1, "prompts": ("x",), "request_rate": 0},
    {"requests": 1, "prompts": ("x",), "max_concurrency": 0},
    {"requests": 1, "prompts": ("x",), "max_concurrency": 1, "api": "responses"},
])
def test_a_workload_that_pins_nothing_sensible_is_refused(bad):
    with pytest.raises(ValueError):
        Workload(**bad)


def test_summary_percentiles_interpolate_like_numpy():
    values = [0.5, 0.1, 0.3, 2.0, 0.25, 0.8, 0.05]
    s = Summary.of(values)
    assert s.n == 7 and math.isclose(s.mean, statistics.fmean(values))
    for got, q in ((s.median, 50), (s.p90, 90), (s.p99, 99)):
        assert math.isclose(got, float(np.percentile(values, q)))
    assert Summary.of([]) == Summary(0, None, None, None, None)
    assert Summary.of([0.2]) == Summary(1, 0.2, 0.2, 0.2, 0.2)
