"""The CPU scaffolding of `builtin:sglang-0.5.23`: how its real SGLang serves on a machine without a GPU.

Test scaffolding, never what a user with a GPU gets. SGLang 0.5.23's CPU engine needs:

- `SGLANG_USE_CPU_ENGINE=1` (with `--device cpu` alone, 0.5.23 imports vllm for the rotary embedding);
- two CPU ops from `sgl_kernel`, whose real build (the sglang-kernel wheel) loads only where libcuda.so.1 does:
  the stand-in in `sgl_kernel/` gives them in plain PyTorch and is put first on the server's PYTHONPATH (the
  venv's installed files stay as installed).

The SGLang adapter adds both to a launch only when all three hold: the recipe's engine is this built-in, its
flags say `--device cpu`, and the machine has no CUDA driver (a machine with one runs the real sgl_kernel). The
CPU flags themselves (`--device cpu`, `--sleep-on-idle`, `--max-total-tokens`) are the built-in recipe's own
(recipes/sglang-cpu-smollm2.yaml).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from functools import cache
from itertools import pairwise
from pathlib import Path

REPO = "builtin:sglang-0.5.23"
STANDIN = Path(__file__).resolve().parent  # holds sgl_kernel/
# How a report shows the stand-in's folder: no path of this machine.
SHOWN = "<abbisect>/builtin/sglang_cpu"
ENV = {"SGLANG_USE_CPU_ENGINE": "1"}
# What the stand-in prints to the server's log when imported (sgl_kernel/__init__.py's MARK starts with it).
STANDIN_MARK = "sgl_kernel: abbisect's CPU stand-in"


@cache
def cuda_driver() -> bool:
    """Whether this machine can load the CUDA driver library (then the real sgl_kernel loads too)."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def applies(repo: str, flags: Sequence[str]) -> bool:
    """The scaffolding is for this built-in served on the CPU of a machine without a CUDA driver, only."""
    on_cpu = any(a == "--device" and b == "cpu" for a, b in pairwise(flags)) or "--device=cpu" in flags
    return repo == REPO and on_cpu and not cuda_driver()


def launch_env() -> dict[str, str]:
    """The variables the scaffolding adds to the server's environment: the stand-in on PYTHONPATH, which comes
    before the venv's site-packages."""
    return {**ENV, "PYTHONPATH": str(STANDIN)}


def shown_env() -> dict[str, str]:
    """The same, as a report shows it."""
    return {**ENV, "PYTHONPATH": SHOWN}
