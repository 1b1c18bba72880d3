"""NVML's answers from a recorded tape (tests/data/nvml/*.json), shaped as `pynvml`: the NVML boundary of the
GPU hygiene tests, and nothing of abbisect's own.

A tape holds devices and scenarios; a scenario is a list of looks, each a list (one entry a device) of the
compute processes and the MiB each holds; the used memory is the device's idle use plus theirs. One look is
read as hygiene reads it (memory info, then the processes, device by device): the tape moves to the next look
once the last device's processes were read, and the last look repeats. Process names map to real PIDs given
by the test (its own real processes); a name without one becomes a PID above Linux's largest (no process has
it); numbers stay as they are.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

MIB = 1024 * 1024
NO_SUCH_PID = 1 << 23  # above Linux's largest PID (pid_max is at most 2**22)
TAPES = Path(__file__).with_name("data") / "nvml"


def tape(name: str = "h200_shared") -> dict:
    return json.loads((TAPES / f"{name}.json").read_text())


class RecordedNvml:
    def __init__(self, recorded: dict, scenario: str, pids: dict[str, int] | None = None) -> None:
        self.devices = recorded["devices"]
        self.driver = recorded.get("driver", "")
        self.looks = recorded["scenarios"][scenario]
        self.pids = pids or {}
        self.step = 0
        self.calls: list[str] = []

    def _look(self) -> list[dict]:
        return self.looks[min(self.step, len(self.looks) - 1)]

    def _pid(self, name: str | int) -> int:
        if isinstance(name, int):
            return name
        if name not in self.pids:
            self.pids[name] = NO_SUCH_PID + len(self.pids)
        return self.pids[name]

    def _procs(self, h: int) -> list[tuple[int, int]]:
        return [(self._pid(p), int(mib)) for p, mib in self._look()[h]["procs"]]

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self.devices[h]["bus_id"].encode())

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self.devices[h]["uuid"]

    def nvmlDeviceGetName(self, h: int) -> str:
        return self.devices[h]["name"]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        dev = self.devices[h]
        used = dev["idle_used_mib"] + sum(mib for _, mib in self._procs(h))
        return SimpleNamespace(total=dev["total_mib"] * MIB, used=used * MIB, free=(dev["total_mib"] - used) * MIB)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        procs = [SimpleNamespace(pid=pid, usedGpuMemory=mib * MIB) for pid, mib in self._procs(h)]
        if h == len(self.devices) - 1:
            self.step += 1
        return procs
