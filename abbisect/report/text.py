"""The markdown primitives every report uses: untrusted text escaped into a cell or a line of prose, a code span,
a table with the full values of its shortened cells below it, a details block (pure functions).

Untrusted text is made fit to show (`shown_as`: secrets masked, this machine's paths replaced) as it enters a
primitive, before it is cut, escaped or fenced: afterwards a secret's name may be escaped apart (`HF\\_TOKEN`),
a value or a path cut in two, and no later pass over the document could find them. Nothing invisible is
added: a long unbroken run in a cell (a looping output, a path) is shortened with `…` and, where the table
keeps `Notes`, listed in full below it, so what a user copies or greps is what abbisect saw.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

CELL = 90
RUN = 48  # the longest unbroken run a cell shows whole: a full sha (40) is never shortened
RUN_SHOWN = 40  # what a cell shows of a longer run, before the `…`
NOTE_CAP = 1000  # characters of one value listed below a table

_SHOWN: ContextVar[Callable[[str], str] | None] = ContextVar("shown", default=None)


@contextmanager
def shown_as(clean: Callable[[str], str]) -> Iterator[None]:
    """While rendering: every untrusted text entering a primitive is first passed through `clean`."""
    token = _SHOWN.set(clean)
    try:
        yield
    finally:
        _SHOWN.reset(token)


def shown(text: str | None) -> str:
    """Untrusted text as it may be shown (see `shown_as`); as it is outside a rendering."""
    t = text or ""
    clean = _SHOWN.get()
    return clean(t) if clean is not None and t else t


_MD_PUNCT = re.compile(r"([\\*_\[\]~|])")


def _escaped(t: str) -> str:
    t = t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("`", "&#96;")
    return _MD_PUNCT.sub(r"\\\1", t)


def esc(text: str | None) -> str:
    """Untrusted text as literal inline markdown: HTML entities for <, >, & and `, backslashes for the
    markdown punctuation that would start emphasis, links, strike-through or a table column."""
    return _escaped(shown(text))


def span(text: str) -> str:
    """Any one line as a code span that shows it exactly (a backtick in it included): delimited by more
    backticks than its longest run of them."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or (text.startswith(" ") and text.endswith(" ")) else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


class Notes:
    """The full values of the runs a table's cells shortened, listed below the table as `[n] value`. With
    `listed=False` the table says where the full values are itself (the outputs table: the full outputs
    follow it) and its cells only shorten."""

    def __init__(self, listed: bool = True) -> None:
        self.listed = listed
        self.values: list[str] = []

    def add(self, value: str) -> str:
        """The marker a cell shows after the shortened run ("" when not listed)."""
        if not self.listed:
            return ""
        value = value if len(value) <= NOTE_CAP else value[: NOTE_CAP - 1] + "…"
        if value not in self.values:
            self.values.append(value)
        return f"[{self.values.index(value) + 1}]"

    def render(self) -> str:
        return "\n".join(f"- [{n}] {span(v)}" for n, v in enumerate(self.values, 1))


_LONG_RUN = re.compile(rf"\S{{{RUN + 1},}}")


def cell(text: str | None, limit: int = CELL, notes: Notes | None = None) -> str:
    """One table cell (or one line of prose) of untrusted text: one line, cut at `limit` characters, escaped.
    In a table's cell (`notes` given) a run of more than RUN characters without a space (a looping output,
    a long identifier, a path) is shortened too, so it cannot push the next column off-screen; its full
    value goes to `notes`, listed below the table."""
    t = shown(text).replace("\r", "").replace("\n", " ⏎ ")
    pieces: list[tuple[str, str | None]] = []  # (text shown, the whole run it shortens)
    pos = 0
    for m in _LONG_RUN.finditer(t) if notes is not None else ():
        pieces += [(t[pos:m.start()], None), (m.group(0)[:RUN_SHOWN] + "…", m.group(0))]
        pos = m.end()
    pieces.append((t[pos:], None))
    out, room = [], limit
    cut = sum(len(p) for p, _ in pieces) > limit
    for piece, whole in pieces:
        if cut and len(piece) >= room:
            out.append(_escaped(piece[: room - 1]) + "…" + (notes.add(whole) if notes and whole else ""))
            break
        out.append(_escaped(piece) + (notes.add(whole) if notes and whole else ""))
        room -= len(piece)
    return "".join(out)


def code(text: str | None, limit: int = CELL) -> str:
    """Untrusted text as one inline code span of prose (not of a table: a `|` there would end the column):
    one line, shortened; a backtick, which would end the span, becomes a quote."""
    t = shown(text).replace("\r", "").replace("\n", " ⏎ ").replace("`", "'")
    return "`" + (t if len(t) <= limit else t[: limit - 1] + "…") + "`"


def table(header: list[str], rows: list[list[str]], notes: Notes | None = None) -> str:
    """A table, and below it the full values its cells shortened (`notes`), if any."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    listed = notes.render() if notes is not None else ""
    return "\n".join(lines) + (f"\n\nShortened above, in full:\n\n{listed}" if listed else "")


def details(summary: str, body: str) -> str:
    return f"<details><summary>{summary}</summary>\n\n{body}\n\n</details>"


def heading(level: int, text: str) -> str:
    return f"{'#' * min(level, 6)} {text}"
