"""Engine adapters: how each engine is started, when it is ready, and what its log says about itself."""

from __future__ import annotations

from abbisect.launch.engines import command, sglang, vllm
from abbisect.launch.engines.base import Adapter

# Typed by the Protocol, one module per entry: the type checker holds each adapter module to it.
ADAPTERS: dict[str, Adapter] = {sglang.kind: sglang, vllm.kind: vllm, command.kind: command}


def adapter(kind: str) -> Adapter:
    return ADAPTERS[kind]
