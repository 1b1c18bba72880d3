"""What a commit changes in the pins of its dependencies: "bumps sgl-kernel 0.3.20 → 0.3.21, and touches 4 files
of its own".

A commit's pins are read from its own files at that commit (git, no checkout): pyproject.toml's
`[project] dependencies` and every optional group (the heavy pins abbisect installs per era are among them),
requirements files (`requirements*.txt`, `requirements/…`) and the requirement strings of setup.py — at the
repository's root and in the engine's `subdir`. A file of its own is a changed path other than a dependency
file whose every changed line is about a changed pin. Pure but for the git reads at the edge (`pin_diff`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from abbisect.environment.base import read_toml
from abbisect.infra import git
from abbisect.infra.git import PathLike

_SETUP_STRING = re.compile(r"""["']([A-Za-z0-9][A-Za-z0-9._\-]*(?:\[[^\]"']*\])?\s*(?:===|==|>=|<=|~=|!=|<|>)[^"']*)["']""")


@dataclass(frozen=True)
class PinChange:
    """One dependency whose requirement differs between a commit and its parent (None: absent on that side)."""

    package: str  # canonical name
    old: str | None  # its specifiers, e.g. "==0.3.20" (several requirements of one package joined by " | ")
    new: str | None

    @property
    def old_version(self) -> str | None:
        return exact(self.old)

    @property
    def new_version(self) -> str | None:
        return exact(self.new)

    @property
    def followable(self) -> bool:
        """Exact pins on both sides: the versions between them can be walked."""
        return self.old_version is not None and self.new_version is not None

    def told(self) -> str:
        if self.old is None:
            return f"adds {self.package}{self.new}"
        if self.new is None:
            return f"drops {self.package}{self.old}"
        a, b = self.old_version, self.new_version
        if a and b:
            verb = "bumps" if _later(b, a) else "lowers"
            return f"{verb} {self.package} {a} → {b}"
        return f"changes {self.package} {self.old or 'any'} → {self.new or 'any'}"


@dataclass(frozen=True)
class PinDiff:
    """A commit against its parent: the pins it changes, the dependency files it touches, its own files."""

    sha: str
    parent: str
    changes: tuple[PinChange, ...]
    own: tuple[str, ...]  # paths it changes beyond the pins
    files: tuple[str, ...]  # the dependency files it changes

    def told(self) -> str:
        own = (f"touches {len(self.own)} file{'s' if len(self.own) != 1 else ''} of its own" if self.own
               else "touches no file of its own")
        if not self.changes:
            return f"changes no pin of its dependencies ({own.removeprefix('touches ')})"
        return ", ".join(c.told() for c in self.changes) + f", and {own}"

    @property
    def followable(self) -> tuple[PinChange, ...]:
        return tuple(c for c in self.changes if c.followable)


def exact(spec: str | None) -> str | None:
    """The version an exact pin names ("==1.2.0" → "1.2.0"); None for a range, a wildcard or several."""
    if not spec or "|" in spec:
        return None
    m = re.fullmatch(r"===?\s*([^,*\s]+)", spec.strip())
    return m.group(1) if m else None


def _later(a: str, b: str) -> bool:
    try:
        return Version(a) > Version(b)
    except InvalidVersion:
        return a > b


def is_dependency_file(path: str, subdir: str = "") -> bool:
    """pyproject.toml, setup.py or a requirements file at the root or in the engine's subdir."""
    folder, _, name = path.rpartition("/")
    homes = {"", subdir.strip("/")}
    if folder in homes and name in ("pyproject.toml", "setup.py"):
        return True
    if folder in homes and re.fullmatch(r"requirements[\w.\-]*\.(txt|in)", name):
        return True
    return any(folder == f"{h}/requirements".lstrip("/") or folder.startswith(f"{h}/requirements/".lstrip("/"))
               for h in homes) and name.endswith((".txt", ".in"))


