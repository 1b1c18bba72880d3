"""Per-output degeneration analysis: loops, collapse, garbage, and a label with its evidence.

Pure functions over one string. Everything here must stay fast (thousands of 512-token outputs a
second on one core), so the heavy lifting is done by C-level string operations: ``str.rfind`` to
propose a loop period, slice comparison to measure how far the loop extends, ``zlib`` for
compressibility and ``set`` for n-gram counts. There is no O(n^2) Python loop.
"""

from __future__ import annotations

import dataclasses
import re
import zlib
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

LABELS = ("healthy", "late_loop", "degenerate")


@dataclass(frozen=True)
class Thresholds:
    """Named settings of the labeller; a recipe overrides any of them by name.

    Every length is in characters of the decoded text unless the name says otherwise.
    """

    #: A loop must repeat its unit at least this many times (the first copy counts) to be evidence.
    min_repeats: int = 3
    #: ... and span at least this many characters, so that "ha ha ha" or "---" is not a loop.
    min_loop_chars: int = 40
    #: ... and cover at least this fraction of the output.
    min_coverage: float = 0.2
    #: A loop whose first character lies at or before this offset started "from the start": a broken
    #: model loops before it has written a sentence (the corpus' broken models do so within ~80 chars).
    early_onset_chars: int = 80
    #: A unit this short (or one word) repeated is a collapse ("amamam", "CopsCops", "!!!!") wherever
    #: it starts: a healthy model does not repeat a single word or a syllable dozens of times.
    collapse_unit_chars: int = 4
    #: Repeats of a single word needed to call a one-word loop a collapse.
    collapse_min_repeats: int = 8
    #: A short output that is mostly one tiny unit ("CÃÃÃÃÃÃÃÃ…", 24 chars from 48 tokens of a broken head)
    #: is a collapse even below ``min_loop_chars``, once the unit repeats ``collapse_min_repeats`` times and
    #: covers this fraction of the output; a markdown rule ("--------") inside an answer covers far less.
    collapse_min_coverage: float = 0.5
    #: Fraction of characters that are replacement characters, control bytes or mojibake above which
    #: the output is garbage.
    garbage_max: float = 0.05
    #: A late loop is the healthy model repeating itself only if the prefix before it looks sensible:
    #: its "sensibleness" score (0..1, see ``prefix_sensibleness``) must reach this value ...
    min_prefix_sensibleness: float = 0.7
    #: ... and the repeated unit must be sentence- or line-like (ends a sentence or a line, has at
    #: least this many words). Healthy models repeat whole lines; broken ones repeat fragments.
    late_loop_min_unit_words: int = 4
    #: A late loop covering more than this fraction of the output is degenerate whatever came before:
    #: the sensible part was a short preamble to a runaway loop.
    late_loop_max_coverage: float = 0.9
    #: Without a qualifying exact loop, an output of at least ``approx_min_words`` words is still
    #: degenerate when this share of its 4-grams repeat earlier ones (seq-rep-4): a loop whose unit
    #: keeps mutating ("she feels bad ... he feels sad ..."). Healthy answers stay well below 0.3.
    max_seq_rep_4: float = 0.5
    approx_min_words: int = 20
    #: Outputs with a loop below the thresholds above are still degenerate when the text compresses
    #: this well (zlib ratio) *and* has this few distinct words: repetition without an exact loop.
    max_compression_ratio: float = 6.0
    min_distinct_1: float = 0.08

    @classmethod
    def from_overrides(cls, overrides: dict[str, float | int] | None) -> Thresholds:
        if not overrides:
            return cls()
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(k for k in overrides if k not in names)
        if unknown:
            raise ValueError(
                f"unknown degeneration threshold(s) {', '.join(unknown)}; valid names: {', '.join(names)}"
            )
        typed: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name in overrides:
                value = overrides[f.name]
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError(f"threshold {f.name} must be a number, got {value!r}")
                typed[f.name] = int(value) if f.type in ("int", int) else float(value)
        return cls(**typed)


