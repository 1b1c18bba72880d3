"""The A/B report as paste-ready GitHub markdown, from result objects (pure functions: data in, text out).

Model text is untrusted: in table cells and prose it is escaped (HTML and markdown punctuation), in code
blocks it is fenced with more backticks than it contains, so any output renders literally. A report fits
one GitHub comment (`COMMENT_LIMIT`): `fit` renders with ever smaller `Budget`s until it does, and the
full outputs go to a side file (`outputs.md`) that the report names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import median

import yaml

from abbisect.ab import ABLinks
from abbisect.bisect.gitlog import CommitLinks
from abbisect.gpu.fingerprint import Fingerprint
from abbisect.infra.serial import load
from abbisect.launch.engines.base import LoggedFacts
from abbisect.launch.jit import JitMode, Start
from abbisect.query.chat import tag
from abbisect.report.jit import caches_line, jit_of
from abbisect.report.packages import render_packages, side_variable
from abbisect.report.text import CELL, Notes, cell, code, details, esc, fence, heading, shown, table
from abbisect.trial.spec import TrialResult

COMMENT_LIMIT = 65_536  # GitHub's limit for an issue comment, in characters
MARGIN = 1_536  # room for what a person adds when pasting
SIGNAL_ROWS = ("signatures", "degenerate", "late loops", "answers", "verdict")  # timings always differ a little
OUTPUTS_FILE = "outputs.md"
OUTPUT_CAP = 1_000_000  # characters of one output kept in the side file
SIDE_FILE_CAP = 16_000_000  # characters of the whole side file


@dataclass(frozen=True)
class Budget:
    """How much of each part a rendering may show; `fit` tries them from the first (most) to the last."""

    cell: int = CELL
    output: int | None = 4000  # characters of each output in the full-output blocks; None: none shown
    rows: int | None = None  # rows of the outputs table and the bisect trail; None: all
    log_lines: int = 40  # matched log lines shown per side


BUDGETS = (Budget(), Budget(cell=90, output=1500, rows=60), Budget(cell=60, output=400, rows=40, log_lines=20),
           Budget(cell=40, output=None, rows=20, log_lines=10), Budget(cell=30, output=None, rows=8, log_lines=5))

def clip(text: str, limit: int | None, where: str = OUTPUTS_FILE) -> str:
    """`text` cut to `limit` characters with a marker saying how much is left out and where it is."""
    text = shown(text)
    if limit is None or len(text) <= limit:
        return text
    return text[:limit] + f"\n… [{len(text) - limit:,} more characters; the full text is in {where}]"


def _secs(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f} s"


def cached_note(r: TrialResult, short: bool = False) -> str:
    """'fresh', or where a cached result came from: the date of the original run and its logs."""
    if not r.cached:
        return "fresh"
    origin = r.extras.cache
    stored = origin.stored if origin is not None else "an earlier run"
    if short:
        return f"cached ({stored})"
    logs = ", ".join(f"`{Path(r.spec.out_dir).name}/{name}`" for name in (origin.logs if origin is not None else ()))
    return (f"served from the trial cache: the result of a run at {stored}"
            + (f"; its logs, kept with the cache entry, are copied here: {logs}" if logs else "; no logs were kept"))


def side_summary(r: TrialResult) -> dict[str, str]:
    n = len(r.outputs)
    degenerate = sum(1 for a in r.analyses if a.label == "degenerate")
    late = sum(1 for a in r.analyses if a.label == "late_loop")
    misses = sum(1 for c in r.answers if c is not None and not c.passed)
    checked = sum(1 for c in r.answers if c is not None)
    serious = sorted({s.id for s in r.signatures if s.severity in ("warning", "error", "fatal")})
    minor = len({s.id for s in r.signatures} - set(serious))
    build = "failed" if r.env and not r.env.ok else ("reused" if r.env and r.env.reused else _secs(r.timings.build))
    return {
        "result": cached_note(r, short=True),
        "build": build,
        "ready": _secs(r.launch.ready_s) if r.launch and r.launch.status == "ready" else (
            r.launch.status if r.launch else "—"),
        "signatures": (", ".join(f"`{s}`" for s in serious) or "none serious")
                      + (f" (+{minor} info)" if minor else ""),
        "degenerate": f"{degenerate}/{n}" if n else "—",
        "late loops": f"{late}/{n}" if n else "—",
        "answers": f"{checked - misses}/{checked} correct" if checked else "—",
        "verdict": f"**{r.verdict.status}**",
    }


SUMMARY_NOTE = ("_result_: fresh = run now, cached = replayed from the trial cache (the date of its run; its logs "
                "copied in). _signatures_: the load log's known failure signatures at warning or above (info ones "
                "counted apart, all listed under Evidence).")


def verdict_line(a: TrialResult, b: TrialResult) -> str:
    """The answer first: each side's outcome and status, whether it changed, and each side's first reason."""
    change = ("the outcome changes between the sides" if a.verdict.outcome != b.verdict.outcome
              else f"both sides are {a.verdict.outcome}")
    why = "; ".join(f"{side}: {cell(r.verdict.reasons[0], 160)}" for side, r in (("A", a), ("B", b))
                    if r.verdict.reasons)
    return (f"**Verdict: A {r_ref(a)} is {a.verdict.outcome} ({a.verdict.status}), B {r_ref(b)} is "
            f"{b.verdict.outcome} ({b.verdict.status})** — {change}. {why}.")


def repeated_verdict_line(ab) -> str:
    """The answer first, over every launch of each side: each side's outcome and the comparison."""
    s = ab.assessment
    said = "; ".join(f"{side.upper()}: {cell(s.side(side).evidence, 200)}" for side in ("a", "b"))
    return (f"**Verdict over {s.launches} launch(es) a side: A {r_ref(ab.a)} is {s.a.outcome}, B {r_ref(ab.b)} is "
            f"{s.b.outcome}** — {cell(s.comparison.text, 300)}. {said}.")


