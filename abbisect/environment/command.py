"""`command`: the user's own shell commands build the venv ({python}, {venv}, {src}, {uv}, {sha} filled in)."""

from __future__ import annotations

from abbisect.environment.base import BuildContext, Step, fill, post_steps, venv_steps

name = "command"


def key_inputs(ctx: BuildContext) -> dict[str, object]:
    return {"sha": ctx.sha}


def steps(ctx: BuildContext) -> list[Step]:
    values = {"python": ctx.python, "venv": str(ctx.venv), "src": str(ctx.package_dir), "uv": ctx.uv, "sha": ctx.sha}
    env = {**ctx.install.env, "VIRTUAL_ENV": str(ctx.venv)}
    user = [Step(("bash", "-c", fill(cmd, values)), f"command {n + 1}", env, shell=True)
            for n, cmd in enumerate(ctx.install.commands)]
    return [*venv_steps(ctx), *user, *post_steps(ctx)]
