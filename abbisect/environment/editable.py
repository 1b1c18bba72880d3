"""`editable`: install the commit's own checkout (optionally a subdir, with extras) plus pins."""

from __future__ import annotations

from abbisect.environment.base import BuildContext, Step, pip_install, post_steps, python_version, venv_step

name = "editable"


def key_inputs(ctx: BuildContext) -> dict[str, object]:
    i = ctx.install
    return {"sha": ctx.sha, "subdir": ctx.install_subdir, "extras": sorted(i.extras), "pins": list(i.pins),
            "python": python_version(i), "find_links": i.find_links, "index": [i.index_url, *i.extra_index_urls],
            "env": i.env, "remove": i.remove, "shims": i.dist_shims}


def steps(ctx: BuildContext) -> list[Step]:
    target = str(ctx.package_dir)
    if ctx.install.extras:
        target += f"[{','.join(ctx.install.extras)}]"
    return [venv_step(ctx), pip_install(ctx, "-e", target, *ctx.install.pins, desc="install checkout",
                                        env=dict(ctx.install.env)), *post_steps(ctx)]
