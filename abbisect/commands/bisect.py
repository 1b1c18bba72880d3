"""`abbisect bisect`: the commit between two ends where the verdict changes (a regression or a fix)."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from abbisect.commands.assembled import (
    KEPT,
    Asked,
    RecipeSource,
    WithServerFlags,
    after_dashes,
    checkout_options,
    which_recipe,
)
from abbisect.commands.common import gpu_lines, interrupted_hint, open_cache, open_reporter
from abbisect.commands.endings import exit_code, exit_help
from abbisect.commands.options import (
    cache_dir_option,
    check_output_option,
    dry_run_option,
    json_option,
    judge_options,
    no_cache_option,
    output_option,
    post_option,
    recipe_argument,
    verbosity_options,
)
from abbisect.infra.errors import UserError
from abbisect.infra.progress import Final
from abbisect.infra.redact import Redactor

if TYPE_CHECKING:
    from abbisect.bisect.bisection import BisectRun, Spent
    from abbisect.bisect.variables import Variable
    from abbisect.checkout import Revision
    from abbisect.recipe import Recipe


@dataclass(frozen=True)
class BisectRequest:
    """What the command line asks for, typed: the recipe, the ends (or a state to resume), the options that
    override the recipe's bisect section (`given`) and the judging flags a resumed run must keep (`flags`)."""

    recipe: str | None
    source: RecipeSource | None  # the recipe of a bisect that starts (None: --resume)
    good: str | None
    bad: str | None
    resume: Path | None
    output: str | None
    cache_dir: str | None
    as_json: bool
    dry_run: bool
    gpus: str | None
    given: dict[str, Any]
    flags: dict[str, Any]
    post: str | None = None  # --post OWNER/REPO#N


def bisect_ending(run: BisectRun) -> str:
    """The row of the exit-code table (abbisect.commands.endings.EXIT_CODES) a finished bisect ends on."""
    if run.mode.ending:
        return run.mode.ending
    return "found" if run.result and run.result.outcome == "found" else "ambiguous"


@click.command(cls=WithServerFlags, epilog=exit_help("bisect") + " 3: both ends got the same verdict; 4: an end "
               "(or the merge base) could not be tested; 5: no single commit (only untestable commits are left, or the "
               "change is outside PATHSPEC).")
@recipe_argument
@checkout_options
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
@click.option("--gpus", "gpus", default=None, help="GPU slots, one trial each: 0,1,2,3; 0+1,2+3 (tensor parallel); "
              "0x4 (four slots sharing GPU 0, 0.22 of its memory each); 0x4@0.2 (each slot's share)")
@click.option("--executor", type=click.Choice(["auto", "sequential", "local", "ray"]), default=None,
              help="where trials run: this process, a process per slot, or Ray tasks (pip install 'abbisect[ray]')")
@click.option("--ray-address", default=None, help="the Ray cluster to attach to (auto = a running one)")
@click.option("--ends", type=click.Choice(["first", "lazy"]), default=None,
              help="first (default): test both ends before the search; lazy: search from the labels at once "
                   "and test an end only when the answer rests on it (fewer launches; a mislabelled end is "
                   "found at the answer, not before the search)")
@click.option("--confirm", type=click.Choice(["auto", "always", "never"]), default=None,
              help="after the search, run the found commit and its parent again, fresh: auto (default) when the "
                   "verdict depends on chance (repeats, a batch, perf, eval: judged by the posterior again), always, "
                   "never")
@click.option("--confirm-revert", is_flag=True, default=None,
              help="also build the far end with the found commit reverted (git revert in a worktree) and test it")
@click.option("--narrow", is_flag=True, default=None,
              help="at the found commit, run abbisect narrow: which feature switch makes the failure go away "
                   "(and, with narrow.passing, the smallest failing difference); the table goes into bisect.md")
@click.option("--follow", type=click.Choice(["auto", "off"]), default=None,
              help="auto (default): when the commit found changes a dependency's pin, find which part is to blame, "
                   "then the package's version and its commit that did it (bisect.follow); off: stop at the commit")
