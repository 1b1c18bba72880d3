"""`abbisect bisect` and `abbisect check` (a `git bisect run` script: 0 good, 1 bad, 125 untestable)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click

from abbisect import checkout
from abbisect.cache import open_cache
from abbisect.errors import UserError
from abbisect.progress import Reporter
from abbisect.recipe import load_recipe, recipe_path
from abbisect.redact import Redactor

EXIT = {"good": 0, "bad": 1, "skip": 125}


@click.command()
@click.argument("recipe", required=False)
@click.option("--good", "--old", "good", help="a ref believed good (the old state)")
@click.option("--bad", "--new", "bad", help="a ref believed bad (the new state)")
@click.option("--first-parent", is_flag=True, default=None, help="walk only the mainline (overrides the recipe)")
@click.option("--retries", type=int, default=None, help="re-run each trial N times to confirm its verdict")
@click.option("--no-cache", is_flag=True, help="ignore cached trial results (they are still written)")
@click.option("--resume", type=click.Path(file_okay=False), help="continue the interrupted bisect in this folder")
@click.option("--output", "-o", help="result folder (default results/<recipe>/<UTC stamp>)")
@click.option("--cache-dir", envvar="ABBISECT_CACHE_DIR", help="worktrees, venvs and trial cache")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON on stdout")
@click.option("--dry-run", is_flag=True, help="print the ends' plans, candidate counts, merge-base handling and "
              "first midpoints; build and launch nothing")
@click.argument("pathspec", nargs=-1)
def bisect(recipe, good, bad, first_parent, retries, no_cache, resume, output, cache_dir, as_json, dry_run,
           pathspec) -> None:
    """Find the commit between --good and --bad where the verdict changes (a regression or a fix).

    Both ends are tested first and the direction is observed, not assumed. PATHSPEC (after --) narrows
    the candidates to commits touching those paths.
    """
    from abbisect.bisect.driver import BisectRun, Driver, load_replay, order_ends
    from abbisect.bisect.report import STOPPED, bisect_json, render_bisect, reproduce_commands
    from abbisect.report.files import new_output_dir, write_results
    from abbisect.trialcache import TrialCache, machine_key

    if not (good and bad):
        raise UserError("give both ends: --good REF --bad REF (or --old/--new)")
    rec, _ = load_recipe(recipe_path(recipe))
    options = rec.bisect.model_copy(update={k: v for k, v in {
        "first_parent": first_parent, "retries": retries, "pathspec": list(pathspec) or None}.items() if v is not None})
    rec = rec.model_copy(update={"bisect": options})
    red = Redactor.from_recipe(rec)
    progress = red.guard(Reporter())
    cache = open_cache(cache_dir, progress)
    variable = None
    if rec.bisect.over is not None:  # a dependency's versions or commits, the engine fixed
        from abbisect.dependency import bisect_variable

        variable = bisect_variable(rec, cache)
        repo = variable.repo
        good_rev, bad_rev = variable.resolve(good), variable.resolve(bad)
        old, new, bases = variable.order_ends(good_rev, bad_rev)
        if dry_run:
            click.echo(red.text(variable.plan(old, new)))
            return
    else:
        repo = checkout.open_repo(rec.engine.repo, cache)
        good_rev, bad_rev = checkout.resolve(repo, good), checkout.resolve(repo, bad)
        if dry_run:
            from abbisect.bisect.dryrun import render_bisect_plan

            click.echo(red.text(render_bisect_plan(rec, repo, good_rev, bad_rev, cache)))
            return
        old, new, bases = order_ends(repo, good_rev, bad_rev)
    replay = load_replay(Path(resume)) if resume else None
    out = Path(resume).resolve() if resume else new_output_dir(rec.name, output)
    cmd = shlex.join(["abbisect", *sys.argv[1:]])
    resume_cmd = f"{cmd} --resume {shlex.quote(str(out))}" if not resume else cmd
    run = BisectRun(rec, repo, good_rev, bad_rev, old, new, command=cmd, merge_bases=bases, variable=variable)
    if variable is not None:
        progress(f"bisecting {variable.describe()}")
    progress(f"bisect [bold]{rec.name}[/bold]: good={good} ({good_rev.short}) bad={bad} ({bad_rev.short}) → {out}")
    driver = Driver(rec, repo, cache, out, TrialCache(cache, machine_key(), enabled=not no_cache), progress,
                    retries=options.retries, prefetch=options.prefetch, variable=variable)
    try:
        run = driver.run(run, replay)
    except (KeyboardInterrupt, SystemExit):
        driver.pool.shutdown(wait=False, cancel_futures=True)
        click.echo(f"\nabbisect: interrupted; resume with:\n  {resume_cmd}", err=True)
        raise
    reproduce = reproduce_commands(run, cmd, str(Path(recipe_path(recipe)).resolve()))
    if variable is not None:  # git cannot drive a walk over package versions or another repository
        reproduce = reproduce[:1]
    results = [(s.role, s.result) for s in run.steps if s.result is not None]
    write_results(out, render_bisect(run, reproduce), bisect_json(run), results, names=("bisect.md", "bisect.json"),
                  redactor=red)
    from abbisect.bisect.report import headline

    progress(headline(run).replace("`", ""))
    progress(f"report: {out / 'bisect.md'}")
    if as_json:
        click.echo(json.dumps(red.data(bisect_json(run)), default=str))
    if run.mode in STOPPED:
        raise SystemExit(3)


@click.command()
@click.argument("recipe", required=False)
@click.argument("ref", required=False)
@click.option("--invert", is_flag=True, help="exit 0 for bad and 1 for good (when git's 'old' state is the bad one)")
@click.option("--cache-dir", envvar="ABBISECT_CACHE_DIR", help="worktrees, venvs and trial cache")
@click.option("--no-cache", is_flag=True, help="ignore a cached result for this commit")
@click.option("--json", "as_json", is_flag=True, help="print the trial result as JSON on stdout")
def check(recipe, ref, invert, cache_dir, no_cache, as_json) -> None:
    """Judge one commit and exit like a `git bisect run` script: 0 good, 1 bad, 125 untestable.

    Without REF it judges what git is testing: under `git bisect run` (or while a bisect is under way in
    the recipe's repository) BISECT_HEAD when present (bare repositories, --no-checkout), else HEAD.
    Usage errors exit 128, which makes `git bisect run` stop instead of calling the commit bad.
    """
    import os

    from abbisect.ab import trial_spec
    from abbisect.bisect.history import bisect_under_way, has_commit
    from abbisect.proc import is_git_var
    from abbisect.trialcache import TrialCache, machine_key

    under = bisect_under_way(dict(os.environ), Path.cwd()) if ref is None else None
    # git bisect run exports GIT_DIR (and more): from here on they must not steer abbisect's own git
    # calls on the recipe's repository, nor reach a build or a server.
    for name in [n for n in os.environ if is_git_var(n)]:
        del os.environ[name]
    try:
        rec, _ = load_recipe(recipe_path(recipe))
        red = Redactor.from_recipe(rec)
        progress = red.guard(Reporter())
        cache = open_cache(cache_dir, progress)
        repo = checkout.open_repo(rec.engine.repo, cache, fetch=under is None)
        if ref is None and under is None:
            under = bisect_under_way({}, repo)
        if under is not None:
            if not has_commit(repo, under[1]):
                raise UserError(f"git bisect in {under[0]} is testing {under[1][:10]}, which is not in the recipe's "
                                f"repository {repo}: run it there, or give the commit as REF")
            rev = checkout.resolve(repo, under[1])
            rev = checkout.Revision("the commit git bisect is testing", rev.sha, rev.subject)
        else:
            rev = checkout.resolve(repo, ref or "HEAD")
    except UserError as exc:
        click.echo(f"abbisect: error: {exc}", err=True)
        raise SystemExit(128) from None
    trials = TrialCache(cache, machine_key(), enabled=not no_cache)
    spec = trial_spec(rec, repo, rev, "check", cache, cache / "checks" / rec.name)
    result = trials.fetch(spec, lambda m: progress(f"{rev.short}: {m}"))
    # The verdict kept beside the logs, so `abbisect matrix <cache>/checks` can read it.
    Path(spec.out_dir).mkdir(parents=True, exist_ok=True)
    kept = json.dumps(red.data(result.to_dict()), indent=1, default=str)
    (Path(spec.out_dir) / "trial.json").write_text(kept)
    outcome = result.verdict.outcome
    if invert and outcome != "skip":
        outcome = "good" if outcome == "bad" else "bad"
    progress(f"{rev.ref} ({rev.short}): {result.verdict.status} → {outcome}"
             + (" (cached)" if result.cached else "") + f" — {'; '.join(result.verdict.reasons[:2])}")
    if as_json:
        click.echo(json.dumps(red.data(result.to_dict()), default=str))
    raise SystemExit(EXIT[outcome])
