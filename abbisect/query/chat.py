"""Stage 4 — query: one request at a time to the OpenAI-compatible endpoints, at temperature 0.

The server's liveness is checked between requests and while one is open: once it died, the prompt in
flight is named and the others are marked as not sent, instead of each waiting for the request timeout.
A request that fails while the server lives (HTTP 5xx, a broken stream) is an error on that output.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import httpx

from abbisect.recipe import Prompt, Sampling


@dataclass(frozen=True)
class Completion:
    prompt_id: str
    prompt: str
    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float
    error: str | None = None


def served_model(client: httpx.Client, base_url: str, fallback: str) -> str:
    """The name the server expects in requests (vLLM rejects any other)."""
    try:
        data = client.get(f"{base_url}/v1/models").json()["data"]
        return data[0]["id"] if data else fallback
    except (httpx.HTTPError, KeyError, IndexError, ValueError, TypeError):
        return fallback


def ask(client: httpx.Client, base_url: str, api: str, model: str, prompt_id: str, prompt: Prompt,
        sampling: Sampling) -> Completion:
    body: dict = {"model": model, "max_tokens": sampling.max_tokens, "temperature": sampling.temperature,
                  "seed": sampling.seed, "top_p": sampling.top_p}
    if api == "chat":
        path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": prompt.prompt}]
    else:
        path, body["prompt"] = "/v1/completions", prompt.prompt
    t0 = time.monotonic()
    try:
        r = client.post(base_url + path, json=body)
        r.raise_for_status()
        data = r.json()
        choice = data["choices"][0]
        text = choice["message"]["content"] if api == "chat" else choice["text"]
        usage = data.get("usage") or {}
        return Completion(prompt_id, prompt.prompt, text or "", choice.get("finish_reason"),
                          usage.get("prompt_tokens"), usage.get("completion_tokens"),
                          round(time.monotonic() - t0, 4))
    except (httpx.HTTPError, KeyError, IndexError, ValueError, TypeError) as exc:
        detail = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, httpx.HTTPStatusError):
            detail = f"HTTP {exc.response.status_code}: {exc.response.text[:200]}"
        return Completion(prompt_id, prompt.prompt, "", None, None, None, round(time.monotonic() - t0, 4), detail)


def _dies_within(alive: Callable[[], bool], seconds: float) -> bool:
    """A request broken by a dying server returns a moment before the process is seen exited."""
    deadline = time.monotonic() + seconds
    while alive():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


NOT_SENT = "not sent: the server had exited"


@dataclass(frozen=True)
class QueryRun:
    outputs: tuple[Completion, ...]  # one per prompt, in the order sent
    in_flight: str | None = None  # the prompt whose request was open when the server died
    died_after: str | None = None  # the last prompt answered before the server was seen dead


def query_all(base_url: str, api: str, prompts: list[tuple[str, Prompt]], sampling: Sampling, timeout: float,
              fallback_model: str, alive: Callable[[], bool] | None = None,
              between: Callable[[], None] | None = None, poll: float = 0.2) -> QueryRun:
    """Ask each (id, prompt) in order. `alive` says whether the server still runs; `between` is called
    after each request (the launch stage uses it to note the server's process tree)."""
    alive = alive or (lambda: True)
    outputs: list[Completion] = []
    in_flight = died_after = None
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="query")
    try:
        with httpx.Client(timeout=timeout) as client:
            model = served_model(client, base_url, fallback_model)
            for pid, p in prompts:
                if not alive():
                    died_after = outputs[-1].prompt_id if outputs else None
                    break
                fut = pool.submit(ask, client, base_url, api, model, pid, p, sampling)
                t0 = time.monotonic()
                while True:
                    try:
                        done = fut.result(timeout=poll)
                        break
                    except FutureTimeout:
                        if alive():
                            continue
                        try:  # a dead server's socket usually fails the request at once
                            done = fut.result(timeout=1.0)
                        except FutureTimeout:
                            done = Completion(pid, p.prompt, "", None, None, None,
                                              round(time.monotonic() - t0, 4), "the server exited during the request")
                        break
                outputs.append(done)
                if between:
                    between()
                if done.error and _dies_within(alive, 0.5):
                    in_flight = pid
                    break
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    sent = {o.prompt_id for o in outputs}
    outputs += [Completion(pid, p.prompt, "", None, None, None, 0.0, NOT_SENT) for pid, p in prompts if pid not in sent]
    return QueryRun(tuple(outputs), in_flight, died_after)


def ordered(prompts: list[Prompt], order: str = "as_written") -> list[tuple[str, Prompt]]:
    """(id, prompt) in the order to send them; ids (given, else p<index as written>) do not depend on the
    order. `by_tag`: untagged prompts first, then the prompts of each first tag, tags in order of appearance."""
    pairs = [(p.id or f"p{n}", p) for n, p in enumerate(prompts)]
    if order != "by_tag":
        return pairs
    groups: dict[str, list[tuple[str, Prompt]]] = {"": []}
    for pid, p in pairs:
        groups.setdefault(p.tags[0] if p.tags else "", []).append((pid, p))
    return [pair for group in groups.values() for pair in group]


def label(pid: str, prompt: Prompt | None) -> str:
    """`p2 [long_context]`: a prompt named with its tags, for reasons and reports."""
    return f"{pid} [{', '.join(prompt.tags)}]" if prompt is not None and prompt.tags else pid