@post_option
@click.argument("pathspec", nargs=-1)
@verbosity_options
def bisect(recipe, model, engine, prompts, good, bad, first_parent, retries, no_cache, script, interactive, resume,
           output, cache_dir, as_json, dry_run, slots, gpus, executor, ray_address, ends, confirm, confirm_revert,
           narrow, follow, post_to, pathspec) -> None:
    """Find the commit between --good and --bad where the verdict changes (a regression or a fix).

    Both ends are tested first and the direction is observed, not assumed (--ends lazy: the search starts
    from the labels and an end is tested only when the answer rests on it). A date as an end means the
    last first-parent commit made on or before that day. PATHSPEC (after --) narrows the candidates to
    commits touching those paths. Interrupted, it prints the command that resumes it
    (`abbisect bisect --resume DIR`): finished trials are replayed from DIR/state.json, never run again.

    In an SGLang or vLLM checkout without a recipe: `abbisect bisect --good REF --bad REF --model M -- FLAGS`
    (the server's flags as you pass them to it; PATHSPEC then goes in a recipe: abbisect init writes one).
    """
    check_output_option(output)
    source = None
    if resume is None:
        source = which_recipe(recipe, Asked(model, engine, prompts), flags_are_pathspec=True)
        if source.path is not None:  # a recipe's PATHSPEC may follow --
            pathspec = (*pathspec, *after_dashes())
    elif after_dashes():
        pathspec = (*pathspec, *after_dashes())
    request = BisectRequest(
        recipe, source, good, bad, Path(resume) if resume else None, output, cache_dir, as_json, dry_run, gpus,
        given={"first_parent": first_parent, "retries": retries, "pathspec": list(pathspec) or None, "slots": slots,
               "executor": executor, "ray_address": ray_address, "ends": ends, "confirm": confirm,
               "revert": confirm_revert, "then_narrow": narrow, "follow": follow},
        flags={"no_cache": no_cache, "script": script, "interactive": interactive}, post=post_to)
    run = run_bisect(request)
    if run is not None and (ending := bisect_ending(run)) != "found":
        raise SystemExit(exit_code("bisect", ending))


