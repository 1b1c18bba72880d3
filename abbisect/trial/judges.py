"""Verdicts decided outside the built-in rules: a user's script, or the user at the terminal.

As `git bisect run` and cargo-bisect-rustc's `--script`: the script gets the trial's JSON on stdin and
exits 0 good, 1–124/126/127 bad, 125 skip. A script that cannot run (not found, killed, timed out)
says nothing about the commit, so it is a skip with the reason, never bad. The interactive judge
shows the outputs (a candidate's beside both ends') and asks good/bad/skip/retry, as mozregression
and cargo-bisect-rustc's `--prompt` do. Either verdict replaces the built-in outcome; the built-in
status stays in the reasons as evidence.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path

import click

from abbisect.infra.errors import UserError
from abbisect.infra.proc import scrubbed_env
from abbisect.infra.serial import dump
from abbisect.recipe.status import Outcome
from abbisect.trial.spec import Progress, TrialResult, TrialSpec
from abbisect.verdict.rules import Verdict

_INTERPRETERS = ("python", "python3", "sh", "bash", "node", "perl", "ruby")


class Answer(StrEnum):
    """What a judge may answer: an outcome, or "retry" (run the trial again and ask again)."""

    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"
    RETRY = "retry"


@dataclass(frozen=True)
class Decision:
    outcome: Answer
    by: str  # "script `cmd`" | "interactive"
    reason: str


# A judge sees the trial and, in a bisect, the good and bad ends' results ({"good": …, "bad": …}).
Judge = Callable[[TrialResult, Mapping[str, TrialResult]], Decision]


def outcome_of_exit(code: int) -> Answer | None:
    """git bisect run's meaning of an exit status; None: the script itself failed (≥128 or killed)."""
    if code == 0:
        return Answer.GOOD
    if code == 125:
        return Answer.SKIP
    if 1 <= code <= 127:
        return Answer.BAD
    return None


@dataclass(frozen=True)
class Script:
    command: str
    cwd: str  # the recipe's folder for `verdict.script`, the current folder for --script
    timeout: float = 600.0

    @property
    def argv(self) -> list[str]:
        try:
            argv = shlex.split(self.command)
        except ValueError as exc:
            raise UserError(f"verdict script {self.command!r}: {exc}") from None
        if not argv:
            raise UserError("verdict script is empty")
        return argv

    def _missing(self, argv: list[str]) -> str | None:
        """An interpreter whose script file is missing would exit 1 or 2 — a false 'bad': caught first."""
        if Path(argv[0]).name.rstrip("0123456789.") in _INTERPRETERS and len(argv) > 1 \
                and not argv[1].startswith("-") and not (Path(self.cwd) / argv[1]).exists():
            return f"{argv[1]} not found in {self.cwd}"
        return None

    def __call__(self, result: TrialResult, ends: Mapping[str, TrialResult]) -> Decision:
        argv = self.argv
        by = f"script `{self.command}`"
        if (missing := self._missing(argv)) is not None:
            return Decision(Answer.SKIP, by, f"the script cannot run: {missing}")
        log = result.launch.log_path if result.launch else ""
        env = scrubbed_env({"ABBISECT_TRIAL_LOG": log if log and Path(log).is_file() else "",
                            "ABBISECT_TRIAL_DIR": result.spec.out_dir, "ABBISECT_TRIAL_SHA": result.spec.sha,
                            "ABBISECT_TRIAL_REF": result.spec.ref, "ABBISECT_TRIAL_STATUS": result.verdict.status,
                            "ABBISECT_TRIAL_OUTCOME": result.verdict.outcome})
        try:
            proc = subprocess.run(argv, input=json.dumps(dump(result), default=str), capture_output=True,
                                  text=True, cwd=self.cwd, env=env, timeout=self.timeout, check=False)
        except FileNotFoundError:
            return Decision(Answer.SKIP, by, f"the script cannot run: {argv[0]} not found")
        except PermissionError:
            return Decision(Answer.SKIP, by, f"the script cannot run: {argv[0]} is not executable")
        except subprocess.TimeoutExpired:
            return Decision(Answer.SKIP, by, f"the script did not finish within {self.timeout:.0f} s")
        said = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
        outcome = outcome_of_exit(proc.returncode)
        if outcome is None:
            tail = (proc.stderr.strip().splitlines() or [""])[-1][:200]
            return Decision(Answer.SKIP, by, f"the script failed itself (exit {proc.returncode}){': ' + tail if tail else ''}")
        return Decision(outcome, by, f"exit {proc.returncode}" + (f": {said[-1][:200]}" if said else ""))


