"""Stage 4 — query, for accuracy: an eval set sent at the recipe's concurrency and graded item by item.

Batching is part of the workload: temperature 0 is not batch-invariant in these engines, and the batched
path is where numeric regressions live, so items go `concurrency` at a time (a thread pool, one HTTP client
a worker), each through `chat.ask` with its whole-request deadline and answer cap.

A failed request (a timeout, an HTTP error, a dropped connection, an empty completion the server did not
finish) is an error on its item, `correct` None with the reason apart: never a wrong answer, which is how
an eval client turned connection failures into a GSM8K score of 0.048 (SGLang PR #29334). Items are paired
across sides by id (`pair`).

What a trial keeps (TrialResult.extras.eval) is the EvalRun, written as `serial.dump(EvalRun)`;
`runs_in_results` reads it back from a results.json.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from abbisect.infra.serial import load
from abbisect.query.chat import CUT_MARK, NOT_SENT, ask, served_model
from abbisect.recipe import Prompt, Sampling, eval_items
from abbisect.recipe.eval import Eval, EvalItem
from abbisect.score.answers import extract, graded, reference

if TYPE_CHECKING:  # loaded when an eval is asked
    import httpx

ANSWER_KEEP = 4000  # characters of an output kept per item (results.json holds every item of every side)
PROMPT_KEEP = 1000  # characters of an item's question kept, for the flipped items of outputs.md
FINISHED = ("stop", "length")  # an empty text with another finish reason (or none) is a request that failed


@dataclass(frozen=True)
class EvalSet:
    """The items of an eval set and what names it in reports (builtin:NAME or the file's name, no path)."""

    name: str
    items: tuple[EvalItem, ...]
    sha256: str

    @classmethod
    def load(cls, spec: str, base: Path | None = None) -> EvalSet:
        """A set by its recipe spelling: builtin:NAME or a .jsonl path (relative to `base`, default here)."""
        return cls.of(Eval(set=spec), base)

    @classmethod
    def of(cls, section: Eval, base: Path | None = None) -> EvalSet:
        """The set of a recipe's section (resolved by load_recipe: its hash is checked again here)."""
        items, sha = eval_items(section, base or Path.cwd(), "eval")
        name = section.set if section.set.startswith("builtin:") else Path(section.set).name
        return cls(name, items, sha)

    def sample(self, n: int | None = None, seed: int = 0) -> tuple[EvalItem, ...]:
        """n items, seeded; the sample of n is the start of every larger one (a bisect that wants more items
        of a "not sure" comparison adds to what it asked, never asks other items)."""
        order = list(self.items)
        random.Random(seed).shuffle(order)
        return tuple(order if n is None else order[:n])

    def shots(self, item: EvalItem, k: int, seed: int = 0) -> tuple[EvalItem, ...]:
        """k few-shot examples for `item`: from the set, never the item itself, seeded by the item's id (so
        an item gets the same examples whatever else is sampled)."""
        if k == 0:
            return ()
        others = [i for i in self.items if i.id != item.id]
        return tuple(random.Random(f"{seed}/{item.id}").sample(others, min(k, len(others))))


@dataclass(frozen=True)
class EvalRequest:
    """What is sent for one item: a chat (few-shot turns, then the item) and the same as one text."""

    item: EvalItem
    messages: tuple[tuple[str, str], ...]  # (role, content)
    text: str  # the completions prompt


def _as_text(item: EvalItem) -> str:
    before = [m.content for m in (item.messages or ())[:-1]]
    return "\n\n".join([*before, item.text])


def _as_chat(item: EvalItem) -> list[tuple[str, str]]:
    before = [(m.role, m.content) for m in (item.messages or ())[:-1]]
    return [*before, ("user", item.text)]


def build_request(item: EvalItem, shots: Sequence[EvalItem]) -> EvalRequest:
    """Each example as a user turn and the assistant's answer (its `target`, else its answer); for the
    completions API the same as text, an example's question and answer on lines of their own, a blank line
    between examples. A set whose prompts carry their own template (e.g. end in "Answer:") keeps it."""
    chat: list[tuple[str, str]] = []
    text = ""
    for shot in shots:
        chat += [*_as_chat(shot), ("assistant", shot.demonstration)]
        text += f"{_as_text(shot)}\n{shot.demonstration}\n\n"
    return EvalRequest(item, (*chat, *_as_chat(item)), text + _as_text(item))


@dataclass(frozen=True)
class ItemResult:
    """One item on one side. `correct` None: the request failed (`error` says how), not a wrong answer."""

    id: str
    correct: bool | None
    answer: str  # the output, its first ANSWER_KEEP characters
    extracted: str | None  # what the item's rule read from it
    reference: str  # the answer as the rule reads answers
    error: str | None = None
    prompt: str = ""  # the item's question (without few-shot examples), its first PROMPT_KEEP characters
    kind: str | None = None
    latency_s: float = 0.0
    finish_reason: str | None = None


@dataclass(frozen=True)
class EvalRun:
    """An eval on one side: every item asked, in the order sent, and how it was asked."""

    name: str  # the set: builtin:NAME or a file's name; "lm-eval TASK" for lm-evaluation-harness samples
    items: tuple[ItemResult, ...]
    sha256: str = ""
    size: int = 0  # items in the set (items asked may be fewer: eval.n)
    api: str = ""
    concurrency: int = 0
    max_tokens: int = 0
    fewshot: int = 0
    seed: int = 0
    wall_s: float = 0.0
    peak_in_flight: int = 0  # the most requests this client had open at once

    @property
    def n(self) -> int:
        return len(self.items)

    @property
    def n_graded(self) -> int:
        return sum(i.correct is not None for i in self.items)

    @property
    def n_correct(self) -> int:
        return sum(i.correct is True for i in self.items)

    @property
    def n_errors(self) -> int:
        return self.n - self.n_graded

    @property
    def accuracy(self) -> float | None:
        """Right answers among the items answered (errors are not in the denominator); None: none answered."""
        return self.n_correct / self.n_graded if self.n_graded else None

    @property
    def error_rate(self) -> float:
        return self.n_errors / self.n if self.n else 0.0

    def request_errors(self, threshold: float) -> bool:
        """Whether this side failed as a side (status request_errors): more failed requests than
        `threshold` (eval.error_threshold) of its items; below it, the answered items are compared."""
        return self.error_rate > threshold

    def errors(self) -> tuple[ItemResult, ...]:
        return tuple(i for i in self.items if i.correct is None)

    def by_id(self) -> dict[str, ItemResult]:
        return {i.id: i for i in self.items}


def _strip_cut(text: str) -> str:
    """An answer cut at the cap is graded on what was read: the marker's own number is no answer."""
    mark = CUT_MARK.split("{n}")[0]
    at = text.rfind(mark)
    return text[:at] if at >= 0 else text


class _Clients:
    """One httpx client a worker thread (a client is not shared across threads), all closed at the end."""

    def __init__(self, timeout: float) -> None:
        self.timeout, self.local, self.lock = timeout, threading.local(), threading.Lock()
        self.made: list[httpx.Client] = []

    def get(self) -> httpx.Client:
        import httpx

        client = getattr(self.local, "client", None)
        if client is None:
            client = self.local.client = httpx.Client(timeout=self.timeout)
            with self.lock:
                self.made.append(client)
        return client

    def close(self) -> None:
        for client in self.made:
            client.close()


class _InFlight:
    def __init__(self) -> None:
        self.now = self.peak = 0
        self.lock = threading.Lock()

    @contextmanager
    def one(self) -> Iterator[None]:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            yield
        finally:
            with self.lock:
                self.now -= 1


def run_eval(base_url: str, model: str, eval_set: EvalSet, items: Sequence[EvalItem], *, api: str = "chat",
             max_tokens: int = 128, concurrency: int = 8, fewshot: int = 0, seed: int = 0, timeout: float = 120.0,
             alive: Callable[[], bool] | None = None) -> EvalRun:
    """Ask every item at `concurrency` requests in flight and grade each answer.

    `model` is the fallback name (the server's /v1/models is asked first, as for prompts); `seed` seeds the
    few-shot draw and goes in each request; `timeout` bounds each request, connect to last byte; `alive`
    says whether the server still runs: once it does not, the items not yet sent are errors "not sent".
    """
    import httpx

    sampling = Sampling(temperature=0.0, max_tokens=max_tokens, seed=seed)
    requests = [build_request(item, eval_set.shots(item, fewshot, seed)) for item in items]
    clients, flight = _Clients(timeout), _InFlight()
    t0 = time.monotonic()
    with httpx.Client(timeout=timeout) as first:
        served = served_model(first, base_url, model)

    def one(req: EvalRequest) -> ItemResult:
        item = req.item
        ref = reference(item)
        question = item.text[:PROMPT_KEEP]
        if alive is not None and not alive():
            return ItemResult(item.id, None, "", None, ref, NOT_SENT, question, item.kind)
        messages = [{"role": role, "content": content} for role, content in req.messages]
        with flight.one():
            done = ask(clients.get(), base_url, api, served, item.id, Prompt.model_construct(prompt=req.text),
                       sampling, messages=messages)
        error = done.error
        if error is None and not done.text and done.finish_reason not in FINISHED:
            error = f"an empty completion the server did not finish (finish_reason {done.finish_reason!r})"
        text = _strip_cut(done.text) if done.cut else done.text
        if error is not None:
            return ItemResult(item.id, None, text[:ANSWER_KEEP], None, ref, error, question, item.kind,
                              done.latency_s, done.finish_reason)
        return ItemResult(item.id, graded(item, text), text[:ANSWER_KEEP], extract(item.extract, text, item.choices),
                          ref, None, question, item.kind, done.latency_s, done.finish_reason)

    try:
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="eval") as pool:
            results = tuple(pool.map(one, requests))
    finally:
        clients.close()
    return EvalRun(eval_set.name, results, eval_set.sha256, len(eval_set.items), api, concurrency, max_tokens,
                   fewshot, seed, round(time.monotonic() - t0, 3), flight.peak)


