"""SGLang: `python -m sglang.launch_server`; ready only at "fired up and ready to roll" (after warm-up).

The earlier "Uvicorn running on" line comes before the warm-up request and does not mean ready.
"""

from __future__ import annotations

import re

from abbisect.launch import jit
from abbisect.launch.engines.base import LaunchPlan, share_args
from abbisect.recipe import Recipe

kind = "sglang"
share_flag: str | None = "--mem-fraction-static"  # the fraction of the GPU's memory for weights and the KV cache pool
# SGLANG_CACHE_DIR (its own JIT kernels; recent versions put Triton's, inductor's and CUDA's under it unless set),
# and what torch, Triton and the kernel libraries compile.
jit_caches = (*jit.SGLANG, *jit.TORCH_STACK, *jit.KERNEL_LIBS)
READY_LINE = r"The server is fired up and ready to roll!"


def plan(recipe: Recipe, python: str, model: str | None, host: str, port: int) -> LaunchPlan:
    argv = (python, "-m", "sglang.launch_server", "--model-path", model or "", "--host", host, "--port", str(port),
            *share_args(recipe, share_flag), *recipe.launch.flags)
    ready = recipe.launch.ready
    return LaunchPlan(argv, {}, ready.http if ready else "/health", ready.log if ready and ready.log else READY_LINE)


def help_argv(recipe: Recipe, python: str) -> list[tuple[str, ...]]:
    return [(python, "-m", "sglang.launch_server", "--help")]


def facts(log_text: str) -> dict[str, object]:
    """SGLang logs `server_args=ServerArgs(...)` at start; its version only in some releases ("sglang
    version 0.4.6", "SGLang v0.5.2"), else the report takes it from the venv's fingerprint."""
    facts: dict[str, object] = {}
    if m := re.search(r"server_args=ServerArgs\((.*?)\)\s*$", log_text, re.MULTILINE):
        facts["server_args"] = m.group(1)
    if m := re.search(r"(?i)\bsglang(?:[ _]version)?[ =:]+v?(\d+\.\d+\.\d+[^\s,;)]*)", log_text):
        facts["version"] = m.group(1)
    return facts
