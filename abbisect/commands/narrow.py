"""`abbisect narrow`: at one commit, the smallest part of a failing launch to blame and the switches that make
the failure go away (abbisect/narrow/)."""

from __future__ import annotations

import sys

import click

from abbisect.commands.assembled import Asked, WithServerFlags, checkout_options, which_recipe
from abbisect.commands.common import interrupted_hint, open_cache, open_reporter
from abbisect.commands.endings import exit_code, exit_help
from abbisect.commands.options import (
    cache_dir_option,
    check_output_option,
    json_option,
    no_cache_option,
    output_option,
    recipe_argument,
    verbosity_options,
)
from abbisect.infra.errors import UserError
from abbisect.infra.progress import Final
from abbisect.infra.redact import Redactor


@click.command(cls=WithServerFlags, epilog=exit_help("narrow"))
@recipe_argument
@checkout_options
@click.option("--ref", default="HEAD", show_default=True, help="the commit whose failing launch is narrowed")
@click.option("--pin", "pins", multiple=True, help="a requirement installed after the engine in the failing "
              "launch (repeatable), e.g. deep-gemm==2.1.0")
@click.option("--switches/--no-switches", default=True, show_default=True,
              help="try the feature switches the commit accepts (the built-in catalogue and narrow.switches)")
@click.option("--slots", type=click.IntRange(1, 64), default=None,
              help="probes at once without GPUs (CPU engines); with GPUs, the recipe's gpus slots")
@output_option()
@cache_dir_option()
@no_cache_option("run every probe even if the trial cache holds its launch", default=None)
@json_option("print the result as JSON on stdout")
@verbosity_options
def narrow(recipe, model, engine, prompts, ref, pins, switches, slots, output, cache_dir, no_cache, as_json) -> None:
    """Narrow a failing launch at one commit: which flags, variables or pins are to blame, and which feature
    switch makes the failure go away.

    The recipe's launch must fail at REF. With `narrow.passing` in the recipe (a launch that passes), delta
    debugging finds a smallest set of the differences that still fails. With --switches (the default), each
    feature switch of the engine's catalogue that this commit's --help declares (and narrow.switches, the
    recipe's own) is tried on the failing launch; the ones that pass are the workarounds, narrowest first.
    Every probe is a trial of the recipe's verdict; a finished probe comes from the trial cache when the same
    command runs again.

    In an SGLang or vLLM checkout without a recipe: `abbisect narrow --ref REF --model M -- FLAGS` (the
    failing launch's flags).
    """
    check_output_option(output)
    source = which_recipe(recipe, Asked(model, engine, prompts))
    rec, _ = source.load()
    if slots:
        rec = rec.model_copy(update={"bisect": rec.bisect.model_copy(update={"slots": slots})})
    if rec.narrow.passing is None and not switches:
        raise UserError("nothing to narrow with: give narrow.passing in the recipe (a launch that passes), or "
                        "leave --switches on")
    from abbisect.launch.switches import catalogue_for

    if rec.narrow.passing is None and not catalogue_for(rec):
        raise UserError(f"nothing to narrow with: engine {rec.engine.kind} has no built-in switch catalogue"
                        + (" (narrow.catalogue: false)" if not rec.narrow.catalogue else "")
                        + " and the recipe names no narrow.switches; give narrow.switches (this engine's own feature "
                        "flags) or narrow.passing (a launch that passes)")
    # The input is valid: what runs and reports the probes loads now (a usage error never pays for it).
    from abbisect import checkout
    from abbisect.infra.envelope import dumps
    from abbisect.narrow.driver import Narrower
    from abbisect.narrow.narrowing import masked
    from abbisect.report.files import new_output_dir, write_results
    from abbisect.report.narrow import headline, narrow_json, render_narrow
    from abbisect.report.portable import reproduce_command
    from abbisect.report.render import portable_for
    from abbisect.trial.executors import from_recipe
    from abbisect.trial.trial_cache import TrialCache, machine_key

    red = Redactor.from_recipe(rec)
    progress = red.guard(open_reporter())
    cache = open_cache(cache_dir, progress)
    repo = checkout.open_repo(rec.engine.repo, cache, say=progress)
    rev = checkout.resolve(repo, ref, progress)
    out = new_output_dir(f"{rec.name}-narrow", output)
    interrupted_hint(f"{out} holds the probes run before the interruption; the same command again takes every "
                     "finished probe from the trial cache")
    progress(f"narrow {rec.name} at {rev.ref} ({rev.short}) → {out}")
    source.keep(out)
    executor = from_recipe(rec, cache.root)
    trials = TrialCache(cache, executor.machine_key() if executor else machine_key(), enabled=not no_cache)
    command = reproduce_command(sys.argv[1:], source.path)
    narrower = Narrower(rec, repo, rev, cache.root, out, trials.fetch, progress, executor, command)
    run = masked(narrower.narrow(use_switches=switches), red)  # what the reports show: secrets out first
    results = [(f"probe{p.n}", p.trials[0]) for p in run.probes if p.trials]
    portable = portable_for(rec, cache, repo, source.path, out)
    md = portable.render(lambda: render_narrow(run, command))
    data = narrow_json(run)
    write_results(out, md, data, results, portable, names=("narrow.md", "narrow.json"))
    progress(Final(headline(run).replace("`", "")))
    progress(Final(f"report: {out / 'narrow.md'}"))
    if as_json:
        click.echo(dumps("narrow", red.data(data)))
    base = run.baseline
    ending = ("found" if run.found else "not-failing" if base is None or base.outcome != "bad"
              else "none-passed" if run.tried else "nothing-to-try")
    if ending != "found":
        raise SystemExit(exit_code("narrow", ending))

