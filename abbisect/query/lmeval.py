"""lm-evaluation-harness's per-item results (`--log_samples`) read as an `EvalRun`, so a user who ran lm-eval
on two commits gets the paired comparison without launching anything.

lm-eval writes `samples_<task>_<date>.jsonl` (lm_eval/loggers/evaluation_tracker.py), one line per document
and filter (lm_eval/evaluator.py): `doc_id`, `doc`, `target`, `arguments` ({"gen_args_0": {"arg_0": prompt,
…}}), `resps`, `filtered_resps`, `filter` (e.g. "strict-match", "flexible-extract"; "none" without one),
`metrics` (the metric names) and each metric's value for that document (`exact_match`, `acc`, …), merged in.
A task with two filters logs each document twice, once per filter; a folder of lm-eval output holds a file
per task. `simple_evaluate`'s own return value, dumped to JSON, holds them as {"samples": {task: [...]}}.
Which task, filter and metric is read is chosen by the caller; where a file holds more than one and none
is named, the error lists them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abbisect.infra.errors import UserError
from abbisect.query.evals import ANSWER_KEEP, PROMPT_KEEP, EvalRun, ItemResult

SAMPLES_NAME = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl$")
RESULTS_NAME = re.compile(r"^results_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.json$")
# What lm-eval writes beside the metrics on each line (never a metric).
BOOKKEEPING = {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics", "doc_hash",
               "prompt_hash", "target_hash"}
NO_FILTER = "none"


@dataclass(frozen=True)
class Selection:
    """What was read: the task, filter and metric (named, or the only one there was), the file, and each
    document's content hash where lm-eval wrote one (doc_id → doc_hash)."""

    task: str
    filter: str
    metric: str
    file: str  # the file's name
    path: Path  # the file read, as reached from the path given (its run folder in it)
    note: str | None = None  # e.g. an older run of the same task in the folder, not read
    hashes: Mapping[str, str] = field(default_factory=dict)


def mismatched(a: Mapping[str, str], b: Mapping[str, str]) -> list[str]:
    """The doc_ids that name another document on each side (both have a doc_hash and they differ): two runs
    over the same ids in another order, or over another version of the dataset, whose items must not be paired."""
    return [i for i, h in a.items() if i in b and b[i] != h]


def lm_eval_results(path: Path) -> str | None:
    """What to say when `path` is lm-eval's aggregated results (results_<date>.json: scores, no per-item
    answers) rather than its samples: the samples files beside it, or how to get them; None otherwise."""
    if not RESULTS_NAME.match(path.name):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        if not (isinstance(data, Mapping) and isinstance(data.get("results"), Mapping)
                and ("configs" in data or "versions" in data or "n-shot" in data)):
            return None
    beside = sorted(p.name for p in path.parent.glob("samples_*.jsonl") if SAMPLES_NAME.match(p.name))
    said = f"{path.name} is lm-eval's aggregated results (scores, no per-item answers): "
    if beside:
        return said + "give the samples file beside it (" + ", ".join(beside[:4]) + \
            (f", … {len(beside) - 4} more" if len(beside) > 4 else "") + f"), or its folder {path.parent}"
    return said + "no samples_<task>_<date>.jsonl beside it; run lm_eval with --log_samples --output_path"


def task_of(path: Path) -> str | None:
    m = SAMPLES_NAME.match(path.name)
    return m.group("task") if m else None


def _lines(path: Path) -> list[dict[str, Any]]:
    out = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text (not an lm-eval samples file)") from None
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            raise UserError(f"{path.name}: line {n} is not JSON (not an lm-eval samples file)") from None
        if not isinstance(doc, dict) or "doc_id" not in doc:
            raise UserError(f"{path.name}: line {n} has no doc_id (not an lm-eval --log_samples line)")
        out.append(doc)
    return out


def _tasks(path: Path) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Path], list[str]]:
    """task → its samples, task → the file read, notes; from a samples file, a folder of them, or a JSON
    document with {"samples": {task: [...]}}."""
    notes: list[str] = []
    if path.is_dir():
        files = sorted(path.rglob("samples_*.jsonl"))
        if not any(task_of(p) for p in files):
            raise UserError(f"{path}: no lm-eval samples_<task>_<date>.jsonl file in this folder (run lm_eval "
                            "with --log_samples --output_path)")
        runs: dict[str, list[tuple[str, Path]]] = {}
        for p in files:
            m = SAMPLES_NAME.match(p.name)
            if m:
                runs.setdefault(m.group("task"), []).append((m.group("date"), p))
        newest: dict[str, Path] = {}
        for task, dated in runs.items():
            dated.sort()
            newest[task] = dated[-1][1]
            notes += [f"{p.name} is an older run of {task}: not read" for _, p in dated[:-1]]
        return {t: _lines(p) for t, p in newest.items()}, newest, notes
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            raise UserError(f"{path.name}: not JSON") from None
        samples = data.get("samples") if isinstance(data, Mapping) else None
        if not isinstance(samples, Mapping):
            raise UserError(lm_eval_results(path)
                            or f"{path.name}: no \"samples\" of lm-eval in it (and no abbisect eval results)")
        return ({str(t): [s for s in v if isinstance(s, dict)] for t, v in samples.items() if isinstance(v, list)},
                {str(t): path for t in samples}, notes)
    task = task_of(path) or path.stem
    return {task: _lines(path)}, {task: path}, notes


