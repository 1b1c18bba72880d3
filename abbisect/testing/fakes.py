"""Stand-ins at the bisect's seam, for tests and the simulation benchmark: a history in memory that implements
the `Variable` interface (no git, no venv). The driver, the policies and the searches run on it as they do on a
repository."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from abbisect.bisect import gitlog
from abbisect.bisect.kinds import VariableKind
from abbisect.bisect.search import Graph
from abbisect.checkout import Revision
from abbisect.environment import EnvResult
from abbisect.recipe import Recipe
from abbisect.trial.spec import Label, TrialSpec


@dataclass
class FakeHistory:
    """A history in memory (parents by sha) standing in for a repository: the `Variable` interface."""

    parents: dict[str, tuple[str, ...]]
    recipe: Recipe
    kind: VariableKind = VariableKind.ENGINE_COMMITS
    repo: Path = Path("/nonexistent")
    engine: Revision | None = None
    built: list[str] = field(default_factory=list)
    paths: dict[str, tuple[str, ...]] = field(default_factory=dict)  # what each commit changes (the prior)

    def _ancestors(self, sha: str) -> set[str]:
        return ancestors(self.parents, sha)

    def describe(self) -> str:
        return ""

    def rev(self, sha: str, ref: str | None = None) -> Revision:
        return Revision(ref or sha, sha, f"subject of {sha}")

    def resolve_ends(self, good: str, bad: str) -> tuple[Revision, Revision]:
        return self.rev(good), self.rev(bad)

    def recorded(self, ref: str, sha: str) -> Revision:
        return self.rev(sha, ref)

    def resolve_end(self, text: str, other: Revision) -> Revision:
        return self.rev(text)

    def order_ends(self, good: Revision, bad: Revision) -> tuple[Revision, Revision, tuple[str, ...]]:
        if good.sha in self._ancestors(bad.sha):
            return good, bad, ()
        if bad.sha in self._ancestors(good.sha):
            return bad, good, ()
        common = self._ancestors(good.sha) & self._ancestors(bad.sha)
        bases = [c for c in common if not any(c in self._ancestors(o) - {o} for o in common)]
        return good, bad, tuple(sorted(bases))

    def graph(self, new: str, olds: Sequence[str], unrelated_olds: bool = False) -> Graph:
        old = set().union(*(self._ancestors(o) for o in olds))
        inside = [s for s in self.parents if s in self._ancestors(new) and s not in old]
        return Graph.from_parents({s: self.parents[s] for s in inside})

    def spec(self, candidate: str, label: str, out: Path) -> TrialSpec:
        return TrialSpec(self.recipe, Label.plain(label), candidate, candidate, "", str(self.repo), "/nonexistent",
                         str(out / candidate))

    def build(self, candidate: str) -> EnvResult:
        self.built.append(candidate)
        return EnvResult(True, "k", "v", "python", True, 0.0, "log", ())

    def info(self, candidate: str) -> gitlog.CommitInfo:
        return gitlog.CommitInfo(candidate, candidate[:7], f"subject of {candidate}", "", "", "", None,
                                  self.parents[candidate])

    def links(self, candidate: str, base: str | None) -> gitlog.CommitLinks:
        return gitlog.CommitLinks()

    def engine_commit(self, sha: str) -> gitlog.CommitInfo:
        return self.info(sha)

    def releases(self, candidate: str) -> gitlog.Releases | None:
        return None

    def dry_run(self, good: Revision, bad: Revision) -> str:
        return ""

    def touched(self, candidates: Sequence[str]) -> dict[str, tuple[str, ...]]:
        return {c: self.paths.get(c, ("src/engine.py",)) for c in candidates}


def ancestors(parents: dict[str, tuple[str, ...]], sha: str) -> set[str]:
    """`sha` and every commit it descends from in `parents`."""
    seen, todo = set(), [sha]
    while todo:
        s = todo.pop()
        if s not in seen:
            seen.add(s)
            todo += parents[s]
    return seen


def line(n: int) -> dict[str, tuple[str, ...]]:
    shas = [f"c{i:03d}" for i in range(n)]
    return {s: ((shas[i - 1],) if i else ()) for i, s in enumerate(shas)}
