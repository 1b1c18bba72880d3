"""GPU hygiene around one trial's server: whole-GPU for a slot alone on its GPUs (as always), per slot when
several slots share a GPU.

Why per slot: with four servers on one GPU, the GPU never returns to its idle baseline while a bisect runs,
so the whole-GPU rule ("idle before a launch") would make every trial wait out its timeout. What matters for
a slot is narrower, and NVML's per-process accounting (nvmlDeviceGetComputeRunningProcesses: pid and
usedGpuMemory) answers it:

- before a launch, the slot's previous server is gone from the GPU (none of its processes is listed, so the
  memory they held is released), and the slot's share is free: free memory ≥ share × total − SLACK_MIB on each
  of its GPUs (the engine sizes itself from that share of the *total*: vLLM refuses to start below it);
- other slots' servers do not block a launch (they run for the whole bisect); they count only through the
  free memory they hold, and are recorded by PID and MiB;
- after teardown, the trial's own server is gone from the GPU (at most AFTER_TIMEOUT_S), as whole-GPU
  hygiene waits for the baseline.

Which processes are a slot's: each slot of a run keeps a ledger (`<cache>/gpu-slots/<run>/slot-<i>.json`)
of its launches: the supervisor token every process of a launch carries in its environment
(infra/supervisor.TOKEN_VAR) and the (pid, start time) of the processes NVML listed for it. A listed PID is
the slot's when its environment carries one of the slot's tokens, or when it is a recorded PID that is gone
from /proc (dead, its context not yet torn down) or still the same process. A share that is not free after
BEFORE_TIMEOUT_S leaves the trial untested (`infra_error`: the machine's fault, never the commit's) rather
than launching a server into an out-of-memory crash a bisect would call bad (ABBISECT_GPU_SLOT_WAIT_S sets
another bound).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Protocol, TypeAlias

from pydantic import Discriminator, Tag

from abbisect.gpu.hygiene import (
    IDLE_USED_MIB,
    HygieneReport,
    _close,
    _Nvml,
    _open,
    check_idle,
    describe,
    map_devices,
    wait_released,
)
from abbisect.infra import procfs
from abbisect.infra.cache import Cache
from abbisect.infra.errors import UserError
from abbisect.infra.locks import atomic_write
from abbisect.infra.supervisor import TOKEN_VAR
from abbisect.recipe.status import Outcome, Status
from abbisect.verdict.rules import Verdict

# The driver's own reservation (about 600 MiB on an H200) is never free: a share that, with the others,
# fills a GPU exactly would otherwise never pass. IDLE_USED_MIB is that reservation's bound.
SLACK_MIB = IDLE_USED_MIB
BEFORE_TIMEOUT_S = 120.0  # as whole-GPU hygiene waits for the previous side
WAIT_ENV = "ABBISECT_GPU_SLOT_WAIT_S"  # another bound for that wait (a driver slow to release, a test)
AFTER_TIMEOUT_S = 60.0
POLL_S = 0.5
LEDGER_LAUNCHES = 8  # the last launches of a slot kept in its ledger (a lingering older one stays attributable)


@dataclass(frozen=True)
class SlotPlace:
    """Where a trial on a shared GPU slot runs: the slot, the run whose slots' ledgers it reads (a folder of
    the cache), and the slots it shares a GPU with. Only such slots get one; a slot alone on its GPUs keeps
    whole-GPU hygiene."""

    index: int
    run: str
    shared_with: tuple[int, ...] = ()


@dataclass(frozen=True)
class GpuProcess:
    """A compute process NVML lists on a GPU, with the MiB it holds (None: NVML could not say)."""

    pid: int
    mib: int | None
    device: int
    slot: int | None = None  # the slot of this run whose server it is; None: of no slot (another program)


@dataclass(frozen=True)
class DeviceMemory:
    """One look at one GPU (the trial's GPU number) through NVML."""

    device: int
    total_mib: int
    used_mib: int
    free_mib: int
    processes: tuple[tuple[int, int | None], ...]  # (pid, MiB)


@dataclass(frozen=True)
class SlotReport:
    """What a check of a shared slot's GPUs saw (a trial's gpu_before / gpu_during / gpu_after).

    It has the keys of the whole-GPU HygieneReport (skipped, notice, busy, pids, devices, used_mib, waited_s),
    so a report reads either."""

    skipped: bool
    notice: str
    busy: bool
    slot: int
    share: float | None
    when: str  # before / during / after
    devices: tuple[int, ...] = ()
    used_mib: tuple[int, ...] = ()
    free_mib: tuple[int, ...] = ()
    total_mib: tuple[int, ...] = ()
    need_mib: tuple[int, ...] = ()  # before a launch: what the share needs free on each GPU
    pids: tuple[int, ...] = ()  # every compute process on the slot's GPUs
    own: tuple[GpuProcess, ...] = ()  # before: the slot's previous server; during/after: this trial's
    others: tuple[GpuProcess, ...] = ()  # the other slots' servers
    foreign: tuple[GpuProcess, ...] = ()  # of no slot of this run
    waited_s: float = 0.0
    mode: str = "per-slot"  # what tells it from a whole-GPU check (`GpuCheck`) where a trial's result is read back


def _check_kind(value: Any) -> str:
    """Which kind of check a GPU check is, as a trial's result holds it or as it was written: a shared slot's
    carries its mode, a whole-GPU one none."""
    mode = value.get("mode") if isinstance(value, Mapping) else getattr(value, "mode", None)
    return "slot" if mode == "per-slot" else "whole"


# What a trial's extras hold of a GPU check (gpu_before, gpu_during, gpu_after): the whole GPU's or a shared slot's.
GpuCheck: TypeAlias = Annotated[Annotated[HygieneReport, Tag("whole")] | Annotated[SlotReport, Tag("slot")],
                                Discriminator(_check_kind)]


# ---------------------------------------------------------------- the rule (pure)

def need_mib(share: float, total_mib: int) -> int:
    """What must be free on a GPU of `total_mib` before a server with `share` of it starts."""
    return max(int(share * total_mib) - SLACK_MIB, 0)


def judge_slot(memory: Sequence[DeviceMemory], slot: int, share: float | None, owner: Callable[[int], int | None],
               when: str, waited_s: float = 0.0) -> SlotReport:
    """The slot's check from one look at its GPUs: busy while the slot's own (previous) server is listed, and,
    before a launch, while its share is not free. Other slots' servers and other programs are recorded and
    block only through the memory they hold."""
    own: list[GpuProcess] = []
    others: list[GpuProcess] = []
    foreign: list[GpuProcess] = []
    for m in memory:
        for pid, mib in m.processes:
            who = owner(pid)
            proc = GpuProcess(pid, mib, m.device, who)
            (own if who == slot else others if who is not None else foreign).append(proc)
    reasons = []
    if own:  # during: the evidence that the check sees the slot's own server (busy, as whole-GPU hygiene says)
        reasons.append(f"slot {slot}'s server on the GPU: {_procs(own)}" if when == "during" else
                       f"slot {slot}'s {'previous ' if when == 'before' else ''}server still holds GPU memory: "
                       f"{_procs(own)}")
    needs: tuple[int, ...] = ()
    if when == "before" and share is not None:
        needs = tuple(need_mib(share, m.total_mib) for m in memory)
        for m, need in zip(memory, needs):
            if m.free_mib < need:
                reasons.append(f"GPU {m.device}: {m.free_mib:,} MiB free, slot {slot}'s share needs {need:,} "
                               f"({share:g} of {m.total_mib:,} MiB, less {SLACK_MIB:,} slack)")
    return SlotReport(
        skipped=False, notice="; ".join(reasons), busy=bool(reasons), slot=slot, share=share, when=when,
        devices=tuple(m.device for m in memory), used_mib=tuple(m.used_mib for m in memory),
        free_mib=tuple(m.free_mib for m in memory), total_mib=tuple(m.total_mib for m in memory), need_mib=needs,
        pids=tuple(sorted({p for m in memory for p, _ in m.processes})), own=tuple(own), others=tuple(others),
        foreign=tuple(foreign), waited_s=round(waited_s, 2))


def _procs(procs: Sequence[GpuProcess]) -> str:
    return ", ".join(f"PID {p.pid} ({'?' if p.mib is None else f'{p.mib:,}'} MiB on GPU {p.device})" for p in procs)


def describe_slot(rep: SlotReport) -> str:
    """One line for the console and a report."""
    if rep.skipped:
        return rep.notice
    gpus = ", ".join(f"GPU {d}: {u:,} MiB used, {f:,} free" for d, u, f in zip(rep.devices, rep.used_mib,
                                                                              rep.free_mib))
    others = f"; other slots: {_procs(rep.others)}" if rep.others else ""
    foreign = f"; not of this run: {_procs(rep.foreign)}" if rep.foreign else ""
    if rep.busy:
        return f"BUSY: {rep.notice} ({gpus}{others}{foreign})"
    state = {"before": "previous server gone, share free", "during": "own server " + (_procs(rep.own) or "not listed"),
             "after": "own server gone"}.get(rep.when, "ok")
    waited = f" after {rep.waited_s:g}s" if rep.waited_s else ""
    return f"slot {rep.slot}: {state}{waited} ({gpus}{others}{foreign})"


# ---------------------------------------------------------------- ledgers

class Ledgers:
    """The launches of each slot of one run, as files in the cache: a slot writes only its own (one trial a slot
    at a time), and reads every slot's."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, slot: int) -> Path:
        return self.folder / f"slot-{slot}.json"

    def launches(self, slot: int) -> list[dict]:
        try:
            data = json.loads(self.path(slot).read_text())
        except (OSError, ValueError):
            return []
        return [x for x in data.get("launches", []) if isinstance(x, dict)] if isinstance(data, dict) else []

    def record(self, slot: int, token: str, pids: Sequence[int], sha: str = "") -> None:
        """Add the launch `token` (or its newly seen PIDs) to the slot's ledger."""
        launches = self.launches(slot)
        entry = next((x for x in launches if x.get("token") == token), None)
        if entry is None:
            entry = {"token": token, "sha": sha, "at": round(time.time(), 3), "pids": []}
            launches.append(entry)
        known = {int(p) for p, _ in entry["pids"]}
        entry["pids"] += [[p, procfs.start_time(p)] for p in pids if p not in known]
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path(slot), json.dumps({"slot": slot, "launches": launches[-LEDGER_LAUNCHES:]}))

    def owner(self, slots: Sequence[int]) -> Callable[[int], int | None]:
        """pid -> the slot (of `slots`) whose server it is, else None; read from the ledgers now."""
        tokens: dict[str, int] = {}
        recorded: dict[int, tuple[int, int | None]] = {}
        for slot in slots:
            for launch in self.launches(slot):
                tokens[str(launch.get("token"))] = slot
                for pid, start in launch.get("pids", []):
                    recorded[int(pid)] = (slot, start)

        def who(pid: int) -> int | None:
            token = procfs.env_value(pid, TOKEN_VAR)
            if token is not None:
                return tokens.get(token)
            if pid in recorded:
                slot, start = recorded[pid]
                now = procfs.start_time(pid)
                # gone from /proc but still listed (its context not torn down yet), or still the same process
                if now is None or start is None or now == start:
                    return slot
            return None

        return who