@dataclass(frozen=True)
class Loop:
    """The dominant exact repetition in an output."""

    unit: str  # one copy of the repeated text, as it first appears in the run
    period_chars: int
    period_words: int
    period_tokens: int | None  # only when token ids were given
    onset_char: int  # where the periodic run begins
    onset_word: int
    repeats: int  # copies of the unit in the run (a trailing partial copy is not counted)
    coverage: float  # fraction of the output's characters inside the run


@dataclass(frozen=True)
class OutputAnalysis:
    label: str  # "healthy" | "late_loop" | "degenerate"
    reason: str
    evidence: tuple[str, ...]
    metrics: dict[str, float] = field(default_factory=dict)
    loop: Loop | None = None


# --- loop detection -------------------------------------------------------------------------------

# Window sizes used to propose a period: a short window finds syllable loops ("amam"), a long one
# skips internal repeats of a long unit ("a place where the sea is a place").
_WINDOWS = (4, 12, 32, 64)
# Anchors (fractions of the length) where a loop that stops before the end is looked for.
_ANCHORS = (0.5, 0.75)
_ANCHOR_WINDOWS = (12, 64)
_LONG_REPEAT = 48


def _periodic_run(s: str, anchor: int, k: int) -> tuple[int, int, int] | None:
    """The maximal run ``[start, end)`` of period ``p`` containing ``s[anchor:anchor+k]``.

    ``p`` is the distance to the nearest earlier copy of the window. Periodicity (s[i] == s[i+p]) is
    monotone in the run's ends, so each end is found by binary search with C-speed slice compares.
    """
    n = len(s)
    if anchor < 1 or anchor + k > n:
        return None
    window = s[anchor : anchor + k]
    prev = s.rfind(window, 0, anchor + k - 1)
    if prev < 0:
        return None
    p = anchor - prev
    return _extend_back(s, prev, p), _extend_forward(s, anchor + k, p), p


# Runs are found by galloping (steps of 16, 32, 64, ... chars) and then bisecting the last step, so
# a window that recurs by chance costs two short compares, not a full binary search.
def _extend_forward(s: str, good: int, p: int) -> int:
    """Largest end such that s[i] == s[i - p] for every i in [good, end)."""
    n = len(s)
    step = 16
    while good < n:
        hi = min(n, good + step)
        if s[good:hi] != s[good - p : hi - p]:
            lo = good  # the answer lies in [good, hi - 1]
            hi -= 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if s[good:mid] == s[good - p : mid - p]:
                    lo = mid
                else:
                    hi = mid - 1
            return lo
        good, step = hi, step * 2
    return n


def _extend_back(s: str, good: int, p: int) -> int:
    """Smallest start such that s[i] == s[i + p] for every i in [start, good)."""
    step = 16
    while good > 0:
        lo = max(0, good - step)
        if s[lo:good] != s[lo + p : good + p]:
            hi = good  # the answer lies in [lo + 1, good]
            lo += 1
            while lo < hi:
                mid = (lo + hi) // 2
                if s[mid:good] == s[mid + p : good + p]:
                    hi = mid
                else:
                    lo = mid + 1
            return lo
        good, step = lo, step * 2
    return 0


def _best_run(s: str) -> tuple[int, int, int] | None:
    """The periodic run covering most characters; ties go to the shorter period."""
    n = len(s)
    best: tuple[int, int, int] | None = None
    probes = [(n - k, k) for k in _WINDOWS] + [(int(n * f), k) for f in _ANCHORS for k in _ANCHOR_WINDOWS]
    for a, k in probes:
        if best is not None and 2 * (best[1] - best[0]) >= n:
            break  # a run elsewhere cannot be longer than one covering half the output
        run = _periodic_run(s, a, k)
        if run is None:
            continue
        start, end, p = run
        # Two whole copies make a loop; so does one copy followed by a long verbatim repeat
        # (a long sentence said twice, cut off by the token limit).
        if end - start < 2 * p and end - start - p < _LONG_REPEAT:
            continue
        if best is None or (end - start, -p) > (best[1] - best[0], -best[2]):
            best = run
    return best