def _requirements(lines: Iterable[str]) -> list[Requirement]:
    out = []
    for line in lines:
        text = line.split(" #")[0].split("#", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if not text or text.startswith("-"):
            continue
        try:
            out.append(Requirement(text))
        except InvalidRequirement:
            continue
    return out


class _Project(BaseModel):
    """What a pyproject.toml's [project] table says of the project's name and requirements (a value of the wrong
    kind read as none: a commit's file is what it is)."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    name: Any = ""
    dependencies: Any = []
    optional: Any = Field({}, alias="optional-dependencies")

    @classmethod
    def of(cls, text: str) -> _Project:
        try:
            return _Pyproject.model_validate(read_toml(text)).project
        except ValidationError:
            return cls()

    @property
    def requirements(self) -> list[str]:
        """Every requirement string: the dependencies, then each optional group's."""
        groups = self.optional.values() if isinstance(self.optional, dict) else ()
        raw = [*(self.dependencies if isinstance(self.dependencies, list) else ()),
               *(r for g in groups if isinstance(g, list) for r in g)]
        return [r for r in raw if isinstance(r, str)]


class _Pyproject(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    project: _Project = _Project()


def pins_of(path: str, text: str) -> list[Requirement]:
    """The requirements one dependency file states."""
    name = path.rpartition("/")[2]
    if name == "pyproject.toml":
        return _requirements(_Project.of(text).requirements)
    if name == "setup.py":
        return _requirements(_SETUP_STRING.findall(text))
    return _requirements(text.splitlines())


def merged(files: dict[str, str]) -> dict[str, str]:
    """{package: its specifiers} over every dependency file (the project's own name left out)."""
    specs: dict[str, set[str]] = {}
    names = {canonicalize_name(str(_Project.of(t).name)) for p, t in files.items() if p.endswith("pyproject.toml")}
    for path, text in sorted(files.items()):
        for req in pins_of(path, text):
            name = canonicalize_name(req.name)
            if name in names:
                continue  # a self-reference such as sglang[srt]
            specs.setdefault(name, set()).add(str(req.specifier) or "")
    return {n: " | ".join(sorted(s)) for n, s in specs.items()}


def diff_pins(old: dict[str, str], new: dict[str, str]) -> tuple[PinChange, ...]:
    return tuple(PinChange(n, old.get(n), new.get(n)) for n in sorted(set(old) | set(new)) if old.get(n) != new.get(n))


def _canon_text(line: str) -> str:
    return re.sub(r"[-_.]+", "-", line.lower())


def pins_only(diff_lines: Iterable[str], packages: Iterable[str]) -> bool:
    """Whether every changed line of a file's diff (`git diff -U0`) names one of the changed packages."""
    names = [canonicalize_name(p) for p in packages]
    changed = [ln[1:] for ln in diff_lines
               if ln[:1] in "+-" and not ln.startswith(("+++", "---")) and ln[1:].strip()]
    return all(any(n in _canon_text(ln) for n in names) for ln in changed)


# -- git, at the edge -------------------------------------------------------------------------------------
def _dependency_files(repo: PathLike, sha: str, subdir: str) -> dict[str, str]:
    tree = git.git(repo, "ls-tree", "-r", "--name-only", sha).splitlines()
    return {p: git.git(repo, "show", f"{sha}:{p}") for p in tree if is_dependency_file(p, subdir)}


def pins_at(repo: PathLike, sha: str, subdir: str = "") -> dict[str, str]:
    """{package: specifiers} the commit's own dependency files state."""
    return merged(_dependency_files(repo, sha, subdir))


def pin_diff(repo: PathLike, parent: str, sha: str, subdir: str = "") -> PinDiff:
    """What `sha` changes in its dependencies' pins against `parent`, and which files it touches beyond them."""
    changes = diff_pins(pins_at(repo, parent, subdir), pins_at(repo, sha, subdir))
    touched = [p for p in git.git(repo, "diff", "--name-only", "--no-renames", parent, sha, "--").splitlines() if p]
    files = tuple(p for p in touched if is_dependency_file(p, subdir))
    own = []
    for p in touched:
        if p in files and changes:
            lines = git.git(repo, "diff", "-U0", "--no-renames", parent, sha, "--", p).splitlines()
            if pins_only(lines, (c.package for c in changes)):
                continue
        own.append(p)
    return PinDiff(sha, parent, changes, tuple(own), files)
