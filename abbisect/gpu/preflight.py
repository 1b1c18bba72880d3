"""Before anything runs: the GPUs a recipe's `gpus` names are on this machine, its slots' shares fit, and a
share reaches each server one way only.

Why up front: a GPU that is not there used to surface inside every trial on it (a traceback each, recorded as
`infra_error`), after the cache was opened and the first builds had started; a share that cannot be free
would make every trial wait out its hygiene timeout. Both are one usage line now (exit 2; 128 under
`check`). The commands call `preflight` once the recipe is loaded and `--gpus` applied, before the cache is
opened; `--dry-run` prints its lines instead of failing on what only this machine lacks.

A recipe without `gpus` never asks NVML here: CPU-only use stays free of GPU tooling.

How the GPUs are counted: NVML (nvidia-ml-py), else `nvidia-smi`, each through abbisect's own
CUDA_VISIBLE_DEVICES (the numbers a trial pins index into what abbisect sees); on a machine where neither
answers there is no NVIDIA GPU, and any GPU number is refused. ABBISECT_GPU_COUNT=N states the count where
abbisect cannot read it (another vendor's GPUs, a container without the NVIDIA tools).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from abbisect.gpu.hygiene import _Nvml, _s, _who, visible_indices
from abbisect.gpu.sharing import SLACK_MIB
from abbisect.infra.errors import UserError
from abbisect.launch.engines import ADAPTERS, adapter
from abbisect.launch.engines.base import share_text
from abbisect.launch.engines.command import SHARE_PLACEHOLDER
from abbisect.recipe import Recipe

GPU_COUNT_ENV = "ABBISECT_GPU_COUNT"


@dataclass(frozen=True)
class Gpu:
    index: int  # as a trial pins it (CUDA_VISIBLE_DEVICES of the trial)
    name: str
    total_mib: int | None = None  # NVML only
    free_mib: int | None = None
    processes: tuple[tuple[int, int | None], ...] = ()  # (pid, MiB), NVML only


@dataclass(frozen=True)
class Visible:
    """The GPUs this process sees and who said so."""

    gpus: tuple[Gpu, ...]
    source: str

    def summary(self) -> str:
        if not self.gpus:
            return f"no GPU ({self.source})"
        def one(g: Gpu) -> str:
            mem = f", {g.total_mib:,} MiB, {g.free_mib:,} free" if g.total_mib is not None and g.free_mib is not None else ""
            return f"{g.index}: {g.name}{mem}"
        return f"{len(self.gpus)} GPU(s) ({'; '.join(one(g) for g in self.gpus)}) as {self.source} sees them"


def _from_nvml(nvml: Any | None) -> tuple[Visible | None, str]:
    try:
        if nvml is None:
            import pynvml

            nvml = pynvml
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001  # ImportError, or NVMLError without a driver
        return None, f"NVML: {type(exc).__name__}: {exc}"
    try:
        n = _Nvml(nvml)
        cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
        gpus = []
        for index, i in enumerate(visible_indices(n.uuids, cvd)):
            total, _used, free = n.memory_mib(i)
            gpus.append(Gpu(index, _s(nvml.nvmlDeviceGetName(n.handles[i])), total, free, tuple(n.processes(i))))
        where = f"NVML (through CUDA_VISIBLE_DEVICES={cvd})" if cvd is not None and cvd.strip() else "NVML"
        return Visible(tuple(gpus), where), ""
    except Exception as exc:  # noqa: BLE001  # a driver that answers init but not the queries
        return None, f"NVML: {type(exc).__name__}: {exc}"
    finally:
        with contextlib.suppress(Exception):  # shutting down is best effort
            nvml.nvmlShutdown()


def nvidia_smi() -> str | None:
    """`nvidia-smi`'s list of GPUs (bus id, uuid, name), or None when it cannot be run or fails."""
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id,uuid,name", "--format=csv,noheader"],
                              check=True, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def _from_smi(smi: Callable[[], str | None]) -> tuple[Visible | None, str]:
    out = smi()
    if out is None:
        return None, "nvidia-smi: not found or failed"
    rows = sorted(tuple(c.strip() for c in line.split(",", 2)) for line in out.splitlines() if line.count(",") >= 2)
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = visible_indices([r[1] for r in rows], cvd)
    return Visible(tuple(Gpu(index, rows[i][2]) for index, i in enumerate(visible)), "nvidia-smi"), ""


