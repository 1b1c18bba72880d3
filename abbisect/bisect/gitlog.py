"""What git's log says about the candidates: the bisect range as a `Graph`, commit metadata, GitHub links, the
releases and backports that carry a commit. (The toy histories abbisect builds itself are builtin/history.py.)"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from abbisect.bisect.search import Graph
from abbisect.checkout import Revision
from abbisect.infra import git
from abbisect.infra.errors import UserError
from abbisect.infra.git import GitError
from abbisect.infra.git import git as _git
from abbisect.infra.serial import NoneLeftOut

PathLike = str | Path


def resolve(repo_path: PathLike, ref: str) -> str:
    """Full sha of the commit `ref` names; UserError when it names none."""
    sha = git.resolve(repo_path, ref)
    if sha is None:
        raise UserError(f"{ref!r} is not a commit in {repo_path}")
    return sha


def has_commit(repo_path: PathLike, sha: str) -> bool:
    return git.succeeds(repo_path, "cat-file", "-e", f"{sha}^{{commit}}")


def is_ancestor(repo_path: PathLike, ancestor: str, descendant: str) -> bool:
    proc = git.call(["merge-base", "--is-ancestor", ancestor, descendant], repo_path)
    if proc.returncode not in (0, 1):
        raise GitError(f"git merge-base --is-ancestor {ancestor} {descendant} failed")
    return proc.returncode == 0


def candidate_graph(
    repo_path: PathLike,
    new_ref: str,
    old_refs: list[str] | tuple[str, ...],
    first_parent: bool = False,
    pathspec: list[str] | None = None,
    unrelated_olds: bool = False,
) -> Graph:
    """The commits `git bisect start <new> <old>...` would consider: reachable from new, not from any old.

    With `first_parent` only the mainline of new (merges are single steps).  With a pathspec the
    graph is git's own simplified walk (a merge that took one side's version of the paths keeps only
    that parent); commits in it that do not touch the paths are marked `treesame`: git walks through
    them but never counts or tests them -- and that holds for the tip too.  With `unrelated_olds` an
    old end need not be an ancestor of new (git's state once their merge base was tested old: every
    ancestor of each old end is excluded).  One difference: git
    redoes the merge simplification at every step, and a merge that looked like one side at the
    start can become a candidate once that side is known old; we keep the first walk's graph.
    """
    new = resolve(repo_path, new_ref)
    olds = [resolve(repo_path, ref) for ref in old_refs]
    if not olds:
        raise UserError("bisecting needs at least one old commit")
    for ref, old in zip(old_refs, olds, strict=True):
        # git would first ask for its merge bases to be tested; we ask for a proper range instead.
        if not unrelated_olds and not is_ancestor(repo_path, old, new):
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


def touched_paths(repo_path: PathLike, shas: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The paths each commit changes against its first parent (a merge: what it brought in), in one git call."""
    if not shas:
        return {}
    out = _git(repo_path, "log", "--no-walk=unsorted", "--first-parent", "-m", "--name-only", "--format=%x00%H",
               *shas, "--")
    touched: dict[str, list[str]] = {}
    for block in out.split("\x00")[1:]:
        sha, _, names = block.partition("\n")
        touched.setdefault(sha.strip(), []).extend(n for n in names.splitlines() if n.strip())
    return {sha: tuple(dict.fromkeys(paths)) for sha, paths in touched.items()}


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


@dataclass(frozen=True)
class CommitLinks(NoneLeftOut):
    """A commit on GitHub: its page, its compare view from a base, its pull request and, for a bisect's answer,
    its parent's page. None where there is none (no GitHub remote, git cannot say, no base, no PR, not an
    answer): results.json and bisect.json leave the key out."""

    commit: str | None = None
    compare: str | None = None
    pr: str | None = None
    parent: str | None = None  # the page of the commit a bisect's answer is measured against


def github_links(repo_path: PathLike, sha: str, base_sha: str | None = None) -> CommitLinks:
    """Commit, compare (from `base_sha`) and PR links of a commit when the repository has a GitHub remote
    (`github_repo`), else none (also when git cannot say: a report without links beats no report)."""
    try:
        found = github_repo(repo_path)
        pr = pr_number(commit_info(repo_path, sha).subject) if found else None
    except (RuntimeError, OSError, UserError):
        return CommitLinks()
    if found is None:
        return CommitLinks()
    home = f"https://github.com/{found[0]}/{found[1]}"
    return CommitLinks(f"{home}/commit/{sha}", f"{home}/compare/{base_sha}...{sha}" if base_sha else None,
                       f"{home}/pull/{pr}" if pr else None)


def merge_bases(repo_path: PathLike, a: str, b: str) -> list[str]:
    """Every best common ancestor of a and b (`git merge-base --all`), empty when they share none."""
    proc = git.call(["merge-base", "--all", a, b], repo_path)
    if proc.returncode not in (0, 1):
        raise GitError(f"git merge-base --all {a} {b} failed: {proc.stderr.strip()}")
    return proc.stdout.split()


