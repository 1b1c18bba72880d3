"""Known answers: a prompt may carry a regex its answer must match ("capital of France" -> Paris)."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class AnswerCheck:
    expected: str  # the regex
    passed: bool
    found: str | None  # the matched text, None on a miss


def check_answer(text: str, expected_regex: str) -> AnswerCheck:
    """Search ``text`` for ``expected_regex``, case-insensitively (write ``(?-i:...)`` to insist on case).

    A bad regex is a ValueError that quotes it, so a recipe typo is reported, not scored as a miss.
    """
    try:
        rx = re.compile(expected_regex, re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"bad expected-answer regex {expected_regex!r}: {exc}") from None
    m = rx.search(text)
    return AnswerCheck(expected=expected_regex, passed=m is not None, found=m.group(0) if m else None)
