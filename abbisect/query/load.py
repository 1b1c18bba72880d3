"""abbisect's own load generator: one pinned, streamed load against an OpenAI-compatible server, timed.

A performance verdict compares two commits, so the client that measures them must not change with the
commit: the engine's own benchmark script (`vllm bench serve`, SGLang's `bench_serving`) moves with its
history, and a change in how it counts would read as a change in the engine (vLLM #8819 was bisected to a
commit that fixed the metric). This module is the same code on both sides of every A/B.

It measures what `vllm bench serve` measures — TTFT, TPOT, ITL and E2E percentiles, request and output-token
throughput, with `max_concurrency` and/or Poisson `request_rate` — from the server-sent events of
streamed requests, parsed by httpx-sse. A request's timings are taken only when it answered in full; a
failure (HTTP status, broken stream, whole-request timeout) is counted apart and never enters a statistic.
Memory stays bounded: response bodies are never kept, and each request keeps at most `TEXT_CAP` characters
of its text (enough to see the output was not empty). Each stream is read to the end of its body (after
[DONE], or after an error event), so its kept-alive connection goes back to the pool whole and is closed in
good order with the client: a connection closed with bytes unread is reset, and the server logs the reset.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import httpx
from httpx_sse import ServerSentEvent, SSEError, aconnect_sse

from abbisect.infra.proc import deliver, signals_held
from abbisect.query.workload import Workload

TEXT_CAP = 2048
CUT_MARKER = "…[cut]"
_ERROR_BODY_CAP = 300

def schedule(workload: Workload) -> tuple[float, ...]:
    """When each measured request is due, in seconds from the pass's start: the first at 0, then
    exponential gaps of mean 1/request_rate drawn from `random.Random(seed)` (a Poisson process, so the
    same seed gives the same arrivals on both sides); all at 0 without a rate (the concurrency cap
    alone paces them)."""
    if workload.request_rate is None:
        return (0.0,) * workload.requests
    rng = random.Random(workload.seed)
    offsets, t = [0.0], 0.0
    for _ in range(workload.requests - 1):
        t += rng.expovariate(workload.request_rate)
        offsets.append(t)
    return tuple(offsets)


@dataclass(frozen=True)
class RequestRecord:
    """One measured request. Timings are seconds from the moment it was sent (after it got a concurrency
    slot, so waiting for a slot is client queueing, not server latency), and are None unless `ok`.

    ttft_s: to the first chunk with non-empty content (a chat stream's leading role-only chunk is not a
    token). itl_s: the gaps between consecutive content chunks (a chunk may carry several tokens).
    e2e_s: to the last content chunk (as `vllm bench serve` counts it: the trailing usage chunk and
    [DONE] carry no token). output_tokens: the usage chunk's completion_tokens when the server sent one
    (`tokens_from` = "usage"), else the number of content chunks ("chunks"). tpot_s: (e2e − ttft) /
    (output_tokens − 1), None for a single token.
    """

    index: int
    scheduled_s: float
    sent_s: float
    ok: bool
    error: str | None = None
    status: int | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    tpot_s: float | None = None
    itl_s: tuple[float, ...] = ()
    output_tokens: int | None = None
    tokens_from: Literal["usage", "chunks"] | None = None
    prompt_tokens: int | None = None
    content_chunks: int = 0
    finish_reason: str | None = None
    text: str = ""
    text_cut: bool = False


@dataclass(frozen=True)
class Summary:
    """Descriptive statistics of one metric over the pass's successful requests (ITL: over all their
    gaps pooled); percentiles interpolate linearly, as numpy's default and `vllm bench serve` do."""

    n: int
    mean: float | None
    median: float | None
    p90: float | None
    p99: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        if not values:
            return cls(0, None, None, None, None)
        if len(values) == 1:
            v = values[0]
            return cls(1, v, v, v, v)
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        return cls(len(values), statistics.fmean(values), statistics.median(values), cuts[89], cuts[98])


@dataclass(frozen=True)
class PassResult:
    """One pass: every measured request's record and what they add up to. `wall_s` runs from the first
    measured request's due time to the last one's end (warm-up excluded); throughputs are over it and
    count successful requests only. Plain data, so `to_dict()` is JSON as it is."""

    model: str
    workload: Workload
    records: tuple[RequestRecord, ...]
    warmup_errors: int
    wall_s: float
    completed: int
    errors: int
    output_tokens: int
    request_throughput: float
    output_throughput: float
    ttft: Summary
    tpot: Summary
    itl: Summary
    e2e: Summary

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Failed(Exception):
    """A request that did not answer in full; the message is the record's error."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _delta_text(api: str, choice: dict[str, Any]) -> str:
    if api == "completions":
        return choice.get("text") or ""
    delta = choice.get("delta") or {}
    # A reasoning model streams its thinking as tokens too (vLLM's `reasoning_content`, later `reasoning`).
    return (delta.get("content") or "") + (delta.get("reasoning_content") or "") + (delta.get("reasoning") or "")


class _Stream:
    """What one stream has shown so far: timestamps of content chunks, usage, a capped text."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.itl: list[float] = []
        self.chunks = 0
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.finish_reason: str | None = None
        self.text: list[str] = []
        self.kept = 0
        self.cut = False

    def content(self, now: float, piece: str) -> None:
        if self.last is None:
            self.first = now
        else:
            self.itl.append(now - self.last)
        self.last = now
        self.chunks += 1
        if self.kept < TEXT_CAP:
            room = TEXT_CAP - self.kept
            self.text.append(piece[:room])
            self.kept += min(room, len(piece))
            self.cut = self.cut or len(piece) > room
        else:
            self.cut = True


