"""What a bisect walks: one interface, three implementations (mozregression's range handlers are the pattern).

- `EngineCommits`: the engine's own history (the default).
- `PackageVersions`: versions of one package installed after a fixed engine commit (`bisect.over.package`).
- `DependencyCommits`: commits of a dependency's repository, each built into the fixed engine's venv
  (`bisect.over.repo`).

The driver and the reports only talk to `Variable`: its candidates as a `Graph`, a `TrialSpec` for one point,
and what a report says about a point (its subject, links, releases). A candidate is a string: a sha, or a
version.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from packaging.version import Version

from abbisect import checkout
from abbisect.bisect import gitlog
from abbisect.bisect.kinds import VariableKind
from abbisect.bisect.search import Graph
from abbisect.bisect.versions import is_version, resolve_versions
from abbisect.checkout import Revision
from abbisect.environment import EnvResult, ensure_env, needs_source
from abbisect.environment.pins import DependencyCommit, after_engine
from abbisect.infra.cache import Cache
from abbisect.infra.errors import UserError
from abbisect.infra.progress import Say
from abbisect.infra.redact import Redactor
from abbisect.recipe import Recipe
from abbisect.trial.spec import Label, TrialSpec, trial_spec


class Variable(Protocol):
    @property
    def kind(self) -> VariableKind: ...

    @property
    def repo(self) -> Path:
        """The git directory the candidates live in (the engine's, for package versions)."""

    @property
    def engine(self) -> Revision | None:
        """The engine commit every trial runs, when the engine is not the variable."""

    def describe(self) -> str:
        """What is walked, for the console and the report ("" for the engine's own history)."""

    def resolve_ends(self, good: str, bad: str) -> tuple[Revision, Revision]:
        """The two ends as the user named them (refs, dates, versions), resolved before anything is built."""

    def recorded(self, ref: str, sha: str) -> Revision:
        """An end as a bisect's state recorded it (by sha: a branch may have moved since)."""

    def resolve_end(self, text: str, other: Revision) -> Revision:
        """One end named again (a resumed run's --good), resolved as `resolve_ends` would beside `other`."""

    def order_ends(self, good: Revision, bad: Revision) -> tuple[Revision, Revision, tuple[str, ...]]:
        """(old, new, merge bases to test first): the ancestor end is old whatever its label."""

    def graph(self, new: str, olds: Sequence[str], unrelated_olds: bool = False) -> Graph:
        """The candidates after the old ends up to `new` (`unrelated_olds`: an old end need not be an
        ancestor of `new`, as after a merge base was tested)."""

    def spec(self, candidate: str, label: str, out: Path) -> TrialSpec:
        """The trial of one candidate, its logs under `out`."""

    def build(self, candidate: str) -> EnvResult:
        """The candidate's venv, built ahead of its trial (a background prefetch)."""

    def info(self, candidate: str) -> gitlog.CommitInfo:
        """What a report says about a candidate (sha, subject, author, date, PR, parents)."""

    def links(self, candidate: str, base: str | None) -> gitlog.CommitLinks:
        """GitHub links of the candidate (and a compare from `base`), none when there are none."""

    def engine_commit(self, sha: str) -> gitlog.CommitInfo:
        """The engine commit a trial ran (`TrialSpec.sha`): the candidate itself, or the fixed engine."""

    def releases(self, candidate: str) -> gitlog.Releases | None:
        """Which releases contain the candidate and its backports (None when candidates are not commits)."""

    def dry_run(self, good: Revision, bad: Revision) -> str:
        """`bisect --dry-run`: what would be walked and built, nothing built."""

    def touched(self, candidates: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """The paths each candidate changes ({} when candidates are not commits of a repository)."""


class _Git:
    """Candidates that are commits of a git repository `repo` (the engine's or a dependency's)."""

    repo: Path
    recipe: Recipe
    say: Say | None

    def recorded(self, ref: str, sha: str) -> Revision:
        rev = checkout.resolve(self.repo, sha, self.say)
        return Revision(ref, rev.sha, rev.subject)

    def graph(self, new: str, olds: Sequence[str], unrelated_olds: bool = False) -> Graph:
        return gitlog.candidate_graph(self.repo, new, list(olds), self.recipe.bisect.first_parent,
                                       self.recipe.bisect.pathspec or None, unrelated_olds=unrelated_olds)

    def info(self, candidate: str) -> gitlog.CommitInfo:
        return gitlog.commit_info(self.repo, candidate)

    def links(self, candidate: str, base: str | None) -> gitlog.CommitLinks:
        return gitlog.github_links(self.repo, candidate, base)

    def releases(self, candidate: str) -> gitlog.Releases | None:
        return gitlog.releases(self.repo, candidate)

    def touched(self, candidates: Sequence[str]) -> dict[str, tuple[str, ...]]:
        return gitlog.touched_paths(self.repo, candidates)


class EngineCommits(_Git):
    """The engine's own history: each candidate is an engine commit, built and launched as itself."""

    kind = VariableKind.ENGINE_COMMITS
    engine = None

    def __init__(self, recipe: Recipe, repo: Path, cache: Cache | Path, say: Say | None = None) -> None:
        self.recipe, self.repo, self.cache, self.say = recipe, repo, cache, say

    def describe(self) -> str:
        return ""

    def resolve_ends(self, good: str, bad: str) -> tuple[Revision, Revision]:
        from abbisect.bisect.dates import resolve_ends

        return resolve_ends(self.repo, good, bad, self.say)

    def resolve_end(self, text: str, other: Revision) -> Revision:
        from abbisect.bisect.dates import resolve_end

        return resolve_end(self.repo, text, other, say=self.say)

    def order_ends(self, good: Revision, bad: Revision) -> tuple[Revision, Revision, tuple[str, ...]]:
        return gitlog.order_ends(self.repo, good, bad)

    def spec(self, candidate: str, label: str, out: Path) -> TrialSpec:
        rev = Revision(str(label), candidate, self.info(candidate).subject)
        return trial_spec(self.recipe, self.repo, rev, label, self.cache, out)

    def build(self, candidate: str) -> EnvResult:
        recipe = self.recipe
        source = checkout.worktree(self.repo, candidate, self.cache, tuple(recipe.engine.sparse), self.say)
        env = ensure_env(source, candidate, recipe.install, recipe.engine.subdir, self.cache, recipe.timeouts.build,
                         redactor=Redactor.from_recipe(recipe), say=self.say)
        if not needs_source(recipe.install):  # the trial checks it out again (a second or two)
            checkout.discard(self.repo, source)
        return env

    def engine_commit(self, sha: str) -> gitlog.CommitInfo:
        return self.info(sha)

    def dry_run(self, good: Revision, bad: Revision) -> str:
        from abbisect.bisect.dryrun import render_bisect_plan

        return render_bisect_plan(self.recipe, self.repo, good, bad, self.cache)


class _FixedEngine:
    """Candidates installed into one engine commit's venv after the engine (its pins or a dependency commit)."""

    kind: VariableKind
    recipe: Recipe
    say: Say | None

    def __init__(self, recipe: Recipe, engine_repo: Path, engine: Revision, cache: Cache | Path,
                 say: Say | None = None) -> None:
        self.recipe, self.engine_repo, self.engine, self.cache, self.say = recipe, engine_repo, engine, cache, say

    def _spec(self, label: str, slug: str, out: Path, pins: list[str],
              dependency: DependencyCommit | None) -> TrialSpec:
        return TrialSpec(self.recipe, Label.plain(label), self.engine.ref, self.engine.sha, self.engine.subject,
                         str(self.engine_repo), str(self.cache), str(out / f"{label.replace(' ', '-')}-{slug}"),
                         pins, dependency)

    def spec(self, candidate: str, label: str, out: Path) -> TrialSpec:
        raise NotImplementedError  # each kind of candidate says how it goes into the venv

    def engine_commit(self, sha: str) -> gitlog.CommitInfo:
        return gitlog.commit_info(self.engine_repo, sha)

    def build(self, candidate: str) -> EnvResult:
        spec = self.spec(candidate, "prefetch", Path(self.cache))
        recipe = self.recipe
        source = checkout.worktree(self.engine_repo, self.engine.sha, self.cache, tuple(recipe.engine.sparse),
                                   self.say)
        return ensure_env(source, self.engine.sha, recipe.install, recipe.engine.subdir, self.cache,
                          recipe.timeouts.build, after=after_engine(spec.pins, spec.dependency, self.cache, say=self.say),
                          redactor=Redactor.from_recipe(recipe), say=self.say)

    def describe(self) -> str:
        raise NotImplementedError

    def order_ends(self, good: Revision, bad: Revision) -> tuple[Revision, Revision, tuple[str, ...]]:
        raise NotImplementedError

    def graph(self, new: str, olds: Sequence[str], unrelated_olds: bool = False) -> Graph:
        raise NotImplementedError

    def dry_run(self, good: Revision, bad: Revision) -> str:
        from abbisect.trial.dryrun import plan_for

        old, new, _ = self.order_ends(good, bad)
        chain = self.graph(new.sha, [old.sha]).order
        spec = self.spec(new.sha, "plan", Path(self.cache))
        key, steps = plan_for(self.recipe, self.engine_repo, self.engine.sha, self.cache,
                              after_engine(spec.pins, spec.dependency, self.cache, planning=True))
        lines = [f"recipe: {self.recipe.name}", f"bisect over {self.describe()}",
                 f"old end {old.ref}, new end {new.ref}: {len(chain)} candidate(s) after the old end: "
                 + ", ".join(c[:10] for c in chain[:20]) + (" …" if len(chain) > 20 else ""),
                 f"each candidate's venv (shown for {new.ref}, env key {key}):"]
        return "\n".join(lines + [f"  $ {s.display()}" for s in steps])


class PackageVersions(_FixedEngine):
    """Candidates are versions of one package, a linear chain ordered by version."""

    kind = VariableKind.PACKAGE_VERSIONS

    def __init__(self, recipe: Recipe, engine_repo: Path, engine: Revision, cache: Cache | Path,
                 versions: list[str], say: Say | None = None) -> None:
        super().__init__(recipe, engine_repo, engine, cache, say)
        assert recipe.bisect.over is not None and recipe.bisect.over.package  # bisect.over.package names it
        self.package: str = recipe.bisect.over.package
        self.versions = versions
        self.repo = engine_repo

    def resolve(self, name: str) -> Revision:
        if name not in self.versions:
            # "2.1" names "2.1.0": compare as versions, not strings
            match = [v for v in self.versions if is_version(name) and Version(v) == Version(name)]
            if not match:
                raise UserError(f"{self.package} {name} is not among the versions bisected: {', '.join(self.versions)}")
            name = match[0]
        return Revision(name, name, f"{self.package}=={name}")

    def resolve_ends(self, good: str, bad: str) -> tuple[Revision, Revision]:
        return self.resolve(good), self.resolve(bad)

    def recorded(self, ref: str, sha: str) -> Revision:
        return self.resolve(ref)

    def resolve_end(self, text: str, other: Revision) -> Revision:
        return self.resolve(text)

    def order_ends(self, good: Revision, bad: Revision) -> tuple[Revision, Revision, tuple[str, ...]]:
        if good.sha == bad.sha:
            raise UserError(f"--good and --bad are the same version {good.sha}")
        return (good, bad, ()) if Version(good.sha) < Version(bad.sha) else (bad, good, ())

    def graph(self, new: str, olds: Sequence[str], unrelated_olds: bool = False) -> Graph:
        chain = self.versions[self.versions.index(olds[0]) + 1: self.versions.index(new) + 1]
        return Graph.from_parents({v: ((chain[i - 1],) if i else ()) for i, v in enumerate(chain)})

    def spec(self, candidate: str, label: str, out: Path) -> TrialSpec:
        slug = re.sub(r"[^A-Za-z0-9.+-]", "_", candidate)
        return self._spec(label, slug, out, [f"{self.package}=={candidate}"], None)

    def info(self, candidate: str) -> gitlog.CommitInfo:
        return gitlog.CommitInfo(candidate, candidate, f"{self.package}=={candidate}", "", "", "", None, ())

    def links(self, candidate: str, base: str | None) -> gitlog.CommitLinks:
        return gitlog.CommitLinks()

    def releases(self, candidate: str) -> gitlog.Releases | None:
        return None  # versions are releases themselves

    def touched(self, candidates: Sequence[str]) -> dict[str, tuple[str, ...]]:
        return {}  # a version changes no path of a repository

    def describe(self) -> str:
        return f"{self.package} versions, engine fixed at {self.engine.ref} ({self.engine.short})"


class DependencyCommits(_Git, _FixedEngine):
    """Candidates are commits of a dependency's own repository, each built into the engine's venv."""

    kind = VariableKind.DEPENDENCY_COMMITS

    def __init__(self, recipe: Recipe, engine_repo: Path, engine: Revision, cache: Cache | Path,
                 dep_repo: Path, say: Say | None = None) -> None:
        _FixedEngine.__init__(self, recipe, engine_repo, engine, cache, say)
        assert recipe.bisect.over is not None  # bisect.over.repo names the dependency
        self.repo = dep_repo
        self.install = recipe.bisect.over.install

    def resolve_ends(self, good: str, bad: str) -> tuple[Revision, Revision]:
        return checkout.resolve(self.repo, good, self.say), checkout.resolve(self.repo, bad, self.say)

    def resolve_end(self, text: str, other: Revision) -> Revision:
        return checkout.resolve(self.repo, text, self.say)

    def order_ends(self, good: Revision, bad: Revision) -> tuple[Revision, Revision, tuple[str, ...]]:
        old, new, bases = gitlog.order_ends(self.repo, good, bad)
        if bases:
            raise UserError(f"{good.ref} and {bad.ref} are on different branches of {self.repo}; pass their merge "
                            f"base (git merge-base {good.ref} {bad.ref}) as one end")
        return old, new, ()

    def graph(self, new: str, olds: Sequence[str], unrelated_olds: bool = False) -> Graph:
        return _Git.graph(self, new, olds, unrelated_olds)

    def spec(self, candidate: str, label: str, out: Path) -> TrialSpec:
        dep = DependencyCommit(str(self.repo), candidate, tuple(self.install.commands), dict(self.install.env))
        return self._spec(label, candidate[:10], out, [], dep)

    def describe(self) -> str:
        over = self.recipe.bisect.over
        return f"commits of {over.repo if over else self.repo}, engine fixed at {self.engine.ref} ({self.engine.short})"


def variable_for(recipe: Recipe, cache: Cache | Path, say: Say | None = None) -> Variable:
    """What the recipe's bisect walks: `bisect.over` (the engine commit resolved, so a typo fails before any
    build), else the engine's history. Lock waits and warnings of its checkouts and builds are told to `say`."""
    over = recipe.bisect.over
    engine_repo = checkout.open_repo(recipe.engine.repo, cache, say=say)
    if over is None:
        return EngineCommits(recipe, engine_repo, cache, say)
    engine = checkout.resolve(engine_repo, over.engine_ref, say)
    if over.package:
        return PackageVersions(recipe, engine_repo, engine, cache, resolve_versions(over, recipe.install), say)
    return DependencyCommits(recipe, engine_repo, engine, cache, checkout.open_repo(over.repo or "", cache, say=say),
                             say)
