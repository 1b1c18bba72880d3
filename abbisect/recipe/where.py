"""Which recipe a command runs, found before anything heavy is imported: a usage error about a missing recipe
costs a command no pydantic, no schema."""

from __future__ import annotations

from pathlib import Path

from abbisect.infra.errors import UserError


def recipe_path(recipe: str | None, fallback: Path | None = None) -> Path:
    """The recipe a command runs: the one named, else ./abbisect.yaml, else `fallback` if it exists."""
    if recipe:
        return Path(recipe)
    if Path("abbisect.yaml").is_file():
        return Path("abbisect.yaml")
    if fallback is not None and fallback.is_file():
        return fallback
    raise UserError("no RECIPE given and no abbisect.yaml in this folder (pass the path of a recipe)")


def existing_recipe(path: str | Path) -> Path:
    """The recipe file at `path`, or the one-line usage error that says it is not there."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"recipe not found: {p} (give the path of a YAML recipe; examples are in recipes/)")
    return p