def launches_block(ab) -> str:
    """One row per launch of each side, in the order they ran (A, B, A, B …)."""
    metric = ab.recipe.perf.metric if ab.recipe.perf is not None else None

    def said_of(t: TrialResult) -> str:
        said = f"{t.verdict.status} → {t.verdict.outcome}"
        if (caches := jit_of(t)) is not None and caches.start is not Start.UNKNOWN:
            said += f"; started {caches.start}"
        if metric:  # a performance verdict: the launch's median of the metric, and its failed requests
            from abbisect.assess.perf import fmt, metric_values, pass_errors

            values, errors = metric_values([t], metric), pass_errors([t])
            said += f"; {fmt(median(values), metric)}" if values else "; not measured"
            said += f"; failed requests {cell(errors.describe(), 300)}" if errors.errors else ""
        if ab.recipe.eval is not None:  # an accuracy verdict: the items this launch answered
            from abbisect.assess.accuracy import accuracy_text, eval_run

            run = eval_run([t])
            said += f"; {accuracy_text(run)}" if run is not None else "; no item answered"
        return said

    rows = []
    for k, (ta, tb) in enumerate(zip(ab.trials("a"), ab.trials("b"))):
        rows.append([str(k + 1), said_of(ta), said_of(tb), "cached" if ta.cached and tb.cached else "fresh"])
    return table(["launch", f"A {r_ref(ab.a, True)}", f"B {r_ref(ab.b, True)}", "result"], rows)


def r_ref(r: TrialResult, in_table: bool = False) -> str:
    """The side's ref as the user named it, a code span."""
    return code(r.spec.ref, 60, in_table)


def summary_table(results: list[tuple[str, TrialResult]]) -> str:
    sums = [side_summary(r) for _, r in results]
    rows = []
    for key in sums[0]:
        vals = [s[key] for s in sums]
        mark = " ⚠ changed" if key in SIGNAL_ROWS and len(set(vals)) > 1 else ""
        rows.append([key + mark, *vals])
    return table(["signal", *[f"{label}: {r_ref(r, True)} ({r.spec.sha[:10]})" for label, r in results]], rows)


