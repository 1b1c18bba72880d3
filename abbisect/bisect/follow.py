"""`bisect.follow`: an answer that changes a dependency's pin, followed into that dependency.

The engine commit found (X, against its parent P) bumps `pkg` from `old` to `new`. Each step below is a bisect
of its own (`bisect.over`, the same recipe, the same verdict — a statistical one stays statistical), in a folder
of its own under the run's `follow/`, its state saved after every trial, so `--resume` of the run continues
whichever step was cut:

1. which part is to blame: the parent with only the new pins (P over the versions [old, new]) and the answer with
   only the old pins (X over the same two). A crash at start on an import error the answer with its own pins
   does not have (or a build that fails) means X's code needs the new pin: untestable with the old, said so.
2. when the pins are to blame: `pkg`'s versions between the two pins (the recipe's find-links, else the index),
   the engine held at X (at P when X cannot run the old pin);
3. when the two versions found are adjacent and `pkg`'s repository is known (`bisect.dependencies.<pkg>.repo`, or
   a source URL in the package's metadata): its commits between the two versions' tags, installed with
   `bisect.dependencies.<pkg>.install`.

The chain is returned as data (`Followed`, kept as `run.follow`); bisect.md and bisect.json render it.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from abbisect.bisect.bisection import BisectRun, Mode
from abbisect.bisect.followed import Followed, Link, NotFollowed
from abbisect.bisect.kinds import VariableKind
from abbisect.bisect.pinchange import PinChange, pin_diff
from abbisect.bisect.state import STATE_FILE, load_state
from abbisect.bisect.variables import Variable, variable_for
from abbisect.checkout import Revision
from abbisect.environment.base import index_args
from abbisect.infra import git
from abbisect.infra.cache import Cache
from abbisect.infra.errors import UserError
from abbisect.infra.progress import Say
from abbisect.recipe.schema import Dependency, Over, Recipe, VersionRange
from abbisect.recipe.status import Outcome

# One chained bisect: (its recipe, what it walks, --good, --bad, its folder, the trials it already finished) → run.
StepRun = Callable[[Recipe, Variable, str, str, Path, dict[str, dict]], BisectRun]
FOLDER = "follow"
_IMPORT_ERROR = re.compile(r"\b(ImportError|ModuleNotFoundError|AttributeError)\b")


def follow(run: BisectRun, out: Path, cache: Cache | Path, step: StepRun, say: Say) -> Followed | NotFollowed | None:
    """The chain after an engine bisect whose answer changes a pin (None when there is nothing to follow); each
    step's folder is under `out`/follow."""
    res = run.result
    if run.variable.kind is not VariableKind.ENGINE_COMMITS or res is None or not res.first_new \
            or run.found_parent is None or run.mode not in (Mode.REGRESSION, Mode.FIX):
        return None
    diff = run.pins.get(res.first_new)
    if diff is None or not diff.changes:
        return None
    if not diff.followable:
        ranged = ", ".join(c.told() for c in diff.changes)
        say(f"follow: the answer {ranged}; no exact pin on both sides, nothing to walk")
        return NotFollowed(f"The answer {ranged}: no exact version on both sides of a pin, so no versions to walk.")
    change = diff.followable[0]
    others = [c.told() for c in diff.changes if c is not change]
    chain = _Chain(run, out, Path(cache), step, say, change, diff.told())
    followed = chain.walk()
    if others:
        followed = replace(followed, said=followed.said + f" Followed {change.package} only; the answer also "
                           + "; ".join(others) + ".")
    return followed


def follow_failed(run: BisectRun, exc: Exception) -> NotFollowed:
    """The chain when a step could not run at all (a repository that cannot be read, a build abbisect cannot
    plan): the engine's answer stands, and the report says where the chain stopped."""
    return NotFollowed(f"The answer was not followed into its dependency: {exc}", stopped=str(exc))


