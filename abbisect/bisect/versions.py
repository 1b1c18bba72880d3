"""A package's published versions, as a bisect over `bisect.over.package` walks them: a list the recipe
gives, or every version in a range, read from the recipe's find-links folders, else from the package index."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from abbisect.environment.base import index_args
from abbisect.infra.errors import UserError
from abbisect.infra.proc import scrubbed_env
from abbisect.recipe import Install, Over, VersionRange


def parse_version(v: str, package: str) -> Version:
    try:
        return Version(v)
    except InvalidVersion:
        raise UserError(f"'{v}' is not a version of {package} (PEP 440, e.g. 2.1.0)") from None


def _local_versions(package: str, install: Install) -> set[str]:
    want = canonicalize_name(package)
    found: set[str] = set()
    args = index_args(install)
    for link in (args[i + 1] for i, a in enumerate(args[:-1]) if a == "--find-links"):
        folder = Path(link.removeprefix("file://"))
        if not folder.is_dir():
            continue
        for f in folder.iterdir():
            try:
                if f.name.endswith(".whl"):
                    name, ver, *_ = parse_wheel_filename(f.name)
                elif f.name.endswith((".tar.gz", ".zip")):
                    name, ver = parse_sdist_filename(f.name)
                else:
                    continue
            except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
                continue
            if name == want:
                found.add(str(ver))
    return found


def _index_versions(package: str, install: Install, prereleases: bool) -> set[str]:
    """`pip index versions` (the machine's pip configuration plus the recipe's index settings)."""
    args = index_args(install)
    cmd = [sys.executable, "-m", "pip", "index", "versions", package, *args, *(["--pre"] if prereleases else [])]
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, env=scrubbed_env(), timeout=120)
    m = re.search(r"Available versions:\s*(.+)", out.stdout)
    return {v.strip() for v in m.group(1).split(",")} if m else set()


def resolve_versions(over: Over, install: Install) -> list[str]:
    """The versions a bisect walks, oldest first. A range is read from the recipe's --find-links folders,
    else from the package index; pre-releases only when `prereleases: true`."""
    package = over.package or ""
    if isinstance(over.versions, list):
        versions = list(dict.fromkeys(over.versions))
        for v in versions:
            parse_version(v, package)
        return sorted(versions, key=Version)
    rng: VersionRange = over.versions  # type: ignore[assignment]
    lo, hi = parse_version(rng.from_, package), parse_version(rng.to, package)
    if lo > hi:
        lo, hi = hi, lo
    available = _local_versions(package, install) or _index_versions(package, install, rng.prereleases)
    picked = sorted((Version(v) for v in available if is_version(v)), key=lambda v: v)
    chosen = [str(v) for v in picked if lo <= v <= hi and (rng.prereleases or not v.is_prerelease)]
    if len(chosen) < 2:
        raise UserError(f"'bisect.over.versions': found {len(chosen)} version(s) of {package} between {rng.from_} "
                        f"and {rng.to} (available: {', '.join(str(v) for v in picked) or 'none'})")
    return chosen


def is_version(v: str) -> bool:
    try:
        Version(v)
        return True
    except InvalidVersion:
        return False