def _rotate_to_word(unit: str) -> str:
    """Rotate a loop unit to start where a reader would: after a line or sentence end, else at a word."""
    if len(unit) < 3:
        return unit
    cut = unit.rfind("\n")
    if cut < 0:
        ends = [m.end() - 1 for m in _SENTENCE_END.finditer(unit)]
        if ends:
            cut = ends[-1]
        elif unit[0].isspace():
            cut = len(unit) - len(unit.lstrip()) - 1
        else:
            cut = unit.rfind(" ")
    return unit if cut < 0 else unit[cut + 1 :] + unit[: cut + 1]


def _find_loop(text: str, token_ids: list[int] | None) -> tuple[Loop, int] | None:
    run = _best_run(text)
    if run is None:
        return None
    start, end, p = run
    period_tokens = None
    if token_ids:
        # Token ids map to code points so the same string machinery finds the token period.
        tok = "".join(map(chr, (t % 0x110000 for t in token_ids)))
        trun = _best_run(tok)
        period_tokens = trun[2] if trun else None
    unit = _rotate_to_word(text[start : start + p])
    loop = Loop(
        unit=unit,
        period_chars=p,
        period_words=max(1, len(unit.split())),
        period_tokens=period_tokens,
        onset_char=start,
        onset_word=len(text[:start].split()),
        repeats=max(2, round((end - start) / p)),
        coverage=round((end - start) / len(text), 4),
    )
    return loop, end


def find_loop(text: str, token_ids: list[int] | None = None) -> Loop | None:
    """The dominant exact repetition in ``text`` (a unit followed by at least a long partial copy)."""
    found = _find_loop(text, token_ids)
    return found[0] if found else None


# --- text statistics ------------------------------------------------------------------------------

# Replacement characters, C0/C1 controls other than whitespace, and the usual UTF-8-read-as-Latin-1
# pairs ("Ã©", "â€™") are what a broken detokenizer or a wrong logit head produces.
_GARBAGE = re.compile(r"[\ufffd\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|Ã[\x80-\xbf¡-¿]|â€")
# A repeated syllable inside a word ("amamam", "CocCocCoc", "ッッッッ"): the mark of a collapsing head.
_STUTTER = re.compile(r"([^\W\d_])\1{3,}|([^\W\d_]{2,3})\2\2", re.IGNORECASE)
_NOT_CONTROL = bytes(b for b in range(256) if b in (9, 10, 13) or 32 <= b < 127)
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")
# A sentence or line end: newline, or . ! ? that is not part of an ellipsis.
_SENTENCE_END = re.compile(r"\n|(?<![.])[.!?](?![.])(?:\s|$)")
_COMMON_WORDS = """a an the and or but if of to in on at by for with from as is are was were be been being it its
    this that these those there here which who what when where why how not no so than then also can
    will would should could may might must do does did has have had i you he she we they them his her
    their our your my me us him one two all some many more most other such each any very only into
    about over after before between through during while because like used use make made new time
    first most way water life people world well just up out"""
_COMMON = frozenset(_COMMON_WORDS.split())


def prefix_sensibleness(prefix: str) -> tuple[float, list[str]]:
    """How much ``prefix`` reads like the start of a normal answer, 0..1, with the cues that count.

    Cues (each worth a share): a completed sentence or line, balanced parentheses, a plausible share
    of common function words, plausible word lengths, and few words that are repeated syllables.
    """
    cues: list[str] = []
    words = _WORD.findall(prefix)
    if not words:
        return 0.0, ["no words before the loop"]
    score = 0.0
    if _SENTENCE_END.search(prefix):
        score += 0.3
        cues.append("a finished sentence before the loop")
    if prefix.count("(") <= prefix.count(")"):
        score += 0.2
    else:
        cues.append("an unclosed parenthesis")
    common = sum(map(_COMMON.__contains__, map(str.lower, words))) / len(words)
    if common >= 0.25:
        score += 0.2
    else:
        cues.append(f"few common words ({common:.0%})")
    mean_len = sum(map(len, words)) / len(words)
    if 3.0 <= mean_len <= 7.5:
        score += 0.15
    else:
        cues.append(f"odd mean word length {mean_len:.1f}")
    # One regex pass over the prefix instead of a per-word Python check.
    stutter = len(_STUTTER.findall(prefix)) / len(words)
    if stutter == 0:
        score += 0.15
    else:
        cues.append(f"{stutter:.0%} stuttering words")
    return round(score, 3), cues


