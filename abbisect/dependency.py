"""A dependency as the one variable: per-side pins, bisects over a package's versions or a dependency's
commits with the engine fixed, and the proof that nothing else differs (the venvs' package lists diffed).

The search (`bisect/search.py`) and the driver are the engine bisect's own; what changes is what a
candidate is — a version string or a dependency commit — and how it becomes a `TrialSpec`: the engine
sha is fixed and the candidate goes into the spec as pins or as a dependency commit, installed into the
venv after the engine (`environment/pins.py`).
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from abbisect import checkout
from abbisect.bisect import history
from abbisect.bisect.search import Graph
from abbisect.cache import Cache
from abbisect.environment import EnvResult, ensure_env
from abbisect.environment.base import index_args
from abbisect.environment.pins import AfterEngine
from abbisect.errors import UserError
from abbisect.proc import scrubbed_env
from abbisect.recipe import Install, Over, Recipe, VersionRange
from abbisect.redact import Redactor

# -- what a trial installs after the engine ------------------------------------------------------------


def after_engine(spec, cache: Cache | Path, planning: bool = False) -> AfterEngine | None:
    """The spec's pins and dependency commit as build input; `planning` computes keys without checkouts."""
    dep = spec.dependency
    if not spec.pins and not dep:
        return None
    source = None
    if dep and not planning:
        source = checkout.worktree(Path(dep["repo"]), dep["sha"], cache)
    return AfterEngine(tuple(spec.pins), dep["sha"] if dep else None, source,
                       tuple(dep.get("commands", ())) if dep else (), dict(dep.get("env", {})) if dep else {})


def requirement_name(req: str) -> str:
    return canonicalize_name(re.split(r"[\s<>=!~;\[@(]", req.strip(), maxsplit=1)[0])


# -- the venv's package list ---------------------------------------------------------------------------

# Run by the venv's own interpreter: every distribution it sees, its version, where it came from (PEP 610)
# and what it requires, so a diff can tell "pulled in by the pin" from "differs for another reason".
_INVENTORY = r"""
import importlib.metadata as m, json, re, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
out = {}
for d in m.distributions():
    name = d.metadata["Name"]
    if not name:
        continue
    reqs = sorted({norm(re.split(r"[\s<>=!~;\[@(]", r.strip(), maxsplit=1)[0])
                   for r in (d.requires or []) if "extra ==" not in r.replace("extra==", "extra ==")})
    url = None
    try:
        url = json.loads(d.read_text("direct_url.json") or "null")["url"]
    except Exception:
        pass
    out.setdefault(norm(name), {"version": d.version, "url": url, "requires": reqs})
print(json.dumps(out))
"""


def installed_packages(python: str, uv_bin: str | None = None) -> dict:
    """{"freeze": `uv pip freeze` lines, "dists": {name: {version, url, requires}}}; empty on failure."""
    import uv

    env = scrubbed_env()
    freeze = subprocess.run([uv_bin or uv.find_uv_bin(), "pip", "freeze", "--python", python], check=False,
                            capture_output=True, text=True, env=env, timeout=120)
    inv = subprocess.run([python, "-c", _INVENTORY], check=False, capture_output=True, text=True, env=env,
                         timeout=120)
    try:
        dists = json.loads(inv.stdout) if inv.returncode == 0 else {}
    except json.JSONDecodeError:
        dists = {}
    return {"freeze": freeze.stdout.splitlines() if freeze.returncode == 0 else [], "dists": dists}


def _shown(d: dict) -> str:
    url = d.get("url") or ""
    sha = re.search(r"/([0-9a-f]{40})/?$", url)
    if sha:  # a worktree of a commit: the commit is what matters, not the cache path
        return f"{d['version']} (commit {sha.group(1)[:10]})"
    if url and not url.startswith("file://"):
        return f"{d['version']} @ {url}"
    return d["version"]


