"""`abbisect schema`: the recipe's JSON Schema, for editors."""

from __future__ import annotations

import click

from abbisect.commands.endings import exit_help
from abbisect.commands.options import verbosity_options


@click.command("schema", epilog=exit_help("schema"))
@verbosity_options
def schema() -> None:
    """Print the recipe's JSON Schema (for editors: yaml-language-server, VS Code)."""
    import json

    from abbisect.recipe import Recipe
    from abbisect.recipe.vocabulary import writable

    click.echo(json.dumps(writable(Recipe.model_json_schema()), indent=2))
