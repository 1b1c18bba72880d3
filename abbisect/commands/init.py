"""`abbisect init`: abbisect.yaml for the engine checkout this folder is in, from the command line as `run`,
`bisect`, `check` and `narrow` assemble it when there is none; never overwrites."""

from __future__ import annotations

from pathlib import Path

import click

from abbisect.commands.assembled import Asked, WithServerFlags, checkout_options, checkout_recipe
from abbisect.commands.endings import exit_help
from abbisect.commands.options import verbosity_options
from abbisect.infra.errors import UserError

RECIPE_FILE = "abbisect.yaml"


@click.command("init", cls=WithServerFlags, epilog=exit_help("init"))
@checkout_options
@verbosity_options
def init(model: str | None, engine: str | None, prompts: tuple[str, ...]) -> None:
    """Write abbisect.yaml for this SGLang or vLLM checkout: `abbisect init --model M -- FLAGS`.

    The recipe `run`, `bisect`, `check` and `narrow` would assemble here (the engine's install and launch, the
    model, the server's flags after -- as you pass them to it, the prompts), with a comment on the keys most
    often changed. An existing abbisect.yaml is never overwritten; from then on the commands run it.
    """
    target = Path.cwd() / RECIPE_FILE
    if target.exists():
        raise UserError(f"{target} exists: not overwritten (edit it, or move it away and run abbisect init again)")
    source = checkout_recipe(Asked(model, engine, prompts), relative=True)
    rec, _ = source.load()  # what run would refuse is refused now, before the file is written
    text = source.text(f"written by abbisect init for the {rec.engine.kind} checkout {source.root}") or ""
    try:
        with target.open("x") as f:  # never over a file that appeared meanwhile
            f.write(text)
    except FileExistsError:
        raise UserError(f"{target} exists: not overwritten") from None
    click.echo(f"wrote {target} ({rec.engine.kind} checkout, model {model}); edit it, then: abbisect run --a GOOD "
               "--b BAD, abbisect bisect --good GOOD --bad BAD, abbisect check REF")
