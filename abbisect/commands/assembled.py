"""Which recipe a command runs: the one named, ./abbisect.yaml, or — in an SGLang or vLLM checkout with neither —
the one assembled from the checkout and the command line (--model, --engine, --prompt, the server's flags after
`--`; abbisect/recipe/assemble.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from abbisect.infra.errors import UserError
from abbisect.recipe.where import existing_recipe, recipe_path

if TYPE_CHECKING:
    from abbisect.recipe import Recipe

AFTER_DASHES = "abbisect.after_dashes"
KEPT = "recipe.yaml"  # the assembled recipe, in the result folder
F = TypeVar("F", bound=Callable[..., Any])


class WithServerFlags(click.Command):
    """A command whose words after `--` are kept apart before click parses the rest: the server's flags when the
    recipe is assembled (`bisect` reads them as its PATHSPEC when a recipe is given)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            ctx.meta[AFTER_DASHES] = tuple(args[cut + 1:])
            args = args[:cut]
        return super().parse_args(ctx, args)


def after_dashes() -> tuple[str, ...]:
    ctx = click.get_current_context(silent=True)
    return tuple(ctx.meta.get(AFTER_DASHES, ())) if ctx is not None else ()


def checkout_options(f: F) -> F:
    """--model, --engine and --prompt: what a recipe assembled from an engine checkout takes."""
    f = click.option("--prompt", "prompts", multiple=True, help="without a recipe: a prompt to ask (repeatable; "
                     "default: a built-in set that exposes loops, collapse and wrong answers)")(f)
    f = click.option("--engine", default=None, metavar="sglang|vllm", help="without a recipe: the engine of this "
                     "checkout (default: what its pyproject.toml names)")(f)
    return click.option("--model", default=None, help="without a recipe, in an SGLang or vLLM checkout: the model "
                        "the server loads; the server's flags follow -- as you pass them to it")(f)


@dataclass(frozen=True)
class Asked:
    """What the command line gives to assemble a recipe with."""

    model: str | None = None
    engine: str | None = None
    prompts: tuple[str, ...] = ()
    flags: tuple[str, ...] = field(default_factory=after_dashes)

    def given(self, flags: bool = True) -> list[str]:
        return [name for name, value in (("--model", self.model), ("--engine", self.engine),
                                         ("--prompt", self.prompts), ("flags after --", self.flags and flags))
                if value]


@dataclass(frozen=True)
class RecipeSource:
    """A recipe file, or a recipe assembled from the checkout at `root` (`doc`)."""

    path: Path | None = None
    doc: dict[str, Any] | None = None
    root: Path | None = None
    base: Path | None = None  # where the assembled recipe's relative paths start

    @property
    def what(self) -> str:
        return str(self.path) if self.path is not None else f"the recipe assembled from {self.root}"

    def load(self) -> tuple[Recipe, Path]:
        from abbisect.recipe.loading import load_recipe, parse_recipe, resolve_files

        if self.path is not None:
            return load_recipe(self.path)
        assert self.doc is not None and self.base is not None
        return resolve_files(parse_recipe(self.doc, self.what), self.base, self.what), self.base

    def text(self, heading: str | None = None) -> str | None:
        """The assembled recipe as YAML to save and edit (None for a recipe file)."""
        if self.doc is None:
            return None
        from abbisect.recipe.assemble import recipe_yaml

        return recipe_yaml(self.doc, heading or f"assembled by abbisect from the checkout {self.root} and the "
                           "command line; save it as abbisect.yaml there to edit it (abbisect init writes it)")

    def keep(self, out: Path) -> None:
        """The assembled recipe written into the result folder (a recipe file is the user's own: not copied)."""
        if (text := self.text()) is not None:
            (out / KEPT).write_text(text)


def checkout_root(folder: Path) -> Path | None:
    from abbisect.infra import git

    proc = git.call(["rev-parse", "--show-toplevel"], folder)
    return Path(proc.stdout.strip()) if proc.returncode == 0 and proc.stdout.strip() else None


def which_recipe(recipe: str | None, asked: Asked, fallback: Path | None = None,
                 flags_are_pathspec: bool = False) -> RecipeSource:
    """The recipe named, else ./abbisect.yaml, else the one assembled in an engine checkout, else `fallback`."""
    if recipe or Path("abbisect.yaml").is_file():
        path = existing_recipe(recipe_path(recipe))
        if extra := asked.given(flags=not flags_are_pathspec):
            raise UserError(f"{', '.join(extra)}: these assemble a recipe where there is none, and {path} is the "
                            "recipe (set model, launch.flags and prompts there)")
        return RecipeSource(path)
    if not asked.given():
        from abbisect.recipe.assemble import engine_of

        root = checkout_root(Path.cwd())
        if root is None or engine_of(root) is None:
            if fallback is not None:
                return RecipeSource(existing_recipe(fallback))
            raise UserError("no RECIPE given and no abbisect.yaml in this folder: pass the path of a recipe, or run "
                            "in an SGLang or vLLM checkout with --model M (abbisect init writes abbisect.yaml)")
    return checkout_recipe(asked)


def checkout_recipe(asked: Asked, relative: bool = False) -> RecipeSource:
    """The recipe assembled for the engine checkout this folder is in (`relative`: its repo named from here, for
    a file written here), or one line saying what is missing."""
    from abbisect.recipe.assemble import assemble, checked_engine

    if asked.engine is not None:
        checked_engine(asked.engine, Path.cwd())  # an unknown engine is said first, wherever this is
    root = checkout_root(Path.cwd())
    if root is None:
        raise UserError(f"{Path.cwd()} is not in a git checkout: run in the engine's checkout, or give a RECIPE")
    kind = checked_engine(asked.engine, root)
    repo = os.path.relpath(root, Path.cwd()) if relative else str(root)
    return RecipeSource(None, assemble(kind, repo, asked.model, asked.flags, asked.prompts), root, Path.cwd())
