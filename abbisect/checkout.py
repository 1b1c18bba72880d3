"""Stage 1 — checkout: resolve refs to shas and give each sha its own git worktree in the cache.

The user's checkout is only read: no change to its working tree, index or HEAD.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from abbisect.infra.cache import Cache, hold, release, remove_if_unused
from abbisect.infra.errors import InfraError, UserError
from abbisect.infra.git import GitError, call, git, is_repository, succeeds
from abbisect.infra.git import resolve as resolve_sha
from abbisect.infra.locks import file_lock
from abbisect.infra.progress import Say, warn
from abbisect.recipe import BUILTIN_PREFIX, DEMO_REPO

_URL = re.compile(r"^[a-z+]+://|^git@")
_NOT_A_REPO = "does not appear to be a git repository"


@dataclass(frozen=True)
class Revision:
    ref: str
    sha: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:10]


def open_repo(spec: str, cache: Cache | Path, fetch: bool = True, say: Say | None = None) -> Path:
    """A local git directory for the recipe's engine.repo (cloning URLs into the cache once, bare).

    With `fetch` False an existing clone is used as it is: `check` under `git bisect run` must neither
    need the network at every step nor move the refs of the clone git is bisecting in."""
    cache = Cache.at(cache)
    if spec == DEMO_REPO:
        from abbisect.builtin.history import ensure_demo_repo

        return ensure_demo_repo(cache.demo_engine, say)
    if spec.startswith(BUILTIN_PREFIX):
        from abbisect.builtin import builtin_repos

        known = builtin_repos()
        if spec not in known:
            raise UserError(f"unknown builtin repository {spec!r}; known: {DEMO_REPO}, {', '.join(known)}")
        return known[spec](cache, say)
    if _URL.match(spec):
        dest = cache.clone(spec)
        with file_lock(cache.lock(dest), say=say):
            cloning = not dest.exists()
            try:
                if cloning:
                    if spec.startswith("file://"):  # a folder here: whether it is a repository is known first
                        _local_repository(spec, Path(unquote(urlsplit(spec).path)))
                    git(dest.parent, "clone", "--quiet", "--bare", spec, str(dest))
                elif fetch:
                    git(dest, "fetch", "origin", "+refs/heads/*:refs/heads/*", "--tags", "--prune")
            except GitError as exc:
                said = next((ln for ln in exc.stderr.splitlines() if _NOT_A_REPO in ln), None)
                if said and cloning:  # the URL names something that is not a repository: the recipe's mistake
                    raise UserError(f"engine.repo {spec}: not a git repository ({said.removeprefix('fatal: ')})"
                                    ) from None
                raise InfraError(f"cannot fetch {spec}: {exc}") from None
        return dest
    path = Path(spec)
    if not is_repository(path):
        raise UserError(f"engine.repo {spec} is not a git repository (give a checkout or a git URL)")
    return path


def _local_repository(spec: str, path: Path) -> None:
    """A UserError naming why the folder a file:// URL points at is not a repository (else nothing)."""
    if is_repository(path):
        return
    why = ("no such folder" if not path.exists() else "a file, not a folder" if not path.is_dir()
           else "a folder without a .git" if not (path / ".git").exists() else "git finds no repository there")
    raise UserError(f"engine.repo {spec}: not a git repository ({why})")


def resolve(repo: Path, ref: str, say: Say | None = None) -> Revision:
    """`ref` as a commit of `repo`; a ref git finds ambiguous is warned about once a command (to `say`)."""
    proc = call(["rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}"], repo)
    sha = proc.stdout.strip()
    if proc.returncode != 0 or not sha:
        raise UserError(f"ref {ref!r} not found in {repo} (give a branch, tag or sha that exists there)")
    if (m := _AMBIGUOUS.search(proc.stderr)) and (repo, m.group(1)) not in _WARNED:
        _WARNED.add((repo, m.group(1)))
        said = _ambiguity(repo, m.group(1))
        if said:
            warn(said, say)
    return Revision(ref=ref, sha=sha, subject=git(repo, "show", "-s", "--format=%s", sha).strip())


_AMBIGUOUS = re.compile(r"warning: refname '(.+)' is ambiguous")
_WARNED: set[tuple[Path, str]] = set()  # said once a command


def _ambiguity(repo: Path, name: str) -> str | None:
    """What git chose for a name several refs (or a ref and a sha prefix) answer to, and how to name the
    others; None when they all name the same commit. git's order: refs/<name>, tags, heads, remotes."""
    rules = [f"refs/{name}", f"refs/tags/{name}", f"refs/heads/{name}", f"refs/remotes/{name}",
             f"refs/remotes/{name}/HEAD"]
    found = [(r, sha) for r in rules if (sha := resolve_sha(repo, r)) is not None]
    if not found:
        return None
    (chosen, sha), others = found[0], found[1:]
    head = f"ref {name!r} is ambiguous: git chose {chosen} ({sha[:10]})"
    if not others:
        return f"{head}; for the commit whose sha starts with {name}, give more of its digits"
    if all(o == sha for _, o in others):
        return None
    return head + "; name the other as " + " or ".join(f"{r} ({o[:10]})" for r, o in others)


