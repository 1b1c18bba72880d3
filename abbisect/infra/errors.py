"""abbisect's error tree; the CLI maps it to exit codes in one place (`abbisect.commands.endings.EXIT_CODES`).

- `UserError`: bad input from the user (recipe, ref, path): say what is wrong and how to fix it.
- `InfraError`: abbisect's own side failed (download, disk, checkout, port, lock): says nothing about the
  commit under test, so `check` exits 125 (untestable) and a bisect never records it as a verdict.
  An `OSError` of the machine itself (disk full, read-only or unwritable folder) counts as one too.
Anything else is a bug of ours (internal error).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

# The machine's faults, not the user's input nor the commit's: a full disk, a read-only or unwritable folder.
_INFRA_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EMFILE,
                 errno.ENFILE, errno.ENOMEM}


class UserError(Exception):
    """Bad input from the user (recipe, ref, path): say what is wrong and how to fix it."""


class InfraError(Exception):
    """An infrastructure fault on abbisect's side (download, disk, checkout, port, lock): never a verdict."""


def kind_of(exc: BaseException) -> str:
    """How an exception ends a command: "usage", "infra", "interrupted", "terminated" or "internal"."""
    if isinstance(exc, UserError):
        return "usage"
    if isinstance(exc, InfraError):
        return "infra"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    if isinstance(exc, OSError) and exc.errno in _INFRA_ERRNOS:
        return "infra"
    return "internal"


def describe_os_error(exc: OSError, cache: Path | None = None) -> str:
    """One line for a machine fault: what failed, where, and what to do about it — the option that moves the
    folder it failed in: the cache's (`cache`: its root, None when unknown) or the results' (--output)."""
    code = exc.errno or 0
    # A copy names its source first and the file it wrote second (shutil): a full or read-only disk is the latter's.
    written = exc.filename2 if exc.filename2 is not None and code in _WRITING else exc.filename
    where = f" ({written})" if written else ""
    in_cache = cache is None or (written is not None and _inside(Path(os.fsdecode(written)), cache))
    folder = "--cache-dir / ABBISECT_CACHE_DIR" if in_cache else "--output"
    hint = {errno.ENOSPC: f"free some space or point {folder} at a larger disk",
            errno.EDQUOT: f"free some space or point {folder} at a larger disk",
            errno.EROFS: f"point {folder} at a writable folder",
            errno.EACCES: f"check the folder's permissions or point {folder} at a writable folder",
            errno.EPERM: f"check the folder's permissions or point {folder} at a writable folder"}.get(code, "")
    return f"{exc.strerror or exc}{where}" + (f": {hint}" if hint else "")


_WRITING = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):
        return False