# -- what git bisect is testing ----------------------------------------------------------------------


def _rev(args: list[str], environ: dict[str, str]) -> str | None:
    proc = git.call(args, base=environ)
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def bisect_under_way(environ: dict[str, str], cwd: PathLike) -> tuple[str, str] | None:
    """(git directory, commit git is testing) when a `git bisect` is running here, else None.

    `git bisect run` exports GIT_DIR in a bare repository (and may elsewhere); in a non-bare one or a
    linked worktree the script runs at the top of the working tree.  In a bare repository (or after
    `--no-checkout`) git moves BISECT_HEAD, not HEAD, so BISECT_HEAD wins when it exists.
    """
    git_dir = environ.get("GIT_DIR")
    if git_dir:
        where = ["--git-dir", str(Path(cwd, git_dir))]
    else:
        where = ["-C", str(cwd)]
    found = _rev([*where, "rev-parse", "--absolute-git-dir"], environ)
    if found is None:
        return None
    start = _rev([*where, "rev-parse", "--git-path", "BISECT_START"], environ)
    if start is None or (not Path(cwd, start).is_file() and not Path(found, "BISECT_START").is_file()):
        return None
    sha = _rev([*where, "rev-parse", "--verify", "-q", "BISECT_HEAD^{commit}"], environ) or \
        _rev([*where, "rev-parse", "--verify", "-q", "HEAD^{commit}"], environ)
    return (found, sha) if sha else None


# -- the same change elsewhere: backports and releases ------------------------------------------------

_CHERRY = re.compile(r"\(cherry picked from commit ([0-9a-f]{7,40})\)")
_VERSION_TAG = re.compile(r"^v?(\d+(?:\.\d+)*)(?:[.-]?(a|b|rc|post|dev)\.?(\d+))?$")


def cherry_picked_from(message: str) -> list[str]:
    """The shas a commit message's `(cherry picked from commit …)` trailers name (git cherry-pick -x)."""
    return _CHERRY.findall(message)


def version_key(tag: str) -> tuple | None:
    """A sort key for a release-looking tag ("v0.5.19", "0.11.2rc1"), None for any other tag."""
    m = _VERSION_TAG.match(tag)
    if not m:
        return None
    pre = {"dev": -3, "a": -2, "b": -1, "rc": 0, None: 1, "post": 2}[m.group(2)]
    return (tuple(int(x) for x in m.group(1).split(".")), pre, int(m.group(3) or 0))


