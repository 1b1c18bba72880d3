"""The pinned load of a performance pass, as data (`Workload`): what abbisect's load generator (load.py) sends,
and what a trial's result records of it (query/measure.py `PerfRun`). Apart from the client, so that a result
names it without loading the client's HTTP libraries.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

# Frequent short English words: each is one token, with its leading space, in the BPE vocabularies of
# the Llama, Qwen, Mistral and GPT families, so `input_words` words make about `input_words` prompt
# tokens (plus the chat template's own dozen or so under the chat API). abbisect holds no tokenizer of
# the model under test, so this is an approximation, the same on both sides.
_WORDS = (
    "the of and to in is that it was for on are as with his they at be this from have or one had by but "
    "not what all were we when your can said there use an each which she do how their if will up other "
    "about out many then them these so some her would make like him into time has look two more write go "
    "see number no way could people my than first water been call who oil its now find long down day did "
    "get come made may part over new sound take only little work know place year live me back give most "
    "very after thing our just name good sentence man think say great where help through much before line "
    "right too mean old any same tell boy follow came want show also around form three small set put end "
    "does another well large must big even such because turn here why ask went men read need land different "
    "home us move try kind hand picture again change off play spell air away animal house point page letter "
    "mother answer found study still learn should world high every near add food between own below country "
    "plant last school father keep tree never start city earth eye light thought head under story saw left "
    "few while along might close something seem next hard open example begin life always those both paper "
    "together got group often run important until children side feet car mile night walk white sea began "
    "grow took river four carry state once book hear stop without second later miss idea enough eat face "
    "watch far real almost let above girl sometimes mountain cut young talk soon list song being leave family"
)
VOCABULARY = tuple(_WORDS.split())


@dataclass(frozen=True)
class Workload:
    """The pinned load of one pass: every field that shapes what the server sees, so that two commits
    are measured under the same load and a recorded pass can be run again as it was.

    Prompts are the given `prompts` texts, or, with `input_words`, synthetic prompts of that many words
    drawn from `VOCABULARY` by a `seed`ed generator (about one token a word). Request k of the pass
    (warm-up first, then the measured ones) gets text k, cycling over given texts; synthetic texts are
    all different, so a prefix cache cannot answer one from another.

    Load: `max_concurrency` caps the requests open at once; `request_rate` (requests/s) launches them at
    Poisson arrivals (exponential gaps from `random.Random(seed)`) whether or not earlier ones finished,
    as `vllm bench serve --request-rate` does; with both, arrivals wait for a free slot. At least one is
    needed: an unbounded burst is rarely the load a regression was seen under.

    `ignore_eos` (and `min_tokens` when set) make both sides generate the same `max_tokens` tokens, so
    throughput compares equal work even when one commit stops earlier; vLLM and SGLang both accept them
    in the request body. Temperature is 0 everywhere in abbisect.
    """

    requests: int
    prompts: tuple[str, ...] = ()
    input_words: int | None = None
    max_concurrency: int | None = None
    request_rate: float | None = None
    warmup: int = 0
    max_tokens: int = 128
    min_tokens: int | None = None
    ignore_eos: bool = True
    api: Literal["chat", "completions"] = "chat"
    seed: int = 0
    temperature: float = 0.0

    def __post_init__(self) -> None:
        if self.requests < 1:
            raise ValueError("a workload needs at least one measured request")
        if bool(self.prompts) == (self.input_words is not None):
            raise ValueError("give either prompts or input_words")
        if self.input_words is not None and self.input_words < 1:
            raise ValueError("input_words must be at least 1")
        if self.max_concurrency is None and self.request_rate is None:
            raise ValueError("give max_concurrency, request_rate or both")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if self.request_rate is not None and not self.request_rate > 0:
            raise ValueError("request_rate must be positive")
        if self.warmup < 0 or self.max_tokens < 1:
            raise ValueError("warmup must be >= 0 and max_tokens >= 1")
        if self.api not in ("chat", "completions"):
            raise ValueError(f"api must be chat or completions, not {self.api!r}")

    def texts(self) -> list[str]:
        """The prompt of each request of the pass, warm-up requests first."""
        total = self.warmup + self.requests
        if self.input_words is None:
            return [self.prompts[k % len(self.prompts)] for k in range(total)]
        rng = random.Random(f"prompts:{self.seed}")
        return [" ".join(rng.choices(VOCABULARY, k=self.input_words)) for _ in range(total)]

    def body(self, model: str, text: str) -> dict[str, Any]:
        """The JSON body of one request. `max_tokens`, not chat's newer `max_completion_tokens`: a bisect
        reaches old engine commits, and every one of them knows `max_tokens`."""
        body: dict[str, Any] = {"model": model, "max_tokens": self.max_tokens, "temperature": self.temperature,
                                "stream": True, "stream_options": {"include_usage": True}}
        if self.ignore_eos:
            body["ignore_eos"] = True
        if self.min_tokens is not None:
            body["min_tokens"] = self.min_tokens
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        return body
