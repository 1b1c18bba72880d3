"""The one door for the environment of every process abbisect starts for a build, a server or a tool.

`git bisect run` exports GIT_DIR (and a worktree may export GIT_WORK_TREE / GIT_INDEX_FILE); passed on,
they make an engine's own `git rev-parse` or a build's setuptools-scm read abbisect's repository instead
of the commit's tree. A venv abbisect runs from must not leak into the venv it launches either.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

# Variables of the caller's Python that would redirect the child's imports.
_PYTHON_VARS = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")


def is_git_var(name: str) -> bool:
    """Git's own per-repository variables (GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE, GIT_PREFIX, …).

    Identity and config variables a user sets on purpose (GIT_AUTHOR_*, GIT_COMMITTER_*, GIT_SSH*,
    GIT_CONFIG_*) are kept: they do not point at a repository.
    """
    keep = ("GIT_AUTHOR_", "GIT_COMMITTER_", "GIT_SSH", "GIT_CONFIG", "GIT_TERMINAL_PROMPT", "GIT_ASKPASS",
            "GIT_HTTP_", "GIT_TRACE")
    return name.startswith("GIT_") and not name.startswith(keep)


def scrubbed_env(extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) without git's repository variables and the caller's
    Python settings, with `extra` on top."""
    src = os.environ if base is None else base
    env = {k: v for k, v in src.items() if k not in _PYTHON_VARS and not is_git_var(k)}
    env.update(extra or {})
    return env


class GitError(RuntimeError):
    """A git command failed; the message is git's last line of stderr."""


def git(repo: str | Path, *args: str) -> str:
    """`git -C repo args…` with a scrubbed environment; stdout, or GitError with git's own message.

    Plain git rather than GitPython for anything that touches worktrees: once a sparse worktree moved
    `core.bare` into `config.worktree`, GitPython takes a bare clone for a checkout and runs git one
    folder too high.
    """
    proc = subprocess.run(["git", "-C", str(repo), *args], check=False, capture_output=True, text=True,
                          env=scrubbed_env())
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise GitError(f"git {' '.join(args[:2])} failed: {lines[-1] if lines else f'exit {proc.returncode}'}")
    return proc.stdout
