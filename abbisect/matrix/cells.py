"""Cells of the serving matrix from loaded result JSON (pure functions: dicts in, frozen dataclasses out).

A cell is one (model checkpoint, engine kind, engine repo, commit, GPU stack). Every trial that judged
that combination is evidence for it: the newest evidence gives the cell its verdict, and evidence with a
different outcome is kept beside it as a conflict, never dropped. Along one line (model × engine × GPU
stack, ordered by commit date) a cell whose outcome differs from the previous tested commit is a
transition: the place where a commit changed the answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import PurePath
from typing import Any

from abbisect.gpu._fingerprint_worker import ENGINE_DISTS
from abbisect.gpu.fingerprint import Fingerprint
from abbisect.infra.serial import load

UNKNOWN_STACK = "not recorded"
MODEL_FLAGS = ("--model", "--model-path", "--served-model-name")


@dataclass(frozen=True)
class Stack:
    """The GPU stack a trial ran on, without the engine itself (which is the cell's other axis)."""

    key: str  # Fingerprint.key of the stack with the engine's own fields left out; "" when not recorded
    summary: str  # GPU · compute capability · driver · CUDA · torch
    gpu_class: str  # what a person filters by: "NVIDIA H200 (sm_90)", "CPU (Linux-x86_64)"


@dataclass(frozen=True)
class Finding:
    """What one trial found of one cell (its outcome, where it ran, the report that proves it): the evidence a
    cell is built from."""

    model: str
    model_id: str  # checkpoint identity: package/file#variant, the model string, or what the launch names
    engine: str  # engine kind
    engine_repo: str
    engine_version: str
    commit: str
    ref: str
    subject: str
    stack: Stack
    status: str
    outcome: str  # good | bad | skip
    date: str  # ISO 8601, when the evidence was produced
    report: str  # the report that proves it (a path relative to the matrix's folder)
    source: str  # run | bisect | check | cache
    recipe: str
    role: str = ""  # side A/B, bisect step role
    commit_date: str | None = None  # orders commits along a line; None when git could not be asked
    parents: tuple[str, ...] = ()
    dependency: str = ""  # what was installed over the engine (a side's pins, a bisect.over candidate)
    replayed: bool = False  # a result served from the trial cache: the trial ran before, in another run
    perf: str = ""  # a performance trial's metric: "tpot_median 2.43 ms (median of 5 passes)"

    @property
    def cell_key(self) -> tuple[str, ...]:
        return (self.model_id, self.engine, self.engine_repo, self.commit, self.stack.key, self.dependency)

    @property
    def line_key(self) -> tuple[str, ...]:
        return (self.model_id, self.engine, self.engine_repo, self.stack.key, self.dependency)


@dataclass(frozen=True)
class Cell:
    evidence: Finding  # the newest
    n_evidence: int = 1  # trials: results replayed from the trial cache are not counted (they ran once before)
    conflicts: tuple[Finding, ...] = ()  # evidence for this cell whose outcome differs from the newest
    transition: str = ""  # "good → bad" when the outcome changed since the previous tested commit
    transition_from: str = ""  # that previous commit
    adjacent: bool = False  # the previous tested commit is this commit's parent
    env_match: bool = False
    n_replayed: int = 0  # evidence that was a replay of the trial cache

    def __getattr__(self, name: str) -> Any:  # cell.model, cell.commit, ... read through to the evidence
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.evidence, name)

    def trials(self) -> str:
        """`2 trials, replayed from the cache 3×`: the evidence, replays apart (they are not trials)."""
        again = f", replayed from the cache {self.n_replayed}×" if self.n_replayed else ""
        return f"{self.n_evidence} trial{'s' if self.n_evidence != 1 else ''}{again}"

    def row(self) -> dict[str, Any]:
        """A flat record for CSV/JSON: every column a script may want, conflicts summarised."""
        e = self.evidence
        return {
            "model": e.model,
            "model_id": e.model_id,
            "engine": e.engine,
            "engine_repo": e.engine_repo,
            "engine_version": e.engine_version,
            "commit": e.commit,
            "dependency": e.dependency,
            "ref": e.ref,
            "subject": e.subject,
            "commit_date": e.commit_date or "",
            "gpu_class": e.stack.gpu_class,
            "gpu": e.stack.summary,
            "stack_key": e.stack.key,
            "status": e.status,
            "outcome": e.outcome,
            "date": e.date,
            "report": e.report,
            "source": e.source,
            "recipe": e.recipe,
            "role": e.role,
            "evidence": self.n_evidence,
            "replayed": self.n_replayed,
            "perf": e.perf,
            "conflicts": "; ".join(f"{c.outcome} ({c.status}) {c.date} {c.report}" for c in self.conflicts),
            "transition": self.transition,
            "transition_from": self.transition_from,
            "adjacent": self.adjacent,
            "env_match": self.env_match,
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.row(), "conflicts": [_evidence_dict(c) for c in self.conflicts]}


