"""`abbisect bisect`: the commit between two ends where the verdict changes (a regression or a fix)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from abbisect import checkout
from abbisect.cache import open_cache
from abbisect.cli import exit_code, exit_help
from abbisect.commands.options import (
    cache_dir_option,
    check_output_option,
    dry_run_option,
    json_option,
    judge_options,
    no_cache_option,
    output_option,
    recipe_argument,
    verbosity_options,
)
from abbisect.errors import UserError
from abbisect.progress import Final, Reporter
from abbisect.recipe import load_recipe, recipe_path
from abbisect.redact import Redactor


def bisect_ending(mode: str, outcome: str | None) -> str:
    """The row of the exit-code table (abbisect.cli.EXIT_CODES) a finished bisect ends on."""
    if mode == "no-change":
        return mode
    if mode.startswith("untestable-"):  # an end, or the merge base standing in for one
        return "untestable-end"
    return "found" if outcome == "found" else "ambiguous"


@click.command(epilog=exit_help("bisect") + " 3: both ends got the same verdict; 4: an end (or the merge base) "
               "could not be tested; 5: no single commit (only untestable commits are left, or the change is "
               "outside PATHSPEC).")
@recipe_argument
@click.option("--good", "--old", "good", help="a ref or a date YYYY-MM-DD believed good (the old state)")
@click.option("--bad", "--new", "bad", help="a ref or a date YYYY-MM-DD believed bad (the new state)")
@click.option("--first-parent", is_flag=True, default=None, help="walk only the mainline (overrides the recipe)")
@click.option("--retries", type=int, default=None, help="re-run each trial N times to confirm its verdict")
@no_cache_option("ignore cached trial results (they are still written)", default=None)
@judge_options("each trial", like_git=True, default=None)
@click.option("--resume", type=click.Path(file_okay=False), help="continue the interrupted bisect in this folder "
              "(recipe, ends and options come from its state.json)")
@output_option()
@cache_dir_option()
@json_option("print the result as JSON on stdout")
@dry_run_option("print the ends' plans, candidate counts, merge-base handling and first midpoints; build and "
                "launch nothing")
@click.option("--slots", type=click.IntRange(1, 64), default=None,
              help="trials at once without GPUs (CPU engines): k commits a round, ⌈log_(k+1) N⌉ rounds")
@click.option("--gpus", "gpus", default=None, help="GPU slots, one trial each: 0,1,2,3 or 0+1,2+3 (tensor parallel)")
@click.option("--executor", type=click.Choice(["auto", "sequential", "local", "ray"]), default=None,
              help="where trials run: this process, a process per slot, or Ray tasks (pip install 'abbisect[ray]')")
@click.option("--ray-address", default=None, help="the Ray cluster to attach to (auto = a running one)")
@click.option("--ends", type=click.Choice(["first", "lazy"]), default=None,
              help="first (default): test both ends before the search; lazy: search from the labels at once "
                   "and test an end only when the answer rests on it (fewer launches; a mislabelled end is "
                   "found at the answer, not before the search)")
@click.argument("pathspec", nargs=-1)
@verbosity_options
def bisect(recipe, good, bad, first_parent, retries, no_cache, script, interactive, resume, output, cache_dir,
           as_json, dry_run, slots, gpus, executor, ray_address, ends, pathspec) -> None:
    """Find the commit between --good and --bad where the verdict changes (a regression or a fix).

    Both ends are tested first and the direction is observed, not assumed (--ends lazy: the search starts
    from the labels and an end is tested only when the answer rests on it). A date as an end means the
    last first-parent commit made on or before that day. PATHSPEC (after --) narrows the candidates to
    commits touching those paths. Interrupted, it prints the command that resumes it
    (`abbisect bisect --resume DIR`): finished trials are replayed from DIR/state.json, never run again.
    """
    from abbisect.bisect.driver import BisectRun, Driver, order_ends
    from abbisect.bisect.ends import resolve_ends
    from abbisect.bisect.report import bisect_files, bisect_json, reproduce_commands
    from abbisect.envelope import dumps
    from abbisect.judges import make_judge
    from abbisect.report.files import new_output_dir, write_results
    from abbisect.report.portable import reproduce_command
    from abbisect.trialcache import TrialCache, machine_key

    check_output_option(output)
    given = {"first_parent": first_parent, "retries": retries, "pathspec": list(pathspec) or None, "slots": slots,
             "executor": executor, "ray_address": ray_address, "ends": ends}
    flags = {"no_cache": no_cache, "script": script, "interactive": interactive}
    if resume:
        rec, opts, st, out = _resumed(Path(resume), recipe, given, flags, output)
    else:
        if not (good and bad):
            raise UserError("give both ends: --good REF --bad REF (or --old/--new; a date YYYY-MM-DD also works), "
                            "or --resume DIR")
        rec, opts = _started(recipe, given, flags)
        if gpus:
            from abbisect.executors import parse_gpus

            gpu_slots = parse_gpus(gpus)
            rec = rec.model_copy(update={"gpus": gpu_slots[0], "gpu_slots": gpu_slots})
    red = Redactor.from_recipe(rec)
    progress = red.guard(Reporter())
    cache = open_cache(cache_dir, progress)
    variable = None
    if rec.bisect.over is not None:  # a dependency's versions or commits, the engine fixed
        from abbisect.dependency import bisect_variable

        variable = bisect_variable(rec, cache)
        repo = variable.repo
    else:
        repo = checkout.open_repo(rec.engine.repo, cache)
    if resume:
        good_rev, bad_rev = _recorded_ends(st, out, repo, variable, good, bad)
    elif variable is not None:
        good_rev, bad_rev = variable.resolve(good), variable.resolve(bad)
    else:
        good_rev, bad_rev = resolve_ends(repo, good, bad)
    if variable is not None:
        old, new, bases = variable.order_ends(good_rev, bad_rev)
        if dry_run:
            click.echo(red.text(variable.plan(old, new)))
            return
    else:
        if dry_run:
            from abbisect.bisect.dryrun import render_bisect_plan

            click.echo(red.text(render_bisect_plan(rec, repo, good_rev, bad_rev, cache)))
            return
        old, new, bases = order_ends(repo, good_rev, bad_rev)
    if resume:
        replay, cmd = {s["sha"]: s for s in st["steps"]}, st["command"]
    else:
        replay, cmd = None, shlex.join(["abbisect", *sys.argv[1:]])
        out = new_output_dir(rec.name, output)
    resume_cmd = shlex.join(["abbisect", "bisect", "--resume", str(out)])
    run = BisectRun(rec, repo, good_rev, bad_rev, old, new, command=cmd, merge_bases=bases, variable=variable,
                    options=opts)
    if variable is not None:
        progress(f"bisecting {variable.describe()}")
    progress(f"bisect [bold]{rec.name}[/bold]: good={good_rev.ref} ({good_rev.short}) bad={bad_rev.ref} "
             f"({bad_rev.short}) → {out}")
    progress(f"state: {out / 'state.json'} (if interrupted, resume with: {resume_cmd})")
    judge = make_judge(opts["script"], opts["interactive"], opts["script_dir"])
    from abbisect.executors import from_recipe

    executor = from_recipe(rec)
    if executor is not None:
        progress(f"{len(executor.slots)} slot(s) on the {executor.name} executor: "
                 + ", ".join(s.label() for s in executor.slots))
    driver = Driver(rec, repo, cache, out, TrialCache(cache, machine_key(), enabled=not opts["no_cache"]), progress,
                    retries=rec.bisect.retries, prefetch=0 if executor and len(executor.slots) > 1 else rec.bisect.prefetch,
                    variable=variable, judge=judge, redact=red.data, executor=executor)
    driver.save(run)  # before the ends are tested: an interrupt at any moment leaves a resumable folder
    try:
        run = driver.run(run, replay)
    except (KeyboardInterrupt, SystemExit):
        driver.pool.shutdown(wait=False, cancel_futures=True)
        click.echo(f"\nabbisect: interrupted; resume with:\n  {resume_cmd}", err=True)
        raise
    recipe_file = Path(opts["recipe_path"])
    reproduce = reproduce_commands(run, reproduce_command(shlex.split(cmd)[1:], recipe_file), str(recipe_file))
    if variable is not None:  # git cannot drive a walk over package versions or another repository
        reproduce = reproduce[:1]
    results = [(s.role, s.result) for s in run.steps if s.result is not None]
    files = bisect_files(run, reproduce, cache, recipe_file, out)
    write_results(out, files.pop("bisect.md"), bisect_json(run), results, names=("bisect.md", "bisect.json"),
                  redactor=red, extra=files)
    from abbisect.bisect.report import headline

    progress(Final(headline(run).replace("`", "")))
    progress(Final(f"report: {out / 'bisect.md'}"))
    if as_json:
        click.echo(dumps("bisect", red.data(bisect_json(run))))
    ending = bisect_ending(run.mode, run.result.outcome if run.result else None)
    if ending != "found":
        raise SystemExit(exit_code("bisect", ending))


def _started(recipe, given, flags):
    """The recipe with the command line's bisect options, and the options a resumed run keeps."""
    path = recipe_path(recipe)
    rec, base = load_recipe(path)
    rec = rec.model_copy(update={"bisect": rec.bisect.model_copy(
        update={k: v for k, v in given.items() if v is not None})})
    opts = {"no_cache": bool(flags["no_cache"]), "script": flags["script"] or rec.verdict.script,
            "script_dir": str(Path.cwd() if flags["script"] else base), "interactive": bool(flags["interactive"]),
            "recipe_path": str(Path(path).resolve())}
    return rec, opts


