"""`abbisect run`: the same recipe on two commits, one after the other on the same GPU, compared (or, when
the recipe asks with `ab.parallel`, at once on two slots of the same GPU model)."""

from __future__ import annotations

import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer

from abbisect import __version__, checkout
from abbisect.assess import assessor_for
from abbisect.assess.base import Comparison
from abbisect.bisect import gitlog
from abbisect.infra.cache import Cache
from abbisect.infra.envelope import SCHEMA_VERSION
from abbisect.infra.errors import UserError
from abbisect.infra.serial import dump
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome
from abbisect.score import Divergence, SignatureDiff, diff_signatures, divergence
from abbisect.trial.pipeline import run_trial
from abbisect.trial.spec import Progress, TrialResult, TrialSpec, trial_spec


def same_commit(a: TrialSpec, b: TrialSpec) -> bool:
    """An A-vs-A: both sides the same commit with the same pins (the noise of the measurement itself)."""
    return a.sha == b.sha and a.pins == b.pins


@dataclass(frozen=True)
class SideAssessed:
    """One side over all its launches, as the assessor said it."""

    outcome: Outcome
    evidence: str
    stats: dict


@dataclass(frozen=True)
class LaunchesAssessed:
    """What the assessor made of every launch of both sides (several launches a side)."""

    kind: str
    launches: int  # a side
    a: SideAssessed
    b: SideAssessed
    comparison: Comparison  # written as results.json carries it (`Comparison.to_dict`)

    def side(self, side: str) -> SideAssessed:
        return self.a if side == "a" else self.b


def _assessment_written(value: LaunchesAssessed | None) -> dict:
    """results.json's "assessment": {} with one launch a side (one trial each says it all)."""
    return dump(value) if value is not None else {}


@dataclass(frozen=True)
class ABLinks:
    """Each side's commit on GitHub (gitlog.py `CommitLinks`)."""

    a: gitlog.CommitLinks = field(default_factory=gitlog.CommitLinks)
    b: gitlog.CommitLinks = field(default_factory=gitlog.CommitLinks)  # its compare view is from A


def _none_when_empty(value: object) -> object:
    """Read back from results.json: {} is what was written for None."""
    return value or None


def _links_written(value: ABLinks | None) -> dict:
    return dump(value) if value is not None else {}


@dataclass(frozen=True)
class ABResult:
    recipe: Recipe
    a: TrialResult
    b: TrialResult
    divergences: tuple[Divergence | None, ...]  # per prompt; None when a side has no output
    signature_diff: SignatureDiff
    launch_a: str  # the launch command with machine-specific parts (venv, port) made neutral
    launch_b: str
    command: str  # to reproduce
    version: str
    started: str
    # GitHub links of each side, gathered before rendering so that the report needs no git (None: not gathered,
    # written {} as by an earlier abbisect).
    links: Annotated[ABLinks | None, BeforeValidator(_none_when_empty), PlainSerializer(_links_written)] = None
    # With several launches a side (repeats): the further trials of each, and what the assessor made of all
    # of them; `a` and `b` above are then each side's first launch.
    more_a: tuple[TrialResult, ...] = ()
    more_b: tuple[TrialResult, ...] = ()
    assessment: Annotated[LaunchesAssessed | None, BeforeValidator(_none_when_empty),
                          PlainSerializer(_assessment_written)] = None
    # Each side's engine commit (date, parents), gathered while the repository is at hand: results.json names
    # no folder of this machine, so a reader (the matrix) cannot ask git later.
    commits: dict[str, gitlog.CommitInfo] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.recipe.name

    @property
    def same_commit(self) -> bool:
        """An A-vs-A: both sides the same commit with the same pins (the noise of the measurement itself)."""
        return same_commit(self.a.spec, self.b.spec)

    def trials(self, side: str) -> tuple[TrialResult, ...]:
        return (self.a, *self.more_a) if side == "a" else (self.b, *self.more_b)

    def outcome(self, side: str) -> str:
        """The side's outcome: over all its launches when there are several, else its one trial's."""
        if self.assessment is not None:
            return str(self.assessment.side(side).outcome)
        return str((self.a if side == "a" else self.b).verdict.outcome)

    @property
    def same_launch(self) -> bool:
        return self.launch_a == self.launch_b

    def to_dict(self) -> dict:
        """The fields and whether the two launches match (what results.json records, with its schema's name
        and version, as the --json envelope's)."""
        return {"schema": f"abbisect/run/v{SCHEMA_VERSION}", **dump(self), "same_launch": self.same_launch,
                "same_commit": self.same_commit}


def neutral_launch(result: TrialResult) -> str:
    """The launch argv with this trial's venv and port replaced, so two sides can be compared."""
    if result.launch is None:
        return ""
    argv = list(result.launch.argv)
    venv = result.env.path if result.env else None
    # The port: after --port (the engines' own flag), or where a `command` recipe's template says {port}.
    template = result.spec.recipe.launch.command
    port = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--port"),
                next((argv[i] for i, a in enumerate(template) if a == "{port}" and i < len(argv)), None))
    shown = []
    for a in argv:
        if venv and a.startswith(venv):
            a = "$VENV" + a[len(venv):]
        if port and a == port:
            a = "$PORT"
        shown.append(a)
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(result.launch.env.items()))
    cmd = " ".join(a if a.startswith(("$VENV", "$PORT")) else shlex.quote(a) for a in shown)
    return f"{env} {cmd}".strip()