def run_bisect(req: BisectRequest) -> BisectRun | None:
    """The bisect the request asks for, run to its end and written to its folder (None after a dry run)."""
    if req.resume:
        from abbisect.bisect.state import resume

        resumed = resume(req.resume, req.recipe, req.given, req.flags, req.output)
        rec, opts = resumed.recipe, resumed.options
    else:
        resumed = None
        if not (req.good and req.bad):
            raise UserError("give both ends: --good REF --bad REF (or --old/--new; a date YYYY-MM-DD also works), "
                            "or --resume DIR")
        assert req.source is not None
        rec, opts = _started(req.source, req.given, req.flags, req.gpus)
    from abbisect.bisect.variables import variable_for
    from abbisect.gpu.preflight import preflight

    if why := rec.perf_conflict():
        raise UserError(why)
    red = Redactor.from_recipe(rec)
    progress = red.guard(open_reporter())
    gpu_check = preflight(rec, bisecting=True)  # before the cache: a GPU this machine lacks is one usage line
    if not req.dry_run:
        gpu_check.raise_if_unfit()
    for note in gpu_check.notes:
        progress(f"note: {note}")
    cache = open_cache(req.cache_dir, progress)
    variable = variable_for(rec, cache, progress)
    if resumed is not None:
        good_rev, bad_rev = resumed.ends_in(variable, req.good, req.bad)
    else:
        assert req.good and req.bad  # checked above
        good_rev, bad_rev = variable.resolve_ends(req.good, req.bad)
    where = None
    if req.post:  # its spelling; unless this is a dry run, a token that sees the issue: before anything runs
        from abbisect.commands.post import check_post

        where = check_post(req.post, req.dry_run)
    if req.dry_run:
        from abbisect.bisect.follow import plan

        assembled = [text] if req.source and (text := req.source.text()) else []
        click.echo(red.text("\n".join([*assembled, variable.dry_run(good_rev, bad_rev),
                                       *plan(rec, variable, good_rev, bad_rev), *gpu_lines(gpu_check)])))
        return None
    # The input is valid: what runs and reports a bisect loads now (a usage error never pays for it).
    from abbisect.report.files import new_output_dir

    out = resumed.out if resumed else new_output_dir(rec.name, req.output)
    if req.source is not None and req.source.doc is not None:  # assembled: kept where the reports name it
        req.source.keep(out)
        opts["recipe_path"] = str(out / KEPT)
    cmd = resumed.command if resumed else shlex.join(["abbisect", *sys.argv[1:]])
    resume_cmd = shlex.join(["abbisect", "bisect", "--resume", str(out)])
    progress(f"state: {out / 'state.json'} (if interrupted, resume with: {resume_cmd})")
    interrupted_hint(f"resume with: {resume_cmd}")
    run, trials = _search(rec, variable, good_rev, bad_rev, out, cmd, opts, resumed.replay if resumed else None,
                          cache, progress, red, before=resumed.spent if resumed else None)
    if rec.bisect.then_narrow and run.result and run.result.first_new:
        from abbisect.narrow.narrowing import masked

        run.narrowing = masked(_narrow_at_answer(run, cache, out, trials.fetch, progress), red)
    if rec.bisect.follow == "auto" and run.result and run.result.first_new and run.pins:
        from abbisect.bisect.follow import follow, follow_failed

        _write(run, opts, cache, out, lambda _: None)  # the engine's answer is on disk before any step runs

        def step(srec: Recipe, svar: Variable, good: str, bad: str, sout: Path, replay: dict[str, dict]) -> BisectRun:
            """One chained bisect; its report names its own recipe (the user's with bisect.over set) by a file
            name of its own, which its recipe block shows."""
            g, b = svar.resolve_ends(good, bad)
            named = sout / f"{Path(opts['recipe_path']).stem}.follow-{sout.name}.yaml"
            scmd = shlex.join(["abbisect", "bisect", str(named), "--good", good, "--bad", bad])
            srun, _ = _search(srec, svar, g, b, sout, scmd, opts, replay, cache, progress, red)
            _write(srun, {**opts, "recipe_path": str(named)}, cache, sout, progress)
            return srun

        try:
            run.follow = follow(run, out, cache, step, progress)
        except (UserError, RuntimeError) as exc:  # the engine's answer stands; the chain says where it stopped
            progress(f"follow: stopped: {exc}")
            run.follow = follow_failed(run, exc)
    _write(run, opts, cache, out, progress)
    if req.as_json:
        from abbisect.infra.envelope import dumps
        from abbisect.report.bisect import bisect_json

        click.echo(dumps("bisect", red.data(bisect_json(run))))
    if where is not None:
        from abbisect.commands.post import post_after

        if not post_after(out, where, lambda line: progress(Final(line))):
            raise SystemExit(exit_code("bisect", "post-failed"))
    return run


def _search(rec: Recipe, variable: Variable, good_rev: Revision, bad_rev: Revision, out: Path, cmd: str, opts: dict,
            replay: dict[str, dict] | None, cache, progress, red: Redactor,
            before: Spent | None = None) -> tuple[BisectRun, Any]:
    """One search between two resolved ends, its state saved in `out` after every trial (`replay`: the trials an
    interrupted run of it finished); the run and the trial cache it fetched from."""
    from abbisect.bisect.bisection import BisectRun, Spent
    from abbisect.bisect.driver import Driver
    from abbisect.bisect.oracle import Oracle
    from abbisect.trial.executors import from_recipe
    from abbisect.trial.judges import make_judge
    from abbisect.trial.trial_cache import TrialCache, machine_key

    old, new, bases = variable.order_ends(good_rev, bad_rev)
    run = BisectRun(rec, variable.repo, good_rev, bad_rev, old, new, variable, command=cmd, merge_bases=bases,
                    options=opts, before=before or Spent())
    if variable.describe():
        progress(f"bisecting {variable.describe()}")
    progress(f"bisect {rec.name}: good={good_rev.ref} ({good_rev.short}) bad={bad_rev.ref} "
             f"({bad_rev.short}) → {out}")
    judge = make_judge(opts["script"], opts["interactive"], opts["script_dir"])
    executor = from_recipe(rec, cache.root)
    if executor is not None:
        progress(f"{len(executor.slots)} slot(s) on the {executor.name} executor: "
                 + ", ".join(s.label() for s in executor.slots))
    # Keyed by where the trials run: this machine, or the nodes of a cluster.
    trials = TrialCache(cache, executor.machine_key() if executor else machine_key(), enabled=not opts["no_cache"])
    oracle = Oracle(rec, variable, out, trials.fetch, lambda spec: trials.get(spec, progress) is not None, progress,
                    retries=rec.bisect.retries, judge=judge, executor=executor,
                    # no background build while a performance trial measures: it would slow some passes; none
                    # here when trials run on other machines (each node builds its own)
                    prefetch=0 if (executor and (len(executor.slots) > 1 or executor.remote)) or rec.perf
                    else rec.bisect.prefetch)
    driver = Driver(oracle, progress, judge, red.data)
    try:
        run = driver.run(run, replay)  # state.json saved first, then after each step
    except (KeyboardInterrupt, SystemExit):
        oracle.shutdown(wait=False)
        raise
    return run, trials


