"""Same-GPU hygiene: a side starts on an idle GPU, and its teardown really released that GPU.

Reads NVML through nvidia-ml-py (`import pynvml`, the `gpu` extra). Without NVML the checks are skipped
with one notice, logged once per process. Device numbers are the values a trial puts into
CUDA_VISIBLE_DEVICES (with CUDA_DEVICE_ORDER=PCI_BUS_ID), so they are mapped to NVML devices by PCI bus
order, through this process's own CUDA_VISIBLE_DEVICES if it has one.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from abbisect.infra.errors import UserError

log = logging.getLogger(__name__)

# An idle H100/H200 reports a few hundred MiB used (driver reservations); a leftover CUDA context is
# 500+ MiB. Without a measured baseline, anything above this counts as in use.
IDLE_USED_MIB = 1024
# Allowed growth over a measured baseline before memory counts as lingering.
BASELINE_SLACK_MIB = 256

_notice_logged = False
MIB = 1024 * 1024


@dataclass(frozen=True)
class HygieneReport:
    skipped: bool
    notice: str
    busy: bool
    pids: tuple[int, ...] = ()
    devices: tuple[int, ...] = ()
    used_mib: tuple[int, ...] = ()  # per device, same order as `devices`
    baseline: tuple[int, ...] | None = None  # the used_mib each device was compared with
    waited_s: float = 0.0


def visible_indices(pci_uuids: Sequence[str], parent_cvd: str | None) -> list[int]:
    """The PCI-bus-ordered device indices this process sees, in CUDA's order: all of them, or those
    abbisect's own CUDA_VISIBLE_DEVICES names (ordinals or GPU UUIDs; CUDA stops at the first invalid entry)."""
    visible = list(range(len(pci_uuids)))
    if parent_cvd is not None and parent_cvd.strip():
        visible = []
        for entry in (e.strip() for e in parent_cvd.split(",")):
            if entry.isdigit():
                if int(entry) >= len(pci_uuids):
                    break  # CUDA stops at the first invalid entry
                visible.append(int(entry))
            else:
                hits = [i for i, u in enumerate(pci_uuids) if u.startswith(entry) or u == f"GPU-{entry}"]
                if len(hits) != 1:
                    break
                visible.append(hits[0])
    return visible