# Seconds a stream's body may take to end after its [DONE] event (or its error event) before the connection is
# given up on; a server ends it at once, an engine a moment later, when its generator is cleaned up.
DRAIN_S = 2.0


async def _drained(events: AsyncIterator[ServerSentEvent]) -> None:
    """The rest of a body read to its end, so that its connection goes back to the pool whole and is later
    closed in good order. A connection closed with the body's end unread (or still on its way) is reset: the
    server's next read fails with a ConnectionResetError, which a server logs as a traceback — evidence of our
    making in the server's log."""
    try:
        async with asyncio.timeout(DRAIN_S):
            async for _ in events:
                pass
    except (TimeoutError, httpx.HTTPError, SSEError):
        pass  # a body that does not end: the connection is closed with the response, as before


async def _stream(client: httpx.AsyncClient, path: str, body: dict[str, Any], api: str) -> _Stream:
    seen = _Stream()
    async with aconnect_sse(client, "POST", path, json=body) as source:
        response = source.response
        if response.status_code != 200:
            head = b""
            async for part in response.aiter_bytes():
                head += part
                if len(head) >= _ERROR_BODY_CAP:
                    break
            detail = head[:_ERROR_BODY_CAP].decode("utf-8", "replace").strip()
            raise _Failed(f"HTTP {response.status_code}: {detail}", response.status_code)
        events = source.aiter_sse()
        try:
            done = await _events(events, seen, api)
        except _Failed:
            await _drained(events)  # the server goes on to [DONE] after an error event
            raise
        if not done:
            raise _Failed("broken stream: it ended before [DONE]", 200)
        await _drained(events)
    return seen


async def _events(events: AsyncIterator[ServerSentEvent], seen: _Stream, api: str) -> bool:
    """The stream's events into `seen` up to [DONE] (True) or the body's end (False); a failure met on the way
    is `_Failed`. The iterator is left open after [DONE], for `_drained`."""
    async for event in events:
        now = time.perf_counter()
        if event.data.strip() == "[DONE]":
            return True
        if not event.data:
            continue
        try:
            chunk = json.loads(event.data)
            # A failure met mid-stream comes as an event: {"error": {...}} (vLLM), or the older
            # {"object": "error", "message": ...} (SGLang, vLLM before its ErrorInfo).
            if chunk.get("error") or chunk.get("object") == "error":
                raise _Failed(f"error in stream: {json.dumps(chunk.get('error') or chunk)[:200]}", 200)
            usage = chunk.get("usage")
            if isinstance(usage, dict):
                seen.completion_tokens = usage.get("completion_tokens", seen.completion_tokens)
                seen.prompt_tokens = usage.get("prompt_tokens", seen.prompt_tokens)
            for choice in chunk.get("choices") or ():
                if piece := _delta_text(api, choice):
                    seen.content(now, piece)
                seen.finish_reason = choice.get("finish_reason") or seen.finish_reason
        except (ValueError, AttributeError, TypeError) as exc:  # not JSON, or not the chunk's shape
            raise _Failed(f"bad event: {type(exc).__name__}: {event.data[:200]}", 200) from exc
    return False


async def _request(client: httpx.AsyncClient, path: str, body: dict[str, Any], api: str, index: int,
                   scheduled: float, t0: float, timeout: float, slot: asyncio.Semaphore | None) -> RequestRecord:
    async def timed() -> RequestRecord:
        sent = time.perf_counter()
        sent_s = sent - t0
        try:
            async with asyncio.timeout(timeout):  # the whole request; httpx's own timeouts are per read
                seen = await _stream(client, path, body, api)
        except _Failed as exc:
            return RequestRecord(index, scheduled, sent_s, False, str(exc), exc.status)
        except TimeoutError:
            return RequestRecord(index, scheduled, sent_s, False, f"timeout: not answered in full within {timeout:g} s")
        except httpx.TimeoutException as exc:
            return RequestRecord(index, scheduled, sent_s, False, f"timeout: {type(exc).__name__}: {exc}")
        except httpx.ConnectError as exc:
            return RequestRecord(index, scheduled, sent_s, False, f"cannot connect: {exc}")
        except httpx.HTTPError as exc:
            return RequestRecord(index, scheduled, sent_s, False, f"broken stream: {type(exc).__name__}: {exc}")
        except SSEError as exc:
            return RequestRecord(index, scheduled, sent_s, False, f"not an event stream: {exc}", 200)
        if seen.first is None or seen.last is None:
            return RequestRecord(index, scheduled, sent_s, False, "no content in the stream", 200)
        source: Literal["usage", "chunks"] = "usage" if isinstance(seen.completion_tokens, int) else "chunks"
        tokens = seen.completion_tokens if isinstance(seen.completion_tokens, int) else seen.chunks
        ttft, e2e = seen.first - sent, seen.last - sent
        return RequestRecord(
            index, scheduled, sent_s, True, status=200, ttft_s=ttft, e2e_s=e2e,
            tpot_s=(e2e - ttft) / (tokens - 1) if tokens > 1 else None, itl_s=tuple(seen.itl),
            output_tokens=tokens, tokens_from=source, prompt_tokens=seen.prompt_tokens, content_chunks=seen.chunks,
            finish_reason=seen.finish_reason, text="".join(seen.text) + (CUT_MARKER if seen.cut else ""),
            text_cut=seen.cut)

    if slot is None:
        return await timed()
    async with slot:
        return await timed()