def _narrow_at_answer(run: BisectRun, cache, out: Path, fetch, progress):
    """abbisect narrow at the found commit (a fix: at its parent, the last commit that fails)."""
    from abbisect.bisect.bisection import Mode
    from abbisect.checkout import Revision
    from abbisect.narrow.driver import Narrower
    from abbisect.trial.executors import from_recipe

    assert run.result is not None and run.result.first_new is not None  # checked by the caller
    sha = run.found_parent if run.mode is Mode.FIX and run.found_parent else run.result.first_new
    rev = Revision(sha[:10], sha, run.subject(sha))
    progress(f"narrowing the failure at {rev.short} ({'the last broken commit' if run.mode is Mode.FIX else 'the found commit'})")
    narrower = Narrower(run.recipe, run.repo, rev, cache.root, out / "narrow", fetch, progress,
                        from_recipe(run.recipe, cache.root))
    return narrower.narrow()


def _write(run: BisectRun, opts: dict, cache, out: Path, say: Callable[[str], None]) -> None:
    """bisect.md, bisect.json, outputs and logs in the run's folder; the headline and where it is, printed."""
    from abbisect.report.bisect import bisect_files, bisect_json, headline, reproduce_commands
    from abbisect.report.files import write_results
    from abbisect.report.nodes import node_caches
    from abbisect.report.portable import engine_source, portable_recipe, reproduce_command
    from abbisect.report.render import portable_for

    recipe_file = Path(opts["recipe_path"])
    reproduce = reproduce_commands(run, reproduce_command(shlex.split(run.command)[1:], recipe_file), str(recipe_file))
    if not run.variable.kind.git_drivable:  # git cannot drive a walk over package versions or another repository
        reproduce = reproduce[:1]
    results = [(str(s.role), s.result) for s in run.steps if s.result is not None]
    portable = portable_for(run.recipe, cache, run.repo, recipe_file, out, node_caches(run))
    files = bisect_files(run, reproduce, portable, portable_recipe(run.recipe, cache), engine_source(run.recipe),
                         recipe_file)
    write_results(out, files.pop("bisect.md"), bisect_json(run), results, portable, names=("bisect.md", "bisect.json"),
                  extra=files)
    say(Final(headline(run).replace("`", "")))
    if run.result and (pins := run.pins.get(run.result.first_new or "")):
        say(Final(f"It {pins.told()}."))
    if run.follow is not None:
        from abbisect.report.follow import chain

        say(Final(f"followed: {chain(run).replace('`', '') or run.follow.said}"
                  + (f" — stops: {run.follow.stopped}" if run.follow.stopped else "")))
    say(Final(f"report: {out / 'bisect.md'}"))


def _started(source: RecipeSource, given: dict[str, Any], flags: dict[str, Any],
             gpus: str | None) -> tuple[Recipe, dict[str, Any]]:
    """The recipe with the command line's bisect options (and --gpus), and the options a resumed run keeps."""
    rec, base = source.load()
    rec = rec.model_copy(update={"bisect": rec.bisect.model_copy(
        update={k: v for k, v in given.items() if v is not None})})
    if gpus:
        from abbisect.recipe.gpus import parse_gpu_option

        rec = rec.model_copy(update=parse_gpu_option(gpus).as_recipe())
    opts = {"no_cache": bool(flags["no_cache"]), "script": flags["script"] or rec.verdict.script,
            "script_dir": str(Path.cwd() if flags["script"] else base), "interactive": bool(flags["interactive"]),
            "recipe_path": str(source.path.resolve()) if source.path else ""}
    return rec, opts
