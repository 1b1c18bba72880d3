"""`abbisect run`: the A/B — the recipe on two commits (or two pin sets), same flags, temperature 0."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from abbisect.builtin import DEFAULT_RECIPE
from abbisect.commands.assembled import Asked, WithServerFlags, checkout_options, which_recipe
from abbisect.commands.common import interrupted_hint
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
    from abbisect.recipe import Recipe
    from abbisect.trial.spec import Progress, TrialResult, TrialSpec


def _sides(recipe: Recipe, a: str | None, b: str | None) -> tuple[str, str]:
    ref_a = a or (recipe.sides.a.ref if recipe.sides else None)
    ref_b = b or (recipe.sides.b.ref if recipe.sides else None)
    if not (ref_a and ref_b):
        raise UserError("no sides: add 'sides: {a: REF, b: REF}' to the recipe or pass --a REF --b REF")
    return ref_a, ref_b


def _pins(recipe: Recipe, a_pins: tuple[str, ...], b_pins: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """Each side's pins: --a-pin/--b-pin when given, else the recipe's sides.<x>.pins."""
    from abbisect.environment.pins import requirement_name

    got = (a_pins or tuple(recipe.sides.a.pins if recipe.sides else ()),
           b_pins or tuple(recipe.sides.b.pins if recipe.sides else ()))
    for pin in (p for side in got for p in side):
        if not requirement_name(pin):
            raise UserError(f"pin {pin!r} is not a requirement (give NAME==VERSION, e.g. deep-gemm==2.1.0)")
    return got


OUTCOMES = ("good", "bad", "skip")


def parse_gate(spec: str | None, option: str) -> dict[str, str]:
    """`a=bad,b=good` → {"a": "bad", "b": "good"}; refused before anything runs."""
    gate: dict[str, str] = {}
    for part in (spec or "").split(","):
        if not part.strip():
            continue
        side, _, outcome = part.strip().partition("=")
        if side not in ("a", "b") or outcome not in OUTCOMES:
            raise UserError(f"{option} {spec!r}: expected SIDE=OUTCOME[,...] with SIDE a or b and OUTCOME "
                            f"{', '.join(OUTCOMES)} (e.g. {option} a=bad,b=good)")
        gate[side] = outcome
    return gate


def gate_failures(outcomes: dict[str, str], expect: dict[str, str], fail_if: dict[str, str]) -> list[str]:
    failures = [f"expected {s}={o}, got {outcomes[s]}" for s, o in expect.items() if outcomes[s] != o]
    failures += [f"{s} is {o} (--fail-if)" for s, o in fail_if.items() if outcomes[s] == o]
    return failures


@click.command("run", cls=WithServerFlags,
               epilog=exit_help("run") + " 1 only with --expect/--fail-if, when the gate fails.")
@recipe_argument
@checkout_options
@click.option("--a", "ref_a", help="ref for side A (overrides sides.a)")
@click.option("--b", "ref_b", help="ref for side B (overrides sides.b)")
@click.option("--a-pin", "a_pins", multiple=True, help="a requirement installed into A's venv after the engine "
              "(repeatable; replaces sides.a.pins), e.g. deep-gemm==2.1.0")
@click.option("--b-pin", "b_pins", multiple=True, help="the same for side B")
@output_option()
@cache_dir_option()
@dry_run_option("print the plan (refs, install steps, argv, prompts) and stop")
@no_cache_option("run both sides even if a cached result exists (it is replaced)")
@json_option("print the final result as JSON on stdout")
@judge_options("each side")
@click.option("--expect", metavar="SIDE=OUTCOME,...",
              help="CI gate: exit 1 unless each side got this outcome (good/bad/skip), e.g. a=bad,b=good")
@click.option("--fail-if", metavar="SIDE=OUTCOME,...", help="CI gate: exit 1 if a side got this outcome, e.g. b=bad")
@post_option
@verbosity_options
def run(recipe: str | None, model: str | None, engine: str | None, prompts: tuple[str, ...], ref_a: str | None,
        ref_b: str | None, a_pins: tuple[str, ...], b_pins: tuple[str, ...],
        output: str | None, cache_dir: str | None, dry_run: bool, no_cache: bool, as_json: bool, script: str | None,
        interactive: bool, expect: str | None, fail_if: str | None, post_to: str | None) -> None:
    """A/B: the recipe on two commits, same flags, temperature 0; writes report.md, results.json, outputs.csv.

    In an SGLang or vLLM checkout without a recipe: `abbisect run --a REF --b REF --model M -- FLAGS` (the
    server's flags as you pass them to it) assembles one; --dry-run prints it, and the result folder keeps it.
    """
    gates = parse_gate(expect, "--expect"), parse_gate(fail_if, "--fail-if")
    for option, given in (("--a", ref_a), ("--b", ref_b)):
        if given is not None and not given.strip():  # never the recipe's side in its place, silently
            raise UserError(f"{option} {given!r}: an empty ref (give a branch, tag or sha, or leave {option} out "
                            "to use the recipe's side)")
    check_output_option(output)
    source = which_recipe(recipe, Asked(model, engine, prompts), DEFAULT_RECIPE)
    recipe_file = source.path
    from abbisect.commands.common import gpu_lines, open_cache, open_reporter
    from abbisect.gpu.preflight import preflight
    from abbisect.trial.judges import make_judge

    rec, base = source.load()
    if why := rec.perf_conflict():
        raise UserError(why)
    pins = _pins(rec, a_pins, b_pins)
    if any(pins) and not rec.sides:  # a dependency A/B: one engine commit (HEAD unless named), two pin sets
        ref_a = ref_a or ref_b or "HEAD"
        ref_b = ref_b or ref_a
    refs = _sides(rec, ref_a, ref_b)
    judge = make_judge(script or rec.verdict.script, interactive, Path.cwd() if script else base)
    red = Redactor.from_recipe(rec)
    gpu_check = preflight(rec)  # before the cache: a GPU this machine lacks is one usage line
    where = None
    if post_to:  # its spelling; unless this is a dry run, a token that sees the issue: before anything runs
        from abbisect.commands.post import check_post

        where = check_post(post_to, dry_run)
    if dry_run:
        from abbisect.infra.cache import cache_path  # a plan needs no cache, not even a writable one
        from abbisect.trial.dryrun import render_plan

        assembled = [text] if (text := source.text()) else []
        click.echo(red.text("\n".join([*assembled, render_plan(rec, refs, cache_path(cache_dir), pins),
                                       *gpu_lines(gpu_check)])))
        return
    gpu_check.raise_if_unfit()
    # The input is valid: what runs and reports an A/B loads now (a usage error never pays for it).
    from abbisect.ab import resolve_sides, run_ab
    from abbisect.infra.envelope import dumps
    from abbisect.report.files import new_output_dir, write_results
    from abbisect.report.portable import reproduce_command
    from abbisect.report.render import ab_files, portable_for
    from abbisect.trial.judges import judging
    from abbisect.trial.pipeline import run_trial

    progress = red.guard(open_reporter())
    for note in gpu_check.notes:
        progress(f"note: {note}")
    cache = open_cache(cache_dir, progress)
    repo, revs = resolve_sides(rec, refs, cache, progress)
    out = new_output_dir(rec.name, output)
    source.keep(out)
    interrupted_hint(f"{out} holds what ran before the interruption: logs, no report")
    progress(f"recipe {rec.name}: A={refs[0]} ({revs[0].short}) B={refs[1]} ({revs[1].short}) → {out}")
    from abbisect.trial.trial_cache import TrialCache, machine_key

    trials = TrialCache(cache, machine_key(), enabled=not no_cache)
    fetch: Callable[..., TrialResult] = trials.fetch
    executor = None
    if rec.ab.parallel:  # each side in a trial process of its own, on its own slot
        from abbisect.ab import side_slots
        from abbisect.trial.executors import LocalParallel

        executor = pool = LocalParallel(side_slots(rec, progress))
        slot_of = dict(zip(("a", "b"), pool.slots, strict=True))

        def fetch(spec: TrialSpec, say: Progress) -> TrialResult:
            return trials.fetch(spec, say, lambda s, p: pool.submit(s, slot_of[s.side], p).result())
    try:
        ab = run_ab(rec, repo, revs, cache, out, reproduce_command(sys.argv[1:], recipe_file), progress,
                    judging(fetch, judge, run_trial), pins, at_once=rec.ab.parallel)
    finally:
        if executor is not None:
            executor.shutdown()
    portable = portable_for(rec, cache, repo, recipe_file, out)
    files = ab_files(ab, rec, cache, repo, recipe_file, out)
    launches = [(f"{side}-{k + 1}" if k else side, t) for side in ("a", "b") for k, t in enumerate(ab.trials(side))]
    write_results(out, files.pop("report.md"), ab.to_dict(), launches, portable, extra=files)
    if ab.assessment is not None:
        progress(Final(f"A: {ab.outcome('a')} ({ab.assessment.a.evidence})   "
                       f"B: {ab.outcome('b')} ({ab.assessment.b.evidence})"))
    else:
        progress(Final(f"A: {ab.a.verdict.status} → {ab.a.verdict.outcome}   "
                       f"B: {ab.b.verdict.status} → {ab.b.verdict.outcome}"))
    progress(Final(f"report: {out / 'report.md'}"))
    if as_json:
        click.echo(dumps("run", red.data(ab.to_dict())))
    posted = True
    if where is not None:
        from abbisect.commands.post import post_after

        posted = post_after(out, where, lambda line: progress(Final(line)))
    failures = gate_failures({"a": ab.outcome("a"), "b": ab.outcome("b")}, *gates)
    if failures:
        click.echo(f"abbisect: gate failed: {'; '.join(failures)}", err=True)
        raise SystemExit(exit_code("run", "gate-failed"))
    if not posted:
        raise SystemExit(exit_code("run", "post-failed"))
