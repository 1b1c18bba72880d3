"""Paste-ready GitHub markdown from result objects (pure functions: data in, text out)."""

from __future__ import annotations

import json
from pathlib import Path

from abbisect.trial import TrialResult

CELL = 90
SIGNAL_ROWS = ("signatures", "degenerate", "late loops", "answers", "verdict")  # timings always differ a little


def cell(text: str | None, limit: int = CELL) -> str:
    """One table cell: no newlines or pipes, shortened with an ellipsis."""
    t = (text or "").replace("\r", "").replace("\n", " ⏎ ").replace("|", "\\|")
    return t if len(t) <= limit else t[: limit - 1] + "…"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def details(summary: str, body: str) -> str:
    return f"<details><summary>{summary}</summary>\n\n{body}\n\n</details>"


def fence(text: str, lang: str = "text") -> str:
    ticks = "````" if "```" in text else "```"
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _secs(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f} s"


def side_summary(r: TrialResult) -> dict[str, str]:
    n = len(r.outputs)
    degenerate = sum(1 for a in r.analyses if a.label == "degenerate")
    late = sum(1 for a in r.analyses if a.label == "late_loop")
    misses = sum(1 for c in r.answers if c is not None and not c.passed)
    checked = sum(1 for c in r.answers if c is not None)
    serious = sorted({s.id for s in r.signatures if s.severity in ("warning", "error", "fatal")})
    build = "failed" if r.env and not r.env.ok else ("reused" if r.env and r.env.reused else _secs(r.timings.get("build")))
    return {
        "result": cached_note(r, short=True),
        "build": build,
        "ready": _secs(r.launch.ready_s) if r.launch and r.launch.status == "ready" else (
            r.launch.status if r.launch else "—"),
        "signatures": ", ".join(f"`{s}`" for s in serious) or "none",
        "degenerate": f"{degenerate}/{n}" if n else "—",
        "late loops": f"{late}/{n}" if n else "—",
        "answers": f"{checked - misses}/{checked} correct" if checked else "—",
        "verdict": f"**{r.verdict.status}**",
    }


def cached_note(r: TrialResult, short: bool = False) -> str:
    """'fresh', or where a cached result came from: the date of the original run and its logs."""
    if not r.cached:
        return "fresh"
    origin = r.extras.get("cache") or {}
    stored = origin.get("stored", "an earlier run")
    if short:
        return f"cached ({stored})"
    logs = ", ".join(f"`{Path(r.spec.out_dir).name}/{name}`" for name in origin.get("logs", []))
    return (f"served from the trial cache: the result of a run at {stored}"
            + (f"; its logs, kept with the cache entry, are copied here: {logs}" if logs else "; no logs were kept"))


def summary_table(results: list[tuple[str, TrialResult]]) -> str:
    sums = [side_summary(r) for _, r in results]
    rows = []
    for key in sums[0]:
        vals = [s[key] for s in sums]
        mark = " ⚠ changed" if key in SIGNAL_ROWS and len(set(vals)) > 1 else ""
        rows.append([key + mark, *vals])
    return table(["", *[f"{label}: `{r.spec.ref}` ({r.spec.sha[:10]})" for label, r in results]], rows)


def outputs_table(a: TrialResult, b: TrialResult, divergences) -> str:
    rows = []
    for n, (oa, ob) in enumerate(zip(a.outputs, b.outputs)):
        d = divergences[n] if n < len(divergences) else None
        where = "—" if d is None else ("identical" if d.identical else f"char {d.char_index} (sim {d.similarity:.2f})")
        la = a.analyses[n].label if n < len(a.analyses) else ""
        lb = b.analyses[n].label if n < len(b.analyses) else ""
        rows.append([cell(oa.prompt, 40), f"{cell(oa.error or oa.text)} _({la})_", f"{cell(ob.error or ob.text)} _({lb})_",
                     where])
    return table(["prompt", "A output", "B output", "first divergence"], rows)


def evidence_block(label: str, r: TrialResult) -> str:
    parts = [f"**{label} verdict: {r.verdict.status}** ({r.verdict.outcome})", ""]
    parts += [f"- {reason}" for reason in r.verdict.reasons]
    if r.cached:
        parts += [f"- {cached_note(r)}"]
    if r.env and not r.env.ok:
        parts += ["", details(f"{label}: build log tail", fence(r.env.error or ""))]
    if r.launch and (r.launch.status != "ready" or r.launch.crashed_while_serving):
        parts += ["", details(f"{label}: server log tail", fence("\n".join(r.launch.log_tail)))]
    if r.first_exception:
        parts += ["", (f"First exception in the log (root cause), line {r.first_exception[0]}: "
                      f"`{cell(r.first_exception[1], 200)}`")]
    if r.signatures:
        sig_rows = [[f"`{s.id}`", s.severity, str(s.line_no), cell(", ".join(s.groups), 40), cell(s.meaning, 80)]
                    for s in r.signatures]
        parts += ["", details(f"{label}: matched log lines ({len(r.signatures)})",
                              table(["signature", "severity", "line", "captured", "meaning"], sig_rows) + "\n\n" +
                              fence("\n".join(f"{s.line_no}: {s.line}" for s in r.signatures)))]
    return "\n".join(parts)