# ---------------------------------------------------------------- guards: what the pipeline calls

class GpuGuard(Protocol):
    """Hygiene around one server: `before` the launch (and `refusal`, a verdict when the trial must not
    launch), `started` with the server's supervised process, `during` once it is ready, `after` teardown.
    Each check returns its report for the trial's extras."""

    refusal: Verdict | None

    def before(self) -> GpuCheck: ...

    def started(self, proc: Any) -> None: ...

    def during(self) -> GpuCheck: ...

    def after(self) -> GpuCheck: ...


class WholeGpu:
    """A slot alone on its GPUs: the GPUs idle before the launch (waits for the previous side), idle again after
    teardown — same-GPU hygiene exactly as abbisect has always done it (abbisect/gpu/hygiene.py)."""

    refusal: Verdict | None = None

    def __init__(self, gpus: list[int], say: Callable[[str], None]) -> None:
        self.gpus, self.say = gpus, say
        self.baseline: HygieneReport | None = None

    def before(self) -> HygieneReport:
        rep = check_idle(self.gpus)
        if rep.busy:
            self.say(f"GPU busy before launch, waiting: {describe(rep)}")
            rep = wait_released(self.gpus, timeout_s=120)
        self.say(f"GPU before launch: {describe(rep)}")
        self.baseline = rep
        return rep

    def started(self, proc: Any) -> None:
        pass

    def during(self) -> HygieneReport:  # evidence that the check sees this side's own server on the GPU
        return check_idle(self.gpus)

    def after(self) -> HygieneReport:
        base = self.baseline.used_mib if self.baseline is not None and not self.baseline.skipped else None
        rep = wait_released(self.gpus, timeout_s=60, baseline=base or None)
        self.say(f"GPU after teardown: {describe(rep)}")
        return rep


