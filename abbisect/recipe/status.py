"""A trial's status: what happened to one side, and every fact abbisect keeps about each kind of ending.

A `str` enum, so results.json, CSV and markdown keep the plain strings ("build_failed", "ok", …) and a
status compares equal to its string. Each member carries:

- `rule`: the name a recipe uses for it in `verdict.bad_if` / `verdict.skip_if` (None: no rule, the
  status decides its outcome alone);
- `default`: its outcome under the default verdicts ("good", "bad" or "skip");
- `may`: the outcomes a recipe may give it through `bad_if` / `skip_if` (a failed build cannot be bad:
  it says nothing about the engine's answers; a degenerate output cannot be skipped: it is the evidence);
- `cacheable`: the result says something about the commit, so the trial cache keeps it; a status the
  machine can cause is run again next time instead;
- `confirm_first`: cacheable only once a second attempt agrees (a loaded machine can cause it too);
- `bounded_by`: the `timeouts` key whose expiry it may be (a hung server, a build that ran out of time):
  timeouts are not part of the trial cache key, so a cached result of this status stands only for a run
  that would not have waited longer.

The recipe's rule lists, their defaults and the trial cache are all derived from this table, so a new
status is one new member here (cargo-bisect-rustc's documented `RegressOn` is the pattern).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Self


class Status(StrEnum):
    # The order is the order `verdict.status_of` decides them in: the first that applies wins.
    BUILD_FAILED = ("build_failed", "build_failed", "skip", ("skip",), True, False, "build")
    FLAG_REJECTED = ("flag_rejected", "flag_rejected", "skip", ("skip",), True)
    CRASHED_AT_STARTUP = ("crashed_at_startup", "crashed_at_startup", "bad", ("bad", "skip"), True)
    TIMEOUT = ("timeout", "timeout", "skip", ("bad", "skip"), True, True, "ready")
    # A server dying mid-run (the OOM killer) or a request failing (a loaded host's request timeout) can be
    # the machine's doing: never cached, the next run tries again.
    CRASHED_WHILE_SERVING = ("crashed_while_serving", "crashed_while_serving", "bad", ("bad", "skip"), False)
    # abbisect's own side failed (an executor lost, a kernel probe that measured nothing): may pass on a retry.
    INFRA_ERROR = ("infra_error", "infra_error", "skip", ("skip",), False)
    REQUEST_ERRORS = ("request_errors", "request_errors", "bad", ("bad", "skip"), False)
    DEGENERATE = ("degenerate", "degenerate", "bad", ("bad",), True)
    WRONG_ANSWER = ("wrong_answer", "answer_mismatch", "bad", ("bad",), True)
    WARNED = ("warned", "signature", "bad", ("bad",), True)
    # An answer that changes with the requests in flight at temperature 0 (query.batch_invariance): evidence,
    # good unless the recipe lists the rule in bad_if (these engines are not batch-invariant by design).
    BATCH_VARIANT = ("batch_variant", "batch_variant", "good", ("good", "bad"), True)
    OK = ("ok", None, "good", (), True)
    # A kernel probe's verdict (abbisect/gpu/kernel_probe.py): its own `probe.bad_if` decides, not the recipe's rules.
    DOES_NOT_FIT = ("does_not_fit", None, "bad", (), True)

    rule: str | None
    default: str
    may: tuple[str, ...]
    cacheable: bool
    confirm_first: bool
    bounded_by: str | None

    def __new__(cls, value: str, rule: str | None, default: str, may: tuple[str, ...], cacheable: bool,
                confirm_first: bool = False, bounded_by: str | None = None) -> Self:
        obj = str.__new__(cls, value)
        obj._value_ = value
        obj.rule, obj.default, obj.may = rule, default, may
        obj.cacheable, obj.confirm_first, obj.bounded_by = cacheable, confirm_first, bounded_by
        return obj


# Rules that are not a status: `differs_from_good` judges a bisect step by which end its outputs resemble
# (abbisect/assess/differs.py).
DIFFERS_FROM_GOOD = "differs_from_good"
RELATIVE_RULES = (DIFFERS_FROM_GOOD,)
BAD_RULES = tuple(s.rule for s in Status if s.rule and "bad" in s.may) + RELATIVE_RULES
SKIP_RULES = tuple(s.rule for s in Status if s.rule and "skip" in s.may)
DEFAULT_BAD_IF = [s.rule for s in Status if s.rule and s.default == "bad"]
DEFAULT_SKIP_IF = [s.rule for s in Status if s.rule and s.default == "skip"]


class Outcome(StrEnum):
    """What a trial says about its commit: good, bad, or untestable (skipped by a bisect). A `str` enum, so
    results keep the plain strings."""

    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"

    @property
    def exit(self) -> int:
        """The code `git bisect run` reads for it."""
        return {"good": 0, "bad": 1, "skip": 125}[self.value]

    def inverted(self) -> Outcome:
        """Good and bad swapped (a fix search's terms); a skip stays a skip."""
        return {Outcome.GOOD: Outcome.BAD, Outcome.BAD: Outcome.GOOD}.get(self, self)
