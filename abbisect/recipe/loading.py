"""Loading a recipe: its file read (bounded.py), validated into a `Recipe` with every problem one line
naming the key, and its relative paths, prompts file and eval set resolved, so the recipe stands on its own.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from abbisect.infra.errors import UserError
from abbisect.recipe.bounded import load_yaml, read_text_file
from abbisect.recipe.eval import MAX_EVAL_FILE_BYTES, Eval, EvalItem, digest, parse_items, set_path
from abbisect.recipe.install import OverlayInstall, PrecompiledInstall, WheelInstall
from abbisect.recipe.schema import BUILTIN_PREFIX, MAX_PROMPTS, Prompt, Recipe
from abbisect.recipe.vocabulary import renamed_key
from abbisect.recipe.where import existing_recipe, recipe_path

__all__ = ["eval_items", "load_recipe", "parse_recipe", "recipe_path"]

MAX_RECIPE_BYTES = 1 << 20
MAX_PROMPTS_FILE_BYTES = 100 << 20
PROMPT_SUFFIXES = (".txt", ".jsonl", ".yaml", ".yml", ".json")


def _describe(err: ErrorDetails) -> str:
    loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function-", "tagged-union")))
    loc = re.sub(r"\.(str|PackagedModel|list\[.*?\])(\.|$)", r"\2", loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"unknown key '{loc}' (check the spelling; every key is listed in recipes/README.md)"
    if kind == "missing":
        return f"missing key '{loc}'"
    msg = err["msg"].removeprefix("Value error, ")
    got = err.get("input")
    shown = "" if isinstance(got, dict | list) or got is None else f" (got {_short(repr(got))})"
    return f"'{loc}': {msg}{shown}" if loc else msg


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def parse_recipe(data: Any, source: str = "recipe") -> Recipe:
    if not isinstance(data, dict):
        raise UserError(f"{source}: expected a mapping of keys at the top level")
    if renamed := renamed_key(data):
        raise UserError(f"{source}: {renamed}")
    try:
        recipe = Recipe.model_validate(data)
    except UserError as exc:  # a validator that knows more than pydantic (e.g. the probe's device classes)
        raise UserError(f"{source}: {exc}") from None
    except ValidationError as exc:
        errors = exc.errors()
        # A union (model: str | mapping) reports every branch; keep the branch the input was meant for.
        meant = [e for e in errors if not (e["type"].endswith("_type") and isinstance(e.get("input"), dict | list))]
        errors = meant or errors
        raise UserError(f"{source}: {_describe(errors[0])}"
                        + (f" (+{len(errors) - 1} more)" if len(errors) > 1 else "")) from None
    return recipe


def load_recipe(path: str | Path) -> tuple[Recipe, Path]:
    """Load and validate a recipe; relative paths inside it are resolved against its folder.

    Returns the recipe with prompts_file folded into prompts, and the recipe's folder.
    """
    p = existing_recipe(path)
    data = load_yaml(read_text_file(p, "recipe", MAX_RECIPE_BYTES), str(p))
    recipe = parse_recipe(data, str(p))
    base = p.resolve().parent
    return resolve_files(recipe, base, str(p)), base


def resolve_files(recipe: Recipe, base: Path, source: str) -> Recipe:
    """Make relative paths absolute and read the prompts file, so a recipe stands on its own."""
    updates: dict[str, Any] = {}
    repo = recipe.engine.repo
    if not repo.startswith(BUILTIN_PREFIX) and not re.match(r"^[a-z+]+://|^git@", repo):
        rp = (base / repo).resolve()
        if not rp.exists():
            raise UserError(f"{source}: 'engine.repo': no such directory {rp} (give a local checkout or a git URL)")
        updates["engine"] = recipe.engine.model_copy(update={"repo": str(rp)})
    if recipe.prompts_file:
        pf = (base / recipe.prompts_file).resolve()
        if pf.suffix not in PROMPT_SUFFIXES:
            raise UserError(f"{source}: 'prompts_file': {pf.name} is not a prompts file (give a "
                            f"{', '.join(PROMPT_SUFFIXES)} file)")
        if not pf.is_file():
            raise UserError(f"{source}: 'prompts_file': no such file {pf}")
        prompts = list(recipe.prompts) + _read_prompts(pf, source)
        if len(prompts) > MAX_PROMPTS:
            raise UserError(f"{source}: {len(prompts):,} prompts, more than the limit of {MAX_PROMPTS:,}")
        updates["prompts"] = prompts
        updates["prompts_file"] = None
    if recipe.eval is not None:
        updates["eval"] = resolve_eval(recipe.eval, base, source)
    install = recipe.install
    wheel = install.wheel if isinstance(install, PrecompiledInstall | WheelInstall | OverlayInstall) else None
    if wheel and not re.match(r"^[a-z+]+://", wheel) and "==" not in wheel:
        wp = (base / wheel).resolve()
        if not wp.exists():
            raise UserError(f"{source}: 'install.wheel': no such file {wp}")
        updates["install"] = install.model_copy(update={"wheel": str(wp)})
    over = recipe.bisect.over
    if over is not None and over.repo and not re.match(r"^[a-z+]+://|^git@", over.repo):
        dp = (base / over.repo).resolve()
        if not dp.exists():
            raise UserError(f"{source}: 'bisect.over.repo': no such directory {dp} (give a local checkout or a git URL)")
        updates["bisect"] = recipe.bisect.model_copy(update={"over": over.model_copy(update={"repo": str(dp)})})
    return recipe.model_copy(update=updates) if updates else recipe


def eval_items(section: Eval, base: Path, source: str = "recipe") -> tuple[tuple[EvalItem, ...], str]:
    """The items of the section's set and the set's sha256; a UserError names the problem (and the line)."""
    what = f"{source}: 'eval.set'"
    try:
        path = set_path(section.set, base)
        text = read_text_file(path, what, MAX_EVAL_FILE_BYTES)
        sha = digest(text)
        if section.sha256 is not None and sha != section.sha256:
            raise ValueError(f"{path.name} changed: its sha256 is {sha[:12]}…, the recipe's eval.sha256 "
                             f"{section.sha256[:12]}… (remove eval.sha256 to take the file as it is now)")
        return parse_items(text, path.name), sha
    except ValueError as exc:
        raise UserError(f"{what}: {exc}") from None


def resolve_eval(section: Eval, base: Path, source: str) -> Eval:
    """The section with its set's path made absolute (builtin:NAME stays) and hash filled in, after the set
    is read and checked, and the power plan run: an eval that cannot see its own eval.min_effect is refused
    here, when the recipe is loaded, so before any engine is built or started."""
    items, sha = eval_items(section, base, source)
    size = len(items)
    if section.n is not None and section.n > size:
        raise UserError(f"{source}: 'eval.n': {section.n:,} items asked of a set of {size:,}")
    if section.fewshot >= size:
        raise UserError(f"{source}: 'eval.fewshot': {section.fewshot} examples need a set of more than "
                        f"{section.fewshot} items (it has {size})")
    try:
        section.check_plan(size)
    except ValueError as exc:
        raise UserError(f"{source}: 'eval': {exc}") from None
    where = section.set if section.set.startswith("builtin:") else str(set_path(section.set, base))
    return section.model_copy(update={"set": where, "sha256": sha})


def _read_prompts(path: Path, source: str) -> list[Prompt]:
    """The prompts of a prompts file; an error names the item and the problem, never the file's text."""
    what = f"{source}: 'prompts_file'"
    text = read_text_file(path, what, MAX_PROMPTS_FILE_BYTES)
    if path.suffix in (".yaml", ".yml", ".json"):
        items = load_yaml(text, f"{what} {path}")
    elif path.suffix == ".jsonl":
        items = []
        for n, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    items.append(json.loads(line))
                except ValueError as exc:
                    raise UserError(f"{what} {path}: line {n} is not JSON ({getattr(exc, 'msg', 'invalid')})") from None
    else:
        items = [line for line in text.splitlines() if line.strip()]
    if not isinstance(items, list):
        raise UserError(f"{what} {path}: expected a list of prompts")
    if len(items) > MAX_PROMPTS:
        raise UserError(f"{what} {path}: {len(items):,} prompts, more than the limit of {MAX_PROMPTS:,}")
    prompts = []
    for n, item in enumerate(items, start=1):
        try:
            prompts.append(Prompt.model_validate({"prompt": item} if isinstance(item, str) else item))
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise UserError(f"{what} {path}: prompt {n}: {(loc + ': ') if loc else ''}{err['msg']}") from None
    return prompts
