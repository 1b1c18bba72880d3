"""Find and read result folders (run, bisect, check; the trial cache on request) into matrix evidence.

Side effects live here: walking folders, reading JSON, asking git for commit dates where the engine clone
is still on this machine. Everything else is `cells`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from abbisect.infra import git
from abbisect.matrix.cells import Finding, evidence_from_bisect, evidence_from_run, evidence_from_trial

# The files each command writes; anything else in a results folder is logs, CSV or a report.
KINDS = {"results.json": "run", "bisect.json": "bisect", "trial.json": "check"}


@dataclass(frozen=True)
class Source:
    """One result file that was read: what kind, where, and its data (kept for the pictures)."""

    kind: str  # run | bisect | check | cache
    path: Path
    data: dict[str, Any]
    report: str  # relative to the matrix folder


@dataclass
class Loaded:
    evidence: list[Finding] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _mtime(path: Path) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(path.stat().st_mtime))


def _report_for(path: Path, kind: str) -> Path:
    """The file a person reads: report.md / bisect.md beside the JSON, else the JSON itself."""
    name = {"run": "report.md", "bisect": "bisect.md"}.get(kind)
    return path.with_name(name) if name and path.with_name(name).is_file() else path


def _rel(path: Path, base: Path) -> str:
    return Path(os.path.relpath(path.resolve(), base.resolve())).as_posix()


def _shape_ok(kind: str, data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    if kind == "run":
        return "recipe" in data and "a" in data and "b" in data
    if kind == "bisect":
        return "recipe" in data and "steps" in data
    return "spec" in data and "verdict" in data


def find(roots: list[Path]) -> list[tuple[str, Path]]:
    found = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                if name in KINDS:
                    found.append((KINDS[name], Path(dirpath) / name))
    return found


def load(roots: list[Path], base: Path, trial_cache: Path | None = None) -> Loaded:
    """Every result under `roots` (and every cached trial under `trial_cache`), reports relative to `base`."""
    files = find(roots)
    if trial_cache is not None and trial_cache.is_dir():
        files += [("cache", p) for p in sorted(trial_cache.glob("*.json"))]
    out = Loaded()
    for kind, path in files:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            out.skipped.append(f"{path}: not readable JSON ({exc})")
            continue
        if not _shape_ok("check" if kind == "cache" else kind, data):
            out.skipped.append(f"{path}: not an abbisect {kind} result")
            continue
        report = _rel(_report_for(path, kind), base)
        date = _mtime(path)
        if kind == "run":
            ev = evidence_from_run(data, report, date)
        elif kind == "bisect":
            ev = evidence_from_bisect(data, report, date)
        else:
            ev = [evidence_from_trial(data, report, date, kind)]
        out.sources.append(Source(kind, path, data, report))
        out.evidence += ev
    out.evidence = with_commit_dates(out.evidence, _repos(out.sources))
    return out


def _repos(sources: list[Source]) -> dict[str, Path]:
    """sha → the local engine clone a trial was checked out from (when it still exists here): a check's
    trial.json and the trial cache name it; a result folder names no folder of this machine (its results.json
    records each side's commit instead), but one written before it did."""
    repos: dict[str, Path] = {}
    for s in sources:
        trials = (
            [s.data["a"], s.data["b"]]
            if s.kind == "run"
            else [s.data]
            if s.kind in ("check", "cache")
            else []
        )
        for t in trials:
            spec = t.get("spec") or {}
            if spec.get("repo") and Path(spec["repo"]).is_dir():
                repos[spec["sha"]] = Path(spec["repo"])
    return repos


def with_commit_dates(evidence: list[Finding], repos: dict[str, Path]) -> list[Finding]:
    """Fill in commit dates and parents that the result files did not record, from git where it can answer."""
    wanted: dict[Path, set[str]] = {}
    for e in evidence:
        if e.commit_date is None and e.commit in repos:
            wanted.setdefault(repos[e.commit], set()).add(e.commit)
    known: dict[str, tuple[str, tuple[str, ...]]] = {}
    for repo, shas in wanted.items():
        proc = git.call(["show", "-s", "--format=%H %aI %P", *sorted(shas), "--"], repo)
        for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
            sha, date, *parents = line.split()
            known[sha] = (date, tuple(parents))
    return [
        replace(e, commit_date=known[e.commit][0], parents=e.parents or known[e.commit][1])
        if e.commit_date is None and e.commit in known
        else e
        for e in evidence
    ]
