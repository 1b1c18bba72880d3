"""The device-class table (devices.yaml): per-block shared-memory limits a probe checks kernels against.

Below both of its readers: a recipe's `probe.targets` are checked against it when the recipe is loaded, and the
kernel probe (abbisect/gpu/) compiles for each class and compares with its limits."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from abbisect.infra.errors import UserError

_TABLE = Path(__file__).with_name("devices.yaml")


@dataclass(frozen=True)
class DeviceClass:
    name: str  # "sm_120"
    cc: int  # 120, as triton's GPUTarget takes it
    shared_memory_per_block_optin: int
    shared_memory_per_sm: int
    examples: tuple[str, ...] = ()


@cache
def device_classes() -> dict[str, DeviceClass]:
    raw = yaml.safe_load(_TABLE.read_text())
    return {
        name: DeviceClass(
            name=name,
            cc=int(row["cc"]),
            shared_memory_per_block_optin=int(row["shared_memory_per_block_optin"]),
            shared_memory_per_sm=int(row["shared_memory_per_sm"]),
            examples=tuple(str(e) for e in row.get("examples", ())),
        )
        for name, row in raw.items()
    }


def device_class(name: str) -> DeviceClass:
    table = device_classes()
    if name not in table:
        raise UserError(f"unknown device class {name!r}; known: {', '.join(table)} (abbisect/recipe/devices.yaml)")
    return table[name]