def _resumed(folder, recipe, given, flags, output):
    """Recipe and options from state.json; what the command line repeats must agree with it."""
    from abbisect.bisect.driver import load_state
    from abbisect.recipe import Recipe

    out = folder.resolve()
    st = load_state(out)
    opts = st["options"]
    if st.get("masked"):
        # Its secrets were never written: the recipe file is read again and must be the same recipe.
        path = Path(recipe or opts["recipe_path"])
        if not path.is_file():
            raise UserError(f"--resume {out}: the recipe has secrets that state.json does not keep; give it: "
                            f"abbisect bisect RECIPE --resume {out}")
        rec = load_recipe(path)[0].model_copy(update={"bisect": Recipe.model_validate(st["recipe"]).bisect})
        if rec.fingerprint() != st["fingerprint"]:
            raise UserError(f"--resume {out}: {path} is not the recipe the bisect started with (it changed)")
    else:
        rec = Recipe.model_validate(st["recipe"])
    if output and Path(output).resolve() != out:
        _differs(out, "--output", output, str(out))
    if recipe:
        given_rec, _ = load_recipe(recipe_path(recipe))
        if given_rec.fingerprint() != rec.fingerprint() or given_rec.verdict.script != rec.verdict.script:
            _differs(out, "the recipe", recipe, opts.get("recipe_path"))
    for key, value in given.items():
        if value is not None and value != getattr(rec.bisect, key):
            _differs(out, f"--{key.replace('_', '-')}", value, getattr(rec.bisect, key))
    for key, value in flags.items():
        if value is not None and value != opts[key]:
            _differs(out, f"--{key.replace('_', '-')}", value, opts[key])
    return rec, opts, st, out


