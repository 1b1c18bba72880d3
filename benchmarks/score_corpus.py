"""Measure the degeneration labeller on a labelled corpus, and its speed on synthetic outputs.

    python benchmarks/score_corpus.py CORPUS.jsonl [--json] [--speed-outputs N]

CORPUS.jsonl: one object a line with at least "id", "text" and "label" (healthy / late_loop /
degenerate). Prints precision, recall and F1 per label, the confusion matrix (rows = truth,
columns = prediction), how often late_loop and degenerate are told apart, and outputs scored per
second on one core over synthetic 512-word outputs (half healthy-like, half loop-like).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from abbisect.score.degeneration import LABELS, analyze

# A neutral vocabulary for synthetic text, weighted like English (many short function words, some
# longer content words), so 512 words come to ~2,500 characters like real 512-token answers.
_VOCAB_TEXT = (
    "the the the of of and and to to a a in in is is it it that for as with was on be by this are "
    "from at or an have not which their can more one all has its been when there new other some these "
    "would about also so if we you he she they his her our into than then only its may such each most "
    "process system energy water light model data cell power large small first second different "
    "example value between through during because however important structure function surface "
    "pressure several people world city history culture science method result answer question number"
)
_VOCAB = _VOCAB_TEXT.split()


def _synthetic(n: int, words: int = 512, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 2 == 0:
            sentences = []
            total = 0
            while total < words:
                k = rng.randint(6, 20)
                sentences.append(" ".join(rng.choice(_VOCAB) for _ in range(k)).capitalize() + ".")
                total += k
            out.append(" ".join(" ".join(sentences).split()[:words]))
        else:
            prefix = [rng.choice(_VOCAB) for _ in range(rng.randint(0, 200))]
            unit = [rng.choice(_VOCAB) for _ in range(rng.randint(1, 15))]
            body = prefix + unit * (words // len(unit) + 1)
            out.append(" ".join(body[:words]))
    return out


def throughput(n: int) -> dict[str, float]:
    texts = _synthetic(n)
    # CPU time of this process is what "one core" means; wall time is also given because a loaded
    # machine (other jobs on the same core) inflates it.
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for t in texts:
        analyze(t)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return {
        "outputs": n,
        "mean_chars": round(sum(map(len, texts)) / n, 1),
        "cpu_seconds": round(cpu, 3),
        "wall_seconds": round(wall, 3),
        "outputs_per_second": round(n / cpu, 1),
        "outputs_per_wall_second": round(n / wall, 1),
    }


def evaluate(rows: list[dict]) -> dict:
    confusion = {t: {p: 0 for p in LABELS} for t in LABELS}
    predictions = []
    for row in rows:
        predicted = analyze(row["text"]).label
        confusion[row["label"]][predicted] += 1
        predictions.append({"id": row["id"], "label": row["label"], "predicted": predicted})
    labels = {}
    for lab in LABELS:
        tp = confusion[lab][lab]
        fp = sum(confusion[t][lab] for t in LABELS if t != lab)
        fn = sum(confusion[lab][p] for p in LABELS if p != lab)
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        labels[lab] = {
            "precision": round(precision, 4),
            "recall": round(recall, 4),
            "f1": round(f1, 4),
            "support": tp + fn,
        }
    # Of the late_loop and degenerate items, how many were not called the other one.
    loopy = [p for p in predictions if p["label"] in ("late_loop", "degenerate")]
    swapped = sum(1 for p in loopy if {p["label"], p["predicted"]} == {"late_loop", "degenerate"})
    return {
        "n": len(rows),
        "labels": labels,
        "confusion": confusion,
        "late_loop_vs_degenerate_separation": round(1 - swapped / len(loopy), 4) if loopy else None,
        "predictions": predictions,
    }


def _print(result: dict, speed: dict | None) -> None:
    print(f"items: {result['n']}")
    print(f"{'label':<12}{'precision':>10}{'recall':>8}{'f1':>8}{'support':>9}")
    for lab, s in result["labels"].items():
        print(f"{lab:<12}{s['precision']:>10.3f}{s['recall']:>8.3f}{s['f1']:>8.3f}{s['support']:>9}")
    print("\nconfusion (rows = truth, columns = predicted)")
    print(f"{'':<12}" + "".join(f"{p:>12}" for p in LABELS))
    for t in LABELS:
        print(f"{t:<12}" + "".join(f"{result['confusion'][t][p]:>12}" for p in LABELS))
    sep = result["late_loop_vs_degenerate_separation"]
    if sep is not None:
        print(f"\nlate_loop told apart from degenerate: {sep:.1%}")
    wrong = [p for p in result["predictions"] if p["label"] != p["predicted"]]
    for p in wrong:
        print(f"  wrong: {p['id']}: {p['label']} -> {p['predicted']}")
    if speed:
        print(
            f"\nspeed: {speed['outputs_per_second']:,.0f} outputs per CPU-second on one core "
            f"({speed['outputs_per_wall_second']:,.0f} per wall-clock second; {speed['outputs']} synthetic "
            f"512-word outputs, mean {speed['mean_chars']:.0f} chars)"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--speed-outputs", type=int, default=4000, help="synthetic outputs to time (0: skip)")
    args = ap.parse_args(argv)
    if not args.corpus.is_file():
        print(f"error: corpus not found: {args.corpus}", file=sys.stderr)
        return 2
    rows = [json.loads(line) for line in args.corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    bad = sorted({r.get("label") for r in rows} - set(LABELS))
    if bad:
        print(f"error: unknown label(s) {bad}; expected {list(LABELS)}", file=sys.stderr)
        return 2
    result = evaluate(rows)
    speed = throughput(args.speed_outputs) if args.speed_outputs > 0 else None
    if args.json:
        print(json.dumps({**result, "throughput": speed}, indent=2))
    else:
        _print(result, speed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