def _elide(rows: list[list[str]], limit: int | None, what: str) -> list[list[str]]:
    """The first and last rows when there are more than `limit`, with one row saying how many are left out."""
    if limit is None or len(rows) <= limit:
        return rows
    head, tail = limit - limit // 3, limit // 3
    filler = [f"… {len(rows) - head - tail} {what} left out (all in {OUTPUTS_FILE} / the CSV)"]
    return rows[:head] + [filler + [""] * (len(rows[0]) - 1)] + (rows[-tail:] if tail else [])


def outputs_table(a: TrialResult, b: TrialResult, divergences, budget: Budget = Budget()) -> str:
    rows = []
    shortened = Notes(listed=False)  # the full outputs follow the table
    for n, (oa, ob) in enumerate(zip(a.outputs, b.outputs)):
        d = divergences[n] if n < len(divergences) else None
        where = "—" if d is None else ("identical" if d.identical else f"char {d.char_index} (sim {d.similarity:.2f})")
        la = a.analyses[n].label if n < len(a.analyses) else ""
        lb = b.analyses[n].label if n < len(b.analyses) else ""
        which = tag(oa).removeprefix(oa.prompt_id).strip()  # its copy, pass, requests in flight
        rows.append([cell(oa.prompt, 40, shortened) + (f" _({cell(which, 40)})_" if which else ""),
                     f"{cell(oa.error or oa.text, budget.cell, shortened)} _({la})_",
                     f"{cell(ob.error or ob.text, budget.cell, shortened)} _({lb})_", where])
    return table(["prompt", "A output", "B output", "first divergence"], _elide(rows, budget.rows, "prompts"))


def evidence_block(label: str, r: TrialResult, budget: Budget = Budget()) -> str:
    parts = [f"**{label} verdict: {r.verdict.status}** ({r.verdict.outcome})", ""]
    parts += [f"- {cell(reason, 400)}" for reason in r.verdict.reasons]
    if r.cached:
        parts += [f"- {cached_note(r)}"]
    if r.env and not r.env.ok:
        parts += ["", details(f"{label}: build log tail", fence(clip(r.env.error or "", 4000, "build.log")))]
    if r.launch and (r.launch.status != "ready" or r.launch.crashed_while_serving):
        parts += ["", details(f"{label}: server log tail",
                              fence("\n".join(shown(line)[:400] for line in r.launch.log_tail[-budget.log_lines:])))]
    if r.first_exception:
        parts += ["", (f"First exception in the log (root cause), line {r.first_exception[0]}: "
                      f"{cell(r.first_exception[1], 200)}")]
    if r.launch and r.launch.client_gone:
        parts += ["", (f"{r.launch.client_gone} traceback(s) in the log end in a connection abbisect's own client "
                       "closed (a ConnectionResetError, a broken pipe): not evidence, not counted above.")]
    if r.signatures:
        matched = r.signatures[: budget.log_lines]
        more = f" (first {len(matched)} shown; all in server.log)" if len(matched) < len(r.signatures) else ""
        notes = Notes()
        sig_rows = [[f"`{s.id}`", s.severity, str(s.line_no), cell(", ".join(s.groups), 40, notes),
                     cell(s.meaning, 80, notes)] for s in matched]
        parts += ["", details(f"{label}: matched log lines ({len(r.signatures)}){more}",
                              table(["signature", "severity", "line", "captured", "meaning"], sig_rows, notes) + "\n\n" +
                              fence("\n".join(f"{s.line_no}: {shown(s.line)[:300]}" for s in matched)))]
    return "\n".join(parts)


def output_entry(o, an, limit: int | None) -> str:
    head = (f"**{cell(o.prompt, 80)}** — {an.label}: {cell(an.reason, 200)} "
            f"(finish={o.finish_reason}, tokens={o.completion_tokens}, {o.latency_s:.2f} s)")
    return head + "\n\n" + fence(clip(o.error or o.text, limit))


def full_outputs(label: str, r: TrialResult, limit: int | None = 4000) -> str:
    body = [output_entry(o, an, limit) for o, an in zip(r.outputs, r.analyses)]
    return details(f"{label}: full outputs", "\n\n".join(body) or "no outputs")


