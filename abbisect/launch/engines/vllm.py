"""vLLM: `python -m vllm.entrypoints.openai.api_server` (or `vllm serve`); ready when /health is 200."""

from __future__ import annotations

import re
from pathlib import Path

from abbisect.launch import jit
from abbisect.launch.engines.base import LaunchPlan, share_args, vllm_style_facts
from abbisect.recipe import Recipe

kind = "vllm"
share_flag: str | None = "--gpu-memory-utilization"  # the fraction of the GPU's total memory this instance may use
# Its torch.compile cache (and FlashInfer's autotune) under VLLM_CACHE_ROOT, and what torch, Triton and the kernel
# libraries compile.
jit_caches = (*jit.VLLM, *jit.TORCH_STACK, *jit.KERNEL_LIBS)


def plan(recipe: Recipe, python: str, model: str | None, host: str, port: int) -> LaunchPlan:
    common = ("--host", host, "--port", str(port), *share_args(recipe, share_flag), *recipe.launch.flags)
    if recipe.launch.entrypoint == "cli":
        argv = (str(Path(python).parent / "vllm"), "serve", model or "", *common)
    else:
        argv = (python, "-m", "vllm.entrypoints.openai.api_server", "--model", model or "", *common)
    # Without VLLM_HOST_IP the engine's internal queue binds the machine's external address.
    env = {"VLLM_HOST_IP": host, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    ready = recipe.launch.ready
    return LaunchPlan(argv, env, (ready.http if ready and ready.http else "/health"), ready.log if ready else None)


def help_argv(recipe: Recipe, python: str) -> list[tuple[str, ...]]:
    """`vllm serve --help=all` (since vLLM #24903 plain --help lists only the sections), else --help."""
    cli = str(Path(python).parent / "vllm")
    return [(cli, "serve", "--help=all"), (cli, "serve", "--help"),
            (python, "-m", "vllm.entrypoints.openai.api_server", "--help")]


# How vLLM states its version at start: "vLLM API server version 0.11.0" (up to 0.11), "vLLM server version
# 0.32.0, serving model M" (later, with VLLM_DISABLE_LOG_LOGO or an unknown formatter), or the logo, whose
# second line ends in "version 0.32.0" (bold when coloured). Every line may carry "(APIServer pid=N) INFO …".
VERSION_RE = (r"(?m)vLLM (?:API )?server version (\S+?)(?:,|\s|$)"
              r"|█\s+version\s+(\S+)\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def facts(log_text: str) -> dict[str, object]:
    return vllm_style_facts(_ANSI.sub("", log_text), VERSION_RE)