class _Chain:
    def __init__(self, run: BisectRun, out: Path, cache: Path, step: StepRun, say: Say, change: PinChange,
                 pins: str) -> None:
        self.run, self.run_dir, self.cache, self.step_run, self.say = run, out, cache, step, say
        self.pkg = change.package
        self.old, self.new = change.old_version or "", change.new_version or ""
        assert run.result is not None and run.result.first_new and run.found_parent  # checked by follow()
        self.answer, self.parent = run.result.first_new, run.found_parent
        self.fix = run.mode is Mode.FIX
        self.base = Followed(self.pkg, self.old, self.new, self.answer, pins, "unknown", "")
        self.links: list[Link] = []

    # -- one chained bisect ------------------------------------------------------------------------------
    def _ends(self, older: str, newer: str) -> tuple[str, str]:
        """(--good, --bad) of a step: the older side is good in a regression, bad in a fix."""
        return (newer, older) if self.fix else (older, newer)

    def _step(self, n: int, name: str, over: Over, older: str, newer: str) -> tuple[BisectRun, Link]:
        rec = self.run.recipe
        srec = rec.model_copy(update={"bisect": rec.bisect.model_copy(update={
            "over": over, "follow": "off", "pathspec": [], "first_parent": False})})
        folder = Path(FOLDER) / f"{n}-{name}"
        sout = self.run_dir / folder
        replay = {s["sha"]: s for s in load_state(sout)["steps"]} if (sout / STATE_FILE).is_file() else {}
        variable = variable_for(srec, self.cache, self.say)
        good, bad = self._ends(older, newer)
        self.say(f"follow {n}: {variable.describe()}, --good {good} --bad {bad} → {folder}"
                 + (f" (resumed: {len(replay)} trial(s) recorded)" if replay else ""))
        srun = self.step_run(srec, variable, good, bad, sout, replay)
        link = _link(srun, name, str(folder))
        self.links.append(link)
        return srun, link

    # -- the chain ---------------------------------------------------------------------------------------
    def walk(self) -> Followed:
        pins = (f"{self.pkg}=={self.old}", f"{self.pkg}=={self.new}")
        self.say(f"follow: the answer {self.base.pins}; which part is to blame: the parent with only "
                 f"{pins[1]}, the answer with only {pins[0]}")
        two = Over(package=self.pkg, versions=[self.old, self.new], engine_ref=self.parent)
        prun, plink = self._step(1, "parent-new-pins", two, self.old, self.new)
        pins_alone = _changed(prun)
        arun, alink = self._step(2, "answer-old-pins", two.model_copy(update={"engine_ref": self.answer}),
                                 self.old, self.new)
        code_alone, needs = _answer_alone(arun, self.pkg, self.old)
        blame, said = _blame(pins_alone, code_alone, needs, self.pkg, self.old, self.new, self.run.mode)
        self.links[0] = replace(plink, said=_said_parent(pins_alone, self.pkg, self.new, self.run.mode))
        self.links[1] = replace(alink, said=needs or _said_answer(code_alone, self.pkg, self.old, self.run.mode))
        self.say(f"follow: {said}")
        followed = replace(self.base, blame=blame, said=said)
        if blame != "pins":
            return replace(followed, links=tuple(self.links), stopped=_NOT_THE_PIN[blame])
        # The versions, the engine held at the answer (at its parent when the answer cannot run the old pin).
        engine = self.answer if code_alone is False else self.parent
        rng = Over(package=self.pkg, versions=VersionRange.model_validate({"from": self.old, "to": self.new}),
                   engine_ref=engine)
        unlisted = ""
        try:
            vrun, vlink = self._step(3, "versions", rng, self.old, self.new)
        except UserError as exc:  # no published versions to walk: the dependency's own history between the pins
            unlisted = f"the versions could not be listed ({exc})"
            before, version = self.old, self.new
        else:
            vres = vrun.result
            if vres is None or vres.outcome != "found" or not vres.first_new or not vrun.found_parent:
                return replace(followed, links=tuple(self.links), stopped=f"the versions' bisect named no version "
                               f"({vlink.said})")
            version, before = vres.first_new, vrun.found_parent
            followed = replace(followed, version=version, version_parent=before)
            self.say(f"follow: {self.pkg} {version} {self.run.mode.word} it ({self.pkg} {before} is the last before)")
            walked = getattr(vrun.variable, "versions", [])
            if walked and (before not in walked or walked.index(version) - walked.index(before) != 1):
                return replace(followed, links=tuple(self.links), stopped=f"{before} and {version} are not adjacent "
                               "versions (those between could not be tested): their commits are not walked")
        dep = _dependency(self.run.recipe, self.pkg, version)
        if dep is None:
            return replace(followed, links=tuple(self.links), stopped=(
                (f"{unlisted}, and " if unlisted else "") + f"no repository known for {self.pkg}: give "
                f"bisect.dependencies.{self.pkg}.repo to walk its commits between {before} and {version}"))
        if unlisted:
            self.say(f"follow: {unlisted}; walking {self.pkg}'s commits between the two pins' tags instead")
            followed = replace(followed, said=f"{followed.said} {unlisted[0].upper()}{unlisted[1:]}: {self.pkg}'s "
                               "commits between the two pins' tags are walked instead.")
        try:
            repo = _open(dep.repo, self.cache, self.say)
            tags = (_tag(repo, before), _tag(repo, version))
        except (UserError, RuntimeError) as exc:
            return replace(followed, links=tuple(self.links), repo=dep.repo, stopped=str(exc))
        if None in tags:
            missing = " and ".join(v for v, t in zip((before, version), tags) if t is None)
            return replace(followed, links=tuple(self.links), repo=dep.repo,
                           stopped=f"no tag of {missing} in {self.pkg}'s repository: its commits are not walked")
        over = Over(repo=dep.repo, install=dep.install, engine_ref=engine)
        try:
            crun, clink = self._step(4, "commits", over, tags[0] or "", tags[1] or "")
        except UserError as exc:
            return replace(followed, links=tuple(self.links), repo=dep.repo,
                           stopped=f"the commits between {tags[0]} and {tags[1]} could not be walked: {exc}")
        cres = crun.result
        if cres is None or cres.outcome != "found" or not cres.first_new:
            return replace(followed, links=tuple(self.links), repo=dep.repo,
                           stopped=f"the commits' bisect named no commit ({clink.said})")
        self.say(f"follow: {self.pkg} commit {cres.first_new[:10]} ({crun.subject(cres.first_new)}) "
                 f"{self.run.mode.word} it")
        return replace(followed, links=tuple(self.links), repo=dep.repo, commit=cres.first_new,
                       commit_subject=crun.subject(cres.first_new))


