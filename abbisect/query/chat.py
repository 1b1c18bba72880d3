"""Stage 4 — query: the recipe's prompts to the OpenAI-compatible endpoints, at temperature 0, one request at a
time or `concurrency` in flight (some engine bugs only show with a batch), each prompt `repeat` times.

The server's liveness is checked between requests and while they are open: once it died, the prompt in
flight is named and the others are marked as not sent, instead of each waiting for the request timeout.
A request that fails while the server lives (HTTP 5xx, a broken stream) is an error on that output.

`timeouts.request` bounds a whole request, connect to last byte: a server that trickles its answer gets an
error at the deadline, not a wait per byte. An answer is read up to `answer_cap()` bytes and no further (a
server may answer gigabytes): the text decoded so far is kept, ended with a marker, and the output is `cut`.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from abbisect.recipe import Prompt, Sampling

if TYPE_CHECKING:  # loaded when a server is asked, not by every module that names a Completion
    import httpx


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
    cut: bool = False  # the answer was longer than answer_cap(): text is its beginning, ended by a marker
    copy: int = 0  # which copy of the prompt (query.repeat sends each several times)
    batch: int = 1  # how many requests were allowed in flight when it was sent
    pass_no: int = 0  # which pass over the prompts (trials.passes, or the batch-invariance check's passes)


# Bytes of an answer read at most (the response body, JSON included); ABBISECT_ANSWER_CAP_BYTES overrides.
DEFAULT_ANSWER_CAP = 1024 * 1024
CUT_MARK = "… [answer cut at {n} bytes by abbisect]"


def answer_cap() -> int:
    return int(os.environ.get("ABBISECT_ANSWER_CAP_BYTES", DEFAULT_ANSWER_CAP))


def late(timeout: float) -> str:
    return f"no complete answer within {timeout:g} s"


class _Late(Exception):
    """The request's deadline passed while its answer was still arriving."""


def _request(client: httpx.Client, method: str, url: str, deadline: float | None, cap: int,
             body: dict | None = None) -> tuple[int, bytes, bool]:
    """(status, body, cut): the response read until `deadline` (else `_Late`) and up to `cap` bytes; the
    rest is never read (the connection is closed with the response)."""
    chunks: list[bytes] = []
    size = 0
    # Connecting and waiting for the headers get what is left of the request's time; the body is read chunk
    # by chunk, each read bounded by the same and the deadline checked between chunks.
    left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
    with client.stream(method, url, json=body, timeout=left) as r:
        for chunk in r.iter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                return r.status_code, b"".join(chunks)[:cap], True
            if deadline is not None and time.monotonic() > deadline:
                raise _Late
        return r.status_code, b"".join(chunks), False


def _deadline(client: httpx.Client) -> float | None:
    """When a request started now must have its whole answer (the client's timeout is the request's)."""
    timeout = client.timeout.read
    return None if timeout is None else time.monotonic() + timeout


def served_model(client: httpx.Client, base_url: str, fallback: str) -> str:
    """The name the server expects in requests (vLLM rejects any other)."""
    import httpx

    try:
        status, raw, cut = _request(client, "GET", f"{base_url}/v1/models", _deadline(client), answer_cap())
        data = json.loads(raw)["data"] if status < 400 and not cut else None
        return data[0]["id"] if data else fallback
    except (_Late, httpx.HTTPError, KeyError, IndexError, ValueError, TypeError):
        return fallback