def _evidence_dict(e: Finding) -> dict[str, Any]:
    d = asdict(e)
    stack = d.pop("stack")
    return {
        **d,
        "stack_key": stack["key"],
        "gpu": stack["summary"],
        "gpu_class": stack["gpu_class"],
        "parents": list(e.parents),
    }


# -- the axes ----------------------------------------------------------------------------------------


_SHOWN_LOCAL = re.compile(r"<local: (.+)>")


def _local_path(s: str) -> bool:
    return s.startswith(("/", "./", "../", "~"))


def local_name(s: str) -> str:
    """A local path by its last part, whether a file holds it as it is (the trial cache, a check's trial.json)
    or as a result folder shows it (`<local: NAME>`, abbisect/report/portable.py): one engine or model, one
    name."""
    if shown := _SHOWN_LOCAL.fullmatch(s):
        return shown.group(1)
    return PurePath(s).name if _local_path(s) else s


def model_of(recipe: Mapping[str, Any]) -> tuple[str, str]:
    """(display name, checkpoint identity) of the recipe's model; local paths reduced to their last part."""
    m = recipe.get("model")
    if isinstance(m, Mapping):
        variant = f" [{m['variant']}]" if m.get("variant") else ""
        ident = f"{m['package']}/{m['file']}" + (f"#{m['variant']}" if m.get("variant") else "")
        return f"{PurePath(m['file']).stem}{variant}", ident
    if isinstance(m, str) and m:
        name = local_name(m)
        return name, name
    probe = recipe.get("probe")
    if isinstance(probe, Mapping) and probe.get("kernel"):
        return f"kernel probe {probe['kernel']}", f"probe:{probe['kernel']}"
    launch = recipe.get("launch") or {}
    argv = [*(launch.get("command") or []), *(launch.get("flags") or [])]
    for flag in MODEL_FLAGS:
        if flag in argv[:-1]:
            name = local_name(str(argv[argv.index(flag) + 1]))
            return name, name
    return f"recipe {recipe.get('name', '?')}", f"recipe:{recipe.get('name', '?')}"


def engine_repo_of(recipe: Mapping[str, Any]) -> str:
    return local_name(str((recipe.get("engine") or {}).get("repo") or ""))


def stack_of(fingerprint: Mapping[str, Any] | None) -> Stack:
    """The stack key is the fingerprint's key with engine, engine version, engine sha and engine packages
    left out: one stack holds many commits, and `abbisect env --key` on a machine without an engine
    installed prints the same key."""
    if not fingerprint:
        return Stack("", UNKNOWN_STACK, "unknown")
    fp = load(Fingerprint, fingerprint)
    return stack_from(fp)


def stack_from(fp: Fingerprint) -> Stack:
    fp = replace(
        fp,
        engine=None,
        engine_version=None,
        engine_sha=None,
        packages={k: v for k, v in fp.packages.items() if k not in ENGINE_DISTS},
    )
    if fp.gpus:
        names: dict[str, int] = {}
        for g in fp.gpus:
            names[f"{g.name} ({g.device_class})"] = names.get(f"{g.name} ({g.device_class})", 0) + 1
        gpu_class = " + ".join(names)
        gpus = ", ".join(f"{n}x {name}" for name, n in names.items())
    else:
        gpu_class = f"CPU ({fp.platform or '?'})"
        gpus = "no GPU"
    parts = [
        gpus,
        f"driver {fp.driver}" if fp.driver else "",
        f"CUDA {fp.cuda_runtime}" if fp.cuda_runtime else "",
        f"torch {fp.torch}" if fp.torch else "no torch",
        f"triton {fp.triton}" if fp.triton else "",
        f"python {fp.python}" if fp.python else "",
    ]
    return Stack(fp.key, " · ".join(p for p in parts if p), gpu_class)


# -- evidence from each kind of result ---------------------------------------------------------------


