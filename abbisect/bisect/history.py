"""What git knows about the candidates: the bisect range as a `Graph`, commit metadata, GitHub links."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from abbisect.bisect.search import Graph
from abbisect.errors import UserError

PathLike = str | Path


def _git(repo_path: PathLike, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo_path), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def resolve(repo_path: PathLike, ref: str) -> str:
    """Full sha of the commit `ref` names; UserError when it names none."""
    proc = subprocess.run(
        ["git", "-C", str(repo_path), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise UserError(f"{ref!r} is not a commit in {repo_path}")
    return proc.stdout.strip()


def is_ancestor(repo_path: PathLike, ancestor: str, descendant: str) -> bool:
    proc = subprocess.run(
        ["git", "-C", str(repo_path), "merge-base", "--is-ancestor", ancestor, descendant],
        capture_output=True,
        check=False,
    )
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"git merge-base --is-ancestor {ancestor} {descendant} failed")
    return proc.returncode == 0


def candidate_graph(
    repo_path: PathLike,
    new_ref: str,
    old_refs: list[str] | tuple[str, ...],
    first_parent: bool = False,
    pathspec: list[str] | None = None,
) -> Graph:
    """The commits `git bisect start <new> <old>...` would consider: reachable from new, not from any old.

    With `first_parent` only the mainline of new (merges are single steps).  With a pathspec the
    graph is git's own simplified walk (a merge that took one side's version of the paths keeps only
    that parent); commits in it that do not touch the paths are marked `treesame`: git walks through
    them but never counts or tests them -- and that holds for the tip too.  One difference: git
    redoes the merge simplification at every step, and a merge that looked like one side at the
    start can become a candidate once that side is known old; we keep the first walk's graph.
    """
    new = resolve(repo_path, new_ref)
    olds = [resolve(repo_path, ref) for ref in old_refs]
    if not olds:
        raise UserError("bisecting needs at least one old commit")
    for ref, old in zip(old_refs, olds, strict=True):
        # git would first ask for its merge bases to be tested; we ask for a proper range instead.
        if not is_ancestor(repo_path, old, new):
            raise UserError(
                f"old {ref!r} is not an ancestor of new {new_ref!r}; "
                f"use their merge base (git merge-base {ref} {new_ref}) as the old end"
            )
    if new in olds:
        raise UserError(f"new {new_ref!r} is also given as old: nothing to bisect")
    revs = [*(["--first-parent"] if first_parent else []), new, *(f"^{old}" for old in olds)]
    paths = ["--", *pathspec] if pathspec else []
    # --sparse keeps the commits that do not touch the paths (git's bisect walk has them too);
    # without a pathspec it changes nothing.
    rows = [
        line.split()
        for line in _git(repo_path, "rev-list", "--parents", "--sparse", *revs, *paths).splitlines()
    ]
    parents = {sha: tuple(ps[:1]) if first_parent else tuple(ps) for sha, *ps in rows}
    treesame: set[str] = set()
    if pathspec:
        touching = set(_git(repo_path, "rev-list", *revs, *paths).split())
        treesame = set(parents) - touching
    return Graph.from_parents(parents, [row[0] for row in reversed(rows)], treesame)


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    short: str
    subject: str
    author: str
    author_email: str
    date: str  # author date, ISO 8601
    pr: int | None
    parents: tuple[str, ...]


_PR_PATTERNS = (
    re.compile(r"^Merge pull request #(\d+)\b"),
    re.compile(r"\(#(\d+)\)\s*$"),
)


def pr_number(subject: str) -> int | None:
    """The pull-request number a squash or merge subject names ("Fix foo (#35228)")."""
    for pattern in _PR_PATTERNS:
        match = pattern.search(subject)
        if match:
            return int(match.group(1))
    return None


def commit_info(repo_path: PathLike, sha: str) -> CommitInfo:
    fmt = "%H%x00%h%x00%s%x00%an%x00%ae%x00%aI%x00%P"
    out = _git(repo_path, "show", "-s", f"--format={fmt}", resolve(repo_path, sha), "--")
    full, short, subject, author, email, date, parents = out.rstrip("\n").split("\x00")
    return CommitInfo(full, short, subject, author, email, date, pr_number(subject), tuple(parents.split()))


_GITHUB_REMOTE = re.compile(
    r"^(?:https?://(?:[^@/]+@)?github\.com/|git@github\.com:|ssh://git@github\.com(?::\d+)?/)"
    r"(?P<owner>[^/]+)/(?P<repo>[^/]+?)(?:\.git)?/?$"
)


def github_repo(repo_path: PathLike) -> tuple[str, str] | None:
    """(owner, name) of the GitHub remote: origin when it is on GitHub, else the first one that is."""
    names = _git(repo_path, "remote").split()
    names.sort(key=lambda name: name != "origin")
    for name in names:
        url = _git(repo_path, "remote", "get-url", name).strip()
        match = _GITHUB_REMOTE.match(url)
        if match:
            return match["owner"], match["repo"]
    return None


def github_urls(repo_path: PathLike, sha: str, base_sha: str | None = None) -> dict[str, str]:
    """{"commit": ..., "compare": ...} links on GitHub ("compare" only with a base), else {}."""
    found = github_repo(repo_path)
    if found is None:
        return {}
    base = f"https://github.com/{found[0]}/{found[1]}"
    urls = {"commit": f"{base}/commit/{sha}"}
    if base_sha:
        urls["compare"] = f"{base}/compare/{base_sha}...{sha}"
    return urls