def ask(client: httpx.Client, base_url: str, api: str, model: str, prompt_id: str, prompt: Prompt,
        sampling: Sampling, messages: list[dict[str, str]] | None = None) -> Completion:
    """One request, bounded by the client's timeout from connect to last byte and read up to `answer_cap()`.

    `messages` replaces the single user message of a chat request (an eval's few-shot turns); the
    completions API sends `prompt.prompt` as it is.
    """
    import httpx

    body: dict = {"model": model, "max_tokens": sampling.max_tokens, "temperature": sampling.temperature,
                  "seed": sampling.seed, "top_p": sampling.top_p}
    if api == "chat":
        path = "/v1/chat/completions"
        body["messages"] = messages if messages is not None else [{"role": "user", "content": prompt.prompt}]
    else:
        path, body["prompt"] = "/v1/completions", prompt.prompt
    t0 = time.monotonic()
    try:
        status, raw, cut = _request(client, "POST", base_url + path, _deadline(client), answer_cap(), body)
        if status >= 400:
            detail = f"HTTP {status}: {raw[:200].decode(errors='replace')}"
            return Completion(prompt_id, prompt.prompt, "", None, None, None, round(time.monotonic() - t0, 4), detail)
        if cut:
            where = ("choices", 0, "message", "content") if api == "chat" else ("choices", 0, "text")
            text = partial_string(raw, where) + CUT_MARK.format(n=len(raw))
            return Completion(prompt_id, prompt.prompt, text, None, None, None, round(time.monotonic() - t0, 4),
                              cut=True)
        data = json.loads(raw)
        choice = data["choices"][0]
        text = choice["message"]["content"] if api == "chat" else choice["text"]
        usage = data.get("usage") or {}
        return Completion(prompt_id, prompt.prompt, text or "", choice.get("finish_reason"),
                          usage.get("prompt_tokens"), usage.get("completion_tokens"),
                          round(time.monotonic() - t0, 4))
    except _Late:
        return Completion(prompt_id, prompt.prompt, "", None, None, None, round(time.monotonic() - t0, 4),
                          late(client.timeout.read or 0.0))
    except (httpx.HTTPError, KeyError, IndexError, ValueError, TypeError) as exc:
        return Completion(prompt_id, prompt.prompt, "", None, None, None, round(time.monotonic() - t0, 4),
                          f"{type(exc).__name__}: {exc}")


_SPECIAL = re.compile(r'["\\]')  # what ends a run of plain characters in a JSON string
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_SURROGATE = re.compile("[\ud800-\udfff]")


def _string(doc: str, i: int) -> tuple[str, int, bool]:
    """The JSON string whose opening quote is just before `i`: (its text, the index after it, whether it
    ended before the document did). An escape cut in half is dropped."""
    parts: list[str] = []
    while (m := _SPECIAL.search(doc, i)) is not None:
        parts.append(doc[i:m.start()])
        i = m.start()
        if doc[i] == '"':
            return _joined(parts), i + 1, True
        esc = doc[i + 1:i + 2]
        if esc == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", doc[i + 2:i + 6]):
            parts.append(chr(int(doc[i + 2:i + 6], 16)))
            i += 6
        elif esc in _ESCAPES:
            parts.append(_ESCAPES[esc])
            i += 2
        else:
            return _joined(parts), len(doc), False  # the document ends inside the escape
    parts.append(doc[i:])
    return _joined(parts), len(doc), False


def _joined(parts: list[str]) -> str:
    """The parts as one text; an escaped surrogate pair (\\ud83d\\ude00) read as two halves is joined, and
    a first half whose second was cut off is dropped."""
    text = "".join(parts)
    if text and "\ud800" <= text[-1] <= "\udbff":
        text = text[:-1]
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace") if _SURROGATE.search(text) else text


def partial_string(raw: bytes, path: tuple[str | int, ...]) -> str:
    """The JSON string at `path` (keys and list indexes) of a JSON document cut short, as far as it was read;
    "" when the cut came before it. Everything else of the document is only walked over."""
    doc = codecs.getincrementaldecoder("utf-8")("replace").decode(raw)  # a character cut in half is dropped
    frames: list[list] = []  # per open container: its bracket and the key or index of the value being read
    expect_key = False
    i = 0
    while i < len(doc):
        c = doc[i]
        if c in "{[":
            frames.append([c, None if c == "{" else 0])
            expect_key = c == "{"
        elif c in "}]":
            if frames:
                frames.pop()
            expect_key = False
        elif c == "," and frames:
            if frames[-1][0] == "[":
                frames[-1][1] += 1
            else:
                expect_key = True
        elif c == '"':
            text, i, ended = _string(doc, i + 1)
            if expect_key and frames:
                frames[-1][1], expect_key = text, False
            elif tuple(f[1] for f in frames) == path:
                return text
            if not ended:
                return ""
            continue
        i += 1
    return ""


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
    outputs: tuple[Completion, ...]  # one per prompt and copy, in the order sent
    in_flight: str | None = None  # the prompt whose request was open when the server died
    died_after: str | None = None  # the last prompt answered before the server was seen dead


