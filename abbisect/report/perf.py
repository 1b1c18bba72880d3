"""A performance verdict told as pure functions: the table per metric, a text picture of each side's passes (and
an SVG of them), the noise floor of an A-vs-A, what disturbed the passes, and the metric along a bisect."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median

from abbisect.assess.perf import PassErrors, fmt, metric_values, pass_errors
from abbisect.recipe.perf import METRICS, SHOWN, Perf, better
from abbisect.report.jit import unlike_starts
from abbisect.report.text import cell, table
from abbisect.stats import compare_samples, detectable_change, noise_floor
from abbisect.stats.decide import pct
from abbisect.trial.spec import TrialResult

Trials = Sequence[TrialResult]


def told(metric: str, values: Sequence[float], errors: PassErrors | None = None) -> str:
    """A trial's (or a commit's) metric in one line: `tpot_median 2.43 ms (median of 10 passes)`, with its failed
    requests when there were any (`…; failed requests: 18 of 96 in 4 passes (…); first: …`); "" without either."""
    said = f"{metric} {fmt(median(values), metric)} (median of {len(values)} passes)" if values else ""
    if errors is not None and errors.errors:
        said = f"{said or f'{metric} not measured'}; failed requests: {errors.describe()}"
    return said


# A 1-minute load average above this many runnable processes a core: the passes shared the CPU with other work.
BUSY_PER_CORE = 1.0


def busy_host(trials: Trials) -> str:
    """A warning when the host was busy during the passes (load average per core above BUSY_PER_CORE), ""
    otherwise: a measurement on a busy host drifts with whatever else runs (results from before the core count
    was recorded say nothing)."""
    seen = [(c.load1, c.cores) for t in trials for p in t.extras.passes
            if (c := p.conditions).load1 is not None and c.cores]
    if not seen:
        return ""
    load, cores = max(seen, key=lambda lc: lc[0] / lc[1])
    if load / cores <= BUSY_PER_CORE:
        return ""
    return (f"⚠ Busy host: the load average reached {load:g} on {cores} core(s) ({load / cores:.1f} per core) "
            "during the passes. Timings taken beside other work drift with it; measure on an otherwise idle "
            "machine (or read the A-vs-A's noise floor first).")


def metric_table(perf: Perf, a: Trials, b: Trials) -> str:
    """Per metric: each side's median over its passes (and range), B's change with its interval, p, the call
    and the passes; the verdict's metric first and in bold."""
    rows = []
    for metric in (perf.metric, *(m for m in SHOWN if m != perf.metric)):
        va, vb = metric_values(a, metric), metric_values(b, metric)
        if not va or not vb:
            continue
        mark = "**" if metric == perf.metric else ""
        side = [f"{fmt(median(v), metric)} ({min(v):,.4g}–{max(v):,.4g})" for v in (va, vb)]
        if min(len(va), len(vb)) >= 3:
            cmp = compare_samples(va, vb, min_effect=perf.min_effect, alpha=perf.alpha)
            change = pct(cmp.change) + (f" [{pct(cmp.ci[0])}, {pct(cmp.ci[1])}]" if cmp.ci else "")
            call, p = f"{mark}{cmp.call.text}{mark}", f"{cmp.p:.2g}"
        else:
            change, call, p = "—", "too few passes", "—"
        rows.append([f"{mark}{metric}{mark} ({'higher' if better(metric) else 'lower'} is better)", *side, change,
                     p, call, f"{len(va)} / {len(vb)}"])
    errors = pass_errors(a), pass_errors(b)
    rows.append(["failed requests (measured, of all passes)", errors[0].describe(first=False),
                 errors[1].describe(first=False), "", "", "", ""])
    lines = [table(["metric", "A median (range)", "B median (range)", "B vs A [95 % interval]", "p", "call",
                    "passes A / B"], rows)]
    firsts = [f"{side}: {cell(e.first, 200)}" for side, e in zip(("A", "B"), errors) if e.errors and e.first]
    if firsts:
        lines += ["", "First failed request: " + "; ".join(firsts) + "."]
    return "\n".join(lines)


def strip(perf: Perf, a: Trials, b: Trials, width: int = 60) -> str:
    """Each side's passes of the verdict's metric on one axis: a text picture for the report (· a pass,
    | the median)."""
    va, vb = metric_values(a, perf.metric), metric_values(b, perf.metric)
    if not va or not vb:
        return ""
    lo, hi = min(va + vb), max(va + vb)
    span = (hi - lo) or 1.0

    def row(values: list[float]) -> str:
        cells = [" "] * width
        for v in values:
            cells[min(int((v - lo) / span * (width - 1)), width - 1)] = "·"
        cells[min(int((median(values) - lo) / span * (width - 1)), width - 1)] = "|"
        return "".join(cells)

    scale = f"{fmt(lo, perf.metric)}".ljust(width // 2) + f"{fmt(hi, perf.metric)}".rjust(width - width // 2)
    return "\n".join([f"A  {row(va)}", f"B  {row(vb)}", f"   {scale}"])


def svg(perf: Perf, a: Trials, b: Trials) -> str:
    """The same picture as an SVG file: every pass a dot, the medians as ticks."""
    va, vb = metric_values(a, perf.metric), metric_values(b, perf.metric)
    if not va or not vb:
        return ""
    lo, hi = min(va + vb), max(va + vb)
    span = (hi - lo) or 1.0
    w, left, right = 640, 40, 20

    def x(v: float) -> float:
        return left + (v - lo) / span * (w - left - right)

    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="130" font-family="sans-serif" '
             'font-size="12">'), f'<text x="{left}" y="16">{perf.metric} per pass ({METRICS[perf.metric][1]})</text>']
    for y, name, values, colour in ((45, "A", va, "#1f77b4"), (85, "B", vb, "#d62728")):
        parts.append(f'<text x="10" y="{y + 4}">{name}</text>')
        parts += [f'<circle cx="{x(v):.1f}" cy="{y}" r="3" fill="{colour}" fill-opacity="0.6"/>' for v in values]
        m = x(median(values))
        parts.append(f'<line x1="{m:.1f}" y1="{y - 10}" x2="{m:.1f}" y2="{y + 10}" stroke="{colour}" '
                     'stroke-width="2"/>')
    parts += [f'<text x="{left}" y="120">{lo:,.4g}</text>',
              f'<text x="{w - right}" y="120" text-anchor="end">{hi:,.4g}</text>', "</svg>"]
    return "\n".join(parts) + "\n"