def visible_gpus(nvml: Any | None = None, smi: Callable[[], str | None] = nvidia_smi) -> Visible:
    """The GPUs this process sees: ABBISECT_GPU_COUNT when set, else NVML, else nvidia-smi, else none."""
    stated = os.environ.get(GPU_COUNT_ENV, "").strip()
    if stated:
        if not stated.isdigit():
            raise UserError(f"{GPU_COUNT_ENV}={stated!r}: give the number of GPUs this machine has")
        return Visible(tuple(Gpu(i, "(stated)") for i in range(int(stated))), GPU_COUNT_ENV)
    seen, why_nvml = _from_nvml(nvml)
    if seen is not None:
        return seen
    seen, why_smi = _from_smi(smi)
    return seen if seen is not None else Visible((), f"{why_nvml}; {why_smi}")


@dataclass(frozen=True)
class GpuCheck:
    """What `preflight` found: lines that say the slots (the dry run prints them), notes worth a console line,
    and what this machine lacks to run the recipe (None: nothing)."""

    lines: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    machine_error: str | None = None

    def raise_if_unfit(self) -> None:
        if self.machine_error:
            raise UserError(self.machine_error)


def _delivery(recipe: Recipe) -> tuple[str, str | None]:
    """How the share reaches each server, and a note when it does not."""
    assert recipe.gpu_share is not None
    share = share_text(recipe.gpu_share)
    flag = adapter(recipe.engine.kind).share_flag
    if flag is not None:
        return f"{flag} {share}", None
    template = [*recipe.launch.command, *recipe.launch.flags]
    if any(SHARE_PLACEHOLDER in a for a in template):
        return f"{SHARE_PLACEHOLDER} = {share} in launch.command", None
    return "not passed", (f"launch.command has no {SHARE_PLACEHOLDER}: each server is not told its share "
                          f"({share} of its GPU's memory) and must keep to it by itself")


def check_recipe(recipe: Recipe, bisecting: bool) -> None:
    """What is wrong with the recipe's GPU slots on any machine: one usage line naming the key."""
    flat_gpus = recipe.gpus is not None and not recipe.gpu_slots
    if bisecting and flat_gpus and recipe.bisect.slots > 1:
        gpus = ",".join(map(str, recipe.gpus or []))
        raise UserError(f"bisect.slots {recipe.bisect.slots} with gpus [{gpus}]: every trial would pin the same "
                        f"GPUs; give each slot its GPUs (gpus: [[0], [1]], --gpus 0,1) or share one "
                        f"(gpus: {{count: 1, per_gpu: {recipe.bisect.slots}}}, --gpus 0x{recipe.bisect.slots})")
    if bisecting and recipe.shares_gpus and recipe.bisect.executor in ("ray", "sequential"):
        raise UserError(f"bisect.executor {recipe.bisect.executor}: slots that share a GPU run on the local "
                        "executor (--executor local or auto)")
    if recipe.gpu_share is None:
        return
    kind = recipe.engine.kind
    template = [*recipe.launch.command, *recipe.launch.flags]
    for name, mod in ADAPTERS.items():
        flag = mod.share_flag
        if flag is None:
            continue
        for n, arg in enumerate(template):
            value = arg.split("=", 1)[1] if arg.startswith(flag + "=") else (
                template[n + 1] if arg == flag and n + 1 < len(template) else None)
            if value is None or (kind != name and SHARE_PLACEHOLDER in value):
                continue
            where = "launch.flags" if arg in recipe.launch.flags else "launch.command"
            raise UserError(f"{where} passes {flag} {value} and gpus gives each slot a share of "
                            f"{share_text(recipe.gpu_share)}: say it once — drop the flag (abbisect passes each "
                            f"server its share{' as ' + SHARE_PLACEHOLDER if kind == 'command' else ''}) or "
                            "drop the share from gpus")


