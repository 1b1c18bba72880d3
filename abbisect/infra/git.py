"""The one door to git: every git command abbisect runs goes through here, with a scrubbed environment.

`git bisect run` exports GIT_DIR (and a worktree may export GIT_WORK_TREE / GIT_INDEX_FILE); a git command
that inherited them would read abbisect's repository instead of the one it names, so `proc.scrubbed_env`
is applied to every call, once, here. Plain git rather than GitPython: once a sparse worktree moved
`core.bare` into `config.worktree`, GitPython takes a bare clone for a checkout and runs git one folder
too high.

Git's output is decoded here, once, for every command: git re-encodes a commit message from the commit's own
`encoding` header to UTF-8 (`i18n.logOutputEncoding` is pinned, whatever the user's config says), and bytes
that are still not UTF-8 (a Latin-1 message with no header, an imported history) are decoded with the
replacement character, never strictly. A git failure that is the machine's (a full or read-only disk) is an
`InfraError`, not a bug.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from abbisect.infra.errors import InfraError
from abbisect.infra.proc import scrubbed_env

PathLike = str | Path
# Every command's messages in UTF-8, re-encoded by git from each commit's `encoding` header where it has one.
_OUTPUT_UTF8 = ("-c", "i18n.logOutputEncoding=UTF-8")
# git's own words for a fault of the machine, not of the repository or the ref asked for.
_MACHINE_FAULTS = ("No space left on device", "Disk quota exceeded", "Read-only file system")


# The author and committer of every commit abbisect makes (a revert it tests) and of the tests' own: never the
# user's, which a Ray node, a container or a fresh machine often lacks (git then refuses to commit).
IDENTITY = {"GIT_AUTHOR_NAME": "abbisect", "GIT_AUTHOR_EMAIL": "abbisect@localhost",
            "GIT_COMMITTER_NAME": "abbisect", "GIT_COMMITTER_EMAIL": "abbisect@localhost"}


class GitError(RuntimeError):
    """A git command failed; the message is git's last line of stderr, `stderr` all of it."""

    def __init__(self, message: str, stderr: str = "") -> None:
        super().__init__(message)
        self.stderr = stderr


class GitMachineError(GitError, InfraError):
    """A git command failed on the machine's side (a full or read-only disk): infra, never a verdict."""


def decode(data: bytes) -> str:
    """Git's bytes as text: UTF-8, a byte that is not UTF-8 shown as the replacement character."""
    return data.decode("utf-8", errors="replace")


def call(args: Sequence[str], repo: PathLike | None = None, env: Mapping[str, str] | None = None,
         base: Mapping[str, str] | None = None, input: str | bytes | None = None,
         text: bool = True) -> subprocess.CompletedProcess:
    """`git [-C repo] args…`, never raising on git's exit status: for callers that read the status.

    The environment is `base` (default: this process's) scrubbed of git's repository variables, with
    `env` on top (identity or dates of a commit abbisect makes)."""
    argv = ["git", *_OUTPUT_UTF8, *(["-C", str(repo)] if repo is not None else []), *args]
    proc = subprocess.run(argv, capture_output=True, check=False,
                          input=input.encode() if isinstance(input, str) else input,
                          stdin=subprocess.DEVNULL if input is None else None, env=scrubbed_env(env, base))
    if not text:
        return proc
    return subprocess.CompletedProcess(proc.args, proc.returncode, decode(proc.stdout), decode(proc.stderr))


def git(repo: PathLike, *args: str, env: Mapping[str, str] | None = None) -> str:
    """`git -C repo args…`; stdout, or GitError with git's own message."""
    proc = call(args, repo, env)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        why = lines[-1] if lines else f"exit {proc.returncode}"
        kind = GitMachineError if any(f in proc.stderr for f in _MACHINE_FAULTS) else GitError
        raise kind(f"git {' '.join(args[:2])} failed: {why}", proc.stderr)
    return proc.stdout


def succeeds(repo: PathLike, *args: str) -> bool:
    """Whether `git -C repo args…` exits 0 (`cat-file -e`, `merge-base --is-ancestor`, `rev-parse -q`)."""
    return call(args, repo).returncode == 0


def is_repository(path: PathLike) -> bool:
    """Whether `path` itself is a git checkout or a git directory (not merely inside one)."""
    proc = call(["rev-parse", "--absolute-git-dir"], path)
    if proc.returncode != 0:
        return False
    top = Path(path).resolve()
    found = Path(proc.stdout.strip()).resolve()
    return found == top or found.parent == top or (top / ".git").exists()


def resolve(repo: PathLike, ref: str) -> str | None:
    """Full sha of the commit `ref` names, None when it names none."""
    proc = call(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"], repo)
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None