def map_devices(devices: Sequence[int], pci_uuids: Sequence[str], parent_cvd: str | None) -> list[int]:
    """Indices into the PCI-bus-ordered NVML device list for the trial's CUDA_VISIBLE_DEVICES values.

    `parent_cvd` is abbisect's own CUDA_VISIBLE_DEVICES: the child's numbers index into what the parent
    sees, which may itself be a subset given by ordinals or GPU UUIDs.
    """
    visible = visible_indices(pci_uuids, parent_cvd)
    out = []
    for d in devices:
        if d < 0 or d >= len(visible):
            raise ValueError(f"GPU {d} is not visible (this process sees {len(visible)} GPU(s))")
        out.append(visible[d])
    return out


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class _Nvml:
    """The few NVML reads we need, with handles in PCI bus order."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        keyed = [(_s(nvml.nvmlDeviceGetPciInfo(h).busId).lower(), h) for h in handles]
        keyed.sort(key=lambda kh: kh[0])
        self.handles = [h for _, h in keyed]
        self.uuids = [_s(nvml.nvmlDeviceGetUUID(h)) for h in self.handles]

    def used_mib(self, i: int) -> int:
        return int(self.nvml.nvmlDeviceGetMemoryInfo(self.handles[i]).used) // MIB

    def pids(self, i: int) -> list[int]:
        procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handles[i])
        return sorted({int(p.pid) for p in procs})

    def memory_mib(self, i: int) -> tuple[int, int, int]:
        """(total, used, free) MiB of device i."""
        info = self.nvml.nvmlDeviceGetMemoryInfo(self.handles[i])
        return int(info.total) // MIB, int(info.used) // MIB, int(info.free) // MIB

    def processes(self, i: int) -> list[tuple[int, int | None]]:
        """(pid, MiB it holds) of each compute process on device i: NVML's per-process accounting. The MiB are
        None where NVML cannot say (it answers NVML_VALUE_NOT_AVAILABLE, e.g. without the permission)."""
        out: dict[int, int | None] = {}
        for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handles[i]):
            used = getattr(p, "usedGpuMemory", None)
            if out.get(int(p.pid)) is None:
                out[int(p.pid)] = int(used) // MIB if isinstance(used, int) and 0 <= used < (1 << 62) else None
        return sorted(out.items())


def _open(nvml: Any | None) -> tuple[_Nvml | None, str]:
    global _notice_logged
    try:
        if nvml is None:
            import pynvml

            nvml = pynvml
        nvml.nvmlInit()
        return _Nvml(nvml), ""
    except Exception as exc:  # noqa: BLE001  # ImportError, or NVMLError when there is no driver
        notice = f"GPU hygiene check skipped: NVML unavailable ({type(exc).__name__}: {exc})"
        if not _notice_logged:
            log.warning(notice)
            _notice_logged = True
        return None, notice


def _close(n: _Nvml) -> None:
    try:
        n.nvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 (shutting down is best effort)
        log.debug("nvmlShutdown failed: %s", exc)


def _baseline(baseline: HygieneReport | Sequence[int] | None) -> tuple[int, ...] | None:
    if baseline is None:
        return None
    if isinstance(baseline, HygieneReport):
        return baseline.used_mib if not baseline.skipped else None
    return tuple(int(b) for b in baseline)


def _sample(n: _Nvml, devices: Sequence[int], base: tuple[int, ...] | None, waited: float) -> HygieneReport:
    try:
        idx = map_devices(devices, n.uuids, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except ValueError as exc:
        raise UserError(f"gpus: {exc}") from None
    used = tuple(n.used_mib(i) for i in idx)
    pids = tuple(sorted({p for i in idx for p in n.pids(i)}))
    limits = [IDLE_USED_MIB] * len(used) if base is None else [b + BASELINE_SLACK_MIB for b in base]
    over = [f"GPU {d}: {u} MiB used (idle is <= {lim})" for d, u, lim in zip(devices, used, limits) if u > lim]
    parts = ([f"compute processes {', '.join(_who(p) for p in pids)}"] if pids else []) + over
    return HygieneReport(
        skipped=False, notice="; ".join(parts), busy=bool(parts), pids=pids, devices=tuple(devices),
        used_mib=used, baseline=base, waited_s=round(waited, 2),
    )


def _who(pid: int) -> str:
    """`PID 1234 (python -m sglang.launch_server …)`: a leftover named so a person can kill it."""
    try:
        import psutil

        argv = psutil.Process(pid).cmdline()
        cmd = " ".join([os.path.basename(argv[0]), *argv[1:]])[:120] if argv else ""
    except Exception:  # noqa: BLE001  # gone, another user's, or psutil missing: the PID alone
        cmd = ""
    return f"PID {pid}" + (f" ({cmd})" if cmd else "")


def check_idle(
    devices: list[int], baseline: HygieneReport | Sequence[int] | None = None, nvml: Any | None = None
) -> HygieneReport:
    """One look: are these GPUs free of compute processes, with memory near idle?"""
    n, notice = _open(nvml)
    if n is None:
        return HygieneReport(skipped=True, notice=notice, busy=False, devices=tuple(devices))
    try:
        return _sample(n, devices, _baseline(baseline), 0.0)
    finally:
        _close(n)


def wait_released(
    devices: list[int],
    timeout_s: float = 60.0,
    baseline: HygieneReport | Sequence[int] | None = None,
    nvml: Any | None = None,
    poll_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> HygieneReport:
    """After teardown: poll until the GPUs are idle again, at most `timeout_s`.

    A report with busy=True names what lingered (PIDs, memory over the baseline); callers put it in the
    trial's report rather than failing the trial, since a slow driver release is not the engine's fault.
    """
    n, notice = _open(nvml)
    if n is None:
        return HygieneReport(skipped=True, notice=notice, busy=False, devices=tuple(devices))
    base = _baseline(baseline)
    start = clock()
    try:
        while True:
            rep = _sample(n, devices, base, clock() - start)
            if not rep.busy or clock() - start >= timeout_s:
                if rep.busy:
                    rep = HygieneReport(**{**rep.__dict__, "notice": f"still in use after {rep.waited_s:g}s: "
                                           + rep.notice})
                return rep
            sleep(poll_s)
    finally:
        _close(n)


def describe(rep: HygieneReport) -> str:
    """One line for a report."""
    if rep.skipped:
        return rep.notice
    gpus = ", ".join(f"GPU {d}: {u:,} MiB" for d, u in zip(rep.devices, rep.used_mib))
    if not rep.busy:
        return f"idle ({gpus}" + (f"; released after {rep.waited_s:g}s)" if rep.waited_s else ")")
    return f"BUSY: {rep.notice} ({gpus})"


@dataclass(frozen=True)
class GpuConditions:
    """One GPU's state before a performance pass; None for a read this GPU or driver does not offer."""

    gpu: int
    used_mib: int | None = None
    sm_mhz: float | None = None
    mem_mhz: float | None = None
    temp_c: float | None = None
    power_w: float | None = None


def gpu_conditions(devices: Sequence[int], nvml: Any | None = None) -> list[GpuConditions]:
    """What can disturb a measurement on these GPUs right now: SM and memory clocks (MHz), temperature (°C),
    power (W) and memory used (MiB), one a GPU; [] when NVML cannot answer (no driver, no GPU)."""
    n, _ = _open(nvml)
    if n is None:
        return []
    try:
        idx = map_devices(devices, n.uuids, os.environ.get("CUDA_VISIBLE_DEVICES"))
        out = []
        for d, i in zip(devices, idx):
            out.append(GpuConditions(d, n.used_mib(i), **_gpu_reads(n.nvml, n.handles[i])))
        return out
    except ValueError:
        return []
    finally:
        _close(n)


def _gpu_reads(nv: Any, h: Any) -> dict[str, float | None]:
    """One GPU's clocks, temperature and power; None for a read this GPU or driver does not offer."""
    reads = {"sm_mhz": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
             "mem_mhz": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
             "temp_c": lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
             "power_w": lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000}
    out: dict[str, float | None] = {}
    for key, read in reads.items():
        try:
            out[key] = round(float(read()), 1)
        except Exception:  # noqa: BLE001  # NVMLError_NotSupported and kin
            out[key] = None
    return out
