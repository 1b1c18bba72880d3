"""The `eval:` section of a recipe and the items of an eval set: what is asked, how answers are read, and
what difference the recipe cares about (the power plan checks it can be seen before anything runs).

An eval set is a JSONL file, one item a line:

    {"id": "gsm-17", "prompt": "…", "answer": "18", "extract": "last_number", "kind": "arith"}
    {"id": "mmlu-3", "prompt": "…", "choices": ["Paris", "Rome", "Oslo", "Bern"], "answer": "A"}

`prompt` (the user message, or the completions prompt) or `messages` (a chat, the last one the user's);
`answer` (for choices: the letter, the 0-based index or the choice's text); `extract` (abbisect/score/
answers.py: "last_number", "regex:P" or "choice"; default "choice" with choices, else "last_number");
`kind` (a label for reports) and `target` (what a few-shot example answers, default `answer`) are optional.
Items are paired across sides by `id`, so ids are unique. `builtin:arith_facts` is the set shipped with
abbisect (abbisect/builtin/evals/).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from abbisect.recipe.strict import derived
from abbisect.score.answers import check_rule, reference

if TYPE_CHECKING:  # the plan is built lazily (scipy), only for a recipe with an eval
    from abbisect.stats.power import PowerPlan

BUILTIN_EVALS = Path(__file__).resolve().parents[1] / "builtin" / "evals"  # data files, not code
MAX_EVAL_ITEMS = 100_000
MAX_EVAL_FILE_BYTES = 200 << 20
MAX_ITEM_CHARS = 200_000

# The defaults of the section, each a decision with a reason:
MIN_DROP = 0.03  # 3 points: smaller than vLLM #50435's −5, larger than SGLang's 2-point nightly tolerance
FLIP_RATE = 0.01  # an A-vs-A of a batched engine flips about 1 in 100 items (temperature 0 is not batch-invariant)
CONCURRENCY = 8  # requests in flight: the batched path is where numeric regressions live
ERROR_THRESHOLD = 0.05  # a few timeouts on a loaded host must not void 1,319 items; more says the side failed
EXPECTED_ACCURACY = 0.8  # the plan's assumption when the recipe gives none (and no A-vs-A measured one)


class _EvalModel(BaseModel):
    """Strict as the recipe's models are (abbisect/recipe/strict.py), but an item's text may be longer."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_max_length=MAX_ITEM_CHARS)


class Message(_EvalModel):
    role: Literal["system", "user", "assistant"]
    content: str


class EvalItem(_EvalModel):
    """One item of an eval set (the module's docstring has the format)."""

    id: str = Field(min_length=1, max_length=200)
    prompt: str | None = None
    messages: tuple[Message, ...] | None = None
    answer: str
    choices: tuple[str, ...] | None = Field(None, min_length=2, max_length=26)
    extract: str = "last_number"
    kind: str | None = None
    target: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if isinstance(data.get("answer"), int | float) and not isinstance(data.get("answer"), bool):
            data["answer"] = str(data["answer"])
        if isinstance(data.get("id"), int):  # lm-evaluation-harness numbers its docs
            data["id"] = str(data["id"])
        if "extract" not in data:
            data["extract"] = "choice" if data.get("choices") else "last_number"
        return data

    @field_validator("extract")
    @classmethod
    def _rule(cls, v: str) -> str:
        return check_rule(v)

    @model_validator(mode="after")
    def _consistent(self) -> EvalItem:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give prompt (a string) or messages (a chat), not both")
        if self.messages is not None and (not self.messages or self.messages[-1].role != "user"):
            raise ValueError("messages must end with the user's")
        if self.choices is not None and self.extract != "choice":
            raise ValueError(f"choices go with extract 'choice', not {self.extract!r}")
        reference(self)  # an answer its rule cannot compare with is a ValueError now, not a wrong item later
        return self

    @property
    def text(self) -> str:
        """The question as one text: the prompt (or the user's last message) and the choices, lettered."""
        base = self.prompt if self.prompt is not None else (self.messages or ())[-1].content
        if not self.choices:
            return base
        lines = "\n".join(f"{chr(65 + i)}. {c}" for i, c in enumerate(self.choices))
        return f"{base}\n{lines}\nAnswer:"

    @property
    def demonstration(self) -> str:
        """What this item answers when it is a few-shot example."""
        if self.target is not None:
            return self.target
        return reference(self) if self.extract == "choice" else self.answer


def parse_items(text: str, what: str) -> tuple[EvalItem, ...]:
    """The items of an eval set's JSONL text; a ValueError names the line and the key, never the text."""
    items: list[EvalItem] = []
    seen: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if len(items) >= MAX_EVAL_ITEMS:
            raise ValueError(f"{what}: more than {MAX_EVAL_ITEMS:,} items")
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{what}: line {n} is not JSON ({getattr(exc, 'msg', 'invalid')})") from None
        try:
            item = EvalItem.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise ValueError(f"{what}: line {n}: {(loc + ': ') if loc else ''}"
                             f"{err['msg'].removeprefix('Value error, ')}") from None
        if item.id in seen:
            raise ValueError(f"{what}: line {n}: id {item.id!r} again (first on line {seen[item.id]}): items are "
                             "paired across sides by id")
        seen[item.id] = n
        items.append(item)
    if not items:
        raise ValueError(f"{what}: no items")
    return tuple(items)


