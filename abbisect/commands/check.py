"""`abbisect check`: one commit judged, exiting as a `git bisect run` script (0 good, 1 bad, 125 skip)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from abbisect.commands.assembled import Asked, WithServerFlags, checkout_options, which_recipe
from abbisect.commands.common import open_cache, open_reporter
from abbisect.commands.endings import exit_code, exit_help
from abbisect.commands.options import (
    cache_dir_option,
    check_output_option,
    json_option,
    judge_options,
    no_cache_option,
    output_option,
    recipe_argument,
    verbosity_options,
)
from abbisect.infra.errors import UserError
from abbisect.infra.progress import Final
from abbisect.infra.redact import Redactor


@click.command(cls=WithServerFlags, epilog=exit_help("check") + " 125 covers every fault on abbisect's side (download, "
               "disk, checkout, port, lock timeout: git bisect skips the commit); 128 stops git bisect run.")
@recipe_argument
@click.argument("ref", required=False)
@checkout_options
@click.option("--invert", is_flag=True, help="exit 0 for bad and 1 for good (when git's 'old' state is the bad one)")
@output_option("the folder that gets the trial's folder, check-<sha> (default: the cache's checks/<recipe>/)")
@cache_dir_option()
@no_cache_option("ignore a cached result for this commit")
@json_option("print the trial result as JSON on stdout")
@judge_options("the trial")
@verbosity_options
def check(recipe, ref, model, engine, prompts, invert, output, cache_dir, no_cache, as_json, script,
          interactive) -> None:
    """Judge one commit and exit like a `git bisect run` script: 0 good, 1 bad, 125 untestable.

    Without REF it judges what git is testing: under `git bisect run` (or while a bisect is under way in
    the recipe's repository) BISECT_HEAD when present (bare repositories, --no-checkout), else HEAD.
    Only a bad verdict exits 1; a fault on abbisect's side exits 125 with the reason on stderr, and usage
    errors exit 128, which makes `git bisect run` stop instead of calling the commit bad.

    In an SGLang or vLLM checkout without a recipe: `abbisect check [REF] --model M -- FLAGS`.
    """
    import os

    check_output_option(output)
    asked = Asked(model, engine, prompts)
    if recipe and ref is None and asked.given() and not Path(recipe).is_file():
        recipe, ref = None, recipe  # `abbisect check REF --model M`: no recipe, the one argument is the commit
    source = which_recipe(recipe, asked)
    from abbisect import checkout
    from abbisect.bisect.gitlog import bisect_under_way, has_commit
    from abbisect.gpu.preflight import preflight
    from abbisect.infra.proc import is_git_var
    from abbisect.trial.judges import make_judge

    under = bisect_under_way(dict(os.environ), Path.cwd()) if ref is None else None
    # git bisect run exports GIT_DIR (and more): from here on they must not steer abbisect's own git
    # calls on the recipe's repository, nor reach a build or a server.
    for name in [n for n in os.environ if is_git_var(n)]:
        del os.environ[name]
    from abbisect.infra.envelope import dumps
    from abbisect.infra.serial import dump

    # Errors from here on exit as abbisect.commands.endings.EXIT_CODES["check"] says (usage 128, infra 125).
    rec, base = source.load()
    if rec.perf is not None or rec.eval is not None:
        what = "a performance" if rec.perf is not None else "an accuracy"
        raise UserError(f"check judges one commit alone, and {what} verdict compares two: use abbisect run "
                        "--a GOOD --b REF (an A/B) or abbisect bisect")
    judge = make_judge(script or rec.verdict.script, interactive, Path.cwd() if script else base)
    red = Redactor.from_recipe(rec)
    gpu_check = preflight(rec)  # before the cache: a GPU this machine lacks is one usage line (128)
    gpu_check.raise_if_unfit()
    # The input is valid: what runs a trial loads now (a usage error never pays for it).
    from abbisect.assess import assessor_for
    from abbisect.trial.judges import judging
    from abbisect.trial.pipeline import run_trial
    from abbisect.trial.spec import trial_spec
    from abbisect.trial.trial_cache import TrialCache, machine_key

    progress = red.guard(open_reporter())
    for note in gpu_check.notes:
        progress(f"note: {note}")
    cache = open_cache(cache_dir, progress)
    repo = checkout.open_repo(rec.engine.repo, cache, fetch=under is None, say=progress)
    if ref is None and under is None:
        under = bisect_under_way({}, repo)
    if under is not None:
        if not has_commit(repo, under[1]):
            raise UserError(f"git bisect in {under[0]} is testing {under[1][:10]}, which is not in the recipe's "
                            f"repository {repo}: run it there, or give the commit as REF")
        rev = checkout.resolve(repo, under[1], progress)
        rev = checkout.Revision("the commit git bisect is testing", rev.sha, rev.subject)
    else:
        rev = checkout.resolve(repo, ref or "HEAD", progress)
    trials = TrialCache(cache, machine_key(), enabled=not no_cache)
    folder = Path(output).expanduser().resolve() if output else cache.checks(rec.name)
    spec = trial_spec(rec, repo, rev, "check", cache, folder)
    assessor = assessor_for(rec)  # with repeats, several launches judged by their failure rate
    launched = [judging(trials.fetch, judge, run_trial)(spec.again(k), lambda m: progress(f"{rev.short}: {m}"))
                for k in range(assessor.first)]
    result, seen = launched[0], assessor.alone(launched)
    # The verdict kept beside the logs, so `abbisect matrix <cache>/checks` can read it.
    Path(spec.out_dir).mkdir(parents=True, exist_ok=True)
    kept = json.dumps(red.data(dump(result)), indent=1, default=str)
    (Path(spec.out_dir) / "trial.json").write_text(kept)
    outcome = seen.outcome.inverted() if invert else seen.outcome
    said = seen.evidence if len(launched) > 1 else "; ".join(result.verdict.reasons[:2])
    progress(Final(f"{rev.ref} ({rev.short}): {result.verdict.status} → {outcome}"
                   + (" (cached)" if result.cached else "") + f" — {said}"))
    if as_json:
        click.echo(dumps("check", red.data(dump(result))))
    raise SystemExit(exit_code("check", "untestable" if outcome == "skip" else outcome))
