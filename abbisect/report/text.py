"""The markdown primitives every report uses: untrusted text escaped into a cell or a line of prose, a code span,
a table, a details block (pure functions)."""

from __future__ import annotations

import re

CELL = 90


_MD_PUNCT = re.compile(r"([\\*_\[\]~|])")


def esc(text: str | None) -> str:
    """Untrusted text as literal inline markdown: HTML entities for <, >, & and `, backslashes for the
    markdown punctuation that would start emphasis, links, strike-through or a table column."""
    t = (text or "").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("`", "&#96;")
    return _MD_PUNCT.sub(r"\\\1", t)


_UNBROKEN = re.compile(r"\S{24}")
WRAP = "\u200b"  # a zero-width space: lets a table column wrap inside a long unbroken run of text


def cell(text: str | None, limit: int = CELL) -> str:
    """One table cell (or one line of prose) of untrusted text: one line, shortened, escaped; a long unbroken
    run (a looping output: "CementCementCement…") may wrap, so it cannot push the next column off-screen."""
    t = (text or "").replace("\r", "").replace("\n", " ⏎ ")
    t = t if len(t) <= limit else t[: limit - 1] + "…"
    return esc(_UNBROKEN.sub(lambda m: m.group(0) + WRAP, t))


def code(text: str | None, limit: int = CELL) -> str:
    """Untrusted text as one inline code span of prose (not of a table: a `|` there would end the column):
    one line, shortened; a backtick, which would end the span, becomes a quote."""
    t = (text or "").replace("\r", "").replace("\n", " ⏎ ").replace("`", "'")
    return "`" + (t if len(t) <= limit else t[: limit - 1] + "…") + "`"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def details(summary: str, body: str) -> str:
    return f"<details><summary>{summary}</summary>\n\n{body}\n\n</details>"


def heading(level: int, text: str) -> str:
    return f"{'#' * min(level, 6)} {text}"