def full_outputs(label: str, r: TrialResult) -> str:
    body = []
    for o, an in zip(r.outputs, r.analyses):
        body += [(f"**{cell(o.prompt, 80)}** — {an.label}: {an.reason} "
                 f"(finish={o.finish_reason}, tokens={o.completion_tokens}, {o.latency_s:.2f} s)"), fence(o.error or o.text)]
    return details(f"{label}: full outputs", "\n\n".join(body) or "no outputs")


def facts_block(a: TrialResult, b: TrialResult) -> str:
    rows = []
    for label, r in (("A", a), ("B", b)):
        facts = r.launch.facts if r.launch else {}
        rows.append([label, cell(str(facts.get("version", "—")), 30),
                     cell(json.dumps(facts.get("non_default_args", facts.get("server_args", "—"))), 120)])
    return table(["side", "engine version (from its log)", "non-default args (from its log)"], rows)


def fingerprint_block(a: TrialResult, b: TrialResult) -> str:
    from abbisect.gpu.fingerprint import Fingerprint, render_sides

    fa, fb = a.extras.get("fingerprint"), b.extras.get("fingerprint")
    if not (fa and fb):
        return ""
    sides = {"A": Fingerprint.from_dict({k: v for k, v in fa.items() if k != "key"}),
             "B": Fingerprint.from_dict({k: v for k, v in fb.items() if k != "key"})}
    return details("Environment fingerprint of each side's venv", render_sides(sides))


def gpu_block(a: TrialResult, b: TrialResult) -> str:
    rows = []
    for label, r in (("A", a), ("B", b)):
        for when in ("gpu_before", "gpu_during", "gpu_after"):
            rep = r.extras.get(when)
            if rep:
                state = "skipped: " + rep["notice"] if rep["skipped"] else ("BUSY" if rep["busy"] else "idle")
                rows.append([label, when.removeprefix("gpu_"), state, ", ".join(map(str, rep["pids"])) or "—",
                             ", ".join(map(str, rep["used_mib"])) or "—", f"{rep['waited_s']:.1f} s"])
    return table(["side", "when", "GPU", "PIDs", "used MiB", "waited"], rows) if rows else ""


def probe_block(label: str, r: TrialResult) -> str:
    from abbisect.gpu.probe import ProbeResult, render_probe_markdown

    data = r.extras.get("probe")
    return f"#### {label}: kernel probe\n\n{render_probe_markdown(ProbeResult.from_dict(data))}" if data else ""


def render_ab(ab) -> str:
    a, b = ab.a, ab.b
    lines = [f"## abbisect A/B: `{ab.name}`", "",
             f"- **A**: `{a.spec.ref}` = {a.spec.sha[:10]} — {cell(a.spec.subject, 100)}",
             f"- **B**: `{b.spec.ref}` = {b.spec.sha[:10]} — {cell(b.spec.subject, 100)}", ""]
    from abbisect.dependency import render_packages, side_variable

    if side_variable(a) or side_variable(b):  # a dependency is the variable: say which, per side
        lines[2:4] = [f"{line}; {side_variable(r) or 'no pins'}" for line, r in zip(lines[2:4], (a, b))]
    if ab.same_launch:
        lines += ["Launch command (identical on both sides; only the checkout differs):", fence(ab.launch_a or "(not launched)", "sh")]
    else:
        lines += ["⚠ The launch commands differ between sides:", fence(f"A: {ab.launch_a}\nB: {ab.launch_b}", "sh")]
    sampling = ab.recipe["sampling"]
    lines += ["", (f"Sampling: temperature {sampling['temperature']}, max_tokens {sampling['max_tokens']}, "
                  f"seed {sampling['seed']}, API `{ab.recipe['api']}`."), "", "### Summary", "",
              summary_table([("A", a), ("B", b)]), ""]
    diff = ab.signature_diff
    if diff.get("appeared") or diff.get("disappeared"):
        lines += [(f"Log signatures appeared in B: {', '.join(f'`{s}`' for s in diff.get('appeared', [])) or 'none'}; "
                  f"disappeared in B: {', '.join(f'`{s}`' for s in diff.get('disappeared', [])) or 'none'}."), ""]
    if a.outputs or b.outputs:
        lines += ["### Outputs", "", outputs_table(a, b, ab.divergences), ""]
    lines += render_packages(a, b)
    probes = [p for p in (probe_block("A", a), probe_block("B", b)) if p]
    lines += [x for p in probes for x in (p, "")]
    gpu = gpu_block(a, b)
    if gpu:
        lines += ["### Same-GPU hygiene", "", gpu, ""]
    lines += ["### Evidence", "", evidence_block("A", a), "", evidence_block("B", b), "",
              "### Engine's own record of its flags", "", facts_block(a, b), ""]
    if a.outputs:
        lines += [full_outputs("A", a), ""]
    if b.outputs:
        lines += [full_outputs("B", b), ""]
    fp = fingerprint_block(a, b)
    if fp:
        lines += [fp, ""]
    timing = table(["", "A", "B"], [[k, _secs(a.timings.get(k)), _secs(b.timings.get(k))]
                                    for k in ("checkout", "build", "ready", "query", "probe", "teardown", "score", "overhead", "total")])
    lines += [details("Timings", timing), "",
              details("Reproduce", fence(ab.command, "sh") + f"\n\nabbisect {ab.version}, started {ab.started}"), ""]
    return "\n".join(lines)
