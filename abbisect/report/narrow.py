"""narrow.md: which part of a failing launch is to blame and how to serve today — the workaround table, the
smallest failing difference, every probe with its evidence. Pure."""

from __future__ import annotations

import shlex

from abbisect import __version__
from abbisect.infra.envelope import SCHEMA_VERSION
from abbisect.infra.serial import dump
from abbisect.launch.jit import JitMode
from abbisect.narrow.narrowing import NarrowRun, Probe
from abbisect.recipe.status import Outcome
from abbisect.report.ab import reproduce_block
from abbisect.report.jit import caches_line
from abbisect.report.text import Notes, cell, code, heading, table


def _result(p: Probe, notes: Notes) -> str:
    if p.outcome == Outcome.GOOD:
        return f"**passes** ({cell(p.evidence, 80, notes)})"
    if p.outcome == Outcome.BAD:
        return f"still fails ({p.status})"
    return f"untestable ({p.status}: {cell(p.evidence, 60, notes)})"


def headline(run: NarrowRun) -> str:
    if run.message and not run.found:
        return f"Nothing narrowed: {cell(run.message, 300)}"
    if not run.tried and not run.found:
        return "Nothing narrowed: nothing was tried"
    parts = []
    if run.workarounds:
        best = run.workarounds[0]
        parts.append(f"the failure goes away with {code(best.change, 120)} ({cell(best.feature, 120)})")
    if run.minimal:
        parts.append("the smallest failing difference is " + ", ".join(code(run.deltas[i].describe(), 80)
                                                                        for i in run.minimal))
    if not parts:
        return "No switch made the failure go away" + (f"; {cell(run.message, 300)}" if run.message else "")
    return "At this commit " + "; ".join(parts)


def workaround_table(run: NarrowRun, level: int = 3) -> list[str]:
    """The switches tried, the passing ones first (narrowest first), as a user pastes it."""
    probes = run.switch_probes
    if not probes:
        return []
    ordered = [*run.workarounds, *(p for p in probes if p.outcome != Outcome.GOOD)]
    full = Notes()
    rows = [[f"`{p.switch}`", cell(p.feature, 70, full), code(p.change, 90), _result(p, full),
             {1: "one kernel", 2: "one feature", 3: "a whole mode"}[p.breadth]] for p in ordered]
    lines = [heading(level, "Workarounds: feature switches at this commit"), "",
             table(["switch", "what it turns off", "change to the launch", "result", "breadth"], rows, full), ""]
    if run.workarounds:
        best = run.workarounds[0]
        lines += [f"Narrowest workaround: `{best.switch}` — {cell(best.feature, 120)} ({code(best.change, 120)}).", ""]
    notes = []
    if run.not_accepted:
        notes.append(f"{len(run.not_accepted)} switch(es) of the catalogue are not declared by this commit's "
                     f"{code(run.help_source or '--help')} and were not tried")
    if run.already:
        notes.append(f"{len(run.already)} already in the launch: {', '.join(code(a, 60) for a in run.already[:8])}")
    if notes:
        lines += ["; ".join(notes) + ".", ""]
    return lines


def minimal_block(run: NarrowRun, level: int = 3) -> list[str]:
    if not run.deltas:
        return []
    rows = [[str(i), code(d.describe(), 100), "**in the smallest failing set**" if run.minimal and i in run.minimal
             else ""] for i, d in enumerate(run.deltas)]
    lines = [heading(level, "Between the failing and the passing launch"), "",
             table(["#", "difference (passing → failing)", ""], rows), ""]
    if run.minimal:
        lines += [(f"Delta debugging (ddmin) over the {len(run.deltas)} differences: the launch fails with only "
                   + " together with ".join(code(run.deltas[i].describe(), 80) for i in run.minimal)
                   + "; without any one of them it passes."), ""]
    return lines


def probes_table(run: NarrowRun, level: int = 3) -> list[str]:
    notes = Notes()
    rows = [[str(p.n), p.kind, cell(p.label, 70, notes), f"**{p.outcome}**", p.status, cell(p.evidence, 90, notes),
             f"{p.seconds:.1f} s" + (" (cached)" if p.cached else "")] for p in run.probes]
    return [heading(level, "Every probe"), "",
            table(["probe", "kind", "launch", "verdict", "status", "evidence", "time"], rows, notes), ""]


def render_narrow(run: NarrowRun, reproduce: str) -> str:
    base = run.baseline
    flags = shlex.join(run.failing.flags)
    lines = [heading(2, f"abbisect narrow: {code(run.recipe.name)} at {code(run.rev.ref)} ({run.rev.short})"), "",
             f"### {headline(run)}", "",
             f"The failing launch: flags {code(flags, 300)}" + (f"; {base.status}: {cell(base.evidence, 200)}"
                                                                 if base else "") + ".", "",
             (f"{len(run.probes)} probes, {run.launches} server launches, {run.wall_s:.1f} s; each probe is a trial "
              "of the recipe's verdict (from the trial cache when it holds that exact launch)."), "",
             caches_line(JitMode(run.recipe.launch.jit_cache), [("the probes", [t for p in run.probes
                                                                                for t in p.trials])]), ""]
    lines += workaround_table(run)
    lines += minimal_block(run)
    lines += probes_table(run)
    lines += [reproduce_block([reproduce], __version__), ""]
    return "\n".join(lines)


def narrow_json(run: NarrowRun) -> dict:
    return {"schema": f"abbisect/narrow/v{SCHEMA_VERSION}", "recipe": run.recipe.model_dump(mode="json"),
            "ref": run.rev.ref, "sha": run.rev.sha, "message": run.message, "found": run.found,
            "failing": dump(run.failing), "passing": dump(run.passing) if run.passing else None,
            "deltas": [dump(d) for d in run.deltas], "minimal": list(run.minimal) if run.minimal else None,
            "workarounds": [p.switch for p in run.workarounds], "not_accepted": run.not_accepted,
            "already": run.already, "help_source": run.help_source,
            "probes": [{**dump(p, exclude={"trials"}), "server_times": p.trials[0].extras.server_times
                        if p.trials else None} for p in run.probes], "launches": run.launches,
            "wall_s": run.wall_s, "command": run.command, "version": __version__}
