"""`abbisect run`: the same recipe on two commits, one after the other on the same GPU, compared."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from abbisect import __version__, checkout
from abbisect.cache import Cache
from abbisect.recipe import Recipe
from abbisect.score import Divergence, diff_signatures, divergence
from abbisect.serial import dump
from abbisect.trial import Progress, TrialResult, TrialSpec, run_trial


@dataclass(frozen=True)
class ABResult:
    recipe: dict
    a: TrialResult
    b: TrialResult
    divergences: tuple[Divergence | None, ...]  # per prompt; None when a side has no output
    signature_diff: dict[str, list[str]]
    launch_a: str  # the launch command with machine-specific parts (venv, port) made neutral
    launch_b: str
    command: str  # to reproduce
    version: str
    started: str

    @property
    def name(self) -> str:
        return self.recipe["name"]

    @property
    def same_launch(self) -> bool:
        return self.launch_a == self.launch_b

    def to_dict(self) -> dict:
        """The fields and whether the two launches match (what results.json records)."""
        return {**dump(self), "same_launch": self.same_launch}


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


def compare(recipe: Recipe, a: TrialResult, b: TrialResult, command: str, started: str) -> ABResult:
    divs = tuple(divergence(oa.text, ob.text) if not (oa.error or ob.error) else None
                 for oa, ob in zip(a.outputs, b.outputs))
    return ABResult(recipe.model_dump(mode="json"), a, b, divs,
                    diff_signatures(list(a.signatures), list(b.signatures)), neutral_launch(a), neutral_launch(b),
                    command, __version__, started)


def trial_spec(recipe: Recipe, repo: Path, rev: checkout.Revision, side: str, cache: Cache | Path, out: Path,
               pins: tuple[str, ...] | list[str] = ()) -> TrialSpec:
    return TrialSpec(recipe, side, rev.ref, rev.sha, rev.subject, str(repo), str(cache),
                     str(out / f"{side}-{rev.short}"), list(pins))


def resolve_sides(recipe: Recipe, refs: tuple[str, ...], cache: Cache | Path) -> tuple[Path, list[checkout.Revision]]:
    """Both refs are resolved before anything is built, so a typo fails at once."""
    repo = checkout.open_repo(recipe.engine.repo, cache)
    return repo, [checkout.resolve(repo, ref) for ref in refs]


def run_ab(recipe: Recipe, repo: Path, revs: list[checkout.Revision], cache: Cache | Path, out: Path, command: str,
           progress: Progress, runner=run_trial, pins: tuple[tuple[str, ...], ...] = ((), ())) -> ABResult:
    """Run A then B, one after the other (same GPU), and compare them; `pins` per side go in after the engine."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results = []
    for side, rev, side_pins in zip(("a", "b"), revs, pins):
        spec = trial_spec(recipe, repo, rev, side, cache, out, side_pins)
        results.append(runner(spec, lambda msg, s=side, r=rev: progress(f"{s.upper()} {r.ref} ({r.short}): {msg}")))
    return compare(recipe, results[0], results[1], command, started)
