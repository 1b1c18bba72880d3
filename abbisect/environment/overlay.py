"""`overlay`: a published wheel's compiled parts plus the commit's own Python source, no compiler.

Installs the wheel (install.wheel, a file, or install.package, name==version) with its dependencies,
then lays the checkout's pure-Python files over the installed package: the wheel's .so files stay,
every .py comes from the commit. Fits engines whose compiled ABI did not change across the range
(e.g. a release's CPU build and the commits around it).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from abbisect.environment.base import (
    BuildContext,
    Step,
    never_blocked,
    no_facts,
    options,
    pip_install,
    post_steps,
    venv_steps,
)
from abbisect.recipe import OverlayInstall

name = "overlay"
blocker = never_blocked
facts = no_facts


def _opts(ctx: BuildContext) -> OverlayInstall:
    return options(ctx, OverlayInstall)
needs_source_after_build = False  # see store.needs_source

# Runs inside the venv. Files are unlinked before being written because uv installs by hardlinking
# from its cache: writing through the link would change the cached wheel for every other venv.
# Unchanged files are left alone, so they stay hardlinks and cost no disk.
OVERLAY = r"""
import os, pathlib, shutil, sys, sysconfig
src = pathlib.Path(sys.argv[1])
site = pathlib.Path(sysconfig.get_paths()["purelib"])
compiled = (".so", ".pyd", ".dylib")
done = []
for pkg in sorted(p for p in src.iterdir() if (p / "__init__.py").is_file() and (site / p.name).is_dir()):
    wanted, changed, removed = set(), 0, 0
    for f in pkg.rglob("*"):
        if f.is_dir() or "__pycache__" in f.parts or f.name.endswith(compiled):
            continue
        rel = f.relative_to(src)
        wanted.add(rel)
        dst = site / rel
        if dst.is_file() and dst.read_bytes() == f.read_bytes():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.exists() or dst.is_symlink():
            dst.unlink()
        shutil.copyfile(f, dst)
        changed += 1
    for f in (site / pkg.name).rglob("*.py"):
        if f.relative_to(site) not in wanted:
            f.unlink()
            removed += 1
    done.append(f"{pkg.name}: {changed} file(s) from the commit, {removed} removed")
if not done:
    sys.exit(f"overlay: no package of {src} is installed in {site}")
print("overlay:", "; ".join(done))
"""


def requirement(ctx: BuildContext) -> str:
    return _opts(ctx).wheel or _opts(ctx).package or ""


def _wheel_digest(path: str) -> str:
    p = Path(path)
    if not p.is_file():
        return path
    h = hashlib.sha256()
    with p.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def key_inputs(ctx: BuildContext) -> dict[str, object]:
    return {"sha": ctx.sha, "base": _wheel_digest(requirement(ctx))}


def steps(ctx: BuildContext) -> list[Step]:
    return [*venv_steps(ctx),
            pip_install(ctx, requirement(ctx), *ctx.install.pins, desc="install the compiled base",
                        env=dict(ctx.install.env)),
            Step((ctx.python, "-c", OVERLAY, str(ctx.package_dir)), "overlay the commit's Python source"),
            *post_steps(ctx)]
