"""The matrix as paste-ready GitHub markdown, grouped by model, always within one comment."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from abbisect.matrix.cells import Cell, Matrix
from abbisect.report.text import cell, code, table

GITHUB_LIMIT = 65_536  # characters in one issue comment
HEADER = ["engine", "version", "commit", "GPU stack", "status", "outcome", "date", "evidence", "report"]
MARK = {"good": "✅ good", "bad": "❌ bad", "skip": "⏭ skip"}


def text(value: object, limit: int = 80) -> str:
    """A value of a result file in a cell or a line: as every report shows untrusted text (report/text.py)."""
    return cell(str(value or ""), limit)


def link(label: str, path: str) -> str:
    return f"[{text(label, 60)}]({quote(path)})" if path else "—"


def _commit(c: Cell) -> str:
    ref = f" {code(c.ref, 30, in_table=True)}" if c.ref and c.ref != c.commit else ""
    dep = f" + {code(c.dependency, 60, in_table=True)}" if c.dependency else ""
    return f"`{c.commit[:10]}`{ref}{dep}"


def _evidence(c: Cell) -> str:
    parts = [c.trials()]
    parts += [
        f"⚠ also **{x.outcome}** ({text(x.status, 20)}, {text(x.recipe, 30)}, {x.date[:10]}, "
        f"{link(x.source, x.report)})"
        for x in c.conflicts
    ]
    return "; ".join(parts)


def _outcome(c: Cell) -> str:
    mark = MARK.get(c.outcome, c.outcome)
    if c.transition:
        since = f"since `{c.transition_from[:10]}`" + (" (its parent)" if c.adjacent else "")
        mark = f"**{mark}** ⇄ {text(c.transition)} {since}"
    return mark + (" 📍" if c.env_match else "")


def row(c: Cell) -> list[str]:
    return [
        text(c.engine, 20) + (f" ({text(c.engine_repo, 30)})" if c.engine_repo else ""),
        text(c.engine_version, 20) or "—",
        _commit(c),
        f"{text(c.stack.gpu_class, 40)} `{c.stack.key or '?'}`",
        text(c.status, 20) + (f" ({text(c.perf, 60)})" if c.perf else ""),
        _outcome(c),
        c.date[:16].replace("T", " "),
        _evidence(c),
        link("/".join(c.report.split("/")[-2:]), c.report),
    ]


def summary(m: Matrix) -> list[str]:
    n = m.counts()
    lines = [
        f"{n['cells']} cells from {len(m.sources)} result file(s): {n['good']} good, {n['bad']} bad, "
        f"{n['skip']} untestable; {n['transitions']} transition(s), {n['conflicts']} with conflicting "
        "evidence."
        + (f" 📍 {n['env_match']} match this machine's GPU stack `{m.env_key}`." if m.env_key else "")
    ]
    moves = [c for c in m.cells if c.transition]
    if moves:
        lines += ["", "Where a commit changed the outcome:", ""]
        lines += [
            f"- {text(c.model, 60)} on {text(c.engine, 20)} / {text(c.stack.gpu_class, 40)}: "
            f"{text(c.transition)} at {_commit(c)} (previous tested commit `{c.transition_from[:10]}`"
            + (", its parent" if c.adjacent else "")
            + f") — {link('report', c.report)}"
            for c in moves
        ]
    return lines


def render_matrix(m: Matrix, plots: Sequence[tuple[str, str]] = (), limit: int = GITHUB_LIMIT) -> str:
    """Sections per model; rows past the comment limit are left to matrix.csv (and say so)."""
    head = ["## abbisect serving matrix", "", *summary(m), ""]
    tail = []
    if plots:
        tail += ["### Pictures", "", *[f"- {link(caption, path)}" for caption, path in plots], ""]
    tail += [
        (
            "Legend: ⇄ the outcome changed since the previous tested commit of the same model × engine × GPU "
            "stack; ⚠ evidence for the same cell disagrees (newest shown first); 📍 this machine's stack. "
            "Every cell: `matrix.csv` / `matrix.json`; interactive: `matrix.html`."
        ),
        "",
    ]
    budget = limit - len("\n".join(head + tail)) - 200
    body: list[str] = []
    shown = 0
    models: dict[str, list[Cell]] = {}
    for c in m.cells:
        models.setdefault(c.model_id, []).append(c)
    for model_id, cells in models.items():
        rows: list[list[str]] = []
        title = [
            f"### {text(cells[0].model, 100)}"
            + (f" ({code(model_id, 100)})" if model_id != cells[0].model else ""),
            "",
        ]
        for c in cells:
            candidate = len("\n".join(body + title + [table(HEADER, [*rows, row(c)])]))
            if candidate > budget:
                break
            rows.append(row(c))
        if rows:
            body += [*title, table(HEADER, rows), ""]
            shown += len(rows)
        if len(rows) < len(cells):
            break
    if shown < len(m.cells):
        body += [
            f"… {len(m.cells) - shown} more cell(s) did not fit in one GitHub comment: see `matrix.csv`.",
            "",
        ]
    return "\n".join(head + body + tail)
