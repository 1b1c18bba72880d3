"""abbisect removes only inside its cache and never follows a link out of it: a link where the cache
has a folder of abbisect's own (`jit`, `worktrees/<repo>`, `jit/<key>`, `envs/<key>`) is refused with one line
before anything is written or removed through it; an entry that is itself a link is removed as a link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from abbisect.infra.cache import Cache, gc
from abbisect.infra.errors import InfraError
from abbisect.launch.jit import JitMode, prepare


def _outside(tmp_path: Path) -> Path:
    """A folder of the user's, outside the cache, laid out like a cache's: what must survive."""
    mine = tmp_path / "mine"
    for name in ("old-entry/a.bin", "other/b.bin"):
        (mine / name).parent.mkdir(parents=True, exist_ok=True)
        (mine / name).write_bytes(b"x" * 1000)
        os.utime(mine / name, (0, 0))
    for d in (mine / "old-entry", mine / "other"):
        os.utime(d, (0, 0))
    return mine


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _one_line(exc: pytest.ExceptionInfo, link: Path) -> str:
    line = str(exc.value)
    assert "\n" not in line and str(link) in line and "link" in line, line
    return line


@pytest.mark.parametrize("where", ["jit", "worktrees/0123456789ab", "envs"])
def test_gc_never_follows_a_linked_folder_out_of_the_cache(tmp_path, where):
    root = tmp_path / "cache"
    root.mkdir()
    mine = _outside(tmp_path)
    before = _files(mine)
    link = root / where
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(mine)
    with pytest.raises(InfraError) as exc:
        gc(root, max_size=0, older_than=0)
    _one_line(exc, link)
    assert _files(mine) == before


def test_an_entry_that_is_a_link_is_removed_as_a_link(tmp_path):
    root = tmp_path / "cache"
    (root / "jit").mkdir(parents=True)
    mine = _outside(tmp_path)
    before = _files(mine)
    (root / "jit" / "abc").symlink_to(mine / "old-entry")
    plan = gc(root, max_size=0, older_than=0)
    assert [e.path.name for e in plan.remove] == ["abc"]
    assert not (root / "jit" / "abc").is_symlink() and _files(mine) == before


@pytest.mark.parametrize("linked", ["jit", "jit/venvkey"])
def test_a_launch_refuses_a_linked_jit_folder(tmp_path, linked):
    """A `jit/<key>` linked to another key's folder would make two commits share the folder the report says is
    never shared; a linked `jit` would put the launch's caches outside the cache."""
    cache = Cache(tmp_path / "cache")
    (cache.root / "jit" / "otherkey").mkdir(parents=True)
    link = cache.root / linked
    if linked == "jit":
        (cache.root / "jit" / "otherkey").rmdir()
        (cache.root / "jit").rmdir()
        link.symlink_to(_outside(tmp_path))
    else:
        link.symlink_to(cache.root / "jit" / "otherkey")
    with pytest.raises(InfraError) as exc:
        prepare(JitMode.COMMIT, (("TRITON_CACHE_DIR", "triton"),), cache, "venvkey", {})
    _one_line(exc, link)
    assert not (cache.root / "jit" / "otherkey" / "triton").exists()


def test_worktrees_and_venvs_under_a_link_are_refused(tmp_path):
    cache = Cache(tmp_path / "cache")
    cache.root.mkdir()
    (cache.root / "envs").symlink_to(_outside(tmp_path))
    with pytest.raises(InfraError) as exc:
        cache.env("k")
    _one_line(exc, cache.root / "envs")
    repo = tmp_path / "repo"
    cache.worktrees_of(repo).parent.mkdir()
    cache.worktrees_of(repo).symlink_to(tmp_path / "mine")
    with pytest.raises(InfraError) as exc:
        cache.worktree(repo, "f" * 40)
    _one_line(exc, cache.worktrees_of(repo))
