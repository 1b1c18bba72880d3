"""Stage 4 — query: one request at a time to the OpenAI-compatible endpoints, at temperature 0."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

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

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Completion:
        return cls(**d)


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


def query_all(base_url: str, api: str, prompts: list[Prompt], sampling: Sampling, timeout: float,
              fallback_model: str) -> list[Completion]:
    with httpx.Client(timeout=timeout) as client:
        model = served_model(client, base_url, fallback_model)
        return [ask(client, base_url, api, model, p.id or f"p{n}", p, sampling) for n, p in enumerate(prompts)]
