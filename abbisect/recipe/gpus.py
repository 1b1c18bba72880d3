"""The GPU slots of a recipe (`gpus:`) and of `--gpus`: which GPUs each trial sees, and what share of each GPU's
memory a slot's server may take when several slots share one GPU.

Forms (recipe → slots):
    gpus: [0]                              one trial sees GPU 0 (no slots: one trial at a time)
    gpus: [[0], [1]]                       two slots, one GPU each (each GPU in one slot only)
    gpus: {count: 8, per_trial: 2}         four slots of two GPUs (tensor parallel)
    gpus: {count: 1, per_gpu: 4}           four slots on GPU 0, each 0.22 of its memory (DEFAULT_TOTAL / 4)
    gpus: {count: 1, per_gpu: 4, share: 0.2}   the same, each 0.2
    --gpus 0,1,2,3 | 0+1,2+3 | 0x4 | 0x4,1x4 | 0x4@0.2   (`@SHARE` applies to every slot)

Why one share for every slot: all slots run the same recipe (one model, one engine), so they need the same
memory; a per-slot share would only let one slot starve another. Why a share is never guessed for a GPU of
its own: a server alone on its GPU keeps the engine's own default (vLLM 0.9, SGLang's model-based fraction),
as abbisect always did.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from abbisect.infra.errors import UserError

MAX_SLOTS = 64  # as bisect.slots
MAX_PER_GPU = 16
# What the slots on one GPU take together when no share is given: the rest is the driver's reservation
# (about 600 MiB on an H200), CUDA contexts and what an engine allocates beyond its budget.
DEFAULT_TOTAL = 0.9


def default_share(per_gpu: int) -> float:
    """DEFAULT_TOTAL split between `per_gpu` slots, rounded down to two decimals (4 → 0.22)."""
    return math.floor(DEFAULT_TOTAL / per_gpu * 100) / 100


@dataclass(frozen=True)
class GpuLayout:
    """The slots (each a tuple of GPU numbers; a GPU may appear in several when they share it) and the share of
    each GPU's memory a slot's server takes (None: the whole GPU, the engine's own default)."""

    slots: tuple[tuple[int, ...], ...]
    share: float | None = None

    def as_recipe(self) -> dict:
        """The recipe's derived fields (`gpus` is the first slot: what one trial sees outside a bisect)."""
        return {"gpus": list(self.slots[0]), "gpu_slots": [list(s) for s in self.slots], "gpu_share": self.share}


def slots_share_a_gpu(slots: Sequence[Sequence[int]]) -> bool:
    """Whether two slots have a GPU in common: their trials run on one GPU at the same time.

    What a performance verdict asks before it trusts a timing (co-runners change timing), and what decides
    per-slot hygiene (abbisect/gpu/sharing.py) instead of waiting for the whole GPU to be idle."""
    seen = [g for s in slots for g in set(s)]
    return len(seen) != len(set(seen))


def neighbours(slots: Sequence[Sequence[int]], index: int) -> tuple[int, ...]:
    """The other slots that share a GPU with slot `index`."""
    mine = set(slots[index])
    return tuple(i for i, s in enumerate(slots) if i != index and mine & set(s))


def most_per_gpu(slots: Sequence[Sequence[int]]) -> int:
    counts: dict[int, int] = {}
    for s in slots:
        for g in set(s):
            counts[g] = counts.get(g, 0) + 1
    return max(counts.values(), default=1)


def check_share(share: float | None, per_gpu: int, key: str = "gpus.share", count: str = "gpus.per_gpu {n}") -> None:
    """A share is a fraction of one GPU's memory, and the slots on one GPU must fit in it together."""
    if share is None:
        return
    if not 0 < share <= 1:
        raise ValueError(f"{key} {share:g}: a fraction of one GPU's memory, more than 0 and at most 1")
    if share * per_gpu > 1 + 1e-9:
        raise ValueError(f"{key} {share:g} × {count.format(n=per_gpu)} = {share * per_gpu:.2f}: the {per_gpu} slots on "
                         f"one GPU would need more than the whole GPU (at most {math.floor(100 / per_gpu) / 100:g} "
                         "each)")


class GpuSlots(BaseModel):
    """`gpus: {count, per_trial, per_gpu, share}`: GPUs 0..count-1 in groups of per_trial, per_gpu slots on each
    group, each slot's server taking `share` of each GPU's memory."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    count: int = Field(ge=1, le=1024)
    per_trial: int = Field(1, ge=1)
    per_gpu: int = Field(1, ge=1, le=MAX_PER_GPU, description="slots that share each GPU (or group of per_trial)")
    share: float | None = Field(None, gt=0, le=1, description="of each GPU's memory, per slot; default 0.9/per_gpu "
                                "when per_gpu > 1, else the engine's own default")

    @model_validator(mode="after")
    def _fits(self) -> GpuSlots:
        if self.count % self.per_trial:
            raise ValueError(f"gpus.count {self.count} is not a multiple of gpus.per_trial {self.per_trial}")
        if self.count // self.per_trial * self.per_gpu > MAX_SLOTS:
            raise ValueError(f"gpus: {self.count // self.per_trial * self.per_gpu} slots; at most {MAX_SLOTS}")
        check_share(self.share, self.per_gpu)
        return self

    def layout(self) -> GpuLayout:
        groups = [tuple(range(i, i + self.per_trial)) for i in range(0, self.count, self.per_trial)]
        share = self.share if self.share is not None or self.per_gpu == 1 else default_share(self.per_gpu)
        return GpuLayout(tuple(g for g in groups for _ in range(self.per_gpu)), share)


def layout_from_mapping(raw: dict) -> GpuLayout:
    """The mapping form, its errors as one line naming the key under `gpus`."""
    try:
        return GpuSlots.model_validate(raw).layout()
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (gpus takes count, per_trial, per_gpu, share)"
        raise ValueError(f"gpus.{loc}: {msg}" if loc else msg) from None


def layout_from_lists(slots: list) -> GpuLayout:
    """`gpus: [[0], [1]]`: each GPU in one slot only (a GPU shared by accident is refused; sharing is asked
    for with per_gpu)."""
    flat = [g for s in slots for g in s]
    if not all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in flat) or not all(slots):
        raise ValueError("gpus: each slot is a non-empty list of GPU numbers")
    if len(flat) != len(set(flat)):
        raise ValueError("gpus: each GPU in one slot only (to share a GPU between slots: "
                         "gpus: {count: 1, per_gpu: 4} or --gpus 0x4)")
    if len(slots) > MAX_SLOTS:
        raise ValueError(f"gpus: {len(slots)} slots; at most {MAX_SLOTS}")
    return GpuLayout(tuple(tuple(s) for s in slots))


def parse_gpu_option(text: str) -> GpuLayout:
    """`--gpus`: 0,1,2,3 (a GPU a slot), 0+1,2+3 (two GPUs a slot, tensor parallel), 0x4 (four slots sharing
    GPU 0), 0x4,1x4, 0+1x2; `@SHARE` at the end gives every slot that share of each GPU's memory."""
    usage = ("give GPU numbers, a slot each (0,1,2,3), joined by + for one slot (0+1,2+3), xN for N slots "
             "sharing it (0x4), @SHARE for each slot's share of its GPU (0x4@0.2)")
    body, at, share_text = text.partition("@")
    share: float | None = None
    groups: list[tuple[tuple[int, ...], int]] = []  # (the slot's GPUs, how many slots share them)
    try:
        if at:
            share = float(share_text)
        for part in (p.strip() for p in body.split(",")):
            if not part:
                continue
            gpus_text, x, times = part.partition("x")
            gpus, n = tuple(int(g) for g in gpus_text.split("+")), int(times) if x else 1
            if n < 1 or n > MAX_PER_GPU or min(gpus) < 0:
                raise ValueError
            groups.append((gpus, n))
    except ValueError:
        raise UserError(f"--gpus {text!r}: {usage}") from None
    if not groups:
        raise UserError(f"--gpus {text!r}: {usage}")
    seen = [g for gpus, _ in groups for g in gpus]
    if len(seen) != len(set(seen)):
        raise UserError(f"--gpus {text!r}: each GPU may belong to one slot only (to share one between slots: 0x4)")
    slots = [gpus for gpus, n in groups for _ in range(n)]
    per_gpu = max(n for _, n in groups)
    if len(slots) > MAX_SLOTS:
        raise UserError(f"--gpus {text!r}: {len(slots)} slots; at most {MAX_SLOTS}")
    try:
        check_share(share, per_gpu, key="share", count="{n} slots on one GPU")
    except ValueError as exc:
        raise UserError(f"--gpus {text!r}: {exc}") from None
    if share is None and per_gpu > 1:
        share = default_share(per_gpu)
    return GpuLayout(tuple(slots), share)
