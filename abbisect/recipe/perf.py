"""The `perf:` section of a recipe: a pinned load, how often it is measured, and which metric is the verdict.

Every commit gets the same load from abbisect's own client (abbisect/query/load.py): the prompts (synthetic,
`input_words` words each from a seed, or the recipe's own prompts), `requests` measured requests after
`warmup`, at most `concurrency` in flight and/or Poisson arrivals at `request_rate`, `sampling.max_tokens`
each with `ignore_eos` so both sides generate the same tokens. A launch measures `passes` passes; a commit gets
`launches` launches at first and more, a launch at a time, while its verdict is not sure, up to `max_launches`
launches. Each pass gives one value of every metric (a pass whose requests failed beyond `error_threshold` gives none:
the trial is request_errors); `metric` is the one that decides, compared with
abbisect/stats/samples.py (Pinpoint's min(KS, MWU) with a bootstrap interval of the change of medians and a
minimum effect).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from abbisect.recipe.strict import derived

# metric → (what it is, unit, whether higher is better). Every metric is one value per pass: a throughput
# over the pass, or a percentile over the pass's requests.
METRICS: dict[str, tuple[str, str, bool]] = {
    "output_throughput": ("output tokens per second", "tok/s", True),
    "request_throughput": ("requests per second", "req/s", True),
    "ttft_median": ("median time to first token", "ms", False),
    "ttft_p90": ("p90 time to first token", "ms", False),
    "ttft_p99": ("p99 time to first token", "ms", False),
    "tpot_median": ("median time per output token", "ms", False),
    "itl_median": ("median inter-token latency", "ms", False),
    "e2e_median": ("median end-to-end latency", "ms", False),
    "e2e_p90": ("p90 end-to-end latency", "ms", False),
    "e2e_p99": ("p99 end-to-end latency", "ms", False),
}
Metric = Literal["output_throughput", "request_throughput", "ttft_median", "ttft_p90", "ttft_p99", "tpot_median",
                 "itl_median", "e2e_median", "e2e_p90", "e2e_p99"]
SHOWN: tuple[Metric, ...] = ("output_throughput", "request_throughput", "ttft_median", "ttft_p99", "tpot_median",
                             "itl_median", "e2e_median", "e2e_p99")


class Perf(BaseModel):
    """A performance verdict (the module's docstring says how a commit is measured)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: Metric = Field("output_throughput", description="the metric that decides: a throughput (higher is "
                           "better) or a latency percentile (lower is better)")
    requests: int = Field(32, ge=1, le=100_000, description="measured requests a pass")
    warmup: int = Field(4, ge=0, le=10_000, description="requests before each pass, not measured")
    concurrency: int | None = Field(8, ge=1, le=4096, description="requests in flight at most")
    request_rate: float | None = Field(None, gt=0, description="Poisson arrivals per second (seeded); with "
                                       "concurrency, arrivals wait for a free slot")
    input_words: int | None = Field(64, ge=1, le=100_000, description="synthetic prompts of this many words "
                                    "(about a token each); null: the recipe's prompts")
    max_tokens: int = derived("sampling.max_tokens", 128, ge=1)  # output tokens a request
    ignore_eos: bool = Field(True, description="generate max_tokens whatever the model says (vLLM and SGLang "
                             "accept it), so both sides do the same work")
    seed: int = derived("sampling.seed", 0)  # the prompts' and the arrivals' seed: the same load on every side
    passes: int = Field(5, ge=1, le=1000, description="passes a launch")
    launches: int = Field(2, ge=1, le=100, description="launches a commit at first")
    max_launches: int = Field(8, ge=1, le=1000, description="launches a commit at most while not sure")
    min_effect: float = Field(0.03, gt=0, lt=1, description="the smallest relative change that matters")
    alpha: float = derived("verdict.alpha", 0.01)  # Pinpoint's
    error_threshold: float = Field(0.05, ge=0, lt=1, description="a pass whose failed requests exceed this fraction "
                                   "of its measured requests is a failed pass: it gives no value, and the trial "
                                   "is request_errors")

    @model_validator(mode="after")
    def _load_given(self) -> Perf:
        if self.concurrency is None and self.request_rate is None:
            raise ValueError("give perf.concurrency, perf.request_rate or both (an unbounded burst is rarely "
                             "the load a regression was seen under)")
        if self.max_launches < self.launches:
            raise ValueError(f"perf.max_launches {self.max_launches} is below perf.launches {self.launches}")
        if self.max_passes < 3:
            raise ValueError(f"perf.max_launches × perf.passes is {self.max_passes}: a commit needs 3 passes at least "
                             "to be compared")
        return self

    @property
    def first_passes(self) -> int:
        return self.passes * self.launches

    @property
    def max_passes(self) -> int:
        """Passes a commit gets at most (max_launches launches of `passes`)."""
        return self.max_launches * self.passes

    @property
    def higher_is_better(self) -> bool:
        return better(self.metric)


def unit(metric: str) -> str:
    return METRICS[metric][1]


def better(metric: str) -> bool:
    """True when a higher value of `metric` is better."""
    return METRICS[metric][2]
