"""bisect.md: the found commit, fix or regression, the decisive A/B, the trail and how to reproduce."""

from __future__ import annotations

from dataclasses import asdict, replace

from abbisect import __version__
from abbisect.ab import compare
from abbisect.bisect import history
from abbisect.bisect.driver import BisectRun
from abbisect.report.markdown import cell, details, fence, render_ab, table


def relabel(result, label: str):
    return replace(result, spec=replace(result.spec, ref=label, side=label))


def headline(run: BisectRun) -> str:
    if run.mode in ("no-change", "untestable-end"):
        return f"No bisection: {run.message}"
    res = run.result
    if res is None:
        return "Bisection did not finish."
    word = "fixed" if run.mode == "fix" else "broke"
    if res.outcome == "found":
        return f"The commit that {word} it: `{res.first_new}`"
    if res.outcome == "ambiguous":
        return (f"Only untestable commits are left: the commit that {word} it is one of "
                f"{', '.join(f'`{c[:10]}`' for c in res.candidates)}")
    return "No candidate could be tested in the range."


def found_block(run: BisectRun) -> list[str]:
    res = run.result
    if res is None or res.first_new is None:
        return []
    info = history.commit_info(run.repo, res.first_new)
    urls = history.github_urls(run.repo, res.first_new, run.found_parent)
    rows = [["sha", f"`{info.sha}`"], ["subject", cell(info.subject, 120)], ["author", f"{info.author}"],
            ["date", info.date], ["PR", f"#{info.pr}" if info.pr else "—"],
            ["kind", "**fix** (old end bad, new end good)" if run.mode == "fix" else
             "**regression** (old end good, new end bad)"]]
    rows += [[k, v] for k, v in urls.items()]
    return [table(["", ""], rows), ""]


def trail(run: BisectRun) -> str:
    rows = []
    for s in run.steps:
        subject = history.commit_info(run.repo, s.sha).subject
        rows.append([str(s.n), f"`{s.sha[:10]}`", cell(subject, 50), s.role, f"**{s.outcome}**", s.status,
                     cell(s.evidence, 90), f"{s.seconds:.1f} s" + (" (cached)" if s.cached else "")])
    return table(["step", "commit", "subject", "role", "verdict", "status", "evidence", "time"], rows)


def render_bisect(run: BisectRun, reproduce: list[str]) -> str:
    lines = [f"## abbisect bisect: `{run.recipe.name}`", "",
             f"Range: `{run.old.ref}` ({run.old.short}) .. `{run.new.ref}` ({run.new.short}); "
             f"named good: `{run.good.ref}`, named bad: `{run.bad.ref}`"
             + (", first-parent walk" if run.recipe.bisect.first_parent else "") + ".", "",
             f"### {headline(run)}", ""]
    lines += found_block(run)
    lines += [(f"{len(run.steps)} trials, {run.launches} server launches, {run.builds} venv builds, "
              f"{run.wall_s:.1f} s wall time."), ""]
    by_sha = {s.sha: s for s in run.steps}
    if run.result and run.result.first_new and run.found_parent in by_sha:
        parent, found = by_sha[run.found_parent].result, by_sha[run.result.first_new].result
        if parent is not None and found is not None:
            ab = compare(run.recipe, relabel(parent, "parent"), relabel(found, "found"), reproduce[0], "")
            lines += ["### Decisive A/B: parent vs the found commit", "", render_ab(ab), ""]
    lines += ["### Trail", "", trail(run), ""]
    skipped = [s for s in run.steps if s.outcome == "skip"]
    if skipped:
        lines += ["### Skipped (untestable) commits", ""]
        lines += [f"- `{s.sha[:10]}`: {s.status} — {cell(s.evidence, 150)}" for s in skipped]
        lines += [""]
    fps = {s.role: s.result.extras["fingerprint"] for s in run.steps[:2] if s.result and s.result.extras.get("fingerprint")}
    if fps:
        from abbisect.gpu.fingerprint import Fingerprint, render_sides

        sides = {role: Fingerprint.from_dict({k: v for k, v in fp.items() if k != "key"}) for role, fp in fps.items()}
        lines += [details("Environment fingerprint of the two ends' venvs", render_sides(sides)), ""]
    lines += [details("Reproduce", fence("\n".join(reproduce), "sh") + f"\n\nabbisect {__version__}"), ""]
    return "\n".join(lines)


def bisect_json(run: BisectRun) -> dict:
    res = run.result
    return {"recipe": run.recipe.model_dump(mode="json"), "mode": run.mode, "message": run.message,
            "good": run.good.ref, "bad": run.bad.ref, "old": run.old.sha, "new": run.new.sha,
            "outcome": res.outcome if res else None, "first_new": res.first_new if res else None,
            "candidates": list(res.candidates) if res else [], "found_parent": run.found_parent,
            "commit": asdict(history.commit_info(run.repo, res.first_new)) if res and res.first_new else None,
            "steps": [s.to_dict() for s in run.steps], "launches": run.launches, "builds": run.builds,
            "wall_s": run.wall_s, "version": __version__}
