"""Known answers: a prompt may carry a regex its answer must match ("capital of France" -> Paris), and an eval
item says how its answer is read from an output (`extract`) and whether what was read is right (`graded`).

Extraction rules (an eval item's `extract`):

- "last_number": the output's last number (commas dropped, a leading minus kept, "7.50" read as "7.5"), as
  lm-evaluation-harness's flexible GSM8K filter reads the last number; the reference is read the same way,
  so "1,234" and "1234" are one answer.
- "regex:P": the first match of P, searched case-insensitively as a prompt's `expect` is; its first group if P
  has one (lm-evaluation-harness's regex filters take a group), else the whole match, lower-cased. Compared
  with the reference lower-cased (and as numbers when both are numbers).
- "choice": the letter of a multiple-choice answer ("The answer is (B)", "B. Paris", "(B)"), else the one
  choice whose text the output names; compared with the reference letter.

Everything here is pure: the query stage sends, the verdict decides, this only reads text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Protocol

RULES = ("last_number", "choice", "regex:PATTERN")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
DEFAULT_LETTERS = 4  # a choice item without its choices listed answers A–D


@dataclass(frozen=True)
class AnswerCheck:
    expected: str  # the regex
    passed: bool
    found: str | None  # the matched text, None on a miss


def check_answer(text: str, expected_regex: str) -> AnswerCheck:
    """Search ``text`` for ``expected_regex``, case-insensitively (write ``(?-i:...)`` to insist on case).

    A bad regex is a ValueError that quotes it, so a recipe typo is reported, not scored as a miss.
    """
    rx = _compiled(expected_regex, "expected-answer")
    m = rx.search(text)
    return AnswerCheck(expected=expected_regex, passed=m is not None, found=m.group(0) if m else None)


def _compiled(pattern: str, what: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"bad {what} regex {pattern!r}: {exc}") from None


def check_rule(rule: str) -> str:
    """The rule itself when it is one `extract` knows (a regex compiled once here); a ValueError otherwise."""
    if rule in ("last_number", "choice"):
        return rule
    if rule.startswith("regex:"):
        _compiled(rule[len("regex:"):], "extract")
        return rule
    raise ValueError(f"unknown extract rule {rule!r}; valid: {', '.join(RULES)}")


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _number(text: str) -> str:
    """A number's one spelling: "007" → "7", "7.50" → "7.5", "-0" → "0"."""
    d = Decimal(text).normalize()
    if d == 0:
        return "0"
    return f"{d:f}"


def last_number(text: str) -> str | None:
    numbers = _NUMBER.findall(text.replace(",", ""))
    return _number(numbers[-1]) if numbers else None


def _letters(choices: Sequence[str] | None) -> str:
    return LETTERS[: len(choices) if choices else DEFAULT_LETTERS]


def choice_letter(text: str, choices: Sequence[str] | None = None) -> str | None:
    """The answer letter of a multiple-choice output, or None.

    In order: "answer is (B)" / "Answer: B" (the last such), an output that starts with the letter ("B",
    "B.", "B)", "(B) Paris"), a letter in parentheses anywhere (the last), the one choice whose text the output
    names as whole words. A lone capital "A" inside a sentence is never read: it is the article as often as
    the answer.
    """
    valid = _letters(choices)
    cls = f"[{valid}]"
    said = re.findall(rf"(?i:answer)\s*(?:is|:)?\s*[:\-]?\s*\(?({cls})\)?(?![A-Za-z])", text)
    if said:
        return said[-1]
    lead = re.match(rf"\s*\(?({cls})(?:[.):]|\s*$)", text)
    if lead:
        return lead.group(1)
    inside = re.findall(rf"\(({cls})\)", text)
    if inside:
        return inside[-1]
    if choices:
        named = [valid[i] for i, c in enumerate(choices)
                 if c.strip() and re.search(rf"(?<!\w){re.escape(c.strip())}(?!\w)", text, re.IGNORECASE)]
        if len(named) == 1:
            return named[0]
    return None


def extract(rule: str, text: str, choices: Sequence[str] | None = None) -> str | None:
    """What `rule` reads from an output (the module's docstring has the rules); None when there is nothing to
    read. `choices` are a multiple-choice item's options (only "choice" uses them)."""
    if rule == "last_number":
        return last_number(text)
    if rule == "choice":
        return choice_letter(text, choices)
    if rule.startswith("regex:"):
        m = _compiled(rule[len("regex:"):], "extract").search(text)
        if m is None:
            return None
        got = m.group(1) if m.re.groups and m.group(1) is not None else m.group(0)
        return got.strip().lower()
    raise ValueError(f"unknown extract rule {rule!r}; valid: {', '.join(RULES)}")


class Gradable(Protocol):
    """What grading needs of an eval item (abbisect/recipe/eval.py's `EvalItem` is one)."""

    @property
    def answer(self) -> str: ...

    @property
    def extract(self) -> str: ...

    @property
    def choices(self) -> Sequence[str] | None: ...


def reference(item: Gradable) -> str:
    """The item's answer as its rule reads answers, so the two compare as strings.

    A choice item's answer may be its letter, its 0-based index or the text of one of its choices.
    """
    answer = item.answer.strip()
    if item.extract == "last_number":
        return last_number(answer) or answer
    if item.extract == "choice":
        valid = _letters(item.choices)
        if answer.upper() in valid and len(answer) == 1:
            return answer.upper()
        if answer.isdigit() and int(answer) < len(valid):
            return valid[int(answer)]
        for letter, text in zip(valid, item.choices or ()):
            if text.strip().lower() == answer.lower():
                return letter
        raise ValueError(f"answer {item.answer!r} is none of the choices' letters ({', '.join(valid)}), indexes "
                         "or texts")
    return _plain(answer.lower())


def _plain(value: str) -> str:
    """A regex's reading as compared: a number in its one spelling, anything else as it is."""
    try:
        return _number(value.replace(",", "")) if _NUMBER.fullmatch(value.replace(",", "")) else value
    except InvalidOperation:
        return value


def graded(item: Gradable, text: str | None) -> bool | None:
    """Whether the output `text` answers the item rightly; None when there is no output to grade (its request
    failed: a failure is never a wrong answer)."""
    if text is None:
        return None
    got = extract(item.extract, text, item.choices)
    if got is None:
        return False
    if item.extract.startswith("regex:"):
        got = _plain(got)
    return got == reference(item)
