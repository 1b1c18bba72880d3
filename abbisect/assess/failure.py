"""How a trial fails, as one line that is the same every time the same bug strikes: its status, the serious
log signatures it matched and, for a crash, its first exception line with what varies from run to run (numbers,
addresses, paths, quoted values) left out. A bisect compares a candidate's with its bad end's
(`verdict.same_failure`), so a second, different bug in the range is shown, not blamed (kernelci's bisect tool
is asked for exactly this)."""

from __future__ import annotations

import re
from collections import Counter

from abbisect.assess.base import Sample
from abbisect.recipe.status import Outcome, Status
from abbisect.score import severity_at_least
from abbisect.trial.spec import TrialResult

# Statuses whose first exception says how it failed; for the others (degenerate outputs, warnings) the log's
# first exception is incidental.
_CRASHES = {Status.CRASHED_AT_STARTUP, Status.CRASHED_WHILE_SERVING, Status.TIMEOUT, Status.REQUEST_ERRORS}
_VARYING = ((re.compile(r"0x[0-9a-fA-F]+"), "0x…"), (re.compile(r"(?:/[\w.+-]+){2,}"), "<path>"),
            (re.compile(r"'[^']*'|\"[^\"]*\""), "'…'"), (re.compile(r"\d+(?:\.\d+)?"), "N"))


def normalise(line: str) -> str:
    for pattern, placeholder in _VARYING:
        line = pattern.sub(placeholder, line)
    return " ".join(line.split())[:200]


def fingerprint(trial: TrialResult, warn: str = "error") -> str:
    """`crashed_at_startup | cuda_illegal_memory_access | RuntimeError: CUDA error: an illegal memory access…`"""
    status = trial.verdict.status
    signatures = sorted({s.id for s in trial.signatures if severity_at_least(s.severity, warn)
                         and s.id != "flag_rejected"})
    exception = normalise(trial.first_exception[1]) if trial.first_exception and status in _CRASHES else ""
    return " | ".join(part for part in (str(status), ",".join(signatures), exception) if part)


def sample_fingerprint(sample: Sample, warn: str = "error") -> str | None:
    """The commonest way a commit's failing trials fail (None when none failed)."""
    seen = Counter(fingerprint(t, warn) for t in sample if t.verdict.outcome == Outcome.BAD)
    return seen.most_common(1)[0][0] if seen else None
