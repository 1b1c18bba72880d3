"""What a narrowing found: every probe (a launch tried, with its verdict and evidence), the differences between
the failing and the passing launch and the smallest failing set of them, and the switches that work around
the failure."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from abbisect.checkout import Revision
from abbisect.infra.redact import Redactor
from abbisect.narrow.deltas import Delta, Launch
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome
from abbisect.trial.spec import TrialResult

ProbeKind = Literal["failing", "passing", "differences", "switch"]


@dataclass
class Probe:
    n: int
    kind: ProbeKind
    label: str  # the differences applied ("+ --enable-prefix-caching, …") or the switch's id
    launch: Launch
    outcome: Outcome
    status: str
    evidence: str
    seconds: float
    cached: bool
    deltas: tuple[int, ...] = ()  # which of NarrowRun.deltas the probe applied to the passing launch
    switch: str = ""
    feature: str = ""
    change: str = ""  # what the switch did to the launch: "+ --enforce-eager", "− --enable-prefix-caching"
    breadth: int = 2
    trials: tuple[TrialResult, ...] = field(default=(), repr=False)


@dataclass
class NarrowRun:
    recipe: Recipe
    repo: Path
    rev: Revision
    failing: Launch
    passing: Launch | None = None
    deltas: list[Delta] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)
    minimal: tuple[int, ...] | None = None  # ddmin's answer: indices into `deltas`
    message: str = ""  # why nothing was narrowed, when so
    help_source: str = ""  # which --help filtered the catalogue
    not_accepted: list[str] = field(default_factory=list)  # switches the commit's --help does not declare
    already: list[str] = field(default_factory=list)  # switches the failing launch already has
    command: str = ""
    launches: int = 0
    wall_s: float = 0.0

    @property
    def baseline(self) -> Probe | None:
        return next((p for p in self.probes if p.kind == "failing"), None)

    @property
    def switch_probes(self) -> list[Probe]:
        return [p for p in self.probes if p.kind == "switch"]

    @property
    def workarounds(self) -> list[Probe]:
        """The switches that make the failure go away, the narrowest first (then in the catalogue's order)."""
        passing = [p for p in self.switch_probes if p.outcome == Outcome.GOOD]
        return sorted(passing, key=lambda p: (p.breadth, p.n))

    @property
    def found(self) -> bool:
        return bool(self.workarounds) or bool(self.minimal)

    @property
    def tried(self) -> bool:
        """Whether anything was tried against the failure: narrow.passing (which may fail too), a subset of the
        differences, or a switch."""
        return any(p.kind in ("passing", "differences", "switch") for p in self.probes)


def masked(run: NarrowRun, red: Redactor) -> NarrowRun:
    """The run as its reports show it (narrow.md, narrow.json, bisect.md): every launch's secret values
    masked under their names, a difference of a secret variable masked on both sides (`was` included), and
    the labels, changes and evidence masked as text, before anything is rendered or escaped."""
    def launch(x: Launch) -> Launch:
        return Launch(tuple(red.text(f) for f in x.flags), red.env(x.env), tuple(red.text(p) for p in x.pins))

    def value(d: Delta, v: tuple[str, ...] | str | None) -> tuple[str, ...] | str | None:
        if v is None:
            return None
        if d.kind == "env" and isinstance(v, str):
            return red.env({d.key: v})[d.key] if d.key in red.names else red.text(v)
        return tuple(red.text(t) for t in v) if isinstance(v, tuple) else red.text(v)

    probes = [replace(p, label=red.text(p.label), launch=launch(p.launch), evidence=red.text(p.evidence),
                      change=red.text(p.change)) for p in run.probes]
    return replace(run, failing=launch(run.failing), passing=launch(run.passing) if run.passing else None,
                   deltas=[replace(d, value=value(d, d.value), was=value(d, d.was)) for d in run.deltas],
                   probes=probes, message=red.text(run.message), command=red.text(run.command))
