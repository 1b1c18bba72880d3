"""bisect.md: the found commit, fix or regression, the decisive A/B, the trail and how to reproduce.

Pure: everything shown (commit subjects, links, releases) was gathered into the `BisectRun` when the search
ended (abbisect/bisect/driver.py `conclude`), so rendering needs no git.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import replace
from pathlib import Path

from abbisect import __version__
from abbisect.ab import ABLinks, ABResult, compare
from abbisect.assess import assessor_for
from abbisect.assess.accuracy import eval_run
from abbisect.assess.base import against_ends
from abbisect.assess.perf import metric_values, pass_errors
from abbisect.bisect.bisection import BisectRun, EndsMode, Mode, Role, Step
from abbisect.bisect.findings import Level
from abbisect.bisect.gitlog import CommitLinks
from abbisect.gpu.fingerprint import Fingerprint, render_sides
from abbisect.gpu.sharing import GpuCheck, GpuProcess, SlotReport
from abbisect.infra.envelope import SCHEMA_VERSION
from abbisect.infra.serial import dump, load
from abbisect.launch.engines.base import LoggedFacts
from abbisect.launch.jit import JitMode
from abbisect.report import changes, follow, posterior
from abbisect.report.ab import (
    BUDGETS,
    OUTPUTS_FILE,
    Budget,
    _elide,
    fit,
    outputs_document,
    recipe_block,
    render_ab,
    reproduce_block,
)
from abbisect.report.accuracy import ab_accuracy, accuracy_along
from abbisect.report.drift import drift_said
from abbisect.report.jit import caches_line, jit_of, starts_of, unlike_starts
from abbisect.report.narrow import headline as narrow_headline
from abbisect.report.narrow import minimal_block, narrow_json, workaround_table
from abbisect.report.nodes import node_of, nodes_block, nodes_json
from abbisect.report.numerics import numerics_block, numerics_picture
from abbisect.report.perf import along_bisect, busy_host, metric_table, told
from abbisect.report.portable import Portable
from abbisect.report.text import Notes, cell, code, details, esc, fence, table
from abbisect.trial.spec import Label, TrialResult


def relabel(result: TrialResult, label: str) -> TrialResult:
    return replace(result, spec=replace(result.spec, ref=label, side=Label.plain(label)))


def terms(mode: Mode) -> tuple[str, str]:
    """git bisect's (old, new) terms for the search: a fix search's old state is the broken one.

    Not good/bad swapped: git refuses to let "good" mean the new state."""
    return ("broken", "fixed") if mode is Mode.FIX else ("good", "bad")


def rerun_command(cmd: str) -> str:
    """The bisect command without its result folder (-o/--output) or --resume: run again, it makes a new one."""
    words, out, skip = shlex.split(cmd), [], False
    for w in words:
        if skip:
            skip = False
        elif w in ("-o", "--output", "--resume"):
            skip = True
        elif not w.startswith(("--output=", "--resume=")) and not (w.startswith("-o") and len(w) > 2
                                                                   and not w.startswith("--")):
            out.append(w)
    return shlex.join(out)


def reproduce_commands(run: BisectRun, cmd: str, recipe_file: str) -> list[str]:
    """The commands bisect.md prints: abbisect's own, then the same search driven by `git bisect run`
    (old ends: the searched range's, merge base included); a test runs every one of them."""
    repo = shlex.quote(str(run.repo))
    if run.mode.stopped:  # no search ran: what stopped it is each tested commit's own verdict
        if against_ends(assessor_for(run.recipe, bisect=True)):  # check cannot judge a commit alone
            return [rerun_command(cmd)]
        return [rerun_command(cmd), "# each commit tested, judged alone (exit 0 good, 1 bad, 125 untestable):",
                *(f"abbisect check {shlex.quote(recipe_file)} {s.sha}  # {s.role}: exit {s.outcome.exit}"
                  for s in run.steps)]
    old_term, new_term = terms(run.mode)
    olds = " ".join(dict.fromkeys((run.old.sha, *run.merge_bases, *run.excluded)))
    lines = [rerun_command(cmd), "# the same search driven by git itself:",
             f"git -C {repo} bisect start --term-old={old_term} --term-new={new_term}"
             + (" --first-parent" if run.recipe.bisect.first_parent else "") + f" {run.new.sha} {olds}"
             + (" -- " + " ".join(shlex.quote(p) for p in run.recipe.bisect.pathspec)
                if run.recipe.bisect.pathspec else ""),
             f"git -C {repo} bisect run abbisect check {shlex.quote(recipe_file)}"
             + (" --invert" if run.mode is Mode.FIX else "")]
    if run.result and run.result.first_new:
        lines.append(f"git -C {repo} rev-parse refs/bisect/{new_term}  # {run.result.first_new}")
    lines.append(f"git -C {repo} bisect reset")
    return lines


def _some(names: tuple[str, ...], shown: int = 3) -> str:
    """The first names, and how many more there are: `release/0.6, v0.6.x, dev and 4 more`."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(esc(n) for n in names[:shown]) + more


def releases_block(run: BisectRun) -> list[str]:
    """Which releases carry the found commit, and its backports (commits elsewhere with the same change)."""
    rel = run.releases
    if rel is None:
        return []
    word = "fixed" if run.mode is Mode.FIX else "broken"
    pr = f" (#{rel.pr})" if rel.pr else ""
    where = f" on {esc(rel.branches[0])}" if rel.branches else ""
    first = (f"first released in {esc(rel.first_release)}" if rel.first_release else "in no release tag yet")
    if len(rel.releases) > 1:
        shown = ", ".join(esc(r) for r in rel.releases[:6]) + (", …" if len(rel.releases) > 6 else "")
        first += f" (in {len(rel.releases)} releases: {shown})"
    also = f"; also on {_some(rel.branches[1:])}" if rel.branches[1:] else ""
    lines = ["### Releases and backports", "",
             f"- {word}{where} by `{rel.sha[:10]}`{pr}; {first}{also}."]
    for c in rel.carriers:
        cfirst = f"first released in {esc(c.first_release)}" if c.first_release else "in no release tag yet"
        lines.append(f"- backported to {_some(c.branches) or 'no branch'} as `{c.sha[:10]}` "
                     f"({cell(c.subject, 80)}; {c.how}); {cfirst}.")
    if not rel.carriers:
        lines.append("- no backport found (no cherry-pick trailer, PR number or patch id matches on other branches).")
    return [*lines, ""]


def headline(run: BisectRun) -> str:
    if run.mode.stopped:
        return f"No bisection: {code(run.message, 600)}"
    res = run.result
    if res is None:
        return "Bisection did not finish."
    if res.outcome == "found" and res.first_new is not None:
        noun = run.variable.kind.noun
        shown = run.subject(res.first_new) if noun == "version" else res.first_new
        several = len(run.changes.changes) if run.changes else 0
        why = f" (the largest effect of the {several} changes named)" if several > 1 else ""
        return f"The {noun} that {run.mode.word} it: {code(shown, 120)}{why}"
    if run.confirmation is not None and run.confirmation.level is Level.HOST_CHANGED:
        return ("Not confirmed: the host changed between the search and the confirmation — run the bisect again on "
                "a quiet host")
    if res.outcome == "ambiguous" and run.posterior:
        p = run.posterior
        return (f"Not sure: no commit holds {p.threshold:.0%} of the posterior after {p.launches} launches; the "
                "likeliest are " + ", ".join(f"`{c[:10]}` ({p.mass.get(c, 0.0):.0%})" for c in res.candidates[:4]))
    if res.outcome == "ambiguous":
        return (f"Only untestable commits are left: the commit that {run.mode.word} it is one of "
                f"{', '.join(f'`{c[:10]}`' for c in res.candidates)}")
    return "No candidate could be tested in the range."


def found_block(run: BisectRun) -> list[str]:
    res = run.result
    if res is None or res.first_new is None:
        return []
    info = run.commits[res.first_new]
    urls = run.links
    notes = Notes()
    if run.variable.kind.noun == "version":
        rows = [["version", code(info.subject, 120, in_table=True)]]
    else:
        pr = f"[#{info.pr}]({urls.pr})" if info.pr and urls.pr else f"#{info.pr}" if info.pr else "—"
        rows = [["sha", f"[`{info.sha}`]({urls.commit})" if urls.commit else f"`{info.sha}`"],
                ["subject", cell(info.subject, 120, notes)], ["author", cell(info.author, 60, notes)],
                ["date", info.date], ["PR", pr]]
    engine = run.variable.engine
    if engine is not None:
        rows.append(["engine (fixed)", f"{code(engine.ref, 60, in_table=True)} = `{engine.sha}`"])
    rows += [["kind", "**fix** (old end bad, new end good)" if run.mode is Mode.FIX else
             "**regression** (old end good, new end bad)"]]
    if urls.compare:
        rows.append(["compare with its parent", f"[{(run.found_parent or '')[:10]}…{res.first_new[:10]}]({urls.compare})"])
    return [table(["field", "value"], rows, notes), ""]


def trail(run: BisectRun, budget: Budget = BUDGETS[0]) -> str:
    several = any(len(s.trials) > 1 for s in run.steps)  # repeats: how many launches each verdict rests on
    nodes = {s.n: node_of(run, s.result) for s in run.steps}  # on a cluster: the node each ran on
    on_nodes = any(nodes.values())
    rows = []
    notes = Notes()
    for s in run.steps:
        role = s.role if s.needed else f"{s.role} (no longer needed)"
        rows.append([str(s.n), f"`{s.sha[:10]}`", cell(run.subject(s.sha), 50, notes), role, f"**{s.outcome}**",
                     s.status, *([str(len(s.trials))] if several else []), *([nodes[s.n]] if on_nodes else []),
                     cell(s.evidence, budget.cell, notes), f"{s.seconds:.1f} s" + (" (cached)" if s.cached else "")
                     + (" (before the resume)" if s.replayed else "")])
    return table(["step", "commit", "subject", "role", "verdict", "status", *(["launches"] if several else []),
                  *(["node"] if on_nodes else []), "evidence", "time"], _elide(rows, budget.rows, "steps"), notes)


def another_failure(step: Step) -> str:
    """How a candidate failed when it is not how the bad end fails ("" when it is, or it did not fail)."""
    return (step.stats.other_failure or "") if step.outcome == "skip" else ""


def how_sure_block(run: BisectRun) -> list[str]:
    """The answer run again (bisect.confirm) and the revert (--confirm-revert), or what was not rerun."""
    res = run.result
    c = run.confirmation
    if c is not None and c.level is Level.HOST_CHANGED:  # nothing named: what the confirmation saw is the answer
        return ["### How sure", "", f"**Host changed**: {c.sentence}.", ""]
    if res is None or res.first_new is None:
        return []
    if c is None:
        return ["### How sure", "", ("The found commit and its parent were each tested once, and the verdict "
                                     "is a rule on one trial; `--confirm always` runs them again, fresh."), ""]
    notes = Notes()
    rows = [[who, f"`{j.sha[:10]}`", f"**{j.outcome}**", cell(j.evidence, 160, notes)]
            for who, j in (("parent", c.parent), ("found", c.found))]
    each = (f"{c.launches} fresh launch(es) each" if c.parent_launches == c.launches
            else f"fresh launches: {c.launches} of the found commit, {c.parent_launches} of its parent")
    counted = c.counted
    if counted is not None:  # the posterior search's confirmation counts the search's launches of the two too
        each += f"; counted with them from the search: {counted.counted} and {counted.parent_counted}"
    lines = ["### How sure", "", f"**{c.level.capitalize()}**: {c.sentence} ({each}).", "",
             table(["", "commit", "verdict", "evidence"], rows, notes), ""]
    if c.compared is not None and c.compared.text:
        lines += [f"Parent vs found, run again: {c.compared.text}.", ""]
    if counted is not None:
        m = counted.mass
        lines += [(f"Every launch counted, the search's and the fresh ones, in the search's posterior: the found "
                   f"commit holds {m.found:.1%}, its parent {m.parent:.1%}, no change {m.no_change:.1%}."), ""]
        for who, why in counted.guard.items():
            if why:
                lines += [(f"⚠ Guard: the {who}'s launches in the search no longer count, only its fresh ones: "
                           f"{cell(why, 300)}."), ""]
    revert = c.revert
    if revert:
        lines += [f"**Revert**: {revert['sentence']}."
                  + (f" The revert is commit `{revert['sha'][:10]}` (made by abbisect, on no branch)."
                     if "sha" in revert else ""), ""]
    return lines


def narrowing_block(run: BisectRun) -> list[str]:
    """`--narrow`: which feature is to blame at the answer, and the workaround (abbisect narrow's tables)."""
    n = run.narrowing
    if n is None:
        return []
    where = f"`{n.rev.sha[:10]}`" + (" (the last broken commit)" if run.mode is Mode.FIX else " (the found commit)")
    lines = [f"### Narrowed at {where}", "", f"**{narrow_headline(n)}**", "",
             f"{len(n.probes)} probes, {n.launches} launches; every probe is in `narrow/` beside this report.", ""]
    return lines + workaround_table(n, level=4) + minimal_block(n, level=4)


def in_history_order(run: BisectRun) -> list[Step]:
    """The tested commits oldest first (the history's order; a commit it does not hold, last)."""
    order = {sha: n for n, sha in enumerate(run.order)}
    return sorted(run.steps, key=lambda s: order.get(s.sha, len(order)))


def perf_block(run: BisectRun) -> list[str]:
    """A performance bisect: the found commit against its parent metric by metric (every launch of each), and
    the metric along the tested commits in the history's order."""
    perf = run.recipe.perf
    if perf is None:
        return []
    lines = ["### Performance", ""]
    busy = busy_host([t for s in run.steps for t in s.trials])
    if busy:
        lines += [busy, ""]
    by_sha = {s.sha: s for s in run.steps}
    found = run.result.first_new if run.result else None
    if found in by_sha and run.found_parent in by_sha:
        unlike = unlike_starts(by_sha[run.found_parent].trials, by_sha[found].trials, ("the parent", "the found commit"))
        lines += [unlike, ""] if unlike else []
        lines += ["Parent (A) vs the found commit (B), every launch of the search:", "",
                  metric_table(perf, by_sha[run.found_parent].trials, by_sha[found].trials), ""]
    chart = along_bisect(perf, [(str(s.role).replace(" end", ""), s.sha, str(s.outcome), s.trials)
                                for s in in_history_order(run) if s.result is not None])
    if chart:
        lines += [f"{perf.metric} along the tested commits, oldest first (the median of each commit's passes):",
                  "", fence(chart), ""]
    return lines


def accuracy_block(run: BisectRun) -> list[str]:
    """An accuracy bisect: the found commit against its parent on the items both answered, and the accuracy of
    every tested commit in the history's order."""
    section = run.recipe.eval
    if section is None:
        return []
    by_sha = {s.sha: s for s in run.steps}
    lines = []
    found = run.result.first_new if run.result else None
    if found in by_sha and run.found_parent in by_sha:
        a, b = eval_run(by_sha[run.found_parent].trials), eval_run(by_sha[found].trials)
        if a is not None and b is not None:
            lines += [ab_accuracy(section, a, b, False, level=3,
                                  title="Accuracy: parent (A) vs the found commit (B)"), ""]
    rows = [(str(s.role).replace(" end", ""), s.sha, str(s.outcome), r)
            for s in in_history_order(run) if (r := eval_run(s.trials))]
    if rows:
        lines += ["Accuracy of the tested commits, oldest first (every item each answered):", "",
                  accuracy_along(rows), ""]
    return lines


def failures_block(run: BisectRun) -> list[str]:
    """How the bad end fails, and the candidates that failed another way (a second bug in the range)."""
    others = [s for s in run.steps if another_failure(s)]
    if not run.failure and not others:
        return []
    lines = ["### Failures", ""]
    if run.failure:
        lines += [(f"The bad end fails as: {code(run.failure, 200)}; a candidate failing another way is "
                   "skipped, not blamed (`verdict.same_failure`).")]
    if others:
        lines += ["", "Another failure in the range (a second bug, not this bisect's):", ""]
        lines += [f"- `{s.sha[:10]}` ({cell(run.subject(s.sha), 60)}): {code(another_failure(s), 200)}"
                  for s in others]
    return [*lines, ""]


def representative(step: Step) -> TrialResult | None:
    """The trial that shows a step's verdict: its first one whose own outcome is the step's (with repeats,
    a launch of a flaky commit that failed), else its first."""
    return next((t for t in step.trials if t.verdict.outcome == step.outcome), step.result)


def slot_check(check: GpuCheck | None) -> SlotReport | None:
    """A trial's per-slot GPU check (gpu/sharing.py's `SlotReport`); None when the trial has none (its slot had a
    GPU of its own: a whole-GPU check, or none)."""
    return check if isinstance(check, SlotReport) else None


def _check_cell(rep: SlotReport | None) -> str:
    """A per-slot check in one cell: its state, the slot's own PIDs, the other slots' PIDs, free MiB."""
    if rep is None:
        return "—"
    if rep.skipped:
        return cell(rep.notice, 80)

    def procs(seen: tuple[GpuProcess, ...]) -> str:
        return ", ".join(f"{p.pid} ({'?' if p.mib is None else format(p.mib, ',')} MiB)" for p in seen) or "—"
    free = ", ".join(f"{f:,}" for f in rep.free_mib) or "?"
    state = "BUSY" if rep.busy else "ok"
    waited = f", waited {rep.waited_s:g} s" if rep.waited_s else ""
    return f"{state}{waited}; own: {procs(rep.own)}; other slots: {procs(rep.others)}; free {free} MiB"


def slot_hygiene(run: BisectRun, budget: Budget = BUDGETS[0]) -> str:
    """Each trial's per-slot checks (gpu/sharing.py) when the run's slots share a GPU; "" otherwise."""
    rows = []
    for s in run.steps:
        if s.result is None or (before := slot_check(s.result.extras.gpu_before)) is None:
            continue
        after = slot_check(s.result.extras.gpu_after)
        rows.append([str(s.n), str(s.slot if s.slot is not None else before.slot), f"`{s.sha[:10]}`",
                     _check_cell(before), _check_cell(after)])
    if not rows:
        return ""
    share = run.recipe.gpu_share
    return ((f"Each slot's server took {share:g} of its GPU's memory. " if share is not None else "")
            + "Before a launch: the slot's previous server gone from the GPU and its share free; after teardown: "
            "the trial's own server gone (NVML's per-process accounting).\n\n"
            + table(["step", "slot", "commit", "before launch", "after teardown"],
                    _elide(rows, budget.rows, "trials")))


def decisive_ab(run: BisectRun) -> ABResult | None:
    """The A/B of the found commit's parent against it, when both were tested (with repeats, a launch of each
    that shows its verdict)."""
    by_sha = {s.sha: s for s in run.steps}
    if run.result and run.result.first_new and run.found_parent in by_sha:
        parent, found = representative(by_sha[run.found_parent]), representative(by_sha[run.result.first_new])
        if parent is not None and found is not None:
            links = ABLinks(CommitLinks(commit=run.links.parent), replace(run.links, parent=None))
            return compare(run.recipe, relabel(parent, "parent"), relabel(found, "found"), "", "", links)
    return None


def render_bisect(run: BisectRun, reproduce: list[str], budget: Budget = BUDGETS[0], recipe: dict | None = None,
                  recipe_file: str | None = None) -> str:
    lines = [f"## abbisect bisect: {code(run.recipe.name)}", "",
             f"Range: {code(run.old.ref)} ({run.old.short}) .. {code(run.new.ref)} ({run.new.short}); "
             f"named good: {code(run.good.ref)}, named bad: {code(run.bad.ref)}"
             + (", first-parent walk" if run.recipe.bisect.first_parent else "") + ".", "",
             f"### {changes.headline(run) or headline(run)}", ""]
    if drifted := drift_said(run):
        lines += [drifted, ""]
    if run.result and (pins := run.pins.get(run.result.first_new or "")):
        lines += [f"It {cell(pins.told(), 400)}.", ""]
    if run.merge_bases:
        bases = ", ".join(b[:10] for b in run.merge_bases)
        lines += ["### Ends", "", cell(run.ends_note, 1000) if run.ends_note
                  else f"The ends are on different branches; merge base {bases}.", ""]
    if run.variable.describe():
        lines[4:4] = [f"Walking {run.variable.describe()}.", ""]
    if run.mislabelled:
        lines += [(f"⚠ The ends were named the other way round: {cell(run.mislabelled, 300)}; this search "
                   f"finds the commit that {run.mode.word} it."), ""]
    lines += changes.block(run)
    lines += found_block(run)
    lines += follow.block(run)
    lines += releases_block(run)
    resumed = any(s.replayed for s in run.steps)
    lines += [(f"{len(run.steps)} commits tested, {run.launches} server launches, {run.builds} venv builds, "
              f"{run.wall_s:.1f} s wall time" + (" (the runs before the resume included)." if resumed else ".")), ""]
    lines += [ends_mode_line(run), ""]
    lines += [caches_line(JitMode(run.recipe.launch.jit_cache), [("the tested commits", [t for s in run.steps
                                                                                          for t in s.trials])]), ""]
    if run.rounds and (run.slots > 1 or not run.posterior):  # a posterior search says its rounds itself
        per_round = ", ".join(f"{r.seconds:.0f} s ({len(r.commits)})" for r in run.rounds)
        ahead = sum(s.round == 0 and s.role is Role.CANDIDATE for s in run.steps)
        with_ends = f"ends tested at once, with {ahead} commit(s) between them" if ahead else "ends tested at once"
        lines += [(f"{run.slots} slots on the {run.executor} executor ({with_ends}): {len(run.rounds)} "
                   f"rounds after the ends" + (" since the resume" if resumed else "")
                   + f" — time per round (commits tested): {per_round}."), ""]
    lines += how_sure_block(run)
    lines += posterior.block(run)
    lines += narrowing_block(run)
    ab = decisive_ab(run)
    if ab is not None and run.result is not None:
        several = any(len(s.trials) > 1 for s in run.steps if s.sha in (run.found_parent, run.result.first_new))
        lines += ["### Decisive A/B: parent vs the found commit", "",
                  *([("One launch of each, one that shows its verdict; every launch is counted in the trail and "
                     "under How sure."), ""] if several else []),
                  render_ab(ab, budget, level=4, embedded=True), ""]
    lines += perf_block(run)
    lines += accuracy_block(run)
    lines += numerics_block(run)
    lines += ["### Trail", "", trail(run, budget), ""]
    lines += nodes_block(run)
    if run.unstable:
        lines += [(f"The good end answered {len(run.unstable)} prompt(s) differently when run twice "
                   f"({', '.join(esc(u) for u in run.unstable[:8])}): noise of the engine, left out of every comparison."), ""]
    lines += failures_block(run)
    hygiene = slot_hygiene(run, budget)
    if hygiene:
        lines += [details("GPU hygiene per slot (slots share a GPU)", hygiene), ""]
    skipped = [s for s in run.steps if s.outcome == "skip" and s.needed and not another_failure(s)]
    if skipped:
        lines += ["### Skipped (untestable) commits", ""]
        lines += [f"- `{s.sha[:10]}`: {s.status} — {cell(s.evidence, 150)}" for s in skipped]
        lines += [""]
    end_steps = [s for s in run.steps if s.is_end][:2]
    fps = {str(s.role): fp for s in end_steps if s.result and (fp := s.result.extras.fingerprint)}
    if fps:
        sides = {role: load(Fingerprint, fp) for role, fp in fps.items()}
        lines += [details("Environment fingerprint of the two ends' venvs", render_sides(sides)), ""]
    block = recipe_block(recipe, recipe_file)
    lines += [block, ""] if block else []
    lines += [reproduce_block(reproduce, __version__), ""]
    return "\n".join(lines)


def ends_mode_line(run: BisectRun) -> str:
    """Which ends mode ran (bisect.ends) and, in lazy mode, which ends were tested and why (or why not)."""
    if run.ends_mode is EndsMode.LAZY:
        return ("Ends: **lazy** (`bisect.ends: lazy`): the search started from the labels at once; an end is "
                "tested only when the answer rests on it. " + "; ".join(run.ends_lazy) + ".")
    if run.ends_asked is EndsMode.LAZY:
        return f"Ends: tested first — `bisect.ends: lazy` was asked but fell back: {run.ends_fallback}."
    return "Ends: tested first (`bisect.ends: first`)."


def bisect_files(run: BisectRun, reproduce: list[str], portable: Portable, doc: dict, engine_source: str,
                 recipe_file: Path) -> dict[str, str]:
    """{file name: text}: bisect.md (fits one GitHub comment, no local path) and the decisive outputs.
    `portable` masks the recipe's secrets and replaces this machine's paths (before any text is cut or
    escaped), `doc` is the portable recipe, `engine_source` where a stranger gets the engine's history."""
    # `git -C REPO bisect run` runs its command inside REPO: the recipe is named by an absolute path there.
    repo, recipe = shlex.quote(str(run.repo)), shlex.quote(str(recipe_file.resolve()))
    commands = [c.replace(f"-C {repo} ", '-C "$ENGINE_REPO" ').replace(f" {recipe}", ' "$RECIPE"')
                if c.startswith("git ") else c for c in reproduce]  # elsewhere the recipe is named by its file name
    if any("$ENGINE_REPO" in c for c in commands):
        commands.insert(0, f"# ENGINE_REPO: a git clone of {engine_source}; "
                           "RECIPE: the absolute path of the recipe above, saved as a file")
    files = {"bisect.md": fit(lambda budget: portable.render(lambda: render_bisect(run, commands, budget, doc,
                                                                                   recipe_file.name)))}
    if run.posterior:
        files["posterior.svg"] = portable.text(posterior.svg(run))
    if picture := numerics_picture(run):
        files["numerics.svg"] = portable.text(picture)
    ab = decisive_ab(run)
    if ab is not None and (ab.a.outputs or ab.b.outputs):
        decisive = ab
        files[OUTPUTS_FILE] = portable.render(lambda: outputs_document(
            f"abbisect bisect {code(run.recipe.name)}: parent vs found", [("parent", decisive.a), ("found", decisive.b)]))
    return files


def bisect_json(run: BisectRun) -> dict:
    res = run.result
    return {"schema": f"abbisect/bisect/v{SCHEMA_VERSION}", "recipe": run.recipe.model_dump(mode="json"),
            "mode": run.mode, "message": run.message, "order": list(run.order),
            "good": run.good.ref, "bad": run.bad.ref, "old": run.old.sha, "new": run.new.sha,
            "outcome": res.outcome if res else None, "first_new": res.first_new if res else None,
            "candidates": list(res.candidates) if res else [], "found_parent": run.found_parent,
            "commit": dump(run.commits[res.first_new]) if res and res.first_new else None,
            "links": dump(run.links), "mislabelled": run.mislabelled,
            "steps": [{**dump(s, exclude={"result", "more"}), "launches": len(s.trials)} for s in run.steps],
            "launches": run.launches, "builds": run.builds, "before": dump(run.before),  # a resumed one's every run
            "failure": run.failure, "unstable": list(run.unstable),
            "confirmation": run.confirmation.json() if run.confirmation else {},
            "posterior": run.posterior.json() if run.posterior else None,
            "changes": run.changes.json() if run.changes else None,
            "narrowing": narrow_json(run.narrowing) if run.narrowing else None,
            "pins": {sha: dump(d) for sha, d in run.pins.items()}, "follow": dump(run.follow) if run.follow is not None else None,
            "wall_s": run.wall_s, "version": __version__, "repo": str(run.repo),
            "merge_bases": list(run.merge_bases), "ends_note": run.ends_note, "excluded": list(run.excluded),
            "releases": dump(run.releases) if run.releases else None,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "slots": run.slots, "executor": run.executor, "rounds": [r.json() for r in run.rounds],
            "nodes": nodes_json(run),
            "ends": {"mode": run.ends_mode, "asked": run.ends_asked, "fallback": run.ends_fallback,
                     "lazy": run.ends_lazy},
            "trials": [trial_record(run, s) for s in run.steps if s.result is not None]}


def trial_record(run: BisectRun, step: Step) -> dict:
    """What the serving matrix needs of a step's trial: its commit, GPU stack, engine version, timings."""
    # The engine's commit (with bisect.over the step is a dependency's version or commit; the engine is fixed).
    r = step.result
    assert r is not None  # only steps with a trial are recorded
    info = run.engine_commits[r.spec.sha]
    return {"n": step.n, "sha": r.spec.sha, "ref": r.spec.ref, "subject": info.subject,
            "pins": list(r.spec.pins), "dependency": r.spec.dependency.sha if r.spec.dependency else None,
            "commit_date": info.date, "parents": list(info.parents),
            "version": LoggedFacts.of(r.launch.facts).version if r.launch else None,
            "fingerprint": r.extras.fingerprint, "timings": dump(r.timings), "cached": r.cached,
            "placement": dump(r.extras.placement) if r.extras.placement is not None else None,
            # Where its JIT caches were, and how each launch of the commit started (cold, warm; unknown on the
            # user's caches): a performance step's launches are measured alike only when they started alike.
            "jit": {"folder": caches.folder, "starts": starts_of(step.trials)}
            if (caches := jit_of(r)) is not None else None,
            "gpu": {w: dump(rep) for w, rep in (("before", r.extras.gpu_before), ("after", r.extras.gpu_after))
                    if rep is not None} or None,
            "perf": told(run.recipe.perf.metric, metric_values(step.trials, run.recipe.perf.metric),
                         pass_errors(step.trials)) if run.recipe.perf else ""}
