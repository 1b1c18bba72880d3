"""What one side's log-probabilities are, as data: a text's tokens with their log-probabilities and top-k
(`Scored`), and a launch's texts, the same texts in a batch, and its continuations (`NumericsRun`). Asked by
abbisect/query/logprobs.py, compared by abbisect/stats/logprobs.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Token:
    """One token of a scored text: its text, its log-probability (None for a text's first) and the top-k there."""

    text: str
    logprob: float | None
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Scored:
    """A text's tokens as one side scored them (`kind` "text": teacher-forced; "continuation": generated), or
    why it could not."""

    id: str
    kind: str
    prompt: str
    tokens: tuple[Token, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class NumericsRun:
    """A launch's log-probabilities: the texts one request at a time, the same texts `concurrency` at once (the
    launch's own noise floor), and the prompts' greedy continuations."""

    texts: tuple[Scored, ...]
    batched: tuple[Scored, ...]
    continuations: tuple[Scored, ...]

    @property
    def n_errors(self) -> int:
        return sum(s.error is not None for s in (*self.texts, *self.batched, *self.continuations))
