"""Result folders: results/<recipe>/<UTC stamp>/ with report.md, results.json, outputs.csv and the logs, every
file of it written as a stranger may see it (abbisect/report/portable.py) but a bisect's state.json."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from abbisect.infra.errors import UserError
from abbisect.report.portable import Portable
from abbisect.trial.spec import TrialResult

if TYPE_CHECKING:  # pandas loads when a table is written, not when a command starts
    import pandas as pd


def new_output_dir(recipe_name: str, output: str | None) -> Path:
    """A fresh folder owned by this run: created atomically (mkdir without exist_ok), so two processes that
    race for the same stamp get two folders; an existing non-empty --output, or a file, is refused."""
    if output:
        out = Path(output)
        if out.exists() and not out.is_dir():
            raise UserError(f"--output {out} is a file, not a folder (choose a new folder; nothing was overwritten)")
        if out.is_dir():
            if any(out.iterdir()):
                raise UserError(f"--output {out} exists and is not empty (choose a new folder; nothing was overwritten)")
            return out.resolve()
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.mkdir()
        except FileExistsError:
            raise UserError(f"--output {out} was just created by another process (choose a new folder)") from None
        except (NotADirectoryError, FileNotFoundError):
            raise UserError(f"--output {out}: a parent of it is a file, not a folder") from None
        return out.resolve()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    parent = Path("results") / recipe_name
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except (NotADirectoryError, FileExistsError):
        raise UserError(f"{parent} is a file, not a folder (move it, or pass --output DIR)") from None
    for n in range(1, 1000):
        out = parent / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            out.mkdir()
        except FileExistsError:
            continue
        return out.resolve()
    raise UserError(f"no free result folder under {parent} for {stamp} (pass --output DIR)")


def outputs_frame(results: list[tuple[str, TrialResult]]) -> pd.DataFrame:
    import pandas as pd

    rows = []
    for side, r in results:
        for n, o in enumerate(r.outputs):
            an = r.analyses[n] if n < len(r.analyses) else None
            ans = r.answers[n] if n < len(r.answers) else None
            rows.append({"side": side, "ref": r.spec.ref, "sha": r.spec.sha, "prompt_id": o.prompt_id,
                         "prompt": o.prompt, "text": o.text, "finish_reason": o.finish_reason,
                         "completion_tokens": o.completion_tokens, "latency_s": o.latency_s, "error": o.error,
                         "label": an.label if an else None, "reason": an.reason if an else None,
                         "answer_ok": ans.passed if ans else None, "verdict": r.verdict.status})
    return pd.DataFrame(rows, columns=["side", "ref", "sha", "prompt_id", "prompt", "text", "finish_reason",
                                       "completion_tokens", "latency_s", "error", "label", "reason", "answer_ok",
                                       "verdict"])


def copy_build_logs(results: list[tuple[str, TrialResult]], portable: Portable) -> None:
    """Each trial's build log beside its server log (masked as it was written, its paths replaced as it is
    copied); a cached trial brought its own."""
    for _, r in results:
        dest = Path(r.spec.out_dir) / "build.log"
        if r.env and Path(r.env.log).is_file() and not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            portable.copy(Path(r.env.log), dest)


def portable_logs(out: Path, portable: Portable) -> None:
    """Every log already in the folder (each server log as it streamed, the logs a cached trial brought)
    rewritten with this machine's paths replaced (the trial cache keeps its own copies as they were)."""
    for log in sorted(out.rglob("*.log")):
        if log.is_file():
            portable.copy(log, log)


def write_results(out: Path, markdown: str, data: dict, results: list[tuple[str, TrialResult]], portable: Portable,
                  names: tuple[str, str] = ("report.md", "results.json"), extra: dict[str, str] | None = None) -> None:
    """The report, its data as JSON, outputs.csv, side files (`extra`: name → text, e.g. outputs.md), and
    each trial's build log beside its server log.

    Every file is written as a stranger may see it (`portable`: the recipe's secrets masked, this machine's
    paths replaced by the placeholders the report explains): the texts for people (the report, side files,
    the CSV's cells) through `portable.text`, the JSON through `portable.data` (no secret's field rewritten),
    the logs through `portable.copy` (they were masked as they were written, abbisect/infra/logstream.py).
    Long strings in the JSON and the CSV are cut at FIELD_CAP with a marker (the full outputs are in the side
    file).
    """
    portable_logs(out, portable)
    copy_build_logs(results, portable)
    (out / names[0]).write_text(portable.text(markdown))
    for name, text in (extra or {}).items():
        (out / name).write_text(portable.text(text))
    (out / names[1]).write_text(json.dumps(portable.data(cap_strings(data)), indent=2, default=str))
    frame = outputs_frame(results).map(lambda v: portable.text(capped(v)) if isinstance(v, str) else v)
    frame.to_csv(out / "outputs.csv", index=False)


FIELD_CAP = 65_536  # characters of one string in results.json / outputs.csv


def capped(text: str, cap: int = FIELD_CAP) -> str:
    if len(text) <= cap:
        return text
    return text[:cap] + f"… [{len(text) - cap:,} more characters cut; the full output is in outputs.md]"


def cap_strings(data):
    """JSON-able data with every string longer than FIELD_CAP cut (a 20 MB answer must not make a 20 MB JSON)."""
    if isinstance(data, dict):
        return {k: cap_strings(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [cap_strings(v) for v in data]
    if isinstance(data, str):
        return capped(data)
    return data
