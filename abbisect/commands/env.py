"""`abbisect env`: the environment fingerprint of this machine and a Python interpreter (venv)."""

from __future__ import annotations

import click

from abbisect.commands.endings import exit_help
from abbisect.commands.options import json_option, verbosity_options
from abbisect.gpu.fingerprint import collect, render_table


@click.command("env", epilog=exit_help("env"))
@json_option("Print the fingerprint as JSON (includes `key`).")
@click.option("--python", "python", type=click.Path(dir_okay=False), default=None,
              help="Interpreter to describe, e.g. a per-commit venv's bin/python (default: this one).")
@click.option("--key", "key_only", is_flag=True, help="Print only the short stable key.")
@verbosity_options
def env(as_json: bool, python: str | None, key_only: bool) -> None:
    """Print GPU(s), driver, CUDA, torch, triton and engine versions, and a stable key for this stack."""
    fp = collect(python=python)  # raises UserError for a missing interpreter
    if key_only:
        click.echo(fp.key)
        return
    if as_json:
        from abbisect.infra.envelope import dumps

        click.echo(dumps("env", fp.to_dict(), indent=2))
        return
    if not fp.has_gpu:
        click.echo("No GPU visible; reporting the rest.", err=True)
    click.echo(render_table(fp))
    for note in fp.notes:
        click.echo(f"note: {note}", err=True)