def text_metrics(text: str) -> dict[str, float]:
    """Repetition and garbage statistics; all are cheap enough to compute for every output."""
    words = text.split()
    m = _basic_metrics(text, len(words))
    m.update(_ngram_metrics(words))
    return m


def _basic_metrics(text: str, n_words: int) -> dict[str, float]:
    raw = text.encode("utf-8", "surrogatepass")
    m: dict[str, float] = {"n_chars": float(len(text)), "n_words": float(n_words)}
    # Level 1 is several times faster than the default and ranks repetitiveness the same way.
    m["compression_ratio"] = round(len(raw) / len(zlib.compress(raw, 1)), 4) if raw else 0.0
    m["garbage_fraction"] = round(_garbage_chars(text, raw) / len(text), 4) if text else 0.0
    return m


def _ngram_metrics(words: list[str]) -> dict[str, float]:
    """distinct-1/2 and seq-rep-4: the costliest statistics (sets of n-grams), so `analyze` asks for
    them only when no exact loop has already decided the label."""
    nw = len(words)
    m = {"distinct_1": round(len(set(words)) / nw, 4) if nw else 0.0,
         "distinct_2": round(len(set(pairwise(words))) / (nw - 1), 4) if nw > 1 else 0.0}
    # seq-rep-4: the share of 4-grams that already occurred earlier in the output.
    n4 = nw - 3
    m["seq_rep_4"] = (
        round(1 - len(set(zip(words, words[1:], words[2:], words[3:]))) / n4, 4) if n4 > 0 else 0.0
    )
    return m


def _garbage_chars(text: str, raw: bytes) -> int:
    # Pure ASCII text can only hold control bytes, counted by deleting every other byte (C speed);
    # the slower mojibake scan is for the rest.
    if text.isascii():
        return len(raw.translate(None, _NOT_CONTROL))
    return sum(len(g) for g in _GARBAGE.findall(text))


# --- the label ------------------------------------------------------------------------------------


def _quote(unit: str, limit: int = 40) -> str:
    shown = unit if len(unit) <= limit else unit[: limit - 1] + "…"
    return '"' + shown.replace("\n", "\\n") + '"'


def _loop_phrase(loop: Loop) -> str:
    return (
        f"loops from char {loop.onset_char}: {_quote(loop.unit)} x {loop.repeats} "
        f"(coverage {loop.coverage:.0%})"
    )


def _sentence_like(unit: str, th: Thresholds) -> bool:
    # The unit is doubled so that a boundary straddling the wrap-around (and an ellipsis) reads right.
    doubled = unit + unit
    return bool(_SENTENCE_END.search(doubled, 0, len(unit) + 1)) and (
        len(_WORD.findall(unit)) >= th.late_loop_min_unit_words
    )


