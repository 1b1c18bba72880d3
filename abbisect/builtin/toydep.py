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


# From some version on, toydep offers a second entry point; an engine commit that calls it cannot run an older one.
FUSED = '''

def row_scales_fused(scale):
    return row_scales(scale)
'''


def write_wheel(folder: Path, version: str, broken: bool, fused: bool = False, source: str | None = None) -> Path:
    """A real (pure-Python) wheel of toydep, written directly: no build backend, no network. `fused`: it has
    `row_scales_fused`; `source`: the repository its metadata names (Project-URL Source)."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"toydep-{version}.dist-info"
    urls = f"Project-URL: Source, {source}\n" if source else ""
    files = {
        "toydep/__init__.py": ((BROKEN if broken else GOOD).format(version=version) + (FUSED if fused else "")).encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: toydep\nVersion: {version}\n{urls}".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: abbisect-demo\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},sha256={_b64(data)},{len(data)}\n" for name, data in files.items()) + f"{dist}/RECORD,,\n"
    path = folder / f"toydep-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)
        zf.writestr(zipfile.ZipInfo(f"{dist}/RECORD", date_time=(2026, 1, 1, 0, 0, 0)), record)
    return path


def publish(folder: Path, versions: list[str], first_broken: str | None, fused_from: str | None = None,
            source: str | None = None) -> Path:
    """Wheels of every version into `folder`; from `first_broken` on they drop the scales, from `fused_from` on
    they have `row_scales_fused`."""
    broken = fused = False
    for v in versions:
        broken = broken or v == first_broken
        fused = fused or v == fused_from
        write_wheel(folder, v, broken, fused, source)
    return folder


def build_history(repo: Path, messages: list[str], first_broken: int, tags: dict[int, str] | None = None) -> list[str]:
    """A git history of toydep: one commit per message, commit `first_broken` (0-based) and later broken;
    `tags`: release tags by position (v1.1 …)."""
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
        if tags and n in tags:
            _git(repo, "tag", tags[n])
    return shas


# A toydep history with release tags: the culprit ("Copy scales on a faster path") lies between v1.1 and v1.2.
TAGGED_MESSAGES = ["Initial toydep", "Document row_scales", "Add a version attribute", "Copy scales on a faster path",
                   "Tidy the package", "Speed up imports", "Release 1.4"]
TAGGED_CULPRIT = 3
TAGS = {0: "v1.0", 1: "v1.1", 4: "v1.2", 5: "v1.3", 6: "v1.4"}


def tagged_history(repo: Path) -> list[str]:
    return build_history(repo, TAGGED_MESSAGES, TAGGED_CULPRIT, TAGS)


# -- a toy engine that pins toydep: a commit bumps the pin ------------------------------------------------
PIN_LINE = 'requires-python = ">=3.9"\n'
# What the bumping commit changes besides the pin: nothing, the lm_head bug (the code is to blame), or a call of
# the new entry point (the commit cannot run the old pin).
BUMPS = {
    "pin": ("Bump toydep to {new}", None),
    "pin_and_code": ("Bump toydep to {new} and refactor quantisation dispatch to linear layers only (#17)",
                     ('QUANTIZED_MODULES = ("layers", "lm_head")', 'QUANTIZED_MODULES = ("layers",)')),
    "pin_needed": ("Use toydep's fused scales (bump toydep to {new})",
                   ("    toydep = None\n", "    toydep = None\nfrom toydep import row_scales_fused  # noqa: E402,F401\n")),
}


def pinned_engine(repo: Path, bump: str, old: str, new: str, n: int = 5, at: int = 2) -> list[str]:
    """A toy engine history of `n` commits whose pyproject pins toydep=={old}; commit `at` bumps it to {new}
    (with the change of BUMPS[bump]); the others are housekeeping. Returns the shas."""
    from abbisect.builtin.history import Commit, commit, init_repo

    message, code = BUMPS[bump]

    def apply(root: Path, change: str | None, k: int) -> None:
        pyproject = root / "pyproject.toml"
        if k == at:
            pyproject.write_text(pyproject.read_text().replace(f"toydep=={old}", f"toydep=={new}"))
            if code:
                loader = root / "toyengine" / "loader.py"
                loader.write_text(loader.read_text().replace(*code, 1))
        else:
            (root / "changes.d").mkdir(exist_ok=True)
            (root / "changes.d" / f"{k:05d}.txt").write_text(f"housekeeping {k}\n")

    init_repo(repo)
    pyproject = repo / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(PIN_LINE, PIN_LINE + f'dependencies = ["toydep=={old}"]\n'))
    commits = [Commit("Initial toy engine, with toydep")] + [
        Commit(message.format(new=new) if k == at else f"Housekeeping {k}") for k in range(1, n)]
    return [commit(repo, c, k, apply) for k, c in enumerate(commits)]