def query_all(base_url: str, api: str, prompts: list[tuple[str, Prompt]], sampling: Sampling, timeout: float,
              fallback_model: str, alive: Callable[[], bool] | None = None, concurrency: int = 1,
              repeat: int = 1, poll: float = 0.2) -> QueryRun:
    """Ask each (id, prompt), `repeat` times each, with up to `concurrency` requests open at once (1: in order,
    one after the other). `alive` says whether the server still runs."""
    import httpx

    alive = alive or (lambda: True)
    jobs = [(pid, p, copy) for copy in range(repeat) for pid, p in prompts]
    done: dict[int, Completion] = {}
    in_flight = died_after = None
    stalled = timeout + 1.0  # `ask` checks its deadline as bytes arrive; a read that stalls is given up here
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="query")
    running: dict[Future[Completion], tuple[int, float]] = {}
    dead = False
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    try:
        with httpx.Client(timeout=timeout, limits=limits) as client:
            model = served_model(client, base_url, fallback_model)
            todo = 0
            while todo < len(jobs) or running:
                while not dead and todo < len(jobs) and len(running) < concurrency:
                    if not alive():
                        dead = True
                        answered = [done[i] for i in sorted(done)]
                        died_after = answered[-1].prompt_id if answered else None
                        break
                    pid, p, copy = jobs[todo]
                    running[pool.submit(ask, client, base_url, api, model, pid, p, sampling)] = (todo, time.monotonic())
                    todo += 1
                if not running:
                    break
                finished, _ = wait(running, timeout=poll, return_when=FIRST_COMPLETED)
                for fut in finished:
                    index, _t0 = running.pop(fut)
                    out = fut.result()
                    done[index] = out
                    if out.error and not dead and _dies_within(alive, 0.5):
                        in_flight, dead = out.prompt_id, True
                now = time.monotonic()
                for fut, (index, t0) in list(running.items()):
                    pid, p, _copy = jobs[index]
                    if now - t0 > stalled:  # left to end by its read timeout, unheard, on a pool of its own
                        running.pop(fut)
                        done[index] = Completion(pid, p.prompt, "", None, None, None, round(now - t0, 4), late(timeout))
                        pool.shutdown(wait=False)
                        pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="query")
                    elif not alive():  # a dead server's socket usually fails the request at once
                        try:
                            done[index] = fut.result(timeout=1.0)
                        except FutureTimeout:
                            done[index] = Completion(pid, p.prompt, "", None, None, None, round(now - t0, 4),
                                                     "the server exited during the request")
                        running.pop(fut)
                        if in_flight is None:
                            in_flight = pid
                        dead = True
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    outputs = []
    for index, (pid, p, copy) in enumerate(jobs):
        out = done.get(index) or Completion(pid, p.prompt, "", None, None, None, 0.0, NOT_SENT)
        outputs.append(replace(out, copy=copy, batch=concurrency))
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


def tag(o: Completion) -> str:
    """An output named by its prompt, and by its copy, pass and requests in flight when there are several
    (`p2`, `p2 copy 3`, `p2 at 4 in flight`)."""
    return o.prompt_id + (f" copy {o.copy + 1}" if o.copy else "") + (f" pass {o.pass_no + 1}" if o.pass_no else "") \
        + (f" at {o.batch} in flight" if o.batch > 1 else "")


def label(pid: str, prompt: Prompt | None) -> str:
    """`p2 [long_context]`: a prompt named with its tags, for reasons and reports."""
    return f"{pid} [{', '.join(prompt.tags)}]" if prompt is not None and prompt.tags else pid