def analyze(
    text: str, thresholds: Thresholds | None = None, token_ids: list[int] | None = None
) -> OutputAnalysis:
    """Label one output healthy / late_loop / degenerate, with a one-line reason and the evidence."""
    th = thresholds or Thresholds()
    words = text.split()
    metrics = _basic_metrics(text, len(words))
    if not text.strip():
        what = "empty output" if not text else f"whitespace-only output ({len(text)} chars)"
        return OutputAnalysis("degenerate", what, (what,), metrics, None)

    evidence: list[str] = []
    if metrics["garbage_fraction"] > th.garbage_max:
        reason = (
            f"non-text garbage: {metrics['garbage_fraction']:.0%} replacement/control/mojibake characters"
        )
        return OutputAnalysis("degenerate", reason, (reason,), metrics, find_loop(text, token_ids))

    found = _find_loop(text, token_ids)
    loop, loop_end = found if found else (None, 0)
    if loop is not None:
        metrics["loop_coverage"] = loop.coverage
        metrics["loop_onset_char"] = float(loop.onset_char)
        metrics["loop_period_chars"] = float(loop.period_chars)
        metrics["loop_repeats"] = float(loop.repeats)
    if (
        loop is not None
        and loop.period_chars <= th.collapse_unit_chars
        and loop.repeats >= th.collapse_min_repeats
        and loop.coverage >= th.collapse_min_coverage
        and loop.period_chars * loop.repeats < th.min_loop_chars  # longer ones are judged below
    ):
        phrase = _loop_phrase(loop)
        return OutputAnalysis("degenerate", f"collapse: {phrase}", (phrase,), metrics, loop)
    significant = (
        loop is not None
        and loop.repeats >= th.min_repeats
        and loop.period_chars * loop.repeats >= th.min_loop_chars
        and loop.coverage >= th.min_coverage
    )
    if loop is not None and significant:
        phrase = _loop_phrase(loop)
        evidence.append(phrase)
        tiny = loop.period_chars <= th.collapse_unit_chars
        one_word = loop.period_words == 1 and loop.repeats >= th.collapse_min_repeats
        if tiny or one_word:
            return OutputAnalysis("degenerate", f"collapse: {phrase}", tuple(evidence), metrics, loop)
        if loop.onset_char <= th.early_onset_chars:
            return OutputAnalysis("degenerate", phrase, tuple(evidence), metrics, loop)
        prefix = text[: loop.onset_char]
        sense, cues = prefix_sensibleness(prefix)
        metrics["prefix_sensibleness"] = sense
        evidence.append(f"prefix sensibleness {sense:.2f}" + (f" ({'; '.join(cues)})" if cues else ""))
        sentence_like = _sentence_like(loop.unit, th)
        evidence.append(f"repeated unit {'is' if sentence_like else 'is not'} a whole sentence or line")
        if loop.coverage > th.late_loop_max_coverage:
            return OutputAnalysis(
                "degenerate", f"{phrase}; the loop is nearly all of it", tuple(evidence), metrics, loop
            )
        if sense >= th.min_prefix_sensibleness and sentence_like:
            return OutputAnalysis(
                "late_loop", f"late loop after sensible text: {phrase}", tuple(evidence), metrics, loop
            )
        return OutputAnalysis("degenerate", f"{phrase} after odd text", tuple(evidence), metrics, loop)

    if (
        loop is not None
        and loop_end == len(text)
        and loop.period_chars * (loop.repeats - 1) >= th.min_loop_chars
        and _sentence_like(loop.unit, th)
        and prefix_sensibleness(text[: loop.onset_char])[0] >= th.min_prefix_sensibleness
    ):
        # Fewer copies than a loop needs, but the output ends by saying a whole sentence again:
        # the healthy model had started to loop when the token limit (or a stop) cut it off.
        phrase = _loop_phrase(loop)
        return OutputAnalysis("late_loop", f"ends by repeating itself: {phrase}", (phrase,), metrics, loop)
    metrics.update(_ngram_metrics(words))
    if metrics["seq_rep_4"] >= th.max_seq_rep_4 and metrics["n_words"] >= th.approx_min_words:
        reason = (
            f"repetitive without an exact loop: {metrics['seq_rep_4']:.0%} of 4-word sequences repeat "
            f"(seq-rep-4), distinct-2 {metrics['distinct_2']:.2f}"
        )
        return OutputAnalysis("degenerate", reason, (reason,), metrics, loop)
    if (
        metrics["compression_ratio"] >= th.max_compression_ratio
        and metrics["distinct_1"] <= th.min_distinct_1
    ):
        reason = (
            f"repetitive without an exact loop: compression ratio {metrics['compression_ratio']:.1f}, "
            f"distinct-1 {metrics['distinct_1']:.2f}"
        )
        return OutputAnalysis("degenerate", reason, (reason,), metrics, loop)
    if loop is not None:
        evidence.append(f"minor repetition: {_loop_phrase(loop)}")
    return OutputAnalysis("healthy", "no loop, collapse or garbage", tuple(evidence), metrics, loop)
