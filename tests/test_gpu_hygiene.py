"""Same-GPU hygiene against a fake NVML, device mapping, and (on a GPU) two launches of a fixture server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from abbisect.gpu import hygiene
from abbisect.gpu.hygiene import HygieneReport, check_idle, describe, map_devices, wait_released
from abbisect.infra.errors import UserError
from abbisect.infra.serial import dump, load

MIB = 1024 * 1024


@dataclass
class FakeNvml:
    """NVML with devices enumerated out of PCI order; each poll advances the script by one step."""

    bus_ids: list[str]
    used: list[list[int]]  # per device: MiB per poll (the last one repeats)
    procs: list[list[list[int]]] = field(default_factory=list)
    polls: int = 0

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.bus_ids)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self.bus_ids[h].encode())

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h:04d}"

    def _at(self, series: list, step: int):  # type: ignore[no-untyped-def]
        return series[min(step, len(series) - 1)]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        self.polls += 1
        return SimpleNamespace(used=self._at(self.used[h], self.step) * MIB)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list:
        series = self.procs[h] if self.procs else [[]]
        return [SimpleNamespace(pid=p) for p in self._at(series, self.step)]

    step: int = 0


class FakeClock:
    def __init__(self, nvml: FakeNvml) -> None:
        self.t, self.nvml = 0.0, nvml

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s
        self.nvml.step += 1


def test_map_devices_follows_pci_order_and_parent_mask() -> None:
    uuids = ["GPU-aaaa", "GPU-bbbb", "GPU-cccc", "GPU-dddd"]
    assert map_devices([0, 2], uuids, None) == [0, 2]
    assert map_devices([0, 1], uuids, "2,3") == [2, 3]
    assert map_devices([1], uuids, "GPU-dddd,GPU-aaaa") == [0]
    with pytest.raises(ValueError):
        map_devices([2], uuids, "1,3")
    with pytest.raises(ValueError):
        map_devices([1], uuids, "1,9,2")  # CUDA stops at the first invalid entry


def test_nvml_enumeration_is_sorted_by_bus_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # NVML index 0 sits on bus 0x41, index 1 on 0x01: trial GPU 0 is NVML index 1
    nvml = FakeNvml(["00000000:41:00.0", "00000000:01:00.0"], used=[[9000], [300]], procs=[[[77]], [[]]])
    rep = check_idle([0], nvml=nvml)
    assert not rep.busy and rep.used_mib == (300,) and rep.pids == ()
    rep = check_idle([1], nvml=nvml)
    assert rep.busy and rep.pids == (77,) and "77" in rep.notice and "9000 MiB" in rep.notice
    with pytest.raises(UserError):
        check_idle([2], nvml=nvml)


def test_wait_released_waits_until_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml = FakeNvml(["0:1"], used=[[20000, 20000, 5000, 400]], procs=[[[123], [123], [], []]])
    clock = FakeClock(nvml)
    base = HygieneReport(skipped=False, notice="", busy=False, devices=(0,), used_mib=(380,))
    rep = wait_released([0], timeout_s=10, baseline=base, nvml=nvml, poll_s=0.5, clock=clock, sleep=clock.sleep)
    assert not rep.busy and rep.waited_s == 1.5 and rep.baseline == (380,)
    assert "released after 1.5s" in describe(rep)


def test_a_leftover_is_named_with_its_pid_and_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "leftover-server-marker"])
    try:
        # Until the child has exec'd, its command line is still the forking parent's (a loaded machine).
        deadline = time.monotonic() + 30
        while b"leftover-server-marker" not in Path(f"/proc/{leftover.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        nvml = FakeNvml(["0:1"], used=[[30000]], procs=[[[leftover.pid]]])
        rep = check_idle([0], nvml=nvml)
        assert rep.busy and f"PID {leftover.pid} (" in rep.notice and "leftover-server-marker" in rep.notice
    finally:
        leftover.kill()
        leftover.wait()


def test_wait_released_names_lingering_pids(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml = FakeNvml(["0:1", "0:2"], used=[[400], [30000]], procs=[[[]], [[4242, 4243]]])
    clock = FakeClock(nvml)
    rep = wait_released([0, 1], timeout_s=3, baseline=[400, 400], nvml=nvml, clock=clock, sleep=clock.sleep)
    assert rep.busy and rep.pids == (4242, 4243) and rep.waited_s >= 3
    assert "still in use after" in rep.notice and "PID 4242" in rep.notice and "PID 4243" in rep.notice
    assert "GPU 1: 30000 MiB" in rep.notice
    assert load(HygieneReport, json.loads(json.dumps(dump(rep)))) == rep


def test_without_nvml_skips_with_one_notice(monkeypatch: pytest.MonkeyPatch, caplog) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    monkeypatch.setattr(hygiene, "_notice_logged", False)
    with caplog.at_level("WARNING"):
        a = check_idle([0])
        b = wait_released([0], timeout_s=1)
    assert a.skipped and b.skipped and not a.busy and "NVML unavailable" in a.notice
    assert sum("NVML unavailable" in r.message for r in caplog.records) == 1
    assert describe(a) == a.notice


# ---------------------------------------------------------------- on a real GPU


def _nvml_gpu() -> str | None:
    """Reason to skip, or None when NVML sees a GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001
        return f"needs NVML (pip install nvidia-ml-py) and an NVIDIA GPU: {type(exc).__name__}"
    try:
        import torch  # noqa: F401
    except ImportError:
        return "needs torch with CUDA for the fixture server"
    return None if n else "NVML sees no GPU"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(port: int) -> subprocess.Popen:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    server = Path(__file__).with_name("gpu_fixture_server.py")
    proc = subprocess.Popen([sys.executable, str(server), str(port), "2048"], env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise AssertionError("fixture server did not come up")


@pytest.mark.gpu
@pytest.mark.skipif(_nvml_gpu() is not None, reason=str(_nvml_gpu()))
def test_hygiene_between_two_launches_of_a_gpu_server() -> None:
    before = check_idle([0])
    print(f"\nbefore first launch: {describe(before)}")
    assert not before.skipped and not before.busy
    for i in (1, 2):
        port = _free_port()
        proc = _launch(port)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                     data=json.dumps({"prompt": "hi", "max_tokens": 8}).encode())
        with urllib.request.urlopen(req, timeout=30) as r:
            text = json.loads(r.read())["choices"][0]["text"]
        during = check_idle([0], baseline=before)
        print(f"launch {i} (pid {proc.pid}, said {text!r}): {describe(during)}")
        assert during.busy and during.used_mib[0] >= before.used_mib[0] + 2048
        if during.pids:  # containers may hide other namespaces' PIDs; ours must show when listed
            assert proc.pid in during.pids
        proc.terminate()
        proc.wait(timeout=30)
        after = wait_released([0], timeout_s=60, baseline=before)
        print(f"after teardown {i}: {describe(after)}")
        assert not after.busy, after.notice
    # a process that lingers is reported by PID
    port = _free_port()
    proc = _launch(port)
    try:
        lingering = wait_released([0], timeout_s=2, baseline=before)
        print(f"lingering check: {describe(lingering)}")
        assert lingering.busy and "still in use" in lingering.notice
        if lingering.pids:  # named with its PID and command line, so a person can find and kill it
            assert f"PID {proc.pid} (" in lingering.notice and "gpu_fixture_server" in lingering.notice
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert not wait_released([0], timeout_s=60, baseline=before).busy
