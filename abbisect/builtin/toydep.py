"""`toydep`: a tiny dependency of the toy engine, for A/Bs and bisects where a dependency is the variable.

The toy engine's loader passes the lm_head's per-row scales through `toydep.row_scales` when toydep is
installed (and is unchanged without it). A broken toydep drops the scales, so greedy output loops
("need analysis there …") exactly like the engine's own lm_head bug. Published two ways: wheels in a
folder (a `--find-links` index of versions) and a git history of the same package (commits).
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

from abbisect.builtin.history import _git

GOOD = '''"""toydep {version}: per-row scale handling for the toy engine."""

__version__ = "{version}"


def row_scales(scale):
    return dict(scale)
'''

# The regression: a "faster" path that forgets to return the scales it copied.
BROKEN = '''"""toydep {version}: per-row scale handling for the toy engine."""

__version__ = "{version}"


def row_scales(scale):
    fast = {{k: v for k, v in scale.items()}}  # noqa: F841 -- the bug: computed, never returned
'''

PYPROJECT = '''[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "toydep"
version = "{version}"
requires-python = ">=3.9"

[tool.setuptools]
packages = ["toydep"]
'''


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_wheel(folder: Path, version: str, broken: bool) -> Path:
    """A real (pure-Python) wheel of toydep, written directly: no build backend, no network."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"toydep-{version}.dist-info"
    files = {
        "toydep/__init__.py": (BROKEN if broken else GOOD).format(version=version).encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: toydep\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: abbisect-demo\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},sha256={_b64(data)},{len(data)}\n" for name, data in files.items()) + f"{dist}/RECORD,,\n"
    path = folder / f"toydep-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)
        zf.writestr(zipfile.ZipInfo(f"{dist}/RECORD", date_time=(2026, 1, 1, 0, 0, 0)), record)
    return path


def publish(folder: Path, versions: list[str], first_broken: str | None) -> Path:
    """Wheels of every version into `folder`; from `first_broken` on they drop the scales."""
    broken = False
    for v in versions:
        broken = broken or v == first_broken
        write_wheel(folder, v, broken)
    return folder


def build_history(repo: Path, messages: list[str], first_broken: int) -> list[str]:
    """A git history of toydep: one commit per message, commit `first_broken` (0-based) and later broken."""
    repo.mkdir(parents=True, exist_ok=True)
    _git(repo, "init", "-q", "-b", "main")
    shas = []
    for n, message in enumerate(messages):
        version = f"0.{n}.0"
        (repo / "toydep").mkdir(exist_ok=True)
        (repo / "pyproject.toml").write_text(PYPROJECT.format(version=version))
        (repo / "toydep" / "__init__.py").write_text((BROKEN if n >= first_broken else GOOD).format(version=version))
        _git(repo, "add", "-A")
        date = f"@{1_767_225_600 + 3600 * n} +0000"
        _git(repo, "commit", "-q", "-m", message, env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return shas
