"""`command`: any OpenAI-compatible server; the recipe gives the argv template and readiness."""

from __future__ import annotations

from abbisect.environment.base import fill
from abbisect.launch.engines.base import LaunchPlan, vllm_style_facts
from abbisect.recipe import Recipe

kind = "command"


def plan(recipe: Recipe, python: str, model: str | None, host: str, port: int) -> LaunchPlan:
    values = {"python": python, "host": host, "port": str(port), "model": model or ""}
    argv = tuple(fill(a, values) for a in recipe.launch.command) + tuple(recipe.launch.flags)
    ready = recipe.launch.ready
    http = ready.http if ready else "/health"
    return LaunchPlan(argv, {}, http, ready.log if ready else None)


def facts(log_text: str) -> dict[str, object]:
    return vllm_style_facts(log_text, r"API server version (\S+)")