def _base(recipe: Mapping[str, Any]) -> dict[str, Any]:
    model, model_id = model_of(recipe)
    return {
        "model": model,
        "model_id": model_id,
        "engine": (recipe.get("engine") or {}).get("kind", "?"),
        "engine_repo": engine_repo_of(recipe),
        "recipe": str(recipe.get("name", "?")),
    }


def _version(trial: Mapping[str, Any]) -> str:
    facts = (trial.get("launch") or {}).get("facts") or {}
    fp = (trial.get("extras") or {}).get("fingerprint") or {}
    return str(facts.get("version") or fp.get("engine_version") or "")


def evidence_from_trial(
    trial: Mapping[str, Any],
    report: str,
    date: str,
    source: str,
    recipe: Mapping[str, Any] | None = None,
    role: str = "",
    commit_date: str | None = None,
    parents: tuple[str, ...] = (),
) -> Finding:
    """One TrialResult dict (results.json's sides, check's trial.json, the trial cache)."""
    spec = trial["spec"]
    verdict = trial["verdict"]
    return Finding(
        **_base(recipe or spec["recipe"]),
        engine_version=_version(trial),
        commit=spec["sha"],
        ref=spec.get("ref", ""),
        subject=spec.get("subject", ""),
        stack=stack_of((trial.get("extras") or {}).get("fingerprint")),
        status=verdict["status"],
        outcome=verdict["outcome"],
        date=date,
        report=report,
        source=source,
        role=role or spec.get("side", ""),
        commit_date=commit_date,
        parents=parents,
        dependency=dependency_of(spec),
        replayed=bool(trial.get("cached")),
        perf=perf_of(trial, recipe or spec["recipe"]),
    )


def perf_of(trial: Mapping[str, Any], recipe: Mapping[str, Any]) -> str:
    """The performance verdict's metric of one trial, its median over the trial's passes ("" without perf)."""
    if isinstance(trial.get("perf"), str):  # bisect.json's trial records carry it already told
        return trial["perf"]
    metric = (recipe.get("perf") or {}).get("metric")
    if not metric:
        return ""
    from abbisect.assess.perf import errors_in, values_in
    from abbisect.query.measure import PerfPass
    from abbisect.report.perf import told

    passes = [load(PerfPass, p) for p in ((trial.get("extras") or {}).get("perf") or {}).get("passes") or []]
    return told(metric, values_in(passes, metric), errors_in(passes))


def dependency_of(spec: Mapping[str, Any]) -> str:
    """What a trial installed over the engine: its pins, or a dependency's commit (bisect.over)."""
    dep = spec.get("dependency") or {}
    if isinstance(dep, str):  # bisect.json's trial records keep only the dependency's sha
        return f"dependency@{dep[:10]}"
    if dep.get("sha"):
        return f"{PurePath(local_name(str(dep.get('repo', 'dependency')))).name}@{str(dep['sha'])[:10]}"
    return ", ".join(spec.get("pins") or [])


def evidence_from_run(data: Mapping[str, Any], report: str, date: str) -> list[Finding]:
    """results.json of `abbisect run`: both sides, with their commits' dates and parents where recorded."""
    when = data.get("started") or date
    commits = data.get("commits") or {}
    out = []
    for side in ("a", "b"):
        if data.get(side):
            info = commits.get(data[side]["spec"]["sha"]) or {}
            out.append(evidence_from_trial(data[side], report, when, "run", data["recipe"], f"side {side.upper()}",
                                           info.get("date"), tuple(info.get("parents") or ())))
    return out


def evidence_from_bisect(data: Mapping[str, Any], report: str, date: str) -> list[Finding]:
    """bisect.json: every step, with its trial's fingerprint and engine version where recorded."""
    base = _base(data["recipe"])
    trials = {t["n"]: t for t in data.get("trials") or []}
    found = data.get("commit") or {}
    out = []
    for step in data.get("steps") or []:
        t = trials.get(step["n"], {})
        # bisect.over: the step is a dependency's candidate; the trial ran the fixed engine commit with it.
        dependency = dependency_of(t) if ("pins" in t or "dependency" in t) else ""
        commit_date = t.get("commit_date") or (found.get("date") if found.get("sha") == step["sha"] else None)
        # A step's trial is labelled by its role, not by a ref; the cell takes a ref from other evidence.
        out.append(
            Finding(
                **base,
                engine_version=str(t.get("version") or ""),
                commit=t.get("sha", step["sha"]),
                ref="",
                subject=t.get("subject", ""),
                stack=stack_of(t.get("fingerprint")),
                status=step["status"],
                outcome=step["outcome"],
                date=data.get("started") or data.get("finished") or date,
                report=report,
                source="bisect",
                role=step.get("role", ""),
                commit_date=commit_date,
                parents=tuple(t.get("parents") or ()),
                dependency=dependency,
                replayed=bool(t.get("cached")),
                perf=str(t.get("perf") or ""),
            )
        )
    return out