def _differs(out: Path, what: str, mine, theirs) -> None:
    raise UserError(f"--resume {out}: {what} {mine!r} differs from the interrupted bisect's {theirs!r} "
                    f"(resume with --resume alone, or start a new bisect)")


def _recorded_ends(st, out, repo, variable, good, bad):
    """The ends as recorded (by sha: a branch may have moved since); a repeated --good/--bad must agree."""
    from dataclasses import replace

    from abbisect.bisect.ends import resolve_end

    revs = {}
    for end in ("good", "bad"):
        if variable is not None:
            revs[end] = variable.resolve(st[end]["ref"])
        else:
            revs[end] = replace(checkout.resolve(repo, st[end]["sha"]), ref=st[end]["ref"])
        if revs[end].sha != st[end]["sha"]:
            raise UserError(f"--resume {out}: {st[end]['ref']} no longer names {st[end]['sha']}")
    for end, text in (("good", good), ("bad", bad)):
        if text is None:
            continue
        other = revs["bad" if end == "good" else "good"]
        mine = variable.resolve(text) if variable is not None else resolve_end(repo, text, other)
        if mine.sha != revs[end].sha:
            _differs(out, f"--{end}", text, f"{revs[end].ref} ({revs[end].short})")
    return revs["good"], revs["bad"]