# Why the chain stops after the blame, by its finding.
_NOT_THE_PIN = {
    "code": "the pin alone does not account for the change: the engine commit's code is the answer",
    "both": ("each part alone changes it, so the engine commit stays the answer; the new pin's versions can be "
             "walked on the parent with bisect.over"),
    "together": "neither part alone changes it: the engine commit (its code with the new pin) is the answer",
    "unknown": "which part is to blame could not be tested: the engine commit is the answer",
}


# -- what a step shows ----------------------------------------------------------------------------------------
def _changed(run: BisectRun) -> bool | None:
    """Whether the step's new end differs from its old end (None: an end could not be tested)."""
    if run.result is not None and run.result.outcome == "found":
        return True
    if run.mode is Mode.NO_CHANGE:
        return False
    return None


def _answer_alone(run: BisectRun, pkg: str, old: str) -> tuple[bool | None, str]:
    """Whether the answer with only the old pins still shows the change (True: its code alone does), and, when
    it cannot run them, why — said plainly."""
    step = run.step_of(old)
    result = step.result if step else None
    if step is not None and step.outcome is Outcome.SKIP:
        return None, (f"the answer cannot be tested with {pkg}=={old}: "
                      f"{step.status} — {step.evidence[:200]} (its code needs the new pin)")
    if result is not None and result.verdict.status == "crashed_at_startup" and result.first_exception:
        text = result.first_exception[1]
        others = [s.result.first_exception for s in run.steps if s.sha != old and s.result is not None]
        if _IMPORT_ERROR.search(text) and all(o is None or o[1] != text for o in others):
            return None, (f"the answer's code needs the new pin: with {old} it does not start "
                          f"({text.strip()[:200]}), so it is untestable with the old pin")
    changed = _changed(run)
    return (None if changed is None else not changed), ""


