"""The proof that nothing else differs: two sides' package lists diffed, each difference explained by what
the sides name as their variable (a pinned package, a dependency commit) or marked as unexplained."""

from __future__ import annotations

import re
from dataclasses import dataclass

from abbisect.environment.inventory import Dist, Inventory
from abbisect.environment.pins import requirement_name
from abbisect.report.text import fence


def _shown(d: Dist) -> str:
    url = d.url or ""
    sha = re.search(r"/([0-9a-f]{40})/?$", url)
    if sha:  # a worktree of a commit: the commit is what matters, not the cache path
        return f"{d.version} (commit {sha.group(1)[:10]})"
    if url and not url.startswith("file://"):
        return f"{d.version} @ {url}"
    return d.version


def _from_commit(dist: Dist | None, shas: tuple[str, ...]) -> bool:
    """Installed from the checkout of one of these commits (its direct URL names the commit's worktree)."""
    url = (dist.url if dist is not None else None) or ""
    return any(sha in url for sha in shas)


@dataclass(frozen=True)
class PackageDiff:
    rows: tuple[tuple[str, str, str, str], ...]  # name, A, B, why it may differ ("" when unexplained)
    named: tuple[str, ...]
    total_a: int
    total_b: int

    @property
    def unexplained(self) -> tuple[str, ...]:
        return tuple(r[0] for r in self.rows if not r[3])


def _closure(names: set[str], dists: dict[str, Dist]) -> dict[str, str]:
    """Every package reachable from `names` by requirements -> the named package that pulls it in."""
    via: dict[str, str] = {}
    for root in sorted(names):
        todo = [root]
        while todo:
            n = todo.pop()
            if n in via:
                continue
            via[n] = root
            todo += dists[n].requires if n in dists else ()
    return via


def diff_packages(a: Inventory, b: Inventory, named: set[str], engine_shas: tuple[str, ...] = ()) -> PackageDiff:
    """The packages that differ between two venvs, each with why it may: named by the sides, required by a
    named one, or the engine under test itself (installed from one of `engine_shas`' checkouts)."""
    da, db = a.dists, b.dists
    via = {**_closure(named, db), **_closure(named, da)}
    rows = []
    for name in sorted(set(da) | set(db)):
        sa = _shown(da[name]) if name in da else "—"
        sb = _shown(db[name]) if name in db else "—"
        if sa != sb:
            own = bool(engine_shas) and all(_from_commit(d.get(name), engine_shas) for d in (da, db))
            why = ("named" if name in named else f"required by {via[name]}" if name in via
                   else "the engine under test (each side's own commit)" if own else "")
            rows.append((name, sa, sb, why))
    return PackageDiff(tuple(rows), tuple(sorted(named)), len(da), len(db))


def named_packages(*results) -> set[str]:
    """What the sides name as their variable: pinned packages, and dists installed from a dependency commit."""
    named: set[str] = set()
    for r in results:
        named |= {requirement_name(p) for p in getattr(r.spec, "pins", [])}
        dep = getattr(r.spec, "dependency", None)
        if dep:
            dists = r.extras.packages.dists if r.extras.packages is not None else {}
            named |= {n for n, d in dists.items() if dep.sha in (d.url or "")}
    return named


def side_variable(r) -> str:
    """What a trial installs after the engine, in words ("" when nothing)."""
    spec = r.spec
    if spec.dependency:
        return f"dependency commit `{spec.dependency.sha[:10]}`"
    return ", ".join(f"`{p}`" for p in spec.pins)


def render_packages(a, b, same_launch: bool) -> list[str]:
    """Markdown: the single variable, the engine and flags identical or not (`same_launch`), the package-list
    diff."""
    pa, pb = a.extras.packages, b.extras.packages
    if pa is None or pb is None:
        return []
    named = named_packages(a, b)
    diff = diff_packages(pa, pb, named, (a.spec.sha, b.spec.sha))
    lines = ["### Packages: what differs between the two venvs", ""]
    if side_variable(a) or side_variable(b):
        same_engine = a.spec.sha == b.spec.sha
        lines += [f"The one variable: A {side_variable(a) or 'no pins'} vs B {side_variable(b) or 'no pins'}. "
                  "Engine commit "
                  + (f"`{a.spec.sha[:10]}` on both sides (identical)" if same_engine
                     else f"⚠ differs: A `{a.spec.sha[:10]}`, B `{b.spec.sha[:10]}`")
                  + ("; launch command identical." if same_launch
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
    if diff.rows:  # identical lists are said in one line above; both in full are in results.json
        freeze = "\n".join(["# A", *pa.freeze, "", "# B", *pb.freeze])
        lines += ["<details><summary>Full package lists (uv pip freeze) of both venvs</summary>", "",
                  fence(freeze), "", "</details>", ""]
    return lines
