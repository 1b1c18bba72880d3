"""The engine's bytecode, and the faults of the disk a launch or a build leaves behind.

Python writes a module's bytecode beside its source (the commit's worktree, its venv) and never checks that the
write was whole: on a full disk a `.pyc` cut to its first 4,096 bytes replaces the good one, and every later
import of the module fails (`EOFError: marshal data too short`) — a commit blamed for a full disk, its crash cached.
So a server's bytecode goes to a folder of its environment's entry (`envs/<key>/bytecode`, PYTHONPYCACHEPREFIX:
Python then neither reads nor writes the `__pycache__` folders beside the sources), and before each launch every
`.pyc` written there since the last check is loaded once by the environment's own Python; one that does not load
is removed (the next import compiles it again). What a launch compiled is kept for the next launch of the same
environment: an engine imports in seconds, not tens of seconds.

A trial whose build log or server log says the disk was full (or whose bytecode was cut) says nothing about the
commit: `disk_fault` names it, and the trial ends as an infrastructure error — never a verdict, never cached.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from abbisect.infra.cache import Cache
from abbisect.infra.proc import scrubbed_env

FOLDER = "bytecode"
_STAMP = ".checked"  # touched as each check starts: a .pyc older than it was checked already
CHECK_TIMEOUT_S = 600
# Run by the environment's own Python (its marshal format): remove every .pyc newer than the stamp that does not
# load; print how many. -I -S: no site, no PYTHON* variable (the check itself writes no bytecode anywhere).
_CHECK = r"""
import marshal, os, sys
root = sys.argv[1]
stamp = os.path.join(root, ".checked")
since = os.stat(stamp).st_mtime_ns if os.path.exists(stamp) else 0
with open(stamp, "a"):
    pass
os.utime(stamp)
removed = 0
for top, _, names in os.walk(root):
    for name in names:
        if not name.endswith(".pyc"):
            continue
        path = os.path.join(top, name)
        try:
            if os.stat(path).st_mtime_ns < since:
                continue
            with open(path, "rb") as fh:
                data = fh.read()
            if len(data) < 16:
                raise EOFError("no header")
            marshal.loads(data[16:])
        except (OSError, EOFError, ValueError, TypeError):
            try:
                os.remove(path)
                removed += 1
            except OSError:
                pass
print(removed)
"""

# What a log says when the disk (or the quota) was full, or bytecode was cut short by it.
DISK_FAULT = re.compile(r"No space left on device|\[Errno 28\]|os error 28\b|\bENOSPC\b|Disk quota exceeded|"
                        r"\[Errno 122\]|EOFError: marshal data too short|ValueError: bad marshal data")


def bytecode_folder(cache: Cache, env_key: str, python: str) -> Path:
    """The folder the server of environment `env_key` keeps its bytecode in, every `.pyc` that does not load
    removed first."""
    folder = cache.own(cache.env(env_key) / FOLDER)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run([python, "-I", "-S", "-c", _CHECK, str(folder)], capture_output=True, text=True,
                              timeout=CHECK_TIMEOUT_S, check=False, env=scrubbed_env(), start_new_session=True)
        checked = done.returncode == 0
    except (OSError, subprocess.SubprocessError):
        checked = False
    if not checked:  # what could not be checked is not read: compiled again
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
    return folder


def disk_fault(text: str) -> str | None:
    """The line of a log that says the disk was full (or bytecode was cut short), or None."""
    m = DISK_FAULT.search(text)
    if m is None:
        return None
    start, end = text.rfind("\n", 0, m.start()) + 1, text.find("\n", m.end())
    return text[start:end if end >= 0 else len(text)].strip()[:200]