def facts_block(a: TrialResult, b: TrialResult) -> str:
    rows = []
    notes = Notes()
    for label, r in (("A", a), ("B", b)):
        logged = LoggedFacts.of(r.launch.facts if r.launch else {})
        version = logged.version
        if not version and r.extras.fingerprint and (
                from_venv := load(Fingerprint, r.extras.fingerprint).engine_version):
            version = f"{from_venv} (from its venv)"
        shims = _shims(r)
        if version and str(version) in shims.values():  # the engine reads its version from the shim
            version = f"{version} (= the recipe's dist-info shim; the engine may read it, not the commit's own version)"
        args = logged.args if logged.args is not None else "—"
        rows.append([label, cell(str(version or "—"), 120, notes), _args(args, notes=notes)])
    return table(["side", "engine version (from its log)", "non-default args (from its log)"], rows, notes)


def _shims(r: TrialResult) -> dict[str, str]:
    """The dist-info shims the side's install section names ({} for strategies without them)."""
    return dict(r.spec.recipe.install.dist_shims)


def _args(args: object, limit: int = 160, notes: Notes | None = None) -> str:
    """The engine's non-default arguments, cut between two arguments (never inside one), with how many more."""
    # as shown (paths replaced, secrets masked) before the cut is decided: a long local path is short as shown
    items = [shown(f"{k}={v!r}") for k, v in args.items()] if isinstance(args, dict) else [shown(str(args))]
    if not any(items):
        return "— (none)"
    listed: list[str] = []
    for item in items:
        if listed and len(", ".join([*listed, item])) > limit:
            break
        listed.append(item)
    more = len(items) - len(listed)
    return cell(", ".join(listed), limit + 40, notes) + (f" (+{more} more; all in server.log)" if more else "")


def fingerprint_block(a: TrialResult, b: TrialResult) -> str:
    from abbisect.gpu.fingerprint import render_sides

    fa, fb = a.extras.fingerprint, b.extras.fingerprint
    if not (fa and fb):
        return ""
    sides = {"A": load(Fingerprint, fa), "B": load(Fingerprint, fb)}
    return details("Environment fingerprint of each side's venv", render_sides(sides))


def at_once_block(a: TrialResult, b: TrialResult) -> str:
    """A and B on two slots at the same time (`ab.parallel`): where each ran and both sides' GPUs."""
    from abbisect.gpu.fingerprint import describe_gpus

    pa, pb = a.extras.placement, b.extras.placement
    if pa is None or pb is None or pa.slot == pb.slot:
        return ""
    where, gpus = [], []
    for side, r, p in (("A", a, pa), ("B", b, pb)):
        where.append(f"{side} on slot {p.slot} (" + (f"GPU {','.join(map(str, p.gpus))}" if p.gpus
                                                    else "no GPU pinned") + ")")
        fp = r.extras.fingerprint
        gpus.append(f"{side}: {describe_gpus(load(Fingerprint, fp))}"
                    if fp else f"{side}: not recorded")
    return (f"**A and B ran at the same time** (`ab.parallel`): {'; '.join(where)}. GPUs each side saw — "
            f"{'; '.join(gpus)}.")


def gpu_block(a: TrialResult, b: TrialResult) -> str:
    rows = []
    for label, r in (("A", a), ("B", b)):
        for when, rep in (("before", r.extras.gpu_before), ("during", r.extras.gpu_during),
                          ("after", r.extras.gpu_after)):
            if rep is not None:
                state = "skipped: " + cell(rep.notice, 120) if rep.skipped else ("BUSY" if rep.busy else "idle")
                rows.append([label, when, state, ", ".join(map(str, rep.pids)) or "—",
                             ", ".join(map(str, rep.used_mib)) or "—", f"{rep.waited_s:.1f} s"])
    return table(["side", "when", "GPU", "PIDs", "used MiB", "waited"], rows) if rows else ""


def probe_block(label: str, r: TrialResult, level: int = 4) -> str:
    from abbisect.gpu.kernel_probe import ProbeResult, render_probe_markdown

    data = r.extras.probe
    return f"{heading(level, f'{label}: kernel probe')}\n\n{render_probe_markdown(load(ProbeResult, data))}" if data else ""


