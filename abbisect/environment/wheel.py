"""`wheel`: install a published build instead of the checkout (install.package, install.wheel, or a
per-commit wheel URL from install.wheel_url_template with {sha}, {short} (git's abbreviation), {short:N}
and {version} filled in).

The key holds the resolved requirement, not the sha: commits that map to the same release share one venv.
"""

from __future__ import annotations

import re

from abbisect.environment.base import (
    BuildContext,
    Step,
    commit_values,
    fill,
    no_facts,
    options,
    pip_install,
    post_steps,
    venv_steps,
)
from abbisect.recipe import WheelInstall

name = "wheel"
facts = no_facts


def _opts(ctx: BuildContext) -> WheelInstall:
    return options(ctx, WheelInstall)
needs_source_after_build = False  # see store.needs_source


def requirement(ctx: BuildContext) -> str:
    i = _opts(ctx)
    if i.wheel_url_template:
        return fill(i.wheel_url_template, commit_values(ctx))
    return i.wheel or i.package or ""


def key_inputs(ctx: BuildContext) -> dict[str, object]:
    return {"requirement": requirement(ctx)}  # not the sha: commits sharing a published build share a venv


def blocker(ctx: BuildContext) -> str | None:
    left = re.findall(r"\{(?:sha|short|version)(?::\w+)?\}", requirement(ctx))
    return f"cannot fill {', '.join(left)} for {ctx.sha[:12]} from its tree" if left else None


def steps(ctx: BuildContext) -> list[Step]:
    return [*venv_steps(ctx),
            pip_install(ctx, requirement(ctx), *ctx.install.pins, desc="install the published build",
                        env=dict(ctx.install.env)),
            *post_steps(ctx)]