def _said_parent(changed: bool | None, pkg: str, new: str, mode: Mode) -> str:
    if changed is None:
        return f"the parent could not be tested with {pkg}=={new}"
    return (f"the parent with only {pkg}=={new} {'is fixed' if mode is Mode.FIX else 'breaks'} like the answer"
            if changed else f"the parent with only {pkg}=={new} behaves as the parent")


def _said_answer(code_alone: bool | None, pkg: str, old: str, mode: Mode) -> str:
    if code_alone is None:
        return f"the answer could not be tested with {pkg}=={old}"
    return (f"the answer with only {pkg}=={old} behaves as the answer: its code alone "
            f"{'fixes' if mode is Mode.FIX else 'breaks'} it" if code_alone
            else f"the answer with only {pkg}=={old} behaves as the parent")


def _blame(pins: bool | None, code: bool | None, needs: str, pkg: str, old: str, new: str,
           mode: Mode) -> tuple[str, str]:
    """(pins | code | both | together | unknown, the sentence that says it)."""
    word = "fixes" if mode is Mode.FIX else "breaks"
    untestable = f" ({needs})" if needs else ""
    if pins and code:
        return "both", (f"Both alone: {pkg}=={new} {word} it on the parent, and the answer's code {word} it with "
                        f"{pkg}=={old}.")
    if pins:
        return "pins", f"The pin is to blame: {pkg} {old} → {new} alone {word} it on the parent{untestable}."
    if code:
        parent = (f"the parent with {pkg}=={new} does not change" if pins is False
                  else f"the parent could not be tested with {pkg}=={new}")
        return "code", f"The code is to blame: the answer {word} it with {pkg}=={old} too, and {parent}."
    if pins is False and code is False:
        return "together", (f"Neither alone: the parent with {pkg}=={new} and the answer with {pkg}=={old} both "
                            "behave as the parent; the code and the pin change it together.")
    if pins is False:  # the answer cannot run the old pin; the new pin alone does nothing
        return "code", f"The code is to blame: {pkg}=={new} alone does not change the parent{untestable}."
    return "unknown", ("Which part is to blame is unknown: the parent could not be tested with "
                       f"{pkg}=={new}{untestable or ', and the answer with ' + pkg + '==' + old + ' did not decide'}.")


def _link(run: BisectRun, name: str, folder: str) -> Link:
    res = run.result
    found = res.first_new if res and res.outcome == "found" else None
    evidence = []
    for sha in (run.found_parent, found) if found else (run.old.sha, run.new.sha):  # nothing named: the ends
        step = run.step_of(sha) if sha else None
        if step is not None:
            evidence.append(f"{_short(sha)}: {step.outcome} ({step.status}){' — ' + step.evidence[:120] if step.evidence else ''}")
    said = (f"{_short(found)} {run.mode.word} it" if found else
            run.message or (f"ended {res.outcome}" if res else "did not finish"))
    return Link(name, folder, run.variable.describe(), run.good.ref, run.bad.ref, str(run.mode),
                res.outcome if res else None, found, run.found_parent if found else None,
                run.subject(found) if found and run.variable.kind is VariableKind.DEPENDENCY_COMMITS else "",
                "; ".join(evidence), len(run.steps), sum(s.replayed for s in run.steps), said)


def _short(sha: str | None) -> str:
    return (sha[:10] if sha and re.fullmatch(r"[0-9a-f]{40}", sha) else sha) or ""


# -- where the dependency's history is --------------------------------------------------------------------------
def _dependency(recipe: Recipe, package: str, version: str) -> Dependency | None:
    """The recipe's `bisect.dependencies` entry of the package, else a repository its metadata names."""
    for name, dep in recipe.bisect.dependencies.items():
        if canonicalize_name(name) == canonicalize_name(package):
            return dep
    url = source_url(package, version, index_args(recipe.install))
    return Dependency(repo=url) if url else None