def release_tags(tags: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The release-looking tags among `tags`, oldest version first."""
    keyed = [(k, t) for t in tags if (k := version_key(t)) is not None]
    return tuple(t for _, t in sorted(keyed))


def first_release(tags: list[str] | tuple[str, ...]) -> str | None:
    """The lowest release-looking tag among `tags` (those that contain a commit): its first release."""
    ordered = release_tags(tags)
    return ordered[0] if ordered else None


@dataclass(frozen=True)
class LogEntry:
    sha: str
    subject: str
    body: str


def match_carriers(origins: set[str], pr: int | None, patch_ids: dict[str, str],
                   found_patch_ids: set[str], entries: list[LogEntry]) -> list[tuple[str, str]]:
    """(sha, how) for each entry that carries one of `origins`' change: a cherry-pick trailer naming
    one of them, the same pull-request number in its subject, or the same `git patch-id --stable`.

    Pure: `patch_ids` maps entry shas to their patch ids (those computed), `found_patch_ids` are the
    origins' own.
    """
    out: list[tuple[str, str]] = []
    for e in entries:
        if e.sha in origins:
            continue
        picked = [s for s in cherry_picked_from(e.body) if any(o.startswith(s) for o in origins)]
        if picked:
            out.append((e.sha, f"cherry-pick of {picked[0][:10]}"))
        elif pr is not None and pr_number(e.subject) == pr and not e.subject.startswith("Revert"):
            out.append((e.sha, f"same PR #{pr}"))
        elif patch_ids.get(e.sha) in found_patch_ids:
            out.append((e.sha, "same patch id"))
    return out


@dataclass(frozen=True)
class Carrier:
    sha: str
    subject: str
    how: str  # why it counts as the same change
    branches: tuple[str, ...]
    first_release: str | None


@dataclass(frozen=True)
class Releases:
    """Where a found commit's change went: releases containing it and the commits carrying it elsewhere."""

    sha: str
    pr: int | None
    first_release: str | None
    branches: tuple[str, ...]
    carriers: tuple[Carrier, ...]
    releases: tuple[str, ...] = ()  # every release tag that contains it, oldest first


def _containing(repo_path: PathLike, sha: str) -> tuple[list[str], list[str]]:
    """(tags, full branch refnames) that contain sha."""
    tags = _git(repo_path, "tag", "--contains", sha).split()
    refs = _git(repo_path, "for-each-ref", "--contains", sha, "--format=%(refname)", "refs/heads", "refs/remotes")
    return tags, [r for r in refs.split() if not r.endswith("/HEAD")]


def rank_branches(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Mainlines first, then release branches, then the rest: the order a reader looks for them in."""
    def rank(name: str) -> tuple[int, str]:
        base = name.split("/", 1)[1] if name.startswith("origin/") else name
        return (0 if base in ("main", "master") else 1 if re.match(r"releases?[/-]", base) else 2, name)
    return tuple(sorted(names, key=rank))


def _short(refname: str) -> str:
    for prefix in ("refs/heads/", "refs/remotes/"):
        if refname.startswith(prefix):
            return refname[len(prefix):]
    return refname


def _patch_ids(repo_path: PathLike, shas: list[str], first_parent_diff: bool = False) -> dict[str, str]:
    """sha -> `git patch-id --stable` of its change (for a merge: against its first parent)."""
    if not shas:
        return {}
    opts = ["--first-parent", "-m"] if first_parent_diff else []
    diff = git.call(["log", "--no-walk=unsorted", "-p", "--format=commit %H", *opts, *shas], repo_path,
                    text=False).stdout
    out = git.call(["patch-id", "--stable"], repo_path, input=diff).stdout
    return {sha: pid for pid, sha in (line.split() for line in out.splitlines() if line.strip())}


def releases(repo_path: PathLike, sha: str) -> Releases:
    """Which releases contain `sha`, and which commits elsewhere (release branches, tags) carry the same
    change: a merge's change is its pull request's, so the commits it merged count as origins too."""
    info = commit_info(repo_path, sha)
    origins = {info.sha}
    if len(info.parents) > 1:
        origins |= set(_git(repo_path, "rev-list", f"{info.parents[0]}..{info.sha}").split())
    tags, branches = _containing(repo_path, sha)
    # A copy is made after its original: only commits committed since (a week of clock skew allowed) and
    # not below the found one are read -- text (trailers, PR numbers) of all, patch ids of those off the
    # branches that contain it (the release branches), which are few.
    since = int(_git(repo_path, "show", "-s", "--format=%ct", info.sha).strip()) - 7 * 86400
    window = [f"--since={since}", "--all"]
    log = _git(repo_path, "log", *window, "--format=%H%x00%s%x00%b%x1e", f"^{info.sha}")
    entries = [LogEntry(*rec.strip("\n").split("\x00", 2)) for rec in log.split("\x1e") if rec.strip()]
    off = set(_git(repo_path, "rev-list", *window, "--not", info.sha, *branches).split())
    mine = _patch_ids(repo_path, [info.sha], first_parent_diff=True)
    mine.update(_patch_ids(repo_path, sorted(origins - {info.sha})))
    theirs = _patch_ids(repo_path, sorted(off))
    found = match_carriers(origins, info.pr, theirs, set(mine.values()), entries)
    # Seen from a backport: the original its own trailer names (older than it, so outside the window).
    message = _git(repo_path, "show", "-s", "--format=%B", info.sha)
    for picked in cherry_picked_from(message):
        if has_commit(repo_path, picked):
            full = resolve(repo_path, picked)
            found = [(full, "the original it was cherry-picked from"), *[f for f in found if f[0] != full]]
    carriers = []
    for c_sha, how in found:
        c_tags, c_branches = _containing(repo_path, c_sha)
        if is_ancestor(repo_path, info.sha, c_sha):
            continue  # a descendant on the found commit's own line (a revert, a reapply): not a backport
        carriers.append(Carrier(c_sha, commit_info(repo_path, c_sha).subject, how,
                                rank_branches([_short(b) for b in c_branches]), first_release(c_tags)))
    return Releases(info.sha, info.pr, first_release(tags), rank_branches([_short(b) for b in branches]),
                    tuple(carriers), release_tags(tags))


def order_ends(repo: Path, good: Revision,
               bad: Revision) -> tuple[Revision, Revision, tuple[str, ...]]:
    """(old, new, merge bases): the end that is an ancestor of the other is old, whichever name the user
    gave it, and there are no merge bases to test.  Ends on different branches (a release tag and main)
    come back as (good, bad, their merge bases): the driver tests the merge base first, as git does."""
    if good.sha == bad.sha:
        raise UserError(f"--good {good.ref} and --bad {bad.ref} are the same commit {good.short}")
    if is_ancestor(repo, good.sha, bad.sha):
        return good, bad, ()
    if is_ancestor(repo, bad.sha, good.sha):
        return bad, good, ()
    bases = tuple(merge_bases(repo, good.sha, bad.sha))
    if not bases:
        raise UserError(f"{good.ref} and {bad.ref} share no history (no merge base): nothing to bisect")
    return good, bad, bases
