"""Known log signatures: the packaged catalogue, scanning a log, the first exception, A/B diffs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml
from typing_extensions import TypedDict  # pydantic reads a TypedDict of typing_extensions on Python 3.11

SEVERITIES = ("info", "warning", "error", "fatal")
_FIELDS = ("id", "pattern", "severity", "engine", "meaning", "hint", "link")


@dataclass(frozen=True)
class Signature:
    id: str
    pattern: str
    severity: str
    engine: str
    meaning: str
    hint: str
    link: str


@dataclass(frozen=True)
class SignatureMatch:
    id: str
    severity: str
    line_no: int  # 1-based
    line: str
    groups: tuple[str, ...]  # the pattern's captured groups that took part in the match
    meaning: str
    hint: str


def severity_at_least(sev: str, threshold: str) -> bool:
    """True when ``sev`` is as bad as ``threshold`` or worse; unknown names are a ValueError."""
    for name in (sev, threshold):
        if name not in SEVERITIES:
            raise ValueError(f"unknown severity {name!r}; valid: {', '.join(SEVERITIES)}")
    return SEVERITIES.index(sev) >= SEVERITIES.index(threshold)


def _signature(d: dict[str, Any]) -> Signature:
    sid = str(d.get("id") or "").strip()
    if not sid:
        raise ValueError(f"signature without an id: {d!r}")
    unknown = sorted(set(d) - set(_FIELDS))
    if unknown:
        raise ValueError(
            f"signature {sid}: unknown field(s) {', '.join(unknown)}; valid: {', '.join(_FIELDS)}"
        )
    pattern = d.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"signature {sid}: pattern must be a non-empty string")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"signature {sid}: bad regex {pattern!r}: {exc}") from None
    severity = str(d.get("severity", "error"))
    if severity not in SEVERITIES:
        raise ValueError(f"signature {sid}: severity {severity!r} is not one of {', '.join(SEVERITIES)}")
    return Signature(
        id=sid,
        pattern=pattern,
        severity=severity,
        engine=str(d.get("engine") or "any"),
        meaning=str(d.get("meaning") or ""),
        hint=str(d.get("hint") or ""),
        link=str(d.get("link") or ""),
    )


@lru_cache(maxsize=1)
def _packaged() -> tuple[Signature, ...]:
    text = resources.files("abbisect.score").joinpath("signatures.yaml").read_text(encoding="utf-8")
    return tuple(_signature(d) for d in yaml.safe_load(text))


def load_catalogue(extra: list[dict] | None = None) -> list[Signature]:
    """The packaged catalogue plus a recipe's own signatures; an extra with a known id replaces it."""
    catalogue = {s.id: s for s in _packaged()}
    for d in extra or []:
        sig = _signature(d)
        catalogue[sig.id] = sig
    return list(catalogue.values())


@lru_cache(maxsize=512)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def scan_text(text: str, catalogue: list[Signature]) -> list[SignatureMatch]:
    """Every (line, signature) match in ``text``, in line order."""
    compiled = [(s, _compiled(s.pattern)) for s in catalogue]
    # One combined search per line would be faster, but logs are small and per-signature groups are
    # what the user needs to see.
    matches: list[SignatureMatch] = []
    for no, line in enumerate(text.splitlines(), start=1):
        for sig, rx in compiled:
            m = rx.search(line)
            if m is None:
                continue
            groups = tuple(g.strip() for g in m.groups() if g is not None)
            matches.append(
                SignatureMatch(sig.id, sig.severity, no, line.rstrip(), groups, sig.meaning, sig.hint)
            )
    return matches


_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Warning)\b.*)$")
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


def first_exception(text: str) -> tuple[int, str] | None:
    """``(line_no, "RuntimeError: ...")`` of the first traceback's exception: the root cause.

    Later tracebacks are usually consequences (a child dies, then the parent reports it). Log
    prefixes such as ``(EngineCore pid=1) `` or ``[... TP0] `` are stripped when they repeat on the
    traceback's lines. Without any traceback, the first line that looks like ``SomeError: ...``.
    """
    lines = text.splitlines()
    for i, line in enumerate(lines):
        at = line.find(_TRACEBACK)
        if at < 0:
            continue
        prefix = line[:at]
        for j in range(i + 1, len(lines)):
            body = lines[j]
            if prefix.strip() and body.startswith(prefix):
                body = body[len(prefix) :]
            if not body.strip() or body[:1].isspace() or body.startswith(_CHAINED):
                continue
            if body.startswith(_TRACEBACK):
                continue
            return j + 1, body.strip()[:500]
        return i + 1, "traceback without a final exception line"
    for i, line in enumerate(lines):
        m = _EXCEPTION_LINE.search(line.strip())
        if m:
            return i + 1, m.group(1)[:500]
    return None


class SignatureDiff(TypedDict):
    """Signature ids only in side B, only in side A, in both (results.json's "signature_diff")."""

    appeared: list[str]
    disappeared: list[str]
    both: list[str]


def diff_signatures(a: list[SignatureMatch], b: list[SignatureMatch]) -> SignatureDiff:
    """Signature ids only in side B ("appeared"), only in side A ("disappeared"), or in both."""
    ids_a = {m.id for m in a}
    ids_b = {m.id for m in b}
    return {
        "appeared": sorted(ids_b - ids_a),
        "disappeared": sorted(ids_a - ids_b),
        "both": sorted(ids_a & ids_b),
    }
