"""Pictures where people would rather look: a bisect's timeline and shrinking range, an A/B's loops.

PNG bytes from result JSON. matplotlib is an optional extra (`pip install 'abbisect[plots]'`); without it
`available()` is False and the matrix is written without pictures.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

SEGMENTS = (
    ("checkout", "#c7c7c7"),
    ("build", "#4c72b0"),
    ("ready", "#dd8452"),
    ("query", "#55a868"),
    ("teardown", "#c7c7c7"),
    ("score", "#8172b3"),
)
OUTCOME_COLOURS = {"good": "#2ca02c", "bad": "#d62728", "skip": "#7f7f7f"}


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(width: float, height: float):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height), dpi=80)
    return plt, fig, ax


def _png(plt, fig) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def bisect_timeline(data: Mapping[str, Any]) -> bytes | None:
    """Rounds × slots: one bar per trial, split into build / ready / query / score (and the rest, grey).

    A step that records `slot` and `start_s` is drawn there; otherwise a slot runs its trials back to back.
    """
    trials = {t["n"]: t for t in data.get("trials") or []}
    steps = [s for s in data.get("steps") or [] if s["n"] in trials]
    if not steps:
        return None
    plt, fig, ax = _figure(8, 0.45 * len(steps) + 1.2)
    clock: dict[int, float] = {}
    labels = []
    for y, step in enumerate(steps):
        t = trials[step["n"]]
        # A sequential bisect records no slot or start (None): one slot, its trials back to back.
        slot = int(step.get("slot") or 0)
        start = step.get("start_s")
        x = float(start) if start is not None else clock.get(slot, 0.0)
        # A cached trial cost nothing in this run: its original timings would draw time that was not spent.
        timings = {} if t.get("cached") else t.get("timings") or {}
        for name, colour in SEGMENTS:
            width = float(timings.get(name) or 0.0)
            if width > 0:
                ax.barh(y, width, left=x, color=colour, edgecolor="white", linewidth=0.5)
                x += width
        clock[slot] = x
        cached = " (cached)" if t.get("cached") else ""
        rnd = step.get("round") if step.get("round") is not None else step["n"]
        labels.append(f"round {rnd} · slot {slot} · {step['sha'][:8]}{cached}")
        ax.text(
            x,
            y,
            f" {step['outcome']}{cached}",
            va="center",
            fontsize=8,
            color=OUTCOME_COLOURS.get(step["outcome"], "black"),
        )
    ax.set_yticks(range(len(steps)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_title(f"bisect {data['recipe'].get('name', '')}: trials", fontsize=10)
    ax.set_xlim(0, max([*clock.values(), 1.0]) * 1.15)  # room for the outcome labels
    handles = [
        plt.Rectangle((0, 0), 1, 1, color=c) for n, c in SEGMENTS if n in ("build", "ready", "query", "score")
    ]
    ax.legend(
        handles,
        ["build", "ready", "query", "score"],
        fontsize=7,
        loc="upper center",
        ncol=4,
        bbox_to_anchor=(0.5, -0.22 - 0.1 / max(len(steps), 1)),
        frameon=False,
    )
    return _png(plt, fig)


def bisect_range(data: Mapping[str, Any]) -> bytes | None:
    """Candidates left after each step (bisect.json steps' `remaining`); None where it was not recorded."""
    steps = [s for s in data.get("steps") or [] if s.get("remaining") is not None]
    if not steps:
        return None
    plt, fig, ax = _figure(6, 3)
    xs = [s["n"] for s in steps]
    ys = [s["remaining"] for s in steps]
    ax.step(xs, ys, where="post", color="#4c72b0")
    for s in steps:
        ax.scatter(s["n"], s["remaining"], color=OUTCOME_COLOURS.get(s["outcome"], "black"), zorder=3)
        ax.annotate(
            s["sha"][:7], (s["n"], s["remaining"]), textcoords="offset points", xytext=(3, 4), fontsize=7
        )
    ax.set_xlabel("step")
    ax.set_ylabel("candidates left")
    ax.set_ylim(bottom=0)
    ax.set_xticks(xs)
    ax.set_title(f"bisect {data['recipe'].get('name', '')}: the range shrinking", fontsize=10)
    return _png(plt, fig)


def _loop(output: Mapping[str, Any], analysis: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """(start, end) in characters of the output's loop, from its recorded analysis or `analyze` afresh.

    Only where the scorer calls the output looping (degenerate or a late loop): a healthy output may still
    hold a repeated unit (a list's pattern) that is no loop.
    """
    if analysis is None:
        from abbisect.infra.serial import dump
        from abbisect.score import analyze

        analysis = dump(analyze(output.get("text") or ""))
    loop = analysis.get("loop")
    if not loop or analysis.get("label") == "healthy":
        return None
    return loop["onset_char"], loop["onset_char"] + loop["period_chars"] * loop["repeats"]


def degeneration_profile(data: Mapping[str, Any]) -> bytes | None:
    """Per prompt and side: the output's length, and where (and until where) it loops."""
    sides = [(k.upper(), data[k]) for k in ("a", "b") if data.get(k) and data[k].get("outputs")]
    if not sides:
        return None
    n = max(len(t["outputs"]) for _, t in sides)
    plt, fig, ax = _figure(8, 0.3 * n * len(sides) + 1.4)
    labels, y = [], 0
    for i in range(n):
        for side, trial in sides:
            if i >= len(trial["outputs"]):
                continue
            out = trial["outputs"][i]
            analyses = trial.get("analyses") or []
            length = len(out.get("text") or "")
            ax.barh(y, length, color="#a6cee3")
            span = _loop(out, analyses[i] if i < len(analyses) else None)
            if span:
                ax.barh(y, min(span[1], length) - span[0], left=span[0], color="#d62728")
                ax.plot([span[0]], [y], marker="|", color="black", markersize=10)
            labels.append(f"{out.get('prompt_id', i)} {side} ({trial['spec']['sha'][:7]})")
            y += 1
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("characters of output (red: the loop, | where it starts)")
    ax.set_title(f"A/B {data['recipe'].get('name', '')}: where each output starts to loop", fontsize=10)
    return _png(plt, fig)
