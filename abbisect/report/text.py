"""The markdown primitives every report uses: untrusted text escaped into a cell or a line of prose, a code span,
a line or a block of code, a table with the full values of its shortened cells below it, a details block (pure
functions). Untrusted text (a commit's subject, a ref, a flag, an output, a log line) becomes markdown only here.

Untrusted text is made fit to show (`shown_as`: secrets masked, this machine's paths replaced) as it enters a
primitive, before it is cut, escaped or fenced: afterwards a secret's name may be escaped apart (`HF\\_TOKEN`),
a value or a path cut in two, and no later pass over the document could find them. Nothing invisible is
added: a long unbroken run in a cell (a looping output, a path) or a value cut at its cell's length is
shortened with `…` and, where the table keeps `Notes`, listed in full below it, so what a user copies or greps
is what abbisect saw.

Safe to paste into GitHub: a control character (an ANSI escape, a bidirectional override) is shown as a
visible picture of itself (`␛[31m`, `<U+202E>`), never written raw; an `@name` in prose or a cell becomes a
code span (`` `@name` ``), which GitHub never turns into a mention; inside a code block (`plain`, `fence`)
text is neither escaped nor changed, as there no markdown is read and no one is mentioned.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

CELL = 90
RUN = 48  # the longest unbroken run a cell shows whole: a full sha (40) is never shortened
RUN_SHOWN = 40  # what a cell shows of a longer run, before the `…`
NOTE_CAP = 4000  # characters of one value listed below a table (a longer one says where it is whole)

_SHOWN: ContextVar[Callable[[str], str] | None] = ContextVar("shown", default=None)


@contextmanager
def shown_as(clean: Callable[[str], str]) -> Iterator[None]:
    """While rendering: every untrusted text entering a primitive is first passed through `clean`."""
    token = _SHOWN.set(clean)
    try:
        yield
    finally:
        _SHOWN.reset(token)


# C0 controls but tab, line feed and carriage return (which a primitive turns into a line's end or drops); DEL;
# C1 controls; the bidirectional marks, embeddings, overrides and isolates ("Trojan Source").
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _picture(ch: str) -> str:
    o = ord(ch)
    return chr(0x2400 + o) if o < 0x20 else "␡" if o == 0x7F else f"<U+{o:04X}>"


def visible(text: str) -> str:
    """A text's control characters as visible pictures of themselves: ESC as `␛`, a C1 or bidi control as
    `<U+202E>`; every other character, tab and line breaks included, as it is."""
    return _CONTROL.sub(lambda m: _picture(m.group(0)), text)


def shown(text: str | None) -> str:
    """Untrusted text as it may be shown (see `shown_as`), its control characters visible."""
    t = visible(text or "")
    clean = _SHOWN.get()
    return clean(t) if clean is not None and t else t


_MD_PUNCT = re.compile(r"([\\*_\[\]~|])")
# What GitHub reads as a mention (a user's or a team's), wherever a word does not run into the `@` (an e-mail
# address is no mention): it is kept whole in a code span, where GitHub mentions no one.
_MENTION = re.compile(r"(?<![A-Za-z0-9_])@[A-Za-z0-9][A-Za-z0-9-]*(?:/[A-Za-z0-9][A-Za-z0-9_.-]*)?")


def _escaped(t: str) -> str:
    out, pos = [], 0
    for m in _MENTION.finditer(t):
        out += [_punct(t[pos:m.start()]), f"`{m.group(0)}`"]
        pos = m.end()
    return "".join([*out, _punct(t[pos:])])


def _punct(t: str) -> str:
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
        if len(value) > NOTE_CAP:  # a report fits one comment: the JSON beside it keeps every value whole
            value = (f"{value[:NOTE_CAP - 1]}… ({len(value):,} characters in all; the whole value is in the JSON "
                     "beside this report)")
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
        if cut and len(piece) >= room:  # the value cut at its length: in full below the table
            out.append(_escaped(piece[: room - 1]) + "…" + (notes.add(t) if notes is not None else ""))
            break
        out.append(_escaped(piece) + (notes.add(whole) if notes and whole else ""))
        room -= len(piece)
    return "".join(out)


def code(text: str | None, limit: int = CELL, in_table: bool = False) -> str:
    """Untrusted text as one inline code span: one line, shortened; a backtick, which would end the span,
    becomes a quote; `in_table`: a `|`, which would end the column even inside a span, is escaped (GitHub
    shows it as `|`)."""
    t = plain(text, limit).replace("`", "'")
    return "`" + (t.replace("|", "\\|") if in_table else t) + "`"


def plain(text: str | None, limit: int = CELL) -> str:
    """Untrusted text as one line inside a code block (a text picture): one line, shortened, nothing escaped
    (a code block shows every character as it is, a backslash included)."""
    t = shown(text).replace("\r", "").replace("\n", " ⏎ ")
    return t if len(t) <= limit else t[: limit - 1] + "…"


def fence(text: str, lang: str = "text") -> str:
    """Untrusted text as a code block that no content can close early: one backtick more than the longest run
    inside."""
    text = shown(text)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


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
