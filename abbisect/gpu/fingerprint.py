"""Environment fingerprint: which GPU and which software stack a trial ran on, plus a short stable key.

The facts are gathered by `_fingerprint_worker.py` under the interpreter being described (a per-commit venv
has torch/triton/the engine but not abbisect), so this module never imports torch itself.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from abbisect.infra.errors import UserError
from abbisect.infra.proc import scrubbed_env
from abbisect.infra.serial import dump, load

_WORKER = Path(__file__).with_name("_fingerprint_worker.py")
_ENGINE_KEYS = ("engine", "engine_version", "engine_sha")


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    capability: str  # "9.0"
    sm_count: int | None = None
    total_memory_mib: int | None = None
    shared_memory_per_block_optin: int | None = None
    shared_memory_per_sm: int | None = None

    @property
    def device_class(self) -> str:
        return "sm_" + self.capability.replace(".", "")


@dataclass(frozen=True)
class Fingerprint:
    gpus: tuple[GpuInfo, ...] = ()
    driver: str | None = None
    cuda_runtime: str | None = None
    torch: str | None = None
    triton: str | None = None
    python: str | None = None
    platform: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    engine_sha: str | None = None
    packages: Mapping[str, str] = field(default_factory=dict)
    cuda_visible_devices: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """12 hex digits over hardware class + driver + stack.

        Left out on purpose: free memory, PIDs, notes, CUDA_VISIBLE_DEVICES and `extra` (they change
        between runs on one machine), and GPU serials (two identical boxes should land in one cell of a
        model x engine x GPU matrix).
        """
        stable = {
            "gpus": [{k: v for k, v in asdict(g).items() if k != "index"} for g in self.gpus],
            **{k: getattr(self, k) for k in ("driver", "cuda_runtime", "torch", "triton", "python", "platform")},
            **{k: getattr(self, k) for k in _ENGINE_KEYS},
            "packages": dict(sorted(self.packages.items())),
        }
        blob = json.dumps(stable, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    def to_dict(self) -> dict[str, Any]:
        """The fields and the key derived from them (what results record; `load` ignores the key)."""
        return {**dump(self), "key": self.key}


def _from_worker(raw: Mapping[str, Any], extra: Mapping[str, Any] | None) -> Fingerprint:
    data = dict(raw)
    rest: dict[str, Any] = {}
    for k, v in (extra or {}).items():
        if k in _ENGINE_KEYS:
            data[k] = v  # the trial knows the checked-out sha better than the installed metadata
        else:
            rest[k] = v
    data["extra"] = rest
    return load(Fingerprint, data)


def collect(python: str | None = None, extra: dict | None = None, timeout_s: float = 180.0) -> Fingerprint:
    """Fingerprint `python` (a venv interpreter; default: this one) without importing torch here."""
    interp = python or sys.executable
    if python is not None and not Path(python).exists():
        raise UserError(f"no Python interpreter at {python}")
    try:
        proc = subprocess.run(
            [interp, str(_WORKER)], capture_output=True, text=True, timeout=timeout_s, check=False,
            env=scrubbed_env() if python else None,  # a venv's interpreter: not the caller's Python or git
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _from_worker({"notes": [f"fingerprint worker did not run: {exc}"]}, extra)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return _from_worker({"notes": [f"fingerprint worker failed (rc={proc.returncode}): {tail[0]}"]}, extra)
    try:
        raw = json.loads(lines[-1])
    except ValueError as exc:
        return _from_worker({"notes": [f"fingerprint worker printed bad JSON: {exc}"]}, extra)
    return _from_worker(raw, extra)


def _n(v: int | None) -> str:
    return "?" if v is None else f"{v:,}"


def describe_gpus(fp: Fingerprint) -> str:
    if not fp.gpus:
        why = next((n for n in fp.notes if "CUDA" in n or "torch" in n), "no GPU visible")
        return f"none ({why})"
    groups: dict[str, list[GpuInfo]] = {}
    for g in fp.gpus:
        groups.setdefault(g.name, []).append(g)
    parts = []
    for name, gs in groups.items():
        g = gs[0]
        parts.append(
            f"{len(gs)}x {name} ({g.device_class}, {_n(g.sm_count)} SMs, {_n(g.total_memory_mib)} MiB, "
            f"smem {_n(g.shared_memory_per_block_optin)} B/block opt-in, {_n(g.shared_memory_per_sm)} B/SM)"
        )
    return "; ".join(parts)


def _rows(fp: Fingerprint) -> list[tuple[str, str]]:
    sha = fp.engine_sha and f"@ {fp.engine_sha[:12]}"
    engine = " ".join(x for x in (fp.engine, fp.engine_version, sha) if x)
    rows = [
        ("key", fp.key),
        ("GPU", describe_gpus(fp)),
        ("driver", fp.driver or "-"),
        ("CUDA runtime (torch)", fp.cuda_runtime or "-"),
        ("torch", fp.torch or "-"),
        ("triton", fp.triton or "-"),
        ("python", fp.python or "-"),
        ("platform", fp.platform or "-"),
        ("engine", engine or "-"),
    ]
    rows += [(f"pkg {k}", v) for k, v in sorted(fp.packages.items())]
    if fp.cuda_visible_devices is not None:
        rows.append(("CUDA_VISIBLE_DEVICES", fp.cuda_visible_devices))
    return rows


def render_table(fp: Fingerprint) -> str:
    """Markdown table for reports and `abbisect env`."""
    lines = ["| field | value |", "|---|---|"]
    lines += [f"| {k} | {v.replace('|', '/')} |" for k, v in _rows(fp)]
    return "\n".join(lines)


def render_sides(sides: Mapping[str, Fingerprint]) -> str:
    """One table, a column per side (e.g. {"a": fp_a, "b": fp_b}); rows that differ are marked."""
    names = list(sides)
    tables = {n: dict(_rows(fp)) for n, fp in sides.items()}
    fields: list[str] = []
    for t in tables.values():
        fields += [k for k in t if k not in fields]
    lines = ["| field | " + " | ".join(names) + " | difference |", "|---|" + "---|" * len(names) + "---|"]
    for f in fields:
        vals = [tables[n].get(f, "-") for n in names]
        mark = "differs" if len(set(vals)) > 1 else ""
        lines.append(f"| {f} | " + " | ".join(v.replace("|", "/") for v in vals) + f" | {mark} |")
    return "\n".join(lines)