def ask_eval(base_url: str, model: str, section: Eval, part: int = 0, *, timeout: float, seed: int = 0,
             alive: Callable[[], bool] | None = None, only: Sequence[str] | None = None) -> EvalRun:
    """Part `part` of a recipe's eval (its section as load_recipe resolved it) on one server: items
    part·n … (part+1)·n − 1 of the seeded sample (n = eval.n, else the whole set), so a bisect that is not sure
    asks further items, never the same ones again; past the set's end, no item. `only`: these items of the set
    instead (by id, in the set's order: a bisect asks a candidate the items that tell the ends apart)."""
    eval_set = EvalSet.of(section)
    size = len(eval_set.items)
    n = section.items_asked(size)
    if only is not None:
        wanted = set(only)
        items = tuple(i for i in eval_set.items if i.id in wanted)
    else:
        items = eval_set.sample(min(n * (part + 1), size), section.seed)[n * part:]
    return run_eval(base_url, model, eval_set, items, api=section.api or "chat",
                    max_tokens=section.max_tokens or Sampling().max_tokens, concurrency=section.concurrency,
                    fewshot=section.fewshot, seed=seed, timeout=timeout, alive=alive)


def plan_lines(section: Eval) -> list[str]:
    """What a dry run says of a recipe's eval: the set and how it is asked, then the power plan (n, the power
    at eval.min_effect, the smallest drop n detects)."""
    eval_set = EvalSet.of(section)
    size = len(eval_set.items)
    asked = section.items_asked(size)
    shots = f", {section.fewshot}-shot" if section.fewshot else ""
    head = (f"eval: {eval_set.name} ({eval_set.sha256[:12]}), {asked:,} of {size:,} items (seed {section.seed}), "
            f"{section.api} API, max_tokens {section.max_tokens}, {section.concurrency} in flight{shots}")
    return [head, section.plan(size).describe() if section.power else "power plan: none (eval.power 0)"]


