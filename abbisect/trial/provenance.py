"""Where a trial's result comes from: the slot (and a cluster's node) it ran on, and for a trial cache hit the
run that stored it. Typed where the result is made, written into the result's `extras` as the JSON objects
results.json and bisect.json have always held (`placement`, `cache`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from abbisect.infra.serial import NoneLeftOut


@dataclass(frozen=True)
class Node:
    """A cluster node a trial ran on, as the node itself said (abbisect/trial/cluster.py `node_trial`)."""

    id: str
    ip: str
    host: str | None = None
    cache: str | None = None  # the node's own cache folder (a path of another machine)
    gpus: tuple[int, ...] | None = None


@dataclass(frozen=True)
class LostAttempt:
    """An attempt of a trial lost with its node (None: lost before the node said which it was)."""

    node: Node | None
    error: str


@dataclass(frozen=True)
class Placement(NoneLeftOut):
    """Where and when a trial ran (a parallel bisect's timeline is drawn from these); on a cluster, its node
    and the attempts lost on the way (absent from the JSON elsewhere)."""

    executor: str
    slot: int
    gpus: tuple[int, ...] | None
    share: float | None
    shared_with: tuple[int, ...]
    start: float
    end: float
    node: Node | None = None
    lost: tuple[LostAttempt, ...] | None = None

    left_out: ClassVar[tuple[str, ...]] = ("node", "lost")


@dataclass(frozen=True)
class CacheOrigin:
    """A trial cache hit's origin: when its run stored it, that run's folder, and the logs kept with it."""

    stored: str
    out_dir: str
    logs: tuple[str, ...] = ()
