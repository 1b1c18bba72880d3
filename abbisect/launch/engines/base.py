"""What every adapter module provides (a Protocol over modules, like pre-commit's languages)."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from abbisect.recipe import Recipe


@dataclass(frozen=True)
class LaunchPlan:
    argv: tuple[str, ...]
    env: dict[str, str]
    ready_http: str | None  # a path that must answer 200
    ready_log: str | None  # a regex that must appear in the log
    # How reports show some of `env`'s values (a folder of this machine's abbisect, by a name fit to share).
    shown: dict[str, str] = field(default_factory=dict)
    # Teardown: SIGTERM to the main process alone first, which ends its children itself (SGLang: SIGTERM to every
    # process at once lets a child die first, and the main process takes that for a crash and waits 5 s).
    stop_main_first: bool = False


class Adapter(Protocol):
    kind: str
    # The engine's own flag for the share of a GPU's memory a server may take (None: the engine has none; the
    # `command` engine fills a {gpu_share} placeholder instead). abbisect passes it when the recipe's slots
    # have a share (abbisect/recipe/gpus.py), and refuses a recipe that passes it too (gpu/preflight.py).
    share_flag: str | None
    # The JIT, compile and autotune caches the engine's stack reads, as (variable, subfolder): abbisect points
    # each into the launch's own folder (abbisect/launch/jit.py, `launch.jit_cache`).
    jit_caches: tuple[tuple[str, str], ...]

    def plan(self, recipe: Recipe, python: str, model: str | None, host: str, port: int) -> LaunchPlan: ...

    def facts(self, log_text: str) -> dict[str, object]: ...

    def help_argv(self, recipe: Recipe, python: str) -> list[tuple[str, ...]]:
        """Commands that print the engine's options in the commit's venv, the first that works wins (which
        feature switches the commit accepts: abbisect/launch/switches.py)."""
        ...


def share_text(share: float) -> str:
    """A share as the engines' flags take it: 0.22, never 0.22000000000000003."""
    return f"{share:.4g}"


def share_args(recipe: Recipe, flag: str | None) -> tuple[str, ...]:
    """The engine's share flag and value when the recipe's slot has a share, else nothing (the engine's own
    default: a server alone on its GPU, as always)."""
    return () if recipe.gpu_share is None or flag is None else (flag, share_text(recipe.gpu_share))


_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})")


@dataclass(frozen=True)
class LoggedFacts:
    """What an engine's own start log said of it (`facts`, kept as the engine module found it): its version and
    its arguments (vLLM's non-default ones, SGLang's server_args), None where the log says none."""

    version: str | None
    args: object | None

    @classmethod
    def of(cls, facts: Mapping[str, object]) -> LoggedFacts:
        version, args = facts.get("version"), facts.get("non_default_args", facts.get("server_args"))
        return cls(str(version) if version else None, args)


def vllm_style_facts(log_text: str, version_re: str) -> dict[str, object]:
    """Version and non-default arguments, as vLLM (and the toy engine) log them at start."""
    facts: dict[str, object] = {}
    if m := re.search(version_re, log_text):
        facts["version"] = next(g for g in m.groups() if g) if m.groups() else m.group(0)
    if m := _NON_DEFAULT.search(log_text):
        try:
            facts["non_default_args"] = ast.literal_eval(m.group(1))
        except (ValueError, SyntaxError):
            facts["non_default_args"] = m.group(1)
    return facts
