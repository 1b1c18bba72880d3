"""The executors' shared vocabulary: a slot (where one trial at a time runs), a trial placed on a slot, the
result of a trial the executor could not carry out, and the `Executor` interface itself.

The executors are in `executors.py` (this process's slots) and `cluster.py` (Ray tasks on a cluster).
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, replace
from types import EllipsisType
from typing import Protocol

from abbisect.gpu.sharing import SlotPlace
from abbisect.infra.serial import load
from abbisect.recipe.gpus import neighbours, parse_gpu_option
from abbisect.recipe.status import Outcome, Status
from abbisect.trial.provenance import LostAttempt, Node, Placement
from abbisect.trial.spec import Extras, Progress, Timings, TrialResult, TrialSpec
from abbisect.verdict.rules import Verdict


@dataclass(frozen=True)
class Slot:
    """Where one trial at a time runs: its GPUs (None: no GPU pinning, a CPU engine), the share of each GPU's
    memory its server takes (None: the whole GPU) and the other slots on one of its GPUs."""

    index: int
    gpus: tuple[int, ...] | None
    share: float | None = None
    shared_with: tuple[int, ...] = ()

    @property
    def shared(self) -> bool:
        """Another slot's trials run on one of this slot's GPUs at the same time (timings are not its own)."""
        return bool(self.shared_with)

    def label(self) -> str:
        if self.gpus is None:
            return f"slot {self.index}"
        share = f", share {self.share:g}" if self.share is not None else ""
        return f"slot {self.index} (GPU {','.join(map(str, self.gpus))}{share})"


def slots_for(gpu_slots: list[list[int]], count: int, share: float | None = None) -> list[Slot]:
    """GPU slots when the recipe names them (a GPU in several slots when they share it, each taking `share`
    of it), else `count` slots without GPUs (CPU engines)."""
    if gpu_slots:
        return [Slot(i, tuple(g), share, neighbours(gpu_slots, i)) for i, g in enumerate(gpu_slots)]
    return [Slot(i, None) for i in range(max(count, 1))]


def parse_gpus(text: str) -> list[list[int]]:
    """The slots' GPUs of `--gpus` (0,1,2,3; 0+1,2+3; 0x4 …); its share too: recipe.gpus.parse_gpu_option."""
    return [list(s) for s in parse_gpu_option(text).slots]


def on_slot(spec: TrialSpec, slot: Slot, run: str = "") -> TrialSpec:
    """The spec placed on `slot`: its GPUs and share in the recipe; on a slot that shares its GPUs, the slot's
    place in `run` (whose ledgers per-slot hygiene reads)."""
    if slot.gpus is None:
        return spec
    recipe = spec.recipe.model_copy(update={"gpus": list(slot.gpus), "gpu_share": slot.share})
    place = SlotPlace(slot.index, run, slot.shared_with) if slot.shared else None
    return replace(spec, recipe=recipe, slot=place)


def placed(result: TrialResult, executor: str, slot: Slot, started: float, node: dict | None = None,
           gpus: list[int] | EllipsisType | None = ..., lost: list[dict] | None = None) -> TrialResult:
    """The result with where and when it ran (the timeline of a parallel bisect is drawn from these); what else
    an executor knows of the place: a cluster's node and the GPUs it gave (`...`: the slot's), as the node said
    them, and the attempts lost on the way ({"node", "error"})."""
    given = (slot.gpus or None) if gpus is ... else gpus
    where = Placement(executor, slot.index, tuple(given) if given is not None else None, slot.share,
                      slot.shared_with, round(started, 3), round(time.time(), 3),
                      load(Node, node) if node else None,
                      tuple(load(LostAttempt, x) for x in lost) if lost is not None else None)
    return replace(result, extras=replace(result.extras, placement=where))


def infra_result(spec: TrialSpec, reason: str) -> TrialResult:
    """The result of a trial that the executor could not carry out (not the commit's fault)."""
    return TrialResult(spec, None, None, (), (), (), (), None, Verdict(Status.INFRA_ERROR, Outcome.SKIP, (reason,)),
                       Timings(), Extras(executor_error=reason))


class Executor(Protocol):
    name: str
    slots: list[Slot]
    # Whether trials run on other machines, which build their own venvs: a build here (a bisect's prefetch)
    # would serve none of them.
    remote: bool

    def submit(self, spec: TrialSpec, slot: Slot, progress: Progress) -> Future[TrialResult]: ...

    def machine_key(self) -> str:
        """The machines the trials run on, for the trial cache's key (trial/cache.py `machine_key`)."""

    def cancel(self, future: Future[TrialResult]) -> None: ...

    def shutdown(self) -> None: ...
