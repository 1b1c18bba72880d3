"""What goes into a venv after the engine, whatever the strategy: a side's pins, a dependency's commit.

This is how a dependency becomes the one variable of an A/B or a bisect: the engine is built the same
way on every side, then `pins` (requirements such as `deep-gemm==2.1.0`) and/or one commit of a
dependency's own repository are installed over it. Both are part of the env key, so each variant has its
own venv and its own cached trial.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from abbisect import checkout
from abbisect.environment.base import BuildContext, Step, fill, pip_install
from abbisect.infra.cache import Cache
from abbisect.infra.progress import Say


@dataclass(frozen=True)
class DependencyCommit:
    """A commit of a dependency's own repository that a trial installs after the engine (bisect.over): the local
    repository holding it, the sha, how to install its worktree (default: uv pip install it) and their environment."""

    repo: str
    sha: str
    commands: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AfterEngine:
    pins: tuple[str, ...] = ()
    dep_sha: str | None = None  # a dependency commit, built from `dep_source` (its worktree)
    dep_source: Path | None = None
    commands: tuple[str, ...] = ()  # how to install the dependency's worktree (default: uv pip install it)
    env: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.pins or self.dep_sha)

    def key_inputs(self) -> dict[str, object]:
        """Paths are left out: the same commit checked out elsewhere is the same venv."""
        return {"pins": list(self.pins), "dep_sha": self.dep_sha, "commands": list(self.commands), "env": self.env}

    def steps(self, ctx: BuildContext) -> list[Step]:
        out: list[Step] = []
        if self.dep_sha:
            src = str(self.dep_source or f"<worktree of {self.dep_sha[:10]}>")
            if self.commands:
                # The same placeholders as the `command` strategy; {src} is the dependency's worktree here.
                values = {"python": ctx.python, "uv": ctx.uv, "venv": str(ctx.venv), "src": src, "sha": self.dep_sha}
                env = {**self.env, "VIRTUAL_ENV": str(ctx.venv)}
                for cmd in self.commands:
                    out.append(Step(("bash", "-c", f"cd {shlex.quote(src)} && {fill(cmd, values)}"),
                                    f"dependency {self.dep_sha[:10]}: {cmd}", env, shell=True))
            else:
                out.append(pip_install(ctx, src, desc=f"install dependency commit {self.dep_sha[:10]}", env=dict(self.env)))
        if self.pins:
            out.append(pip_install(ctx, *self.pins, desc=f"pin {' '.join(self.pins)}", env=dict(self.env)))
        return out


def after_engine(pins: list[str] | tuple[str, ...], dependency: DependencyCommit | None, cache: Cache | Path,
                 planning: bool = False, say: Say | None = None) -> AfterEngine | None:
    """A trial's pins and dependency commit as build input; `planning` computes keys without checking the
    dependency out."""
    if not pins and dependency is None:
        return None
    if dependency is None:
        return AfterEngine(tuple(pins))
    source = None if planning else checkout.worktree(Path(dependency.repo), dependency.sha, cache, say=say)
    return AfterEngine(tuple(pins), dependency.sha, source, tuple(dependency.commands), dict(dependency.env))


def requirement_name(req: str) -> str:
    """The canonical distribution name a requirement names (`Deep_GEMM>=2` → `deep-gemm`)."""
    return canonicalize_name(re.split(r"[\s<>=!~;\[@(]", req.strip(), maxsplit=1)[0])
