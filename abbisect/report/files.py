"""Result folders: results/<recipe>/<UTC stamp>/ with report.md, results.json, outputs.csv and the logs."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pandas as pd

from abbisect.errors import UserError
from abbisect.trial import TrialResult


def new_output_dir(recipe_name: str, output: str | None) -> Path:
    """A fresh folder; an existing non-empty --output is refused so no earlier result is overwritten."""
    if output:
        out = Path(output)
        if out.exists() and any(out.iterdir()):
            raise UserError(f"--output {out} exists and is not empty (choose a new folder; nothing was overwritten)")
    else:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        out = Path("results") / recipe_name / stamp
        n = 1
        while out.exists():
            n += 1
            out = Path("results") / recipe_name / f"{stamp}-{n}"
    out.mkdir(parents=True, exist_ok=True)
    return out.resolve()


def outputs_frame(results: list[tuple[str, TrialResult]]) -> pd.DataFrame:
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


def copy_build_logs(out: Path, results: list[tuple[str, TrialResult]]) -> None:
    for _, r in results:
        if r.env and Path(r.env.log).is_file():
            dest = Path(r.spec.out_dir)
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(r.env.log, dest / "build.log")


def write_results(out: Path, markdown: str, data: dict, results: list[tuple[str, TrialResult]],
                  names: tuple[str, str] = ("report.md", "results.json")) -> None:
    """The report, its data as JSON, outputs.csv, and each trial's build log beside its server log."""
    copy_build_logs(out, results)
    (out / names[0]).write_text(markdown)
    (out / names[1]).write_text(json.dumps(data, indent=2, default=str))
    outputs_frame(results).to_csv(out / "outputs.csv", index=False)
