"""Engine adapters: how each engine is started, when it is ready, and what its log says about itself."""

from __future__ import annotations

from types import ModuleType

from abbisect.engines import command, sglang, vllm

ADAPTERS: dict[str, ModuleType] = {m.kind: m for m in (sglang, vllm, command)}


def adapter(kind: str) -> ModuleType:
    return ADAPTERS[kind]