def commit_line(label: str, r: TrialResult, urls: CommitLinks) -> str:
    """`- **A**: `ref` = sha — subject`, the sha and the PR linked on GitHub."""
    sha = f"[{r.spec.sha[:10]}]({urls.commit})" if urls.commit else r.spec.sha[:10]
    pr = f" ([#{urls.pr.rsplit('/', 1)[-1]}]({urls.pr}))" if urls.pr else ""
    return f"- **{label}**: {r_ref(r)} = {sha} — {cell(r.spec.subject, 100)}{pr}"


def recipe_block(recipe: dict | None, file_name: str | None = None) -> str:
    """The recipe itself, portable (no local paths), so a stranger can rerun the report; `file_name` is the
    name the Reproduce commands use."""
    if not recipe:
        return ""
    text = yaml.safe_dump(recipe, sort_keys=False, allow_unicode=True, width=110)
    name = file_name or f"{recipe.get('name', 'recipe')}.yaml"
    return details(f"Recipe <code>{esc(recipe.get('name', ''))}</code> (save as <code>{esc(name)}</code> to rerun)",
                   fence(text, "yaml"))


def reproduce_block(commands: list[str], version: str, started: str = "") -> str:
    when = f", started {started}" if started else ""
    return details("Reproduce", fence("\n".join(commands), "sh") + f"\n\nabbisect {version}{when}")


def render_ab(ab, budget: Budget = Budget(), level: int = 2, embedded: bool = False,
              recipe: dict | None = None, recipe_file: str | None = None) -> str:
    """The A/B report. `level` is the title's heading level; `embedded` (inside bisect.md) leaves out the
    title, the recipe, the fingerprint and Reproduce, which the enclosing report shows once."""
    a, b = ab.a, ab.b
    h2 = level if embedded else level + 1
    first = repeated_verdict_line(ab) if ab.assessment is not None else verdict_line(a, b)
    lines = [] if embedded else [heading(level, f"abbisect A/B: {code(ab.name)}"), "", first, ""]
    links = ab.links or ABLinks()
    urls_a, urls_b = links.a, links.b
    commits = [commit_line("A", a, urls_a), commit_line("B", b, urls_b)]
    if side_variable(a) or side_variable(b):  # a dependency is the variable: say which, per side
        commits = [f"{line}; {side_variable(r) or 'no pins'}" for line, r in zip(commits, (a, b))]
    lines += commits
    if urls_b.compare:
        lines += [f"- [compare A…B]({urls_b.compare})"]
    lines += [""]
    if ab.same_launch:
        lines += ["Launch command (identical on both sides; only the checkout differs):", fence(ab.launch_a or "(not launched)", "sh")]
    else:
        lines += ["⚠ The launch commands differ between sides:", fence(f"A: {ab.launch_a}\nB: {ab.launch_b}", "sh")]
    rec = ab.recipe
    sampling = rec.sampling
    lines += ["", (f"Sampling: temperature {sampling.temperature}, max_tokens {sampling.max_tokens}, "
                  f"seed {sampling.seed}, API `{rec.api}`."), ""]
    lines += [caches_line(JitMode(rec.launch.jit_cache), [("A", ab.trials("a")), ("B", ab.trials("b"))]), ""]
    if rec.perf is not None and not embedded:
        from abbisect.report.perf import perf_section

        lines += perf_section(rec.perf, ab.trials("a"), ab.trials("b"), ab.same_commit, heading(h2, "Performance"))
    if rec.eval is not None and not embedded:
        from abbisect.assess.accuracy import eval_run
        from abbisect.report.accuracy import ab_accuracy

        runs = eval_run(ab.trials("a")), eval_run(ab.trials("b"))
        if runs[0] is not None and runs[1] is not None:
            lines += [ab_accuracy(rec.eval, runs[0], runs[1], ab.same_commit, h2), ""]
    if rec.numerics is not None and not embedded:
        from abbisect.assess.numerics import ALPHA
        from abbisect.report.numerics import numerics_section

        alpha = rec.verdict.alpha or ALPHA
        lines += numerics_section(rec.numerics, alpha, ab.trials("a"), ab.trials("b"), ab.same_commit, h2)
    if ab.assessment is not None and not embedded:
        lines += [heading(h2, "Every launch"), "", launches_block(ab), ""]
    lines += [heading(h2, "Summary" + (" of each side's first launch" if ab.assessment is not None else "")), "",
              summary_table([("A", a), ("B", b)]), "", SUMMARY_NOTE, ""]
    diff = ab.signature_diff
    if diff["appeared"] or diff["disappeared"]:
        lines += [(f"Log signatures appeared in B: {', '.join(f'`{s}`' for s in diff['appeared']) or 'none'}; "
                  f"disappeared in B: {', '.join(f'`{s}`' for s in diff['disappeared']) or 'none'}."), ""]
    if a.outputs or b.outputs:
        lines += [heading(h2, "Outputs"), "", outputs_table(a, b, ab.divergences, budget), ""]
    lines += [line.replace("### ", heading(h2, "")) if line.startswith("### ") else line
              for line in render_packages(a, b, ab.same_launch)]
    probes = [p for p in (probe_block("A", a, h2 + 1), probe_block("B", b, h2 + 1)) if p]
    lines += [x for p in probes for x in (p, "")]
    gpu = gpu_block(a, b)
    if gpu:
        lines += [heading(h2, "Same-GPU hygiene"), "", gpu, ""]
    together = at_once_block(a, b)
    if together:
        lines += [together, ""]
    lines += [heading(h2, "Evidence"), "", evidence_block("A", a, budget), "", evidence_block("B", b, budget), "",
              heading(h2, "Engine's own record of its flags"), "", facts_block(a, b), ""]
    if a.outputs or b.outputs:
        if budget.output is None:
            lines += [f"Full outputs of both sides: `{OUTPUTS_FILE}` next to this report.", ""]
        else:
            lines += [f"Full outputs (each cut at {budget.output:,} characters here; complete in `{OUTPUTS_FILE}`):",
                      ""]
            lines += [x for r, lab in ((a, "A"), (b, "B")) if r.outputs for x in (full_outputs(lab, r, budget.output), "")]
    fp = fingerprint_block(a, b) if not embedded else ""
    if fp:
        lines += [fp, ""]
    timing = table(["stage", "A", "B"], [[k, _secs(getattr(a.timings, k)), _secs(getattr(b.timings, k))]
                                         for k in ("checkout", "build", "ready", "query", "perf", "probe", "teardown", "score",
                                                   "overhead", "total")])
    lines += [details("Timings", timing + "\n\n" + TIMINGS_NOTE), ""]
    if not embedded:
        block = recipe_block(recipe, recipe_file)
        lines += [block, ""] if block else []
        lines += [reproduce_block([ab.command], ab.version, ab.started), ""]
    return "\n".join(lines)


