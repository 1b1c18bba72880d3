"""Stage 6 — verdict: every signal of one side folded into a status, and the status into good/bad/skip.

Pure functions: the same evidence always gives the same verdict, and the reasons say why.
"""

from __future__ import annotations

from dataclasses import dataclass

from abbisect.recipe import Verdicts
from abbisect.recipe.status import Outcome, Status

# A kernel probe's outcome (decided by its own `probe.bad_if`, abbisect/gpu/kernel_probe.py) as a status: a kernel
# that does not fit a target is the commit's fault, a probe that measured nothing in scope leaves it untested.
PROBE_STATUS = {"good": Status.OK, "bad": Status.DOES_NOT_FIT, "skip": Status.INFRA_ERROR}


@dataclass(frozen=True)
class Signals:
    """The signals of one side, reduced to what the verdict needs (built by the trial)."""

    build_ok: bool
    build_error: str | None
    ready: str | None  # "ready" | "exited" | "timeout" | None (never launched)
    rejected_flags: tuple[str, ...]
    first_exception: str | None
    n_outputs: int
    n_errors: int
    degenerate: tuple[str, ...]  # "prompt id: reason" per degenerate output
    late_loops: tuple[str, ...]
    answer_misses: tuple[str, ...]
    serious_signatures: tuple[str, ...]  # "id (line N)" at or above the recipe's warn severity
    bad_signatures: tuple[str, ...]  # ids the recipe names as bad, whatever their severity
    # The server's main process exited after ready: its exit code, and the request open at that moment
    # (or the last one answered before it was seen dead).
    exited_while_serving: bool = False
    exit_code: int | None = None
    crash_prompt: str | None = None
    crash_after: str | None = None
    request_errors: tuple[str, ...] = ()  # "prompt id: error" of requests that failed on a living server
    # "perf pass N: …" of the performance passes whose requests failed beyond perf.error_threshold, of n_passes
    failed_passes: tuple[str, ...] = ()
    n_passes: int = 0
    batch_variant: tuple[str, ...] = ()  # "prompt id: …" whose answer changed with the requests in flight


@dataclass(frozen=True)
class Verdict:
    status: Status
    outcome: Outcome
    reasons: tuple[str, ...]


SHOWN = 8  # items of one kind a verdict lists before it says how many more


def _listed(items: tuple[str, ...]) -> list[str]:
    """Every item up to SHOWN, then one line saying how many more (a count is never followed by fewer)."""
    unlisted = len(items) - SHOWN
    return [*items[:SHOWN], *([f"… and {unlisted} more (all in results.json)"] if unlisted > 0 else [])]


def status_of(ev: Signals, degenerate_fraction: float) -> tuple[Status, list[str]]:
    if not ev.build_ok:
        return Status.BUILD_FAILED, [f"venv build failed: {ev.build_error}"]
    if ev.ready == "exited":
        if ev.rejected_flags:
            return Status.FLAG_REJECTED, [f"the engine rejected flag(s) {', '.join(ev.rejected_flags)} (flag drift)"]
        return Status.CRASHED_AT_STARTUP, [f"server exited before ready: {ev.first_exception or 'see log tail'}"]
    if ev.ready == "timeout":
        return Status.TIMEOUT, ["server never became ready within the ready timeout"]
    if ev.exited_while_serving:
        where = (f"while serving prompt {ev.crash_prompt}" if ev.crash_prompt
                 else f"after prompt {ev.crash_after}" if ev.crash_after else "before the first request")
        sigs = list(dict.fromkeys(ev.bad_signatures + ev.serious_signatures))
        return Status.CRASHED_WHILE_SERVING, [(f"server exited (code {ev.exit_code}) {where}: "
                                          f"{ev.first_exception or 'see the log lines below'}"),
                                         *([f"log signatures: {', '.join(sigs[:5])}"] if sigs else [])]
    if ev.request_errors or ev.failed_passes:
        said = []
        if ev.failed_passes:
            said += [(f"{len(ev.failed_passes)}/{ev.n_passes} perf pass(es) failed their requests while the server "
                      "stayed up"), *_listed(ev.failed_passes)]
        if ev.request_errors:
            said += [(f"{len(ev.request_errors)}/{ev.n_outputs} request(s) failed while the server stayed up"),
                     *_listed(ev.request_errors)]
        return Status.REQUEST_ERRORS, said
    reasons: list[str] = []
    if ev.n_outputs and len(ev.degenerate) / ev.n_outputs >= degenerate_fraction:
        return Status.DEGENERATE, [f"{len(ev.degenerate)}/{ev.n_outputs} outputs degenerate", *_listed(ev.degenerate)]
    if ev.degenerate:
        reasons.append(f"{len(ev.degenerate)}/{ev.n_outputs} outputs degenerate (below the "
                       f"{degenerate_fraction:.0%} threshold)")
    if ev.answer_misses:
        return Status.WRONG_ANSWER, [f"{len(ev.answer_misses)} expected answer(s) missing", *_listed(ev.answer_misses),
                                     *reasons]
    if ev.serious_signatures or ev.bad_signatures:
        sigs = list(dict.fromkeys(ev.bad_signatures + ev.serious_signatures))
        return Status.WARNED, [f"log signatures: {', '.join(sigs[:5])}", *reasons]
    if ev.batch_variant:
        return Status.BATCH_VARIANT, [f"{len(ev.batch_variant)} answer(s) change with the batch at temperature 0",
                                      *_listed(ev.batch_variant), *reasons]
    if ev.late_loops:
        reasons.append(f"{len(ev.late_loops)} output(s) loop late after sensible text (not counted as broken)")
    return Status.OK, reasons or ["no degenerate output, no serious log signature"]


def judge(ev: Signals, rules: Verdicts) -> Verdict:
    status, reasons = status_of(ev, rules.degenerate_fraction)
    if ev.batch_variant and status is not Status.BATCH_VARIANT:  # shown whatever decided the status
        reasons = [*reasons, f"also: {len(ev.batch_variant)} answer(s) change with the batch at temperature 0",
                   *_listed(ev.batch_variant)]
    rule = status.rule
    if rule in rules.skip_if:
        outcome = Outcome.SKIP
    elif (status is Status.WARNED and ev.bad_signatures) or rule in rules.bad_if:
        outcome = Outcome.BAD
    else:
        outcome = Outcome.GOOD
    return Verdict(status, outcome, tuple(reasons))
