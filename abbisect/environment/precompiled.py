"""`precompiled`: vLLM's own way to install a commit without compiling: reuse a prebuilt wheel's libraries.

`VLLM_USE_PRECOMPILED=1` makes vLLM's setup.py take `_C.abi3.so` and friends from a wheel instead of
building them. Which wheel: install.wheel (a file or URL) when given, else the per-commit wheel of this
exact sha. The full 40-character sha matters: anything shorter is ignored by setup.py, which then guesses
a base from the current branch (empty on a detached worktree) and silently takes the nightly wheel.
"""

from __future__ import annotations

import re

from abbisect.environment.base import (
    BuildContext,
    Step,
    checkout_target,
    no_facts,
    options,
    pip_install,
    post_steps,
    venv_steps,
)
from abbisect.recipe import PrecompiledInstall

name = "precompiled"
needs_source_after_build = True  # the venv runs the commit's worktree (see store.needs_source)
facts = no_facts


def _opts(ctx: BuildContext) -> PrecompiledInstall:
    return options(ctx, PrecompiledInstall)


def build_env(ctx: BuildContext) -> dict[str, str]:
    env = {"VLLM_USE_PRECOMPILED": "1", **ctx.install.env}
    wheel = _opts(ctx).wheel
    if wheel:
        env["VLLM_PRECOMPILED_WHEEL_LOCATION"] = wheel
    elif re.fullmatch(r"[0-9a-f]{40}", ctx.sha):
        env["VLLM_PRECOMPILED_WHEEL_COMMIT"] = ctx.sha
    else:  # --dry-run of a remote repository: the sha is only known once fetched
        env["VLLM_PRECOMPILED_WHEEL_COMMIT"] = "<full 40-character sha of the commit>"
    return env


def blocker(ctx: BuildContext) -> str | None:
    """A setup.py older than VLLM_PRECOMPILED_WHEEL_COMMIT would ignore the sha and take the nightly wheel."""
    setup = ctx.read_package("setup.py")
    if _opts(ctx).wheel or setup is None or "VLLM_PRECOMPILED_WHEEL_COMMIT" in setup:
        return None
    return (f"setup.py of {ctx.sha[:12]} does not read VLLM_PRECOMPILED_WHEEL_COMMIT (older than vLLM #29838): "
            "it would build against the nightly wheel; use strategy vllm-wheels")


def key_inputs(ctx: BuildContext) -> dict[str, object]:
    return {"sha": ctx.sha}


def steps(ctx: BuildContext) -> list[Step]:
    return [*venv_steps(ctx),
            pip_install(ctx, "-e", checkout_target(ctx), *ctx.install.pins, desc="install checkout with precompiled libraries",
                        env=build_env(ctx)),
            *post_steps(ctx)]