TIMINGS_NOTE = ("`overhead` is the trial's time outside the stages above: the model's preparation, reading the "
                "venv's package list and fingerprint, waiting for the GPU to be idle, abbisect's own start; "
                "`total` is the whole trial.")


def fit(render: Callable[[Budget], str], limit: int = COMMENT_LIMIT - MARGIN) -> str:
    """The fullest rendering that fits one GitHub comment; the last resort is cut with a marker."""
    text = ""
    for budget in BUDGETS:
        text = render(budget)
        if len(text) <= limit:
            return text
    marker = f"\n\n… [report cut at {limit:,} characters; everything is in {OUTPUTS_FILE} and the JSON]\n"
    return text[: limit - len(marker)] + marker


def outputs_document(title: str, sides: list[tuple[str, TrialResult]]) -> str:
    """The side file: every output in full (each up to OUTPUT_CAP, the file up to SIDE_FILE_CAP)."""
    parts = [f"# {title}: full outputs", ""]
    used = 0
    for label, r in sides:
        parts += [f"## {label}: {r_ref(r)} ({r.spec.sha[:10]})", ""]
        for o, an in zip(r.outputs, r.analyses):
            left = max(SIDE_FILE_CAP - used, 0)
            entry = output_entry(o, an, min(OUTPUT_CAP, left) if left else 0)
            if not left:
                entry = f"**{cell(o.prompt, 80)}** — left out: the side file reached {SIDE_FILE_CAP:,} characters"
            used += len(entry)
            parts += [entry, ""]
    return "\n".join(parts)