def _pick(what: str, given: str | None, available: list[str], option: str, where: str) -> str:
    if given is not None:
        if given not in available:
            raise UserError(f"{where}: no {what} {given!r} (there: {', '.join(available) or 'none'})")
        return given
    if len(available) == 1:
        return available[0]
    raise UserError(f"{where}: {len(available)} {what}s ({', '.join(available)}): pick one with {option}")


def _metrics(samples: list[dict[str, Any]]) -> list[str]:
    named = {m for s in samples for m in (s.get("metrics") or []) if isinstance(m, str)}
    if named:
        return sorted(named)
    return sorted({k for s in samples for k, v in s.items()
                   if k not in BOOKKEEPING and isinstance(v, int | float | bool)})


def _text(value: Any) -> str:
    """A response as text: the string itself, else compact JSON (a multiple-choice task's loglikelihoods)."""
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _prompt(sample: dict[str, Any]) -> str:
    args = sample.get("arguments")
    if isinstance(args, Mapping):  # as lm-eval writes the file: {"gen_args_0": {"arg_0": prompt, ...}}
        first = args.get("gen_args_0")
        value = first.get("arg_0") if isinstance(first, Mapping) else None
    elif isinstance(args, list) and args and isinstance(args[0], list) and args[0]:  # simple_evaluate's return
        value = args[0][0]
    else:
        value = None
    return _prompt_text(value)


def _prompt_text(value: Any) -> str:
    """A request's context as text. A chat run's is its messages: lm-eval's `JsonChatStr` (the message list as
    JSON) is written as a one-element list, `["[{\"role\": \"user\", \"content\": …}]"]`; its last user
    message is the question (a few-shot run's earlier turns are examples)."""
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, Mapping) and isinstance(value.get("prompt"), str):
        value = value["prompt"]
    if isinstance(value, str) and value.lstrip().startswith("[{"):
        try:
            messages = json.loads(value)
        except ValueError:
            return value
        if isinstance(messages, list) and messages and all(isinstance(m, Mapping) for m in messages):
            users = [m for m in messages if m.get("role") == "user"] or messages
            return _content(users[-1].get("content"))
    return value if isinstance(value, str) else ""


def _content(content: Any) -> str:
    """A chat message's content: a string, or parts of which the text ones are read."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return content if isinstance(content, str) else ""


def _correct(value: Any, metric: str, doc_id: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    raise UserError(f"{where}: metric {metric!r} is not right-or-wrong per item (doc {doc_id}: {value!r}); a "
                    "paired test needs a 0/1 metric such as exact_match or acc (--metric)")


def read_samples(path: Path, task: str | None = None, metric: str | None = None,
                 filter_: str | None = None) -> tuple[EvalRun, Selection]:
    """One task's per-document correctness under one filter and metric, as an EvalRun (ids: doc_id)."""
    tasks, files, notes = _tasks(path)
    where = path.name
    chosen = _pick("task", task, sorted(tasks), "--task", where)
    samples = tasks[chosen]
    where = files[chosen].name
    if not samples:
        raise UserError(f"{where}: no samples of task {chosen}")
    flt = _pick("filter", filter_, sorted({str(s.get("filter", NO_FILTER)) for s in samples}), "--filter", where)
    samples = [s for s in samples if str(s.get("filter", NO_FILTER)) == flt]
    met = _pick("metric", metric, _metrics(samples), "--metric", where)
    items: list[ItemResult] = []
    seen: set[str] = set()
    hashes: dict[str, str] = {}
    for s in samples:
        doc_id = str(s["doc_id"])
        if doc_id in seen:
            raise UserError(f"{where}: doc_id {doc_id} twice under filter {flt!r}: the file holds two runs "
                            "(lm-eval appends to a samples file of the same name)")
        seen.add(doc_id)
        if isinstance(s.get("doc_hash"), str) and s["doc_hash"]:
            hashes[doc_id] = s["doc_hash"]
        if met not in s:
            raise UserError(f"{where}: doc {doc_id} has no {met!r} value")
        items.append(ItemResult(doc_id, _correct(s[met], met, doc_id, where), _text(s.get("resps"))[:ANSWER_KEEP],
                                _text(s.get("filtered_resps")), str(s.get("target", "")),
                                prompt=_prompt(s)[:PROMPT_KEEP]))
    run = EvalRun(f"lm-eval {chosen}", tuple(items), size=len(items))
    return run, Selection(chosen, flt, met, where, files[chosen], "; ".join(notes) or None, hashes)