class SharedSlot:
    """A slot that shares its GPUs with other slots: per-slot hygiene (the module's docstring has the rule)."""

    refusal: Verdict | None = None

    def __init__(self, gpus: list[int], share: float | None, place: SlotPlace, ledgers: Ledgers, sha: str,
                 say: Callable[[str], None], nvml: Any | None = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, before_timeout_s: float | None = None,
                 after_timeout_s: float = AFTER_TIMEOUT_S, poll_s: float = POLL_S) -> None:
        self.gpus, self.share, self.place, self.ledgers, self.sha, self.say = gpus, share, place, ledgers, sha, say
        self.nvml, self.clock, self.sleep, self.poll_s = nvml, clock, sleep, poll_s
        self.before_timeout_s = before_timeout_s if before_timeout_s is not None else _wait_s()
        self.after_timeout_s = after_timeout_s
        self.token: str | None = None
        self.slots = (place.index, *place.shared_with)

    def _look(self, n: _Nvml) -> list[DeviceMemory]:
        try:
            idx = map_devices(self.gpus, n.uuids, _parent_cvd())
        except ValueError as exc:
            raise UserError(f"gpus: {exc}") from None
        out = []
        for d, i in zip(self.gpus, idx):
            total, used, free = n.memory_mib(i)
            out.append(DeviceMemory(d, total, used, free, tuple(n.processes(i))))
        return out

    def _poll(self, when: str, timeout_s: float, first_busy: Callable[[SlotReport], None] | None = None) -> SlotReport:
        """Look until the slot's check passes or `timeout_s` has gone; the last look (`first_busy` is told of
        the first look that did not pass)."""
        n, notice = _open(self.nvml)
        if n is None:
            return SlotReport(skipped=True, notice=notice, busy=False, slot=self.place.index, share=self.share,
                              when=when, devices=tuple(self.gpus))
        start = self.clock()
        try:
            while True:
                owner = self.ledgers.owner(self.slots)
                rep = judge_slot(self._look(n), self.place.index, self.share, owner, when, self.clock() - start)
                if not rep.busy or self.clock() - start >= timeout_s:
                    return rep
                if first_busy is not None:
                    first_busy(rep)
                    first_busy = None
                self.sleep(self.poll_s)
        finally:
            _close(n)

    def before(self) -> SlotReport:
        rep = self._poll("before", self.before_timeout_s, lambda first: self.say(
            f"GPU slot {self.place.index} not ready for a launch, waiting: {describe_slot(first)}"))
        if rep.busy:
            why = (f"GPU slot {self.place.index}: not ready for a launch after {rep.waited_s:g}s: {rep.notice} "
                   "(not the commit's fault: the trial was not run)")
            self.refusal = Verdict(Status.INFRA_ERROR, Outcome.SKIP, (why,))
            self.say(why)
        else:
            self.say(f"GPU before launch: {describe_slot(rep)}")
        return rep

    def started(self, proc: Any) -> None:
        """The server is started: its token (and main PID) in the slot's ledger before anything else, so a
        server killed while it loads is still known as this slot's."""
        self.token = str(proc.token)
        self.ledgers.record(self.place.index, self.token, [int(proc.pid)] if proc.pid else [], self.sha)

    def during(self) -> SlotReport:
        rep = self._poll("during", 0.0)
        if not rep.skipped and self.token is not None:
            mine = [p.pid for p in rep.foreign + rep.own + rep.others
                    if procfs.env_value(p.pid, TOKEN_VAR) == self.token]
            if mine:  # NVML's PIDs of this server: attributable to the slot after they are gone from /proc
                self.ledgers.record(self.place.index, self.token, mine, self.sha)
        return rep

    def after(self) -> SlotReport:
        rep = self._poll("after", self.after_timeout_s)
        if rep.busy:
            rep = SlotReport(**{**rep.__dict__, "notice": f"still in use after {rep.waited_s:g}s: {rep.notice}"})
        self.say(f"GPU after teardown: {describe_slot(rep)}")
        return rep


def _wait_s() -> float:
    text = os.environ.get(WAIT_ENV, "").strip()
    try:
        return float(text) if text else BEFORE_TIMEOUT_S
    except ValueError:
        raise UserError(f"{WAIT_ENV}={text!r}: give the seconds a shared GPU slot may wait for its share") from None


def _parent_cvd() -> str | None:
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def guard_for(gpus: list[int] | None, share: float | None, place: SlotPlace | None, cache_dir: str | Path,
              sha: str, say: Callable[[str], None]) -> GpuGuard | None:
    """The hygiene a trial's server gets: none without GPUs, per slot on a slot that shares its GPUs, else
    whole-GPU."""
    if gpus is None:
        return None
    if place is None or not place.shared_with:
        return WholeGpu(gpus, say)
    return SharedSlot(gpus, share, place, Ledgers(Cache.at(cache_dir).gpu_slots(place.run)), sha, say)