_SOURCE_LABELS = ("source", "source code", "repository", "code", "github", "homepage")


def source_url(package: str, version: str, index: list[str]) -> str | None:
    """The repository a wheel of the package in the recipe's --find-links folders names in its metadata
    (Project-URL Source / Repository / Code, else a Home-page on a git host)."""
    want = canonicalize_name(package)
    for link in (index[i + 1] for i, a in enumerate(index[:-1]) if a == "--find-links"):
        folder = Path(link.removeprefix("file://"))
        wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
        mine = [w for w in wheels if canonicalize_name(w.name.split("-")[0]) == want]
        mine.sort(key=lambda w: w.name.split("-")[1] != version)  # the version's own wheel first
        for wheel in mine:
            if url := _metadata_url(wheel):
                return url
    return None


def _metadata_url(wheel: Path) -> str | None:
    try:
        with zipfile.ZipFile(wheel) as zf:
            name = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
            text = zf.read(name).decode(errors="replace") if name else ""
    except (OSError, zipfile.BadZipFile):
        return None
    urls: dict[str, str] = {}
    for line in text.split("\n\n")[0].splitlines():
        if line.startswith("Project-URL:") and "," in line:
            label, _, url = line.removeprefix("Project-URL:").partition(",")
            urls[label.strip().lower()] = url.strip()
        elif line.startswith("Home-page:"):
            urls.setdefault("home-page", line.removeprefix("Home-page:").strip())
    for label in _SOURCE_LABELS:
        if urls.get(label):
            return urls[label]
    home = urls.get("home-page", "")
    return home if re.match(r"https://(github\.com|gitlab\.com)/[^/]+/[^/]+", home) else None


def _open(spec: str, cache: Path, say: Say) -> Path:
    from abbisect import checkout

    return checkout.open_repo(spec, cache, say=say)


def _tag(repo: Path, version: str) -> str | None:
    """The release tag of `version` in the dependency's repository (v1.2, 1.2.0, release-1.2 …)."""
    try:
        want = Version(version)
    except InvalidVersion:
        return None
    for tag in git.git(repo, "tag", "--list").split():
        m = re.search(r"\d[\w.+!-]*$", tag)
        try:
            if m and Version(m.group(0)) == want:
                return tag
        except InvalidVersion:
            continue
    return None


# -- what --dry-run says --------------------------------------------------------------------------------------
def plan(recipe: Recipe, variable: Variable, good: Revision, bad: Revision) -> list[str]:
    """The follow plan of a bisect: whether the answer is followed, the pins the ends differ in (an answer can
    only change those), and where each known dependency's commits come from."""
    if variable.kind is not VariableKind.ENGINE_COMMITS:
        return []
    if recipe.bisect.follow == "off":
        return ["bisect.follow: off (the bisect stops at the engine commit)"]
    lines = [("bisect.follow: auto — when the commit found changes an exact pin: (1) the parent with only the new "
              "pin and the commit with only the old, (2) the package's versions between the pins, engine held, (3) "
              "its commits between the two versions' tags")]
    try:
        old, new, _ = variable.order_ends(good, bad)
        ends = pin_diff(variable.repo, old.sha, new.sha, recipe.engine.subdir or "")
    except RuntimeError as exc:
        lines.append(f"  the ends' pins could not be read: {exc}")
    else:
        lines.append(f"  from {old.ref} to {new.ref} the pins change: " + ("; ".join(c.told() for c in ends.changes)
                                                                           or "none"))
    for name, dep in sorted(recipe.bisect.dependencies.items()):
        how = "; ".join(dep.install.commands) or "uv pip install <its worktree>"
        env = " ".join(f"{k}={v}" for k, v in sorted(dep.install.env.items()))
        lines.append(f"  {name}: commits of {dep.repo}, each installed with: {how}" + (f" (env {env})" if env else ""))
    lines.append("  another package: the repository its wheel's metadata names, else the chain stops at its version")
    return lines
