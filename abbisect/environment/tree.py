"""The commit's tree, as the install strategies read it: the same answers for a plan and for the build.

A plan (`--dry-run`, the trial cache's key) has the repository and a sha; a build has the commit's
worktree. Both read files with `git show <sha>:<path>` from whichever git directory holds the sha, so
the env key a plan prints is the key the build uses. A folder that is not a git checkout of the sha
(a hand-made tree in a test) is read from the filesystem.
"""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from abbisect.infra import git

SHA_RE = re.compile(r"[0-9a-f]{40}")


def _git(gitdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return git.call(args, gitdir)


@functools.lru_cache(maxsize=4096)
def _has_commit(gitdir: Path, sha: str) -> bool:
    if not SHA_RE.fullmatch(sha) or not gitdir.exists():
        return False
    return _git(gitdir, "cat-file", "-e", f"{sha}^{{commit}}").returncode == 0


@functools.lru_cache(maxsize=4096)
def _show(gitdir: Path, sha: str, path: str) -> str | None:
    out = _git(gitdir, "show", f"{sha}:{path}")
    return out.stdout if out.returncode == 0 else None


@functools.lru_cache(maxsize=1024)
def _rev_parse_short(gitdir: Path, sha: str) -> str | None:
    out = _git(gitdir, "rev-parse", "--short", sha)
    return out.stdout.strip() if out.returncode == 0 else None


@functools.lru_cache(maxsize=1024)
def _describe(gitdir: Path, sha: str) -> str | None:
    out = _git(gitdir, "describe", "--tags", "--long", sha)
    return out.stdout.strip() if out.returncode == 0 else None


@dataclass(frozen=True)
class CommitTree:
    """Files and git facts of one commit. `root` is a git directory (repo, bare clone or worktree) or,
    for hand-made trees, a plain folder; `prefix` is the package's subdir inside the commit."""

    root: Path
    sha: str

    @property
    def in_git(self) -> bool:
        return _has_commit(self.root, self.sha)

    def read(self, rel: str) -> str | None:
        """The text of `rel` (a path from the commit's top) in this commit, or None if it has none."""
        rel = rel.strip("/")
        if self.in_git:
            return _show(self.root, self.sha, rel)
        try:
            return (self.root / rel).read_text()
        except (OSError, UnicodeDecodeError):
            return None

    def short(self, width: int | None = None) -> str:
        """An abbreviation of the sha: `width` characters, else git's own choice for this repository."""
        if width:
            return self.sha[:width]
        if self.in_git:
            found = _rev_parse_short(self.root, self.sha)
            if found:
                return found
        return self.sha[:7]  # git's minimum, for a tree without a repository

    def describe(self) -> str | None:
        """`git describe --tags` of the commit (None without a reachable tag)."""
        return _describe(self.root, self.sha) if self.in_git else None

    def first_parents(self, limit: int) -> list[str]:
        """The commit and its first-parent ancestors, nearest first."""
        if not self.in_git:
            return [self.sha]
        out = _git(self.root, "rev-list", "--first-parent", f"--max-count={limit}", self.sha)
        return out.stdout.split() if out.returncode == 0 else [self.sha]

    def at(self, sha: str) -> CommitTree:
        return CommitTree(self.root, sha)
