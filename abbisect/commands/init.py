"""`abbisect init`: abbisect.yaml for the engine checkout this folder is in, from the command line as `run`,
`bisect`, `check` and `narrow` assemble it when there is none; never overwrites."""

from __future__ import annotations

import os
from pathlib import Path

import click

from abbisect.commands.assembled import Asked, RecipeSource, WithServerFlags, checkout_options, checkout_root
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
    from abbisect.recipe.assemble import assemble, checked_engine

    target = Path.cwd() / RECIPE_FILE
    if target.exists():
        raise UserError(f"{target} exists: not overwritten (edit it, or move it away and run abbisect init again)")
    asked = Asked(model, engine, prompts)
    if engine is not None:
        checked_engine(engine, Path.cwd())
    root = checkout_root(Path.cwd())
    if root is None:
        raise UserError(f"{Path.cwd()} is not in a git checkout: run abbisect init in the engine's checkout")
    kind = checked_engine(engine, root)
    doc = assemble(kind, os.path.relpath(root, Path.cwd()), asked.model, asked.flags, asked.prompts)
    source = RecipeSource(None, doc, root)
    source.load()  # what run would refuse is refused now, before the file is written
    text = (source.text() or "").replace(
        "assembled by abbisect from the checkout", "written by abbisect init for the checkout", 1).replace(
        "; save it as abbisect.yaml there to edit it (abbisect init writes it)", "", 1)
    try:
        with target.open("x") as f:  # never over a file that appeared meanwhile
            f.write(text)
    except FileExistsError:
        raise UserError(f"{target} exists: not overwritten") from None
    click.echo(f"wrote {target} ({kind} checkout, model {model}); edit it, then: abbisect run --a GOOD --b BAD, "
               "abbisect bisect --good GOOD --bad BAD, abbisect check REF")