@dataclass(frozen=True)
class PackageDiff:
    rows: tuple[tuple[str, str, str, str], ...]  # name, A, B, why it may differ ("" when unexplained)
    named: tuple[str, ...]
    total_a: int
    total_b: int

    @property
    def unexplained(self) -> tuple[str, ...]:
        return tuple(r[0] for r in self.rows if not r[3])


def _closure(names: set[str], dists: dict) -> dict[str, str]:
    """Every package reachable from `names` by requirements -> the named package that pulls it in."""
    via: dict[str, str] = {}
    for root in sorted(names):
        todo = [root]
        while todo:
            n = todo.pop()
            if n in via:
                continue
            via[n] = root
            todo += (dists.get(n) or {}).get("requires", [])
    return via


def diff_packages(a: dict, b: dict, named: set[str]) -> PackageDiff:
    da, db = a.get("dists", {}), b.get("dists", {})
    via = {**_closure(named, db), **_closure(named, da)}
    rows = []
    for name in sorted(set(da) | set(db)):
        sa = _shown(da[name]) if name in da else "—"
        sb = _shown(db[name]) if name in db else "—"
        if sa != sb:
            why = "named" if name in named else (f"required by {via[name]}" if name in via else "")
            rows.append((name, sa, sb, why))
    return PackageDiff(tuple(rows), tuple(sorted(named)), len(da), len(db))


def named_packages(*results) -> set[str]:
    """What the sides name as their variable: pinned packages, and dists installed from a dependency commit."""
    named: set[str] = set()
    for r in results:
        named |= {requirement_name(p) for p in getattr(r.spec, "pins", [])}
        dep = getattr(r.spec, "dependency", None)
        if dep:
            dists = (r.extras.get("packages") or {}).get("dists", {})
            named |= {n for n, d in dists.items() if dep["sha"] in (d.get("url") or "")}
    return named


def side_variable(r) -> str:
    """What a trial installs after the engine, in words ("" when nothing)."""
    spec = r.spec
    if spec.dependency:
        return f"dependency commit `{spec.dependency['sha'][:10]}`"
    return ", ".join(f"`{p}`" for p in spec.pins)


