"""A confirmed culprit: after the search, the found commit and its parent are run again, fresh (with the recipe's
launches), and — with `bisect.revert` / `--confirm-revert` — the far end is built once more with the found
commit reverted and tested, as engine maintainers do by hand (the revert passes, the untouched control fails).

The revert is made in a worktree of abbisect's own (`git revert` on a detached HEAD: a commit object in the
repository, no branch or tag, nothing of the user's checkout touched); a revert that does not apply cleanly is
aborted and said so, with the conflicting files.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from abbisect.assess.base import against_ends
from abbisect.bisect.bisection import BisectRun, Mode
from abbisect.bisect.findings import Confirmation, Judged, Level
from abbisect.bisect.kinds import VariableKind
from abbisect.bisect.oracle import Oracle, Sample
from abbisect.infra import git
from abbisect.recipe.status import Outcome
from abbisect.stats.decide import Call
from abbisect.trial.spec import Label, Purpose


def wanted(run: BisectRun, statistical: bool) -> bool:
    """Whether the answer is run again: bisect.confirm always, never, or auto (when one look is not enough)."""
    policy = run.recipe.bisect.confirm
    return policy == "always" or (policy == "auto" and statistical) or run.recipe.bisect.revert


def confirm(oracle: Oracle, run: BisectRun) -> None:
    """The found commit and its parent, fresh; `run.confirmation` says what they showed and how sure the answer
    is. A rule on one trial is judged by the rule (so is a performance bisect searched plainly because an end's
    requests failed: it has no posterior); a verdict that depends on chance was confirmed by its own search,
    every launch of the two counting (abbisect/bisect/noisy.py), and only the revert is left to do here."""
    found, parent = (run.result.first_new if run.result else None), run.found_parent
    if not found or not parent:
        return
    if not (oracle.assessor.statistical and run.posterior):
        fresh = {sha: oracle.again(sha, Label(what, Purpose.CONFIRM))
                 for sha, what in ((parent, "parent"), (found, "found"))}
        seen = {sha: oracle.assessor.alone([t]) for sha, t in fresh.items()}
        if against_ends(oracle.assessor):  # a change of output is the signal
            compared = oracle.assessor.compare([fresh[parent]], [fresh[found]])
            held = compared.call is Call.DIFFERENT
            said = (f"the found commit's outputs differ from its parent's on {', '.join(compared.differing[:5])}"
                    if held else "the found commit's outputs are its parent's")
        else:
            bad, good = (Outcome.BAD, Outcome.GOOD) if run.mode is Mode.REGRESSION else (Outcome.GOOD, Outcome.BAD)
            held = seen[found].outcome == bad and seen[parent].outcome == good
            said = f"the found commit is {seen[found].outcome} and its parent {seen[parent].outcome}"
        run.confirmation = Confirmation(
            Level.CONFIRMED if held else Level.NOT_REPRODUCED,
            f"run again, {said}" + (", as in the search" if held else ": the answer is not reproducible"),
            Judged(parent, seen[parent].outcome, seen[parent].evidence),
            Judged(found, seen[found].outcome, seen[found].evidence), launches=1, compared=None)
        oracle.say(f"confirmation: {run.confirmation.sentence}")
    if run.recipe.bisect.revert and run.confirmation is not None:
        run.confirmation = replace(run.confirmation, revert=revert(oracle, run, found))


def revert(oracle: Oracle, run: BisectRun, found: str) -> dict:
    """The far end (the bad end of a regression, the fixed end of a fix) with `found` reverted, tested."""
    if run.variable.kind is not VariableKind.ENGINE_COMMITS:
        return {"applied": False, "sentence": "a revert is made of engine commits only (not with bisect.over)"}
    target = run.new
    onto = target.short if target.sha.startswith(target.ref) else target.ref  # `main`, or a sha cut short
    made = revert_commit(run.repo, target.sha, found, run.variable.info(found).parents)
    if "sha" not in made:
        sentence = (f"reverting {found[:10]} on {onto} does not apply cleanly ({made['why']}): not tested")
        oracle.say(sentence)
        return {**made, "applied": False, "sentence": sentence}
    trials = [oracle.again(made["sha"], "revert", i) for i in range(max(oracle.assessor.first, 1))]
    ends = _ends(run)
    a = oracle.assessor
    seen = a.against(trials, ends["good"], ends["bad"]) if a.relative and ends else a.alone(trials)
    expected = Outcome.GOOD if run.mode is Mode.REGRESSION else Outcome.BAD
    restores, fails = (("restores good", "does not restore good") if run.mode is Mode.REGRESSION
                       else ("brings the failure back", "does not bring the failure back"))
    said = f"reverting {found[:10]} on {onto}"
    sentence = (f"{said} {restores} ({seen.evidence})" if seen.outcome == expected
                else f"{said} {fails}: it is {seen.outcome} ({seen.evidence})")
    oracle.say(sentence)
    return {**made, "applied": True, "outcome": seen.outcome, "evidence": seen.evidence,
            "as_expected": seen.outcome == expected, "sentence": sentence}


def _ends(run: BisectRun) -> dict[str, Sample]:
    ends: dict[str, Sample] = {}
    for step in run.steps:
        if step.is_end and step.outcome in (Outcome.GOOD, Outcome.BAD):
            ends.setdefault(str(step.outcome), step.trials)
    return ends


def revert_commit(repo: Path, onto: str, culprit: str, parents: tuple[str, ...]) -> dict:
    """{"sha": the revert of `culprit` made on top of `onto`} or {"why": …, "conflicts": [files]}."""
    where = Path(tempfile.mkdtemp(prefix="abbisect-revert-"))
    tree = where / "tree"
    try:
        added = git.call(["worktree", "add", "--detach", "--quiet", str(tree), onto], repo)
        if added.returncode != 0:
            return {"why": f"no worktree of {onto[:10]}: {added.stderr.strip()[:200]}", "conflicts": []}
        mainline = ["-m", "1"] if len(parents) > 1 else []
        done = git.call(["revert", "--no-edit", *mainline, culprit], tree, env=git.IDENTITY)
        if done.returncode != 0:
            conflicts = git.call(["diff", "--name-only", "--diff-filter=U"], tree).stdout.split()
            git.call(["revert", "--abort"], tree)
            why = f"conflicts in {', '.join(conflicts[:5])}" if conflicts else done.stderr.strip().splitlines()[-1:]
            return {"why": why if isinstance(why, str) else "; ".join(why), "conflicts": conflicts}
        return {"sha": git.git(tree, "rev-parse", "HEAD").strip(), "onto": onto, "conflicts": []}
    finally:
        git.call(["worktree", "remove", "--force", str(tree)], repo)
        shutil.rmtree(where, ignore_errors=True)
        git.call(["worktree", "prune"], repo)
