"""`abbisect matrix`: gather result folders into the serving matrix; write markdown, JSON, CSV, HTML, PNGs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click

from abbisect.commands.common import open_cache
from abbisect.commands.endings import exit_help
from abbisect.commands.options import cache_dir_option, json_option, output_option, verbosity_options
from abbisect.infra.errors import UserError
from abbisect.matrix import plots
from abbisect.matrix.cells import Matrix, build_cells, mark_env, stack_from
from abbisect.matrix.html import render_html
from abbisect.matrix.loader import Source, load
from abbisect.matrix.markdown import render_matrix

FILES = ("matrix.md", "matrix.json", "matrix.csv", "matrix.html")


def machine_key() -> str:
    """This machine's GPU stack key (`abbisect env --key` without an engine installed gives the same)."""
    from abbisect.gpu.fingerprint import collect

    return stack_from(collect()).key


def _slug(report: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", report.rsplit("/", 1)[0]).strip("-.") or "result"


def pictures(sources: list[Source]) -> list[tuple[str, str, bytes]]:
    """(caption, file name, PNG) for each bisect (timeline, range) and each A/B (degeneration profile)."""
    made = []
    for s in sources:
        slug = _slug(s.report)
        where = "/".join(s.report.split("/")[-3:-1]) or s.report
        if s.kind == "bisect":
            made += [
                (
                    f"bisect {where}: trials by round and slot",
                    f"{slug}-timeline.png",
                    plots.bisect_timeline(s.data),
                ),
                (
                    f"bisect {where}: candidates left per step",
                    f"{slug}-range.png",
                    plots.bisect_range(s.data),
                ),
            ]
        elif s.kind == "run":
            made.append(
                (
                    f"A/B {where}: where each output starts to loop",
                    f"{slug}-loops.png",
                    plots.degeneration_profile(s.data),
                )
            )
    return [(cap, fname, png) for cap, fname, png in made if png]


@click.command("matrix", epilog=exit_help("matrix"))
@click.argument("results_dirs", nargs=-1, type=click.Path(file_okay=False))
@output_option("folder for matrix.{md,json,csv,html} and plots/ (default RESULTS_DIR/matrix)")
@click.option(
    "--checks", is_flag=True, help="also read `abbisect check` verdicts kept in the cache (CACHE/checks)"
)
@click.option("--trial-cache", is_flag=True, help="also read every cached trial (CACHE/trials/*.json)")
@cache_dir_option("the abbisect cache (for --checks, --trial-cache)")
@click.option("--env", "mark_here", is_flag=True, help="mark the cells whose GPU stack is this machine's")
@click.option("--env-key", help="mark the cells of this GPU stack key (as `abbisect env --key` prints it)")
@click.option("--no-plots", is_flag=True, help="skip the pictures")
@json_option("print matrix.json on stdout")
@verbosity_options
def matrix(
    results_dirs: tuple[str, ...],
    output: str | None,
    checks: bool,
    trial_cache: bool,
    cache_dir: str | None,
    mark_here: bool,
    env_key: str | None,
    no_plots: bool,
    as_json: bool,
) -> None:
    """Every verified cell of model × engine@commit × GPU stack from the results of run, bisect and check.

    RESULTS_DIR (default results/) is searched for results.json (run), bisect.json (bisect) and trial.json
    (check). Newer evidence for a cell supersedes older; disagreeing evidence is shown beside it; a commit
    that changed a cell's outcome is marked as a transition.
    """
    roots = [Path(d) for d in results_dirs or ("results",)]
    missing = [str(r) for r in roots if not r.is_dir()]
    if missing:
        raise UserError(f"no such results folder: {', '.join(missing)}")
    out = Path(output) if output else roots[0] / "matrix"
    out.mkdir(parents=True, exist_ok=True)
    cache = open_cache(cache_dir, budget=False) if (checks or trial_cache) else None
    if cache and checks and cache.checks().is_dir():
        roots.append(cache.checks())
    loaded = load(roots, out, cache.trials if cache and trial_cache else None)
    if not loaded.sources:
        raise UserError(
            f"no abbisect results (results.json, bisect.json, trial.json) under {', '.join(map(str, roots))}"
        )
    key = env_key or (machine_key() if mark_here else "")
    cells = build_cells(loaded.evidence)
    m = Matrix(
        mark_env(cells, key) if key else cells, [s.report for s in loaded.sources], loaded.skipped, key
    )

    made: list[tuple[str, str, bytes]] = []
    if no_plots:
        click.echo("plots skipped (--no-plots)", err=True)
    elif not plots.available():
        click.echo("plots skipped: matplotlib is not installed (pip install 'abbisect[plots]')", err=True)
    else:
        made = pictures(loaded.sources)
        (out / "plots").mkdir(exist_ok=True)
        for _, fname, png in made:
            (out / "plots" / fname).write_bytes(png)
    data = m.to_dict()
    (out / "matrix.md").write_text(render_matrix(m, [(cap, f"plots/{f}") for cap, f, _ in made]))
    (out / "matrix.json").write_text(json.dumps(data, indent=1))
    import pandas as pd  # only here: `abbisect --help` imports every command

    pd.DataFrame([c.row() for c in m.cells]).to_csv(out / "matrix.csv", index=False)
    (out / "matrix.html").write_text(render_html(m, [(cap, png) for cap, _, png in made]))
    n = m.counts()
    click.echo(
        f"{n['cells']} cells ({n['good']} good, {n['bad']} bad, {n['skip']} untestable; "
        f"{n['transitions']} transitions, {n['conflicts']} conflicts"
        + (f", {n['replayed']} results replayed from the cache" if n["replayed"] else "")
        + (f", {n['env_match']} on GPU stack {key}" if key else "")
        + f") from {len(loaded.sources)} "
        f"result files; {len(made)} pictures",
        err=True,
    )
    for skipped in loaded.skipped:
        click.echo(f"not read: {skipped}", err=True)
    click.echo(f"wrote {', '.join(str(out / f) for f in FILES)}", err=True)
    if as_json:
        from abbisect.infra.envelope import dumps

        click.echo(dumps("matrix", data))