def render_packages(a, b) -> list[str]:
    """Markdown: the single variable, the engine and flags identical or not, the package-list diff."""
    from abbisect.ab import neutral_launch

    pa, pb = a.extras.get("packages"), b.extras.get("packages")
    if not pa or not pb:
        return []
    named = named_packages(a, b)
    diff = diff_packages(pa, pb, named)
    lines = ["### Packages: what differs between the two venvs", ""]
    if side_variable(a) or side_variable(b):
        same_engine = a.spec.sha == b.spec.sha
        lines += [f"The one variable: A {side_variable(a) or 'no pins'} vs B {side_variable(b) or 'no pins'}. "
                  "Engine commit "
                  + (f"`{a.spec.sha[:10]}` on both sides (identical)" if same_engine
                     else f"⚠ differs: A `{a.spec.sha[:10]}`, B `{b.spec.sha[:10]}`")
                  + ("; launch command identical." if neutral_launch(a) == neutral_launch(b)
                     else "; ⚠ launch commands differ."), ""]
    if not diff.rows:
        lines += [f"The two venvs' package lists are identical ({diff.total_a} packages).", ""]
    else:
        rows = [[f"`{n}`", sa, sb, why or "⚠ **not explained by the named packages**"] for n, sa, sb, why in diff.rows]
        lines += ["| package | A | B | why it differs |", "|---|---|---|---|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows] + [""]
        if named and diff.unexplained:
            lines += [f"⚠ {len(diff.unexplained)} package(s) differ that the named ones do not require: "
                      + ", ".join(f"`{n}`" for n in diff.unexplained) + ". The variable is not single.", ""]
        elif named:
            lines += ["Only the named package(s) and what they require differ.", ""]
    freeze = "\n".join(["# A", *pa.get("freeze", []), "", "# B", *pb.get("freeze", [])])
    lines += ["<details><summary>Full package lists (uv pip freeze) of both venvs</summary>", "",
              "```text", freeze, "```", "", "</details>", ""]
    return lines


# -- a package's versions ---------------------------------------------------------------------------------


def _version(v: str, package: str) -> Version:
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
    import sys

    args = [a for a in index_args(install)]
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
            _version(v, package)
        return sorted(versions, key=Version)
    rng: VersionRange = over.versions  # type: ignore[assignment]
    lo, hi = _version(rng.from_, package), _version(rng.to, package)
    if lo > hi:
        lo, hi = hi, lo
    available = _local_versions(package, install) or _index_versions(package, install, rng.prereleases)
    picked = sorted((Version(v) for v in available if _ok(v)), key=lambda v: v)
    chosen = [str(v) for v in picked if lo <= v <= hi and (rng.prereleases or not v.is_prerelease)]
    if len(chosen) < 2:
        raise UserError(f"'bisect.over.versions': found {len(chosen)} version(s) of {package} between {rng.from_} "
                        f"and {rng.to} (available: {', '.join(str(v) for v in picked) or 'none'})")
    return chosen


def _ok(v: str) -> bool:
    try:
        Version(v)
        return True
    except InvalidVersion:
        return False


# -- what a bisect walks ------------------------------------------------------------------------------------


class _FixedEngine:
    """Shared by both kinds of candidates: the engine commit every trial runs, and its venv build."""

    def __init__(self, recipe: Recipe, engine_repo: Path, engine: checkout.Revision, cache: Cache | Path) -> None:
        self.recipe, self.engine_repo, self.engine, self.cache = recipe, engine_repo, engine, cache

    def _spec(self, label: str, slug: str, out: Path, pins: list[str], dependency: dict | None):
        from abbisect.trial import TrialSpec

        return TrialSpec(self.recipe, label, self.engine.ref, self.engine.sha,
                         self.engine.subject, str(self.engine_repo), str(self.cache),
                         str(out / f"{label.replace(' ', '-')}-{slug}"), pins, dependency)

    def build(self, candidate: str) -> EnvResult:
        spec = self.spec(candidate, "prefetch", Path(self.cache))
        source = checkout.worktree(self.engine_repo, self.engine.sha, self.cache, tuple(self.recipe.engine.sparse))
        return ensure_env(source, self.engine.sha, self.recipe.install, self.recipe.engine.subdir, self.cache,
                          self.recipe.timeouts.build, after=after_engine(spec, self.cache),
                          redactor=Redactor.from_recipe(self.recipe))

    def spec(self, candidate: str, label: str, out: Path):
        raise NotImplementedError

    def graph(self, old: str, new: str) -> Graph:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def plan(self, old: checkout.Revision, new: checkout.Revision) -> str:
        """`bisect --dry-run`: what is walked and how one candidate's venv is built, nothing built."""
        from abbisect.plan import plan_for

        chain = self.graph(old.sha, new.sha).order
        spec = self.spec(new.sha, "plan", Path(self.cache))
        key, steps = plan_for(self.recipe, self.engine_repo, self.engine.sha, self.cache,
                              after_engine(spec, self.cache, planning=True))
        lines = [f"recipe: {self.recipe.name}", f"bisect over {self.describe()}",
                 f"old end {old.ref}, new end {new.ref}: {len(chain)} candidate(s) after the old end: "
                 + ", ".join(c[:10] for c in chain[:20]) + (" …" if len(chain) > 20 else ""),
                 f"each candidate's venv (shown for {new.ref}, env key {key}):"]
        return "\n".join(lines + [f"  $ {s.display()}" for s in steps])


class PackageVersions(_FixedEngine):
    """Candidates are versions of one package, a linear chain ordered by version."""

    kind = "versions"

    def __init__(self, recipe, engine_repo, engine, cache, versions: list[str]) -> None:
        super().__init__(recipe, engine_repo, engine, cache)
        self.package = recipe.bisect.over.package
        self.versions = versions
        self.repo = engine_repo

    def resolve(self, name: str) -> checkout.Revision:
        if name not in self.versions:
            # "2.1" names "2.1.0": compare as versions, not strings
            match = [v for v in self.versions if _ok(name) and Version(v) == Version(name)]
            if not match:
                raise UserError(f"{self.package} {name} is not among the versions bisected: {', '.join(self.versions)}")
            name = match[0]
        return checkout.Revision(name, name, f"{self.package}=={name}")

    def order_ends(self, good: checkout.Revision, bad: checkout.Revision):
        if good.sha == bad.sha:
            raise UserError(f"--good and --bad are the same version {good.sha}")
        return (good, bad, ()) if Version(good.sha) < Version(bad.sha) else (bad, good, ())

    def graph(self, old: str, new: str) -> Graph:
        chain = self.versions[self.versions.index(old) + 1: self.versions.index(new) + 1]
        return Graph.from_parents({v: ((chain[i - 1],) if i else ()) for i, v in enumerate(chain)})

    def spec(self, candidate: str, label: str, out: Path):
        slug = re.sub(r"[^A-Za-z0-9.+-]", "_", candidate)
        return self._spec(label, slug, out, [f"{self.package}=={candidate}"], None)

    def info(self, candidate: str) -> history.CommitInfo:
        return history.CommitInfo(candidate, candidate, f"{self.package}=={candidate}", "", "", "", None, ())

    def describe(self) -> str:
        return f"{self.package} versions, engine fixed at {self.engine.ref} ({self.engine.short})"


class DependencyCommits(_FixedEngine):
    """Candidates are commits of a dependency's own repository, each built into the engine's venv."""

    kind = "commits"

    def __init__(self, recipe, engine_repo, engine, cache, dep_repo: Path) -> None:
        super().__init__(recipe, engine_repo, engine, cache)
        self.repo = dep_repo
        self.install = recipe.bisect.over.install

    def resolve(self, ref: str) -> checkout.Revision:
        return checkout.resolve(self.repo, ref)

    def order_ends(self, good, bad):
        from abbisect.bisect.driver import order_ends

        old, new, bases = order_ends(self.repo, good, bad)
        if bases:
            raise UserError(f"{good.ref} and {bad.ref} are on different branches of {self.repo}; pass their merge "
                            f"base (git merge-base {good.ref} {bad.ref}) as one end")
        return old, new, ()

    def graph(self, old: str, new: str) -> Graph:
        return history.candidate_graph(self.repo, new, [old], self.recipe.bisect.first_parent,
                                       self.recipe.bisect.pathspec or None)

    def spec(self, candidate: str, label: str, out: Path):
        dep = {"repo": str(self.repo), "sha": candidate, "commands": list(self.install.commands),
               "env": dict(self.install.env)}
        return self._spec(label, candidate[:10], out, [], dep)

    def info(self, candidate: str) -> history.CommitInfo:
        return history.commit_info(self.repo, candidate)

    def describe(self) -> str:
        over = self.recipe.bisect.over
        return f"commits of {over.repo if over else self.repo}, engine fixed at {self.engine.ref} ({self.engine.short})"


def bisect_variable(recipe: Recipe, cache: Cache | Path) -> PackageVersions | DependencyCommits:
    """The candidates of `bisect.over`, with the engine commit resolved (a typo fails before any build)."""
    over = recipe.bisect.over
    assert over is not None
    engine_repo = checkout.open_repo(recipe.engine.repo, cache)
    engine = checkout.resolve(engine_repo, over.engine_ref)
    if over.package:
        return PackageVersions(recipe, engine_repo, engine, cache, resolve_versions(over, recipe.install))
    dep_repo = checkout.open_repo(over.repo or "", cache)
    return DependencyCommits(recipe, engine_repo, engine, cache, dep_repo)
