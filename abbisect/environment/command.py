"""`command`: the user's own shell commands build the venv ({python}, {venv}, {src}, {uv}, {sha} filled in)."""

from __future__ import annotations

from abbisect.environment.base import (
    BuildContext,
    Step,
    fill,
    never_blocked,
    no_facts,
    options,
    post_steps,
    venv_steps,
)
from abbisect.recipe import CommandInstall

name = "command"
needs_source_after_build = True  # the venv runs the commit's worktree (see store.needs_source)
blocker = never_blocked
facts = no_facts


def _opts(ctx: BuildContext) -> CommandInstall:
    return options(ctx, CommandInstall)


def key_inputs(ctx: BuildContext) -> dict[str, object]:
    return {"sha": ctx.sha}


def steps(ctx: BuildContext) -> list[Step]:
    values = {"python": ctx.python, "venv": str(ctx.venv), "src": str(ctx.package_dir), "uv": ctx.uv, "sha": ctx.sha}
    env = {**ctx.install.env, "VIRTUAL_ENV": str(ctx.venv)}
    user = [Step(("bash", "-c", fill(cmd, values)), f"command {n + 1}", env, shell=True)
            for n, cmd in enumerate(_opts(ctx).commands)]
    return [*venv_steps(ctx), *user, *post_steps(ctx)]
