"""`editable`: install the commit's own checkout (optionally a subdir, with extras) plus pins.

With install.read_pins the engine's heavy pins (compiled kernels, torch) are read from the commit's own
pyproject.toml and installed first, as a step of their own; they go into the key as `heavy`, so commits
whose pins match share the heavy part (one uv cache entry, hardlinked) and the report can say which pins
changed between two commits.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from abbisect.environment.base import BuildContext, Step, checkout_target, pip_install, post_steps, venv_steps

name = "editable"

# The compiled dependencies SGLang asserts at start (assert_pkg_version); vLLM's are in requirements/*.txt.
HEAVY = ("sgl-kernel", "sglang-kernel", "flashinfer-python", "flashinfer-cubin", "torch")


def _norm(req: str) -> str:
    return re.split(r"[\s<>=!~;\[@]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def read_heavy_pins(package_dir: Path) -> list[str] | None:
    """The commit's pinned heavy requirements, or None when it has no readable pyproject.toml."""
    try:
        data = tomllib.loads((package_dir / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    project = data.get("project", {})
    reqs = list(project.get("dependencies", []))
    for group in project.get("optional-dependencies", {}).values():
        reqs += group
    return sorted({r.split(";")[0].strip() for r in reqs if _norm(r) in HEAVY and "==" in r})


def key_inputs(ctx: BuildContext) -> dict[str, object]:
    inputs: dict[str, object] = {"sha": ctx.sha}
    if ctx.install.read_pins:
        inputs["heavy"] = read_heavy_pins(ctx.package_dir)
    return inputs


def steps(ctx: BuildContext) -> list[Step]:
    out = venv_steps(ctx)
    if ctx.install.read_pins:
        heavy = read_heavy_pins(ctx.package_dir)
        if heavy:
            out.append(pip_install(ctx, *heavy, desc="install the commit's heavy pins", env=dict(ctx.install.env)))
    out.append(pip_install(ctx, "-e", checkout_target(ctx), *ctx.install.pins, desc="install checkout", env=dict(ctx.install.env)))
    return [*out, *post_steps(ctx)]