async def run_pass_async(base_url: str, model: str, workload: Workload, timeout: float) -> PassResult:
    """Send `workload` to the server at `base_url` (`http://host:port`, no `/v1`) as model `model`:
    the warm-up requests first (under the same concurrency cap, one at a time without one; no schedule,
    not counted), then the measured ones on `schedule(workload)`. `timeout` bounds each request whole."""
    path = "/v1/chat/completions" if workload.api == "chat" else "/v1/completions"
    texts = workload.texts()
    cap = workload.max_concurrency
    # One connection a slot, all kept alive: the pool must never be what limits or delays a request.
    limits = httpx.Limits(max_connections=cap, max_keepalive_connections=cap)
    async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(timeout), limits=limits) as client:
        warm_slot = asyncio.Semaphore(cap or 1)
        t_warm = time.perf_counter()
        warm = await asyncio.gather(*(
            _request(client, path, workload.body(model, texts[k]), workload.api, -1 - k, 0.0, t_warm, timeout,
                     warm_slot) for k in range(workload.warmup)))
        slot = asyncio.Semaphore(cap) if cap is not None else None
        tasks: list[asyncio.Task[RequestRecord]] = []
        t0 = time.perf_counter()
        for i, due in enumerate(schedule(workload)):
            delay = t0 + due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            body = workload.body(model, texts[workload.warmup + i])
            tasks.append(asyncio.create_task(
                _request(client, path, body, workload.api, i, due, t0, timeout, slot)))
        records = tuple(await asyncio.gather(*tasks))
        wall = time.perf_counter() - t0
    return summarise(model, workload, records, sum(not r.ok for r in warm), wall)


def run_pass(base_url: str, model: str, workload: Workload, timeout: float) -> PassResult:
    """`run_pass_async` for callers without an event loop (the trial runs synchronously).

    Ctrl-C or SIGTERM during the pass cancels it (its requests end, its connections close) and is delivered
    under its own handler once the loop is closed (the CLI's: exit 130 or 143). Raised inside the loop, the
    exit would leave the loop's tasks holding an exception nobody retrieves, each printed at exit with its
    traceback."""
    main: list[asyncio.Task[PassResult]] = []
    stopped: list[int] = []

    def stop(signum: int) -> None:
        stopped.append(signum)
        if main:
            main[0].get_loop().call_soon_threadsafe(main[0].cancel)

    async def measured() -> PassResult:
        task = asyncio.current_task()
        assert task is not None  # a coroutine run by the loop is a task
        main.append(task)
        if stopped:  # a signal before the loop ran: nothing to measure
            raise asyncio.CancelledError
        return await run_pass_async(base_url, model, workload, timeout)

    result: PassResult | None = None
    with signals_held(stop) as pending:
        try:
            with asyncio.Runner() as runner:
                result = runner.run(measured())
        except asyncio.CancelledError:
            if not stopped:
                raise
    deliver(pending)
    if result is None:  # its handler let the signal pass, but the pass it stopped has no result
        raise SystemExit(128 + stopped[0])
    return result


def summarise(model: str, workload: Workload, records: tuple[RequestRecord, ...], warmup_errors: int,
              wall_s: float) -> PassResult:
    """The pass's totals and statistics from its records (pure, so a stored pass can be summarised again)."""
    ok = [r for r in records if r.ok]
    tokens = sum(r.output_tokens or 0 for r in ok)

    def per_s(count: float) -> float:
        return count / wall_s if wall_s > 0 else 0.0

    return PassResult(
        model, workload, records, warmup_errors, wall_s, len(ok), len(records) - len(ok), tokens,
        per_s(len(ok)), per_s(tokens),
        Summary.of([r.ttft_s for r in ok if r.ttft_s is not None]),
        Summary.of([r.tpot_s for r in ok if r.tpot_s is not None]),
        Summary.of([gap for r in ok for gap in r.itl_s]),
        Summary.of([r.e2e_s for r in ok if r.e2e_s is not None]))