def worktree(repo: Path, sha: str, cache: Cache | Path, sparse: tuple[str, ...] = (), say: Say | None = None) -> Path:
    """A detached worktree of `sha`, shared by every trial of that commit (and held while this process runs).

    With `sparse` folders (the recipe's engine.sparse) and a repository abbisect owns (a clone or built-in
    history in the cache), only those folders and the top-level files are checked out (git's cone-mode
    sparse checkout): SGLang builds from `python/` (+ `rust/` since its Rust extensions), a fraction of the
    tree. A user's own checkout always gets a full worktree: a sparse one would switch on
    `extensions.worktreeConfig` in their repository's config.
    """
    dest = worktree_path(repo, sha, cache, sparse)
    lean = dest.name != sha
    hold(dest, say)
    with file_lock(Cache.lock(dest), say=say):
        if (dest / ".git").exists():
            try:
                if git(dest, "rev-parse", "HEAD").strip() == sha:
                    return dest
            except GitError:
                pass
        if dest.exists():  # half-made or stale: it is ours, in the cache, so it can go
            shutil.rmtree(dest)
        try:
            git(repo, "worktree", "prune")
            if lean:
                git(repo, "worktree", "add", "--detach", "--no-checkout", "--force", str(dest), sha)
                git(dest, "sparse-checkout", "set", "--cone", *sparse)
                git(dest, "reset", "-q", "--hard", sha)
            else:
                git(repo, "worktree", "add", "--detach", "--force", str(dest), sha)
        except GitError as exc:  # the commit exists (resolved before): the checkout itself failed
            raise InfraError(f"cannot check out {sha[:10]} into {dest}: {exc}") from None
    return dest


def worktree_path(repo: Path, sha: str, cache: Cache | Path, sparse: tuple[str, ...] = ()) -> Path:
    """Where `worktree` puts (or has put) the checkout of `sha` (see `Cache.worktree`)."""
    return Cache.at(cache).worktree(repo, sha, sparse)


def discard(repo: Path, dest: Path) -> bool:
    """Remove a worktree this process no longer needs, unless another process uses it; True if removed."""
    release(dest)
    removed = remove_if_unused(dest)
    if removed:
        git(repo, "worktree", "prune")
    return removed


def bundle(repo: Path, shas: list[str], dest: Path) -> list[str]:
    """A git bundle at `dest` of every commit another machine needs to check out `shas`: the histories of the
    repository's branches and tags and of each sha (a sha on no branch included). Returns the bundle's tips.

    git bundles only what refs name, and a commit may be on none: the refs are made in a scratch git
    directory that borrows the repository's objects (git's alternates), so the user's repository is only
    read, as everywhere else."""
    objects = git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir").strip() + "/objects"
    with tempfile.TemporaryDirectory(prefix="abbisect-bundle-") as tmp:
        scratch = Path(tmp) / "scratch.git"
        git(Path(tmp), "init", "--quiet", "--bare", str(scratch))
        (scratch / "objects" / "info" / "alternates").write_text(objects + "\n")
        listed = git(repo, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads", "refs/tags")
        refs = [line.split(" ", 1) for line in listed.splitlines() if line.strip()]
        updates = "".join(f"update {name} {sha}\n" for sha, name in refs)
        updates += "".join(f"update refs/abbisect/{sha} {sha}\n" for sha in shas)
        proc = call(["update-ref", "--stdin"], scratch, input=updates)
        if proc.returncode != 0:
            raise InfraError(f"cannot bundle {', '.join(s[:10] for s in shas)} of {repo}: {proc.stderr.strip()}")
        try:
            git(scratch, "bundle", "create", "--quiet", str(dest), "--all")
        except GitError as exc:
            raise InfraError(f"cannot bundle the commits of {repo}: {exc}") from None
        return git(scratch, "rev-list", "--all").split()


def from_bundle(dest: Path, sha: str, read: Callable[[], bytes]) -> Path:
    """A bare repository at `dest` (in this machine's cache) that holds `sha`: created once, and fetched into
    from the bundle `read()` returns only when it lacks the commit (a node's later trials read nothing)."""
    with file_lock(Cache.lock(dest)):
        if not (dest / "HEAD").exists():
            if dest.exists():  # half-made: ours, in the cache
                shutil.rmtree(dest)
            git(dest.parent, "init", "--quiet", "--bare", str(dest))
        if succeeds(dest, "cat-file", "-e", f"{sha}^{{commit}}"):
            return dest
        with tempfile.NamedTemporaryFile(dir=dest, suffix=".bundle") as fh:
            fh.write(read())
            fh.flush()
            try:
                git(dest, "fetch", "--quiet", "--no-write-fetch-head", fh.name, "+refs/*:refs/*")
            except GitError as exc:
                raise InfraError(f"cannot read the bundle of {sha[:10]} into {dest}: {exc}") from None
        if not succeeds(dest, "cat-file", "-e", f"{sha}^{{commit}}"):
            raise InfraError(f"the bundle sent for {sha[:10]} does not hold it")
    return dest