def builtin_sets() -> list[str]:
    return sorted(f"builtin:{p.stem}" for p in BUILTIN_EVALS.glob("*.jsonl"))


def set_path(spec: str, base: Path) -> Path:
    """The file an eval set names: builtin:NAME (shipped with abbisect) or a .jsonl path from `base`."""
    if spec.startswith("builtin:"):
        path = BUILTIN_EVALS / f"{spec.removeprefix('builtin:')}.jsonl"
        if not path.is_file():
            raise ValueError(f"no built-in eval set {spec!r} (built in: {', '.join(builtin_sets())})")
        return path
    path = (base / spec).expanduser().resolve()
    if path.suffix != ".jsonl":
        raise ValueError(f"{path.name} is not an eval set (give a .jsonl file of items, or builtin:NAME)")
    if not path.is_file():
        raise ValueError(f"no such file {path}")
    return path


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Eval(_EvalModel):
    """The `eval:` section: the set, how it is sent, and what difference matters (recipes/README.md)."""

    set: str = Field(description="a .jsonl file of items (from the recipe's folder) or builtin:NAME "
                     "(builtin:arith_facts)")
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$", description="the set's content hash: filled in "
                               "when the recipe is loaded; given, the set must still match it")
    n: int | None = Field(None, ge=1, description="items sampled (seeded); default every item of the set")
    seed: int = derived("sampling.seed", 0)  # which items are sampled, and each item's few-shot examples
    fewshot: int = Field(0, ge=0, le=64, description="examples prepended to each item, from the set but never "
                         "the item itself")
    api: Literal["chat", "completions"] | None = Field(None, description="default: the recipe's api")
    max_tokens: int = derived("sampling.max_tokens", 128, gt=0)
    concurrency: int = Field(CONCURRENCY, ge=1, le=1024, description="requests in flight")
    min_effect: float = Field(MIN_DROP, gt=0, lt=1, description="the smallest accuracy drop that matters")
    alpha: float = derived("verdict.alpha", 0.05)
    power: float = Field(0.8, ge=0, lt=1, description="the power the plan asks at min_effect; 0: no plan")
    expected_accuracy: float | None = Field(None, gt=0, le=1, description=f"for the power plan; default "
                                            f"{EXPECTED_ACCURACY}")
    flip_rate: float = Field(FLIP_RATE, ge=0, lt=1, description="items an A-vs-A flips, as a fraction")
    error_threshold: float = Field(ERROR_THRESHOLD, ge=0, le=1, description="a side with more failed "
                                   "requests than this fraction of its items is request_errors")

    @field_validator("set")
    @classmethod
    def _set(cls, v: str) -> str:
        if not v.strip() or v.startswith("-"):
            raise ValueError("not a path or builtin:NAME")
        return v

    def items_asked(self, size: int) -> int:
        return min(self.n, size) if self.n is not None else size

    def plan(self, size: int, accuracy: float | None = None) -> PowerPlan:
        """The power plan of this section on a set of `size` items (`accuracy`: an A-vs-A's, when known)."""
        from abbisect.stats.power import power_plan

        return power_plan(self.items_asked(size), accuracy or self.expected_accuracy or EXPECTED_ACCURACY,
                          self.min_effect, flip_rate=self.flip_rate, alpha=self.alpha, power=self.power)

    def check_plan(self, size: int) -> PowerPlan | None:
        """The plan, or a ValueError (one line, naming the keys to change) when n cannot see min_effect."""
        if self.power == 0:
            return None
        try:
            plan = self.plan(size)
        except ValueError:
            raise ValueError(f"no eval has accuracy {self.expected_accuracy or EXPECTED_ACCURACY:g} and an "
                             f"A-vs-A flip rate {self.flip_rate:g} with a drop of {self.min_effect:g} "
                             "(eval.expected_accuracy, eval.flip_rate, eval.min_effect)") from None
        if plan.enough:
            return plan
        pct = plan.percent
        if plan.needed_n is None:
            would = "no number of items reaches it"
        elif plan.needed_n <= size:
            would = f"{plan.needed_n:,} items would (eval.n; the set has {size:,})"
        else:
            would = f"{plan.needed_n:,} items would, more than the set's {size:,}"
        smallest = (f"the smallest drop {plan.n:,} items find with {pct(plan.target)} power is "
                    f"{plan.detectable * 100:.1f} points (raise eval.min_effect to {plan.detectable:.3f})"
                    if plan.detectable is not None else f"{plan.n:,} items find no drop with {pct(plan.target)} power")
        raise ValueError(f"under-powered: {plan.n:,} items find a drop of {self.min_effect * 100:g} points with "
                         f"{pct(plan.power)} power, under the {pct(self.power)} asked (eval.power); {would}, or "
                         f"{smallest}; assumed {plan.assumptions()}")

