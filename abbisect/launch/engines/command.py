"""`command`: any OpenAI-compatible server; the recipe gives the argv template and readiness.

`{gpu_share}` in launch.command or launch.flags becomes the slot's share of each GPU's memory (0.22), or 1
when the slot has the whole GPU: the server is told its budget the way the recipe's author chooses."""

from __future__ import annotations

from abbisect.environment.base import fill
from abbisect.launch import jit
from abbisect.launch.engines.base import LaunchPlan, share_text, vllm_style_facts
from abbisect.recipe import Recipe

kind = "command"
share_flag: str | None = None  # a placeholder instead: {gpu_share}
# Any engine: every cache variable abbisect knows (one the server does not read is harmless).
jit_caches = (*jit.VLLM, *jit.SGLANG, *jit.TORCH_STACK, *jit.KERNEL_LIBS)
SHARE_PLACEHOLDER = "{gpu_share}"


def plan(recipe: Recipe, python: str, model: str | None, host: str, port: int) -> LaunchPlan:
    share = "1" if recipe.gpu_share is None else share_text(recipe.gpu_share)
    values = {"python": python, "host": host, "port": str(port), "model": model or "", "gpu_share": share}
    argv = tuple(fill(a, values) for a in recipe.launch.command) + tuple(fill(f, {"gpu_share": share})
                                                                       for f in recipe.launch.flags)
    ready = recipe.launch.ready
    http = ready.http if ready else "/health"
    return LaunchPlan(argv, {}, http, ready.log if ready else None)


def help_argv(recipe: Recipe, python: str) -> list[tuple[str, ...]]:
    """The recipe's narrow.help, else its launch command up to its first long option or placeholder other
    than {python}, with --help: `{python} -m toyengine.server --help`."""
    if recipe.narrow.help:
        return [tuple(fill(a, {"python": python}) for a in recipe.narrow.help)]
    head = []
    for a in recipe.launch.command:
        if a.startswith("--") or ("{" in a and a != "{python}"):
            break
        head.append(fill(a, {"python": python}))
    return [(*head, "--help")] if head else []


def facts(log_text: str) -> dict[str, object]:
    return vllm_style_facts(log_text, r"API server version (\S+)")
