"""The `numerics:` section of a recipe: a verdict on the sides' token log-probabilities, not on their text.

Each launch scores fixed texts teacher-forced (the log-probability of every token of the text after the tokens
before it: completions with `echo` and `logprobs`), first one request at a time and then `concurrency` at once
(the two passes of one launch measure its own noise floor), and generates a greedy continuation of each of the
recipe's prompts with its top-k. Two sides differ when the mean absolute difference of the texts' token
log-probabilities (nats a token) is surely above the noise floor and at least `min_effect`
(abbisect/stats/logprobs.py).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Plain English of the kind any small model scores (and the toy engine's corpus: its log-probabilities there are
# the model's own, not a floor).
TEXTS = (
    "the sea is wide and blue , and waves roll onto the sand at dawn .",
    "a good test fails when the code is wrong and passes when it is right .",
    "copper is used for electrical wires , for pipes and for coins .",
    "the sun is a star at the centre of our solar system .",
    "plants make food from light , water and air by photosynthesis .",
    "the capital of japan is tokyo , a large city with fast trains .",
    "a hash table stores values under keys and finds them quickly by hashing .",
    "water boils at one hundred degrees celsius at sea level .",
)
MIN_EFFECT = 0.01  # nats a token: bf16 noise between two kernels of one model is below it, a dropped scale far above
MAX_TEXT_CHARS = 20_000
MAX_TEXTS = 1_000


class Numerics(BaseModel):
    """The `numerics:` section (recipes/README.md, "Numerics")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    texts: tuple[str, ...] = Field(TEXTS, min_length=1, max_length=MAX_TEXTS, description="texts scored "
                                   "teacher-forced (default: eight short English sentences)")
    continuations: bool = Field(True, description="also a greedy continuation of each of the recipe's prompts, "
                                "with its top-k (sampling.max_tokens tokens)")
    top_k: int = Field(5, ge=1, le=20, description="alternatives kept at every position")
    min_effect: float = Field(MIN_EFFECT, gt=0, description="the smallest mean absolute difference of the "
                              "texts' token log-probabilities that matters, in nats a token")
    concurrency: int = Field(8, ge=1, le=256, description="requests in flight in the batched pass")
    deterministic: bool = Field(True, description="one launch of a commit gives its log-probabilities (an "
                                "A-vs-A says whether it does); false: launches are repeated as for the other "
                                "statistical verdicts, up to max_launches")
    max_launches: int = Field(6, ge=1, le=100, description="launches of a commit at most while not sure "
                              "(deterministic: false)")

    @field_validator("texts")
    @classmethod
    def _texts(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for n, t in enumerate(v, start=1):
            if len(t.split()) < 2:
                raise ValueError(f"text {n} has fewer than two words: nothing to score after its first token")
            if len(t) > MAX_TEXT_CHARS:
                raise ValueError(f"text {n} is longer than {MAX_TEXT_CHARS:,} characters")
        return v