# --- pairing and reading back ----------------------------------------------------------------------


@dataclass(frozen=True)
class Pairing:
    """Two runs' items matched by id: only items answered on both sides are compared; the rest is counted."""

    ids: tuple[str, ...]  # answered on both sides, in A's order
    a: tuple[bool, ...]
    b: tuple[bool, ...]
    only_a: tuple[str, ...]  # in A's run only
    only_b: tuple[str, ...]
    errors_a: tuple[str, ...]  # in both runs, the request failed on A (not compared)
    errors_b: tuple[str, ...]

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def lost(self) -> tuple[str, ...]:
        """Right on A, wrong on B."""
        return tuple(i for i, x, y in zip(self.ids, self.a, self.b) if x and not y)

    @property
    def gained(self) -> tuple[str, ...]:
        return tuple(i for i, x, y in zip(self.ids, self.a, self.b) if y and not x)


def pair(a: EvalRun, b: EvalRun) -> Pairing:
    by_b = b.by_id()
    both = [i for i in a.items if i.id in by_b]
    answered = [(i, by_b[i.id]) for i in both if i.correct is not None and by_b[i.id].correct is not None]
    in_a = {i.id for i in a.items}
    return Pairing(tuple(x.id for x, _ in answered), tuple(bool(x.correct) for x, _ in answered),
                   tuple(bool(y.correct) for _, y in answered), tuple(i.id for i in a.items if i.id not in by_b),
                   tuple(i.id for i in b.items if i.id not in in_a),
                   tuple(i.id for i in both if i.correct is None),
                   tuple(i.id for i in both if by_b[i.id].correct is None))


def runs_in_results(data: Any) -> dict[str, EvalRun]:
    """The eval runs a JSON document holds, by side: a results.json of `abbisect run` (each side's
    `extras.eval`), a bisect's trials (each trial's `extras.eval`, by its short sha), or one EvalRun as
    dumped (side "")."""
    if not isinstance(data, Mapping):
        return {}
    if isinstance(data.get("items"), list) and "name" in data:
        return {"": load(EvalRun, data)}
    runs: dict[str, EvalRun] = {}
    for side, value in data.items():
        extras = value.get("extras") if isinstance(value, Mapping) else None
        if isinstance(extras, Mapping) and isinstance(extras.get("eval"), Mapping):
            runs[str(side)] = load(EvalRun, extras["eval"])
    for trial in data.get("trials") or ():
        extras = trial.get("extras") if isinstance(trial, Mapping) else None
        if isinstance(extras, Mapping) and isinstance(extras.get("eval"), Mapping):
            runs[str(trial.get("sha", ""))[:10] or str(len(runs))] = load(EvalRun, extras["eval"])
    return runs