def noise_lines(perf: Perf, a: Trials, b: Trials) -> list[str]:
    """An A-vs-A's noise floor and the smallest change these settings find, for the verdict's metric."""
    va, vb = metric_values(a, perf.metric), metric_values(b, perf.metric)
    if min(len(va), len(vb)) < 3:
        return ["Too few passes a side for a noise floor (3 are needed)."]
    floor = noise_floor(va, vb)
    found = detectable_change(floor, alpha=perf.alpha)
    at_cap = detectable_change(floor, alpha=perf.alpha, n=perf.max_passes)
    return [f"A-vs-A noise floor of {perf.metric}: {floor.describe()}.",
            (f"Smallest change these settings find: {found.describe()}; at perf.max_launches ({perf.max_passes} passes): "
            f"{at_cap.describe()}. perf.min_effect is {perf.min_effect:.0%}.")]


def conditions_table(a: Trials, b: Trials) -> str:
    """What could have disturbed the passes, per side: host load, CPU frequency, GPU clocks and temperature."""
    rows = []
    for name, trials in (("A", a), ("B", b)):
        conds = [p.conditions for t in trials for p in t.extras.passes]
        if not conds:
            continue

        def span(values: list[float | None], unit: str) -> str:
            got = [v for v in values if v is not None]
            return f"{min(got):,.4g}–{max(got):,.4g} {unit}" if got else "—"

        gpus = [g for c in conds for g in c.gpus or ()]
        cores = {c.cores for c in conds if c.cores}
        rows.append([name, str(len(conds)), span([c.load1 for c in conds], "").rstrip()
                     + (f" on {'/'.join(str(n) for n in sorted(cores))} cores" if cores else ""),
                     span([c.cpu_mhz for c in conds], "MHz"), span([g.sm_mhz for g in gpus], "MHz"),
                     span([g.temp_c for g in gpus], "°C"), span([g.power_w for g in gpus], "W")])
    return table(["side", "passes", "load average", "CPU clock", "GPU SM clock", "GPU temperature", "GPU power"],
                 rows) if rows else ""


def perf_section(perf: Perf, a: Trials, b: Trials, same_commit: bool, heading: str) -> list[str]:
    """The A/B report's performance section."""
    lines = [heading, ""]
    for warning in (busy_host([*a, *b]), unlike_starts(a, b)):
        if warning:
            lines += [warning, ""]
    lines += [metric_table(perf, a, b), ""]
    picture = strip(perf, a, b)
    if picture:
        lines += [f"Every pass of {perf.metric} (· a pass, | the median; `perf.svg` beside this report):", "",
                  "```text", picture, "```", ""]
    if same_commit:
        lines += [*noise_lines(perf, a, b), ""]
    conds = conditions_table(a, b)
    if conds:
        lines += ["What the passes ran under:", "", conds, ""]
    load = f"concurrency {perf.concurrency}" if perf.concurrency else ""
    rate = f"request_rate {perf.request_rate:g}/s (Poisson, seeded)" if perf.request_rate else ""
    prompts = f"{perf.input_words} words a prompt" if perf.input_words else "the recipe's prompts"
    lines += [(f"The load, the same on both sides: {perf.requests} requests a pass after {perf.warmup} warm-up, "
               f"{', '.join(x for x in (load, rate) if x)}, {prompts}, {perf.max_tokens} tokens each"
               + (" (ignore_eos)" if perf.ignore_eos else "") + f"; {perf.passes} passes a launch, launches "
               f"alternating A, B, A, B …; p = min(KS, Mann–Whitney U), bootstrap interval of the change of "
               f"medians, different at p ≤ {perf.alpha:g} and a change of at least {perf.min_effect:.0%}."), ""]
    return lines


def along_bisect(perf: Perf, steps: Sequence[tuple[str, str, str, Trials]], width: int = 30) -> str:
    """The metric along the tested commits, in the history's order: (label, sha, verdict, trials) each; a commit
    whose passes failed their requests is shown with its failed requests (per pass) and the first error."""
    rows = [(label, sha, verdict, metric_values(trials, perf.metric), pass_errors(trials))
            for label, sha, verdict, trials in steps]
    rows = [r for r in rows if r[3] or r[4].errors]
    if not rows:
        return ""
    meds = [median(r[3]) for r in rows if r[3]]
    lo, hi = (min(meds), max(meds)) if meds else (0.0, 1.0)
    span = (hi - lo) or 1.0
    lines = []
    for label, sha, verdict, values, errors in rows:
        if values:
            med = median(values)
            bar = "█" * max(1, round((med - lo) / span * width))
            said = f"{bar:<{width}} {fmt(med, perf.metric)} ({len(values)} passes)" + ("; " if errors.errors else "")
        else:
            said = f"{'not measured:':<{width}} "
        if errors.errors:
            said += f"failed requests {errors.describe()}"
        lines.append(f"{sha[:10]} {label:<10} {verdict:<5} {said}")
    return "\n".join(lines)