def _slot_lines(recipe: Recipe) -> list[str]:
    slots = recipe.gpu_slots or ([recipe.gpus] if recipe.gpus is not None else [])
    groups: dict[tuple[int, ...], int] = {}
    for s in slots:
        groups[tuple(s)] = groups.get(tuple(s), 0) + 1
    where = "; ".join(f"{n} on GPU {','.join(map(str, g))}" if n > 1 else f"GPU {','.join(map(str, g))}"
                      for g, n in groups.items())
    head = (f"gpus: {len(slots)} slots — {where}" if recipe.gpu_slots else f"gpus: one trial at a time on {where}")
    if recipe.gpu_share is None:
        return [f"{head}; each server has its GPUs to itself (whole-GPU hygiene: idle before a launch, idle after)"]
    how, _ = _delivery(recipe)
    hygiene = ("hygiene per slot: a slot's previous server gone from the GPU and its share free before a launch"
               if recipe.shares_gpus else "whole-GPU hygiene")
    return [f"{head}; each server takes {share_text(recipe.gpu_share)} of each GPU's memory ({how}); {hygiene}"]


def _machine_error(recipe: Recipe, seen: Visible) -> str | None:
    used = sorted({*(recipe.gpus or []), *(g for s in recipe.gpu_slots for g in s)})
    if not seen.gpus:
        return (f"gpus: GPU {', '.join(map(str, used))} named, but this machine has no GPU ({seen.source}); leave "
                f"gpus out to run on the CPU, or set {GPU_COUNT_ENV}=N where abbisect cannot count its GPUs")
    missing = [g for g in used if g >= len(seen.gpus)]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        return (f"gpus: GPU {', '.join(map(str, missing))} {verb} not on this machine: it has "
                f"{seen.summary()}")
    if recipe.gpu_share is None:
        return None
    per_gpu: dict[int, int] = {}
    for s in recipe.gpu_slots or [recipe.gpus or []]:
        for g in set(s):
            per_gpu[g] = per_gpu.get(g, 0) + 1
    for g, k in sorted(per_gpu.items()):
        gpu = seen.gpus[g]
        if gpu.total_mib is None or gpu.free_mib is None:
            continue  # only NVML says how much is free
        need = k * int(recipe.gpu_share * gpu.total_mib) - SLACK_MIB
        if gpu.free_mib < need:
            held = ", ".join(f"{_who(p)}: {'?' if m is None else f'{m:,}'} MiB" for p, m in gpu.processes)
            return (f"gpus: the {k} slot(s) on GPU {g} need {k} × {share_text(recipe.gpu_share)} of its "
                    f"{gpu.total_mib:,} MiB ({need:,} MiB, less {SLACK_MIB:,} slack) and it has {gpu.free_mib:,} "
                    f"MiB free now" + (f" (in use: {held})" if held else "") +
                    ": free it, or give each slot a smaller share (gpus.share, --gpus 0x4@0.1)")
    return None


def preflight(recipe: Recipe, bisecting: bool = False, visible: Callable[[], Visible] = visible_gpus) -> GpuCheck:
    """The recipe's GPU slots checked before anything runs (after --gpus is applied): recipe errors raise a
    UserError; what this machine lacks is `machine_error`, for the caller to raise (or a dry run to print).
    Without `gpus`, nothing is asked of NVML."""
    check_recipe(recipe, bisecting)
    if recipe.gpus is None:
        return GpuCheck()
    lines = _slot_lines(recipe)
    notes = []
    if recipe.gpu_share is not None and (note := _delivery(recipe)[1]):
        notes.append(note)
    seen = visible()
    lines.append(f"on this machine: {seen.summary()}")
    error = _machine_error(recipe, seen)
    return GpuCheck(tuple(lines), tuple(notes), error)