def compare(recipe: Recipe, a: TrialResult, b: TrialResult, command: str, started: str,
            links: ABLinks | None = None, more: tuple[tuple[TrialResult, ...], ...] = ((), ()),
            assessment: LaunchesAssessed | None = None, commits: dict[str, gitlog.CommitInfo] | None = None) -> ABResult:
    divs = tuple(divergence(oa.text, ob.text) if not (oa.error or ob.error) else None
                 for oa, ob in zip(a.outputs, b.outputs))
    return ABResult(recipe, a, b, divs,
                    diff_signatures(list(a.signatures), list(b.signatures)), neutral_launch(a), neutral_launch(b),
                    command, __version__, started, links, more[0], more[1], assessment,
                    commits or {})


def resolve_sides(recipe: Recipe, refs: tuple[str, ...], cache: Cache | Path,
                  say: Progress | None = None) -> tuple[Path, list[checkout.Revision]]:
    """Both refs are resolved before anything is built, so a typo fails at once (a warning told to `say`)."""
    repo = checkout.open_repo(recipe.engine.repo, cache, say=say)
    return repo, [checkout.resolve(repo, ref, say) for ref in refs]


def run_ab(recipe: Recipe, repo: Path, revs: list[checkout.Revision], cache: Cache | Path, out: Path, command: str,
           progress: Progress, runner=run_trial, pins: tuple[tuple[str, ...], ...] = ((), ()),
           at_once: bool = False) -> ABResult:
    """Run A then B, one after the other (same GPU), and compare them; `pins` per side go in after the engine.
    `at_once`: both at the same time (the runner puts each side on its own slot, see `side_slots`).

    With several launches a side (`repeats`), they alternate — A, B, A, B … — so that a drift of the
    machine lands on both sides, and more pairs run while the assessor cannot tell the sides apart (up to
    its cap)."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    specs = [trial_spec(recipe, repo, rev, side, cache, out, side_pins)
             for side, rev, side_pins in zip(("a", "b"), revs, pins)]
    says = [lambda msg, s=side, r=rev: progress(f"{s.upper()} {r.ref} ({r.short}): {msg}")
            for side, rev in zip(("a", "b"), revs)]
    assessor = assessor_for(recipe)

    # An A-vs-A (the same commit and pins on both sides) judged by a rate or a sample: B's launches are
    # attempts of their own (A takes the even numbers, B the odd), so that B never replays A's observations
    # from the trial cache. With a rule on one trial the cached verdict is a fact about the commit, shared.
    same = same_commit(*specs) and assessor.statistical

    def pair(k: int) -> list[TrialResult]:
        """The k-th launch of each side (A's first)."""
        mine = [spec.again(2 * k + i if same else k, chunk=k) for i, spec in enumerate(specs)]
        if at_once:
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="side") as pool:
                return [f.result() for f in [pool.submit(runner, sp, say) for sp, say in zip(mine, says)]]
        return [runner(sp, say) for sp, say in zip(mine, says)]

    got: list[list[TrialResult]] = []
    assessment: LaunchesAssessed | None = None
    want = assessor.first
    while want:
        got += [pair(k) for k in range(len(got), len(got) + want)]
        if not assessor.statistical:  # one launch each says it all
            break
        sides = [tuple(p[i] for p in got) for i in (0, 1)]
        seen = assessor.settle_ends(sides[0], sides[1], names="A and B")
        compared = assessor.compare(*sides)
        told = [SideAssessed(s.outcome, s.evidence, s.stats) for s in seen]
        assessment = LaunchesAssessed(assessor.kind, len(got), told[0], told[1], compared)
        want = min(max(seen[0].wanted, seen[1].wanted), assessor.cap - len(got))
        if want > 0:
            progress(f"A and B after {len(got)} launch(es) each: {compared.text}; {want} more of each")
    a, b = got[0]
    links = ABLinks(gitlog.github_links(a.spec.repo, a.spec.sha),
                    gitlog.github_links(b.spec.repo, b.spec.sha, a.spec.sha))
    more = (tuple(p[0] for p in got[1:]), tuple(p[1] for p in got[1:]))
    commits = {sha: gitlog.commit_info(repo, sha) for sha in sorted({a.spec.sha, b.spec.sha})}
    return compare(recipe, a, b, command, started, links, more, assessment, commits)


def side_slots(recipe: Recipe, progress: Progress) -> list:
    """The two slots of an A/B at once (`ab.parallel`): the first two `gpus` slots, whose GPUs must be the
    same model; without GPUs, two CPU slots (no same-GPU hygiene: nothing to check)."""
    from abbisect.trial.slots import slots_for

    if recipe.gpus is not None and len(recipe.gpu_slots) < 2:
        raise UserError("ab.parallel: true needs two GPU slots, one a side: gpus: [[0], [1]] "
                        "(or drop ab.parallel to run A then B on one GPU)")
    slots = slots_for(recipe.gpu_slots if recipe.gpus is not None else [], 2, recipe.gpu_share)[:2]
    if slots[0].gpus is None:
        progress("A and B at once on two CPU slots: no GPUs named, same-GPU hygiene skipped")
        return slots
    models = gpu_models([g for s in slots for g in s.gpus or ()])
    if models is not None:
        named = [sorted({models.get(g, "?") for g in s.gpus or ()}) for s in slots]
        if len({m for n in named for m in n}) != 1:
            raise UserError(f"ab.parallel: A's GPUs ({', '.join(named[0])}) and B's ({', '.join(named[1])}) are "
                            "not the same model: name slots of one model in gpus, or drop ab.parallel")
    progress(f"A and B at once: A on {slots[0].label()}, B on {slots[1].label()}")
    return slots


def gpu_models(indices: list[int]) -> dict[int, str] | None:
    """GPU number -> model name from nvidia-smi; None when it cannot say (the report's fingerprints still do)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"], check=True,
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    names = {}
    for line in out.splitlines():
        index, _, name = line.partition(",")
        if index.strip().isdigit():
            names[int(index)] = name.strip()
    return {g: names[g] for g in indices if g in names} or None