# -- cells -------------------------------------------------------------------------------------------


def _when(iso: str | None) -> datetime:
    try:
        d = datetime.fromisoformat(iso or "")
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return d if d.tzinfo else d.replace(tzinfo=UTC)


def build_cells(evidence: Iterable[Finding]) -> list[Cell]:
    """One cell per (model, engine, repo, commit, stack): newest evidence wins, differing outcomes kept."""
    by_cell: dict[tuple[str, ...], list[Finding]] = {}
    for e in evidence:
        by_cell.setdefault(e.cell_key, []).append(e)
    cells = []
    for items in by_cell.values():
        items.sort(key=lambda e: _when(e.date))
        newest = items[-1]
        # A finding may know the commit's date or parents where the newest does not (e.g. a bisect's record).
        newest = replace(
            newest,
            commit_date=newest.commit_date or next((e.commit_date for e in items if e.commit_date), None),
            parents=newest.parents or next((e.parents for e in items if e.parents), ()),
            ref=newest.ref or next((e.ref for e in reversed(items) if e.ref), ""),
            subject=newest.subject or next((e.subject for e in items if e.subject), ""),
        )
        conflicts = tuple(e for e in items[:-1] if e.outcome != newest.outcome)
        # A replay is the result of a trial that ran before (usually one read here too): it adds no trial.
        replays = sum(e.replayed for e in items)
        cells.append(Cell(newest, max(len(items) - replays, 1), conflicts, n_replayed=replays))
    return sort_cells(mark_transitions(cells))


def mark_transitions(cells: list[Cell]) -> list[Cell]:
    """Along each line (model × engine × stack) in commit order, mark where the outcome changed.

    Untestable (skip) cells and cells with no known commit date are not part of the walk.
    """
    lines: dict[tuple[str, ...], list[Cell]] = {}
    for c in cells:
        if c.evidence.commit_date and c.outcome in ("good", "bad"):
            lines.setdefault(c.evidence.line_key, []).append(c)
    marked: dict[int, Cell] = {}
    for line in lines.values():
        line.sort(key=lambda c: (_when(c.evidence.commit_date), c.commit))
        for prev, cur in pairwise(line):
            if cur.outcome != prev.outcome:
                marked[id(cur)] = replace(
                    cur,
                    transition=f"{prev.outcome} → {cur.outcome}",
                    transition_from=prev.commit,
                    adjacent=prev.commit in cur.evidence.parents,
                )
    return [marked.get(id(c), c) for c in cells]


def sort_cells(cells: list[Cell]) -> list[Cell]:
    return sorted(
        cells,
        key=lambda c: (
            c.model,
            c.engine,
            c.stack.gpu_class,
            c.stack.key,
            _when(c.evidence.commit_date),
            c.commit,
        ),
    )


def mark_env(cells: list[Cell], key: str) -> list[Cell]:
    """Cells whose GPU stack key is `key` (this machine's, or one someone printed with `abbisect env`)."""
    return [replace(c, env_match=bool(key) and c.stack.key == key) for c in cells]


@dataclass(frozen=True)
class Matrix:
    cells: list[Cell]
    sources: list[str] = field(default_factory=list)  # the result files read
    skipped: list[str] = field(default_factory=list)  # files that were not results, with why
    env_key: str = ""

    def counts(self) -> dict[str, int]:
        outcomes = [c.outcome for c in self.cells]
        return {
            "cells": len(self.cells),
            "good": outcomes.count("good"),
            "bad": outcomes.count("bad"),
            "skip": outcomes.count("skip"),
            "conflicts": sum(1 for c in self.cells if c.conflicts),
            "transitions": sum(1 for c in self.cells if c.transition),
            "env_match": sum(1 for c in self.cells if c.env_match),
            "replayed": sum(c.n_replayed for c in self.cells),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "abbisect.matrix/1",
            "counts": self.counts(),
            "env_key": self.env_key,
            "sources": self.sources,
            "skipped": self.skipped,
            "cells": [c.to_dict() for c in self.cells],
        }