def _line(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def show(result: TrialResult, ends: Mapping[str, TrialResult]) -> str:
    """A compact view of the trial's outputs, each beside the good and bad ends' where known."""
    v = result.verdict
    lines = [f"── {result.spec.side} {result.spec.sha[:10]} {_line(result.spec.subject, 60)}",
             f"   built-in verdict: {v.status} → {v.outcome} ({_line('; '.join(v.reasons), 120)})"]
    others = {k: {o.prompt_id: o for o in r.outputs} for k, r in ends.items() if r is not None}
    for o in result.outputs:
        lines.append(f"   [{o.prompt_id}] {_line(o.prompt, 60)}")
        lines.append(f"      this: {_line(o.error or o.text)}")
        for k, outs in others.items():
            if o.prompt_id in outs and outs[o.prompt_id].text != o.text:
                lines.append(f"      {k} end: {_line(outs[o.prompt_id].error or outs[o.prompt_id].text)}")
            elif o.prompt_id in outs:
                lines.append(f"      {k} end: (same)")
    if not result.outputs and result.launch:
        lines += [f"   log: {_line(t, 120)}" for t in result.launch.log_tail[-5:]]
    return "\n".join(lines)


def interactive(result: TrialResult, ends: Mapping[str, TrialResult]) -> Decision:
    click.echo(show(result, ends), err=True)
    try:
        answer = click.prompt("good, bad, skip or retry?", type=click.Choice(["good", "bad", "skip", "retry"]),
                              err=True)
    except click.Abort:
        raise UserError("--interactive: no answer on stdin (it was closed)") from None
    return Decision(Answer(answer), "interactive", "answered at the terminal")


def make_judge(script: str | None, interactive_mode: bool, cwd: Path | str) -> Judge | None:
    if script and interactive_mode:
        raise UserError("choose one judge: a verdict script or --interactive, not both")
    if script:
        judge = Script(script, str(cwd))
        _ = judge.argv  # a malformed command is a usage error before anything runs
        return judge
    return interactive if interactive_mode else None


def rejudged(result: TrialResult, d: Decision) -> TrialResult:
    """The result with the judge's outcome; the built-in status and reasons kept as evidence."""
    v = result.verdict
    reasons = (f"{d.by}: {d.outcome} ({d.reason})", f"built-in: {v.status} → {v.outcome}", *v.reasons)
    extras = replace(result.extras, judge={"by": d.by, "outcome": d.outcome, "reason": d.reason, "builtin": dump(v)})
    return replace(result, verdict=Verdict(v.status, Outcome(d.outcome.value), reasons), extras=extras)


def judging(fetch: Callable[[TrialSpec, Progress], TrialResult], judge: Judge | None,
            rerun: Callable[[TrialSpec, Progress], TrialResult]) -> Callable[[TrialSpec, Progress], TrialResult]:
    """A trial runner whose results carry the judge's verdict (`rerun` serves "retry": never the cache)."""
    if judge is None:
        return fetch

    def runner(spec: TrialSpec, progress: Progress) -> TrialResult:
        return apply(judge, fetch(spec, progress), lambda: rerun(spec, progress))

    return runner


def apply(judge: Judge, result: TrialResult, rerun: Callable[[], TrialResult],
          ends: Mapping[str, TrialResult] | None = None) -> TrialResult:
    """Ask the judge; "retry" runs the trial again (never from the cache) and asks again."""
    while True:
        d = judge(result, ends or {})
        if d.outcome is not Answer.RETRY:
            return rejudged(result, d)
        result = rerun()
