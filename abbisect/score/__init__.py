"""Scoring: per-output degeneration, log signatures, A/B comparison, known answers and eval answers (read by
an item's rule and graded: `extract`, `graded`)."""

from abbisect.score.answers import AnswerCheck, check_answer, extract, graded
from abbisect.score.compare import Divergence, Resemblance, divergence, resemblance, similarity
from abbisect.score.degeneration import (
    LABELS,
    Loop,
    OutputAnalysis,
    Thresholds,
    analyze,
    find_loop,
    prefix_sensibleness,
    text_metrics,
)
from abbisect.score.signatures import (
    SEVERITIES,
    Signature,
    SignatureDiff,
    SignatureMatch,
    diff_signatures,
    first_exception,
    load_catalogue,
    scan_text,
    severity_at_least,
)

__all__ = [
    "LABELS",
    "SEVERITIES",
    "AnswerCheck",
    "Divergence",
    "Loop",
    "OutputAnalysis",
    "Resemblance",
    "Signature",
    "SignatureDiff",
    "SignatureMatch",
    "Thresholds",
    "analyze",
    "check_answer",
    "diff_signatures",
    "divergence",
    "extract",
    "find_loop",
    "first_exception",
    "graded",
    "load_catalogue",
    "prefix_sensibleness",
    "resemblance",
    "scan_text",
    "severity_at_least",
    "similarity",
    "text_metrics",
]
