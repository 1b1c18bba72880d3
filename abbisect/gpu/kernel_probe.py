"""Kernel probe: a trial whose "server" is one Triton kernel, compiled for device classes and launched.

A recipe names a kernel inside the engine checkout, how to call it (its launcher and arguments), a sweep
and target device classes; the probe reports each combination's compiled shared memory against each
target's per-block limit (devices.yaml). Compiling needs no GPU; where one is present the kernel is also
launched for real. `bad_if` turns the table into a verdict, so a probe can be bisected or A/B-tested.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from abbisect.infra.errors import UserError
from abbisect.infra.proc import run_logged
from abbisect.recipe.devices import device_class
from abbisect.recipe.probe import BadIf, ProbeConfig

_WORKER = Path(__file__).with_name("_probe_worker.py")


@dataclass(frozen=True)
class ProbeRow:
    combo: Mapping[str, Any]
    target: str
    method: Literal["compile", "launch"]
    shared_bytes: int | None
    limit: int | None
    fits: bool | None
    launched: bool | None  # None: compiled only; True/False: a real launch on this machine's GPU
    error: str | None = None
    launcher_default: bool = False
    effective: Mapping[str, Any] = field(default_factory=dict)  # num_stages/num_warps actually used
    gpu: str | None = None

    @property
    def over_by(self) -> int | None:
        if self.shared_bytes is None or self.limit is None:
            return None
        return self.shared_bytes - self.limit


@dataclass(frozen=True)
class ProbeResult:
    kernel: str
    file: str
    rows: tuple[ProbeRow, ...] = ()
    gpu: Mapping[str, Any] | None = None
    triton: str | None = None
    torch: str | None = None
    notes: tuple[str, ...] = ()
    error: str | None = None


def _row(raw: Mapping[str, Any]) -> ProbeRow:
    shared, limit = raw.get("shared_bytes"), raw.get("limit")
    fits = None if shared is None or limit is None or raw.get("error") else shared <= limit
    if raw.get("method") == "launch" and raw.get("launched") is False and shared is not None and limit:
        fits = shared <= limit  # an OutOfResources launch still tells us the size it needed
    return ProbeRow(
        combo=dict(raw.get("combo") or {}), target=raw["target"], method=raw.get("method", "compile"),
        shared_bytes=shared, limit=limit, fits=fits, launched=raw.get("launched"), error=raw.get("error"),
        launcher_default=bool(raw.get("launcher_default")), effective=dict(raw.get("effective") or {}),
        gpu=raw.get("gpu"),
    )


def worker_spec(config: ProbeConfig, source_root: Path) -> dict[str, Any]:
    """What the standalone worker reads: the config plus the device limits it cannot look up itself."""
    spec = config.model_dump(mode="json")
    spec["source_root"] = str(source_root)
    spec["targets"] = [
        {"name": t, "cc": device_class(t).cc, "limit": device_class(t).shared_memory_per_block_optin}
        for t in config.targets
    ]
    return spec


def run_probe(config: ProbeConfig, python: str, source_root: Path, workdir: Path,
              env: dict[str, str] | None = None) -> ProbeResult:
    """Run the probe under `python` (the side's venv) against the checkout at `source_root`, with `env` on top
    of abbisect's own environment."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec_path, out_path, log_path = workdir / "probe-spec.json", workdir / "probe-result.json", workdir / "probe.log"
    spec_path.write_text(json.dumps(worker_spec(config, Path(source_root).resolve()), indent=1))
    out_path.unlink(missing_ok=True)
    try:
        ran = run_logged([python, str(_WORKER), str(spec_path), str(out_path)], log_path, env, cwd=workdir,
                         timeout=config.timeout_s, fresh=True, header=False, tail_lines=1)
    except FileNotFoundError as exc:
        raise UserError(f"cannot run the probe: no interpreter {python}") from exc
    except subprocess.TimeoutExpired:
        return ProbeResult(config.kernel, config.file, error=f"probe timed out after {config.timeout_s:g}s")
    if not out_path.exists():
        why = f"probe worker failed (rc={ran.returncode}): {ran.tail[0] if ran.tail else 'no output'}"
        return ProbeResult(config.kernel, config.file, error=why)
    raw = json.loads(out_path.read_text())
    return ProbeResult(
        kernel=config.kernel, file=config.file, rows=tuple(_row(r) for r in raw.get("rows") or ()),
        gpu=raw.get("gpu"), triton=raw.get("triton"), torch=raw.get("torch"),
        notes=tuple(raw.get("notes") or ()), error=raw.get("error"),
    )


# ---------------------------------------------------------------- verdict


def _in_scope(row: ProbeRow, rule: BadIf) -> bool:
    if row.target not in rule.not_fits:
        return False
    if rule.scope == "launcher_default" and not row.launcher_default:
        return False
    return all(row.combo.get(k) in allowed for k, allowed in rule.when.items())


def _label(row: ProbeRow) -> str:
    combo = ", ".join(f"{k}={v}" for k, v in row.combo.items())
    how = f"launched on {row.gpu}" if row.method == "launch" else "compiled"
    return f"{combo or 'default'} on {row.target} ({how})"


def probe_verdict(result: ProbeResult, config: ProbeConfig) -> tuple[bool, list[str]]:
    """(is_bad, evidence lines). Bad when a combination in scope does not fit a `not_fits` target."""
    rule = config.bad_if
    if result.error:
        return rule.on_error, [f"probe failed: {result.error}"]
    scoped = [r for r in result.rows if _in_scope(r, rule)]
    evidence: list[str] = []
    bad = False
    for r in scoped:
        if r.error:
            evidence.append(f"{_label(r)}: error: {r.error}")
            bad = bad or rule.on_error
        elif r.fits is False:
            evidence.append(f"{_label(r)}: needs {r.shared_bytes:,} B shared memory, limit {r.limit:,} "
                            f"(over by {r.over_by:,})")
            bad = True
    if not scoped:
        evidence.append("no probe row is in scope of bad_if (check targets, when, scope)")
    elif not bad:
        evidence.append(f"all {len(scoped)} combination(s) in scope fit {', '.join(rule.not_fits)}")
    return bad, evidence


def probe_status(result: ProbeResult, config: ProbeConfig) -> Literal["good", "bad", "skip"]:
    """Like probe_verdict, but 'skip' when nothing in scope could be measured (untestable commit)."""
    bad, _ = probe_verdict(result, config)
    if bad:
        return "bad"
    measured = [r for r in result.rows if _in_scope(r, config.bad_if) and r.fits is not None]
    return "good" if measured else "skip"


# ---------------------------------------------------------------- report


def _cell(r: ProbeRow | None) -> str:
    if r is None:
        return "-"
    if r.error and r.shared_bytes is None:
        return "error"
    size = f"{r.shared_bytes:,}"
    if r.method == "launch":
        size += " launched" if r.launched else " launch failed"
    if r.fits is False:
        return f"**{size} (over by {r.over_by:,})**"
    return size


def render_probe_markdown(result: ProbeResult) -> str:
    """The seed-like table: one line per sweep combination, compiled shared memory per target."""
    head = f"Kernel probe `{result.kernel}` ({result.file}), triton {result.triton or '?'}"
    if result.gpu:
        head += f", launched on {result.gpu.get('name')} ({result.gpu.get('class')})"
    lines = [head, ""]
    if result.error:
        return "\n".join([*lines, f"Probe failed: {result.error}"])
    keys: list[str] = []
    targets: list[tuple[str, Literal["compile", "launch"]]] = []
    limits: dict[str, int | None] = {}
    for r in result.rows:
        keys += [k for k in r.combo if k not in keys]
        if (r.target, r.method) not in targets:
            targets.append((r.target, r.method))
            limits[r.target] = r.limit
    header = [*keys] + [f"{t} {'launch' if m == 'launch' else ''}".strip() + f" (limit {limits[t] or 0:,})"
                        for t, m in targets]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(keys) + "---:|" * len(targets)]
    combos: list[tuple] = []
    for r in result.rows:
        c = tuple(r.combo.get(k) for k in keys)
        if c not in combos:
            combos.append(c)
    by = {(tuple(r.combo.get(k) for k in keys), r.target, r.method): r for r in result.rows}
    for c in combos:
        rep = next(r for r in result.rows if tuple(r.combo.get(k) for k in keys) == c)
        vals = [f"{v}{' *' if k == keys[-1] and rep.launcher_default else ''}" for k, v in zip(keys, c)]
        lines.append("| " + " | ".join(vals + [_cell(by.get((c, t, m))) for t, m in targets]) + " |")
    lines += ["", ("Bytes of shared memory per block; **bold** does not fit that target's per-block limit; "
                   "* marks the combination the launcher itself chose.")]
    errors = sorted({f"{r.target}: {r.error}" for r in result.rows if r.error})
    lines += [f"- error {e}" for e in errors]
    lines += [f"- note: {n}" for n in result.notes]
    return "\n".join(lines)
