"""Where abbisect keeps its caches (worktrees, venvs, trial results, models)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from abbisect.errors import InfraError, describe_os_error

_REAPED: set[Path] = set()

# The cache folder this process last opened: where the crash handler puts its traceback (if it can write).
last_root: Path | None = None


def cache_path(override: str | Path | None = None) -> Path:
    """ABBISECT_CACHE_DIR, else $XDG_CACHE_HOME/abbisect, else ~/.cache/abbisect (nothing created)."""
    if override:
        root = Path(override)
    elif os.environ.get("ABBISECT_CACHE_DIR"):
        root = Path(os.environ["ABBISECT_CACHE_DIR"])
    else:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = Path(xdg) / "abbisect"
    root = root.expanduser().resolve()
    if root.is_dir():  # even a dry run: servers left by a killed abbisect die now, said once
        _reap_once(root)
    return root


def cache_root(override: str | Path | None = None) -> Path:
    """The cache folder, created and checked writable: an unusable cache is an `InfraError` up front,
    not a traceback halfway through a trial."""
    global last_root
    root = cache_path(override)
    if root.exists() and not root.is_dir():
        raise InfraError(f"cache folder {root} is a file (point --cache-dir / ABBISECT_CACHE_DIR at a folder)")
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".writable-{os.getpid()}"  # os.access says yes to root on a read-only mount
        probe.touch()
        probe.unlink()
        tag = root / "CACHEDIR.TAG"
        if not tag.exists():
            # Marks the folder as a cache for backup tools (the convention nox and others follow).
            tag.write_text("Signature: 8a477f597d28d172789f06886806bc55\n# abbisect cache: safe to delete\n")
    except OSError as exc:
        raise InfraError(f"cache folder {root} is not usable: {describe_os_error(exc)}") from None
    last_root = root
    return root


def _reap_once(root: Path) -> None:
    """Every invocation opens its cache here first: servers left by a killed abbisect die now, said once."""
    if root in _REAPED:
        return
    _REAPED.add(root)
    from abbisect.supervisor import reap_orphans

    try:
        lines = reap_orphans(root)
    except OSError as exc:  # an unreadable record folder must not stop the command
        lines = [f"abbisect: could not check for orphaned servers: {exc}"]
    for line in lines:
        print(line, file=sys.stderr)
