"""Stage 4 — query, for numerics: each text's token log-probabilities, teacher-forced, and a greedy continuation
of each prompt with its top-k, through the engine's OpenAI-compatible endpoints (the recipe's
`numerics:` section, abbisect/recipe/numerics.py).

Teacher-forced: `/v1/completions` with the text as the prompt, `echo: true`, `logprobs: k`, `max_tokens: 1` — the
response's `logprobs` lists the prompt's own tokens first (the first with no log-probability: nothing precedes
it), then the generated ones, which are dropped (`usage.completion_tokens` of them). vLLM and SGLang both answer
it so: vLLM's prompt log-probabilities default to `logprobs` when `echo` is on (it also takes `prompt_logprobs`
itself); SGLang's OpenAI server sets `logprob_start_len` 0 for echo with logprobs, logging that its native
`/generate` (`return_logprob`, `logprob_start_len`, `top_logprobs_num`) is the intended way. Echo is the one
request both OpenAI servers answer. Continuations: the recipe's api — chat with `logprobs:
true, top_logprobs: k` (`choices[0].logprobs.content`), or completions with `logprobs: k`.

A failed request is an error on its text, never a score. What a trial keeps is the `NumericsRun`
(TrialResult.extras.numerics).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from abbisect.recipe.numerics import Numerics
from abbisect.score.logprobs import NumericsRun, Scored, Token


def _tops(entry: Any) -> tuple[tuple[str, float], ...]:
    """A position's alternatives, best first: a completions dict {token: logprob} or a chat list of objects."""
    if isinstance(entry, dict):
        pairs = [(str(t), float(v)) for t, v in entry.items() if v is not None]
    elif isinstance(entry, list):
        pairs = [(str(e.get("token", "")), float(e["logprob"])) for e in entry
                 if isinstance(e, dict) and e.get("logprob") is not None]
    else:
        return ()
    return tuple(sorted(pairs, key=lambda p: -p[1]))


def completion_tokens(body: dict) -> list[Token]:
    """The tokens of a completions response's `logprobs` (tokens, token_logprobs, top_logprobs)."""
    lp = body["choices"][0].get("logprobs") or {}
    toks, lps, tops = lp.get("tokens") or [], lp.get("token_logprobs") or [], lp.get("top_logprobs") or []
    if len(lps) != len(toks):
        raise ValueError("the response's logprobs hold a different number of tokens and log-probabilities")
    return [Token(str(t), None if v is None else float(v), _tops(tops[i]) if i < len(tops) else ())
            for i, (t, v) in enumerate(zip(toks, lps))]


def chat_tokens(body: dict) -> list[Token]:
    """The tokens of a chat response's `logprobs.content`."""
    content = (body["choices"][0].get("logprobs") or {}).get("content")
    if content is None:
        raise ValueError("the response has no logprobs.content (does the server return chat log-probabilities?)")
    return [Token(str(e.get("token", "")), float(e["logprob"]), _tops(e.get("top_logprobs"))) for e in content]


def prompt_part(body: dict, tokens: list[Token]) -> list[Token]:
    """An echoed completion's own prompt tokens: the generated ones (`usage.completion_tokens`) dropped."""
    generated = int((body.get("usage") or {}).get("completion_tokens") or 0)
    return tokens[:len(tokens) - generated] if generated else tokens


# What a failed request raises: the transport or the HTTP status, or a response without what was asked.
FAILED = (httpx.HTTPError, ValueError, KeyError, TypeError, IndexError)
Post = Callable[[str, dict], dict]  # path, JSON body → the response's JSON (raises on a failed request)


def score_text(post: Post, model: str, n: int, text: str, k: int, seed: int) -> Scored:
    sid = f"text-{n + 1:03d}"
    try:
        body = post("/v1/completions", {"model": model, "prompt": text, "max_tokens": 1, "temperature": 0.0,
                                        "seed": seed, "logprobs": k, "echo": True})
        tokens = prompt_part(body, completion_tokens(body))
        if len(tokens) < 2 or any(t.logprob is None for t in tokens[1:]):
            raise ValueError("the response did not echo the text's tokens with their log-probabilities "
                             "(echo and logprobs)")
        return Scored(sid, "text", text, tuple(tokens[1:]))
    except FAILED as exc:  # a failed request is an error on its text
        return Scored(sid, "text", text, error=f"{type(exc).__name__}: {exc}"[:500])


def continue_prompt(post: Post, model: str, n: int, prompt: str, k: int, api: str, max_tokens: int,
                    seed: int) -> Scored:
    sid = f"prompt-{n + 1:03d}"
    base = {"model": model, "max_tokens": max_tokens, "temperature": 0.0, "seed": seed}
    try:
        if api == "chat":
            body = post("/v1/chat/completions", {**base, "messages": [{"role": "user", "content": prompt}],
                                                 "logprobs": True, "top_logprobs": k})
            tokens = chat_tokens(body)
        else:
            body = post("/v1/completions", {**base, "prompt": prompt, "logprobs": k})
            tokens = completion_tokens(body)
        return Scored(sid, "continuation", prompt, tuple(tokens))
    except FAILED as exc:
        return Scored(sid, "continuation", prompt, error=f"{type(exc).__name__}: {exc}"[:500])


def ask_numerics(base_url: str, model: str, section: Numerics, prompts: Sequence[str], api: str, max_tokens: int,
                 seed: int, timeout: float, say: Callable[[str], None] = lambda _: None) -> NumericsRun:
    """The section's texts scored one at a time and then `concurrency` at once, and the prompts continued."""
    with httpx.Client(base_url=base_url, timeout=timeout) as client:
        def post(path: str, body: dict) -> dict:
            r = client.post(path, json=body)
            r.raise_for_status()
            return r.json()

        k = section.top_k
        texts = tuple(score_text(post, model, n, t, k, seed) for n, t in enumerate(section.texts))
        say(f"numerics: {len(texts)} text(s) scored one at a time")
        with ThreadPoolExecutor(max_workers=section.concurrency, thread_name_prefix="logprobs") as pool:
            batched = tuple(pool.map(lambda nt: score_text(post, model, nt[0], nt[1], k, seed),
                                     enumerate(section.texts)))
        conts = tuple(continue_prompt(post, model, n, p, k, api, max_tokens, seed) for n, p in enumerate(prompts)) \
            if section.continuations else ()
    run = NumericsRun(texts, batched, conts)
    say(f"numerics: {len(texts)} text(s) at {section.concurrency} at once, {len(conts)} continuation(s)"
        + (f", {run.n_errors} failed request(s)" if run.n_errors else ""))
    return run
