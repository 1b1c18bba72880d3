"""Where abbisect keeps its caches (worktrees, venvs, trial results, models)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root(override: str | Path | None = None) -> Path:
    """ABBISECT_CACHE_DIR, else $XDG_CACHE_HOME/abbisect, else ~/.cache/abbisect."""
    if override:
        root = Path(override)
    elif os.environ.get("ABBISECT_CACHE_DIR"):
        root = Path(os.environ["ABBISECT_CACHE_DIR"])
    else:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = Path(xdg) / "abbisect"
    root = root.expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    tag = root / "CACHEDIR.TAG"
    if not tag.exists():
        # Marks the folder as a cache for backup tools (the convention nox and others follow).
        tag.write_text("Signature: 8a477f597d28d172789f06886806bc55\n# abbisect cache: safe to delete\n")
    return root
