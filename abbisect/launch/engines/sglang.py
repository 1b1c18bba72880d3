"""SGLang: `python -m sglang.launch_server` (or `sglang serve`); ready only at "fired up and ready to roll".

Checked on the real sglang 0.5.23 (docs/real-engines.md): `/v1/models` answers before the warm-up request has
run, and "Uvicorn running on" is logged before it too; the ready line comes after it. `sglang serve
--model-path M` (launch.entrypoint cli) serves as `python -m sglang.launch_server` does (module, the default: the
only entry point of older trees); its --help lists the same server options less three of the gRPC servicer's.
Teardown signals the main process first: it ends its children itself, where a child signalled with it may die
first and be taken for a crash (a SIGQUIT and a 5 s wait).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from abbisect.builtin import sglang_cpu
from abbisect.launch import jit
from abbisect.launch.engines.base import LaunchPlan, share_args
from abbisect.recipe import Recipe

kind = "sglang"
share_flag: str | None = "--mem-fraction-static"  # the fraction of the GPU's memory for weights and the KV cache pool
# SGLANG_CACHE_DIR (its own JIT kernels; recent versions put Triton's, inductor's and CUDA's under it unless set),
# and what torch, Triton and the kernel libraries compile.
jit_caches = (*jit.SGLANG, *jit.TORCH_STACK, *jit.KERNEL_LIBS)
READY_LINE = r"The server is fired up and ready to roll!"


def _entry(recipe: Recipe, python: str) -> tuple[str, ...]:
    if recipe.launch.entrypoint == "cli":
        return (str(Path(python).parent / "sglang"), "serve")
    return (python, "-m", "sglang.launch_server")


def plan(recipe: Recipe, python: str, model: str | None, host: str, port: int) -> LaunchPlan:
    argv = (*_entry(recipe, python), "--model-path", model or "", "--host", host, "--port", str(port),
            *share_args(recipe, share_flag), *recipe.launch.flags)
    ready = recipe.launch.ready
    # builtin:sglang-0.5.23 on a machine without a GPU: its CPU scaffolding (abbisect/builtin/sglang_cpu).
    scaffold = sglang_cpu.applies(recipe.engine.repo, recipe.launch.flags)
    return LaunchPlan(argv, sglang_cpu.launch_env() if scaffold else {},
                      ready.http if ready else "/health",
                      ready.log if ready and ready.log else READY_LINE,
                      shown=sglang_cpu.shown_env() if scaffold else {}, stop_main_first=True)


def help_argv(recipe: Recipe, python: str) -> list[tuple[str, ...]]:
    """The recipe's own entry point's --help first (a tree without `sglang serve` falls back to the module's)."""
    module, cli = (python, "-m", "sglang.launch_server", "--help"), (str(Path(python).parent / "sglang"), "serve",
                                                                    "--help")
    return [cli, module] if recipe.launch.entrypoint == "cli" else [module, cli]


def facts(log_text: str) -> dict[str, object]:
    """SGLang logs its arguments at start: `server_args=ServerArgs(...)` in older releases, a dict
    (`server_args={'model_path': …}`) in 0.5.23; its version only in some releases ("sglang version 0.4.6",
    "SGLang v0.5.2"; 0.5.23 logs none), else the report takes it from the venv's fingerprint."""
    facts: dict[str, object] = {}
    if m := re.search(r"server_args=ServerArgs\((.*?)\)\s*$", log_text, re.MULTILINE):
        facts["server_args"] = m.group(1)
    elif m := re.search(r"server_args=(\{.*\})\s*$", log_text, re.MULTILINE):
        try:
            facts["server_args"] = ast.literal_eval(m.group(1))
        except (ValueError, SyntaxError):
            facts["server_args"] = m.group(1)
    if m := re.search(r"(?i)\bsglang(?:[ _]version)?[ =:]+v?(\d+\.\d+\.\d+[^\s,;)]*)", log_text):
        facts["version"] = m.group(1)
    if sglang_cpu.STANDIN_MARK in log_text:
        facts["sgl_kernel"] = "abbisect's CPU stand-in (test scaffolding of builtin:sglang-0.5.23)"
    return facts
