"""The recipe: one YAML file that says what to build, launch, ask and judge.

One module per job: `schema` (the pydantic models, `Recipe` and its sections; `eval`, `perf`, `gpus` and `probe`
hold the sections with rules of their own, `devices` the GPU device classes a probe names), `install` (the
install strategies' models and their registry), `bounded` (a recipe's files read bounded), `loading` (a file
into a `Recipe`: validated, every problem one line naming the key, its paths resolved) and `fingerprint`
(what of a recipe keys a cached trial); `where` finds the recipe file before any of them loads. The names the
rest of abbisect uses are importable from here, each loading its module when first used, so a command that
stops before reading a recipe imports no pydantic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from abbisect.recipe.install import (
        FLAT_INSTALL_DEFAULTS,
        CommandInstall,
        EditableInstall,
        FromCheckout,
        Install,
        InstallCommon,
        OverlayInstall,
        PrecompiledInstall,
        VllmWheelsInstall,
        WheelInstall,
        make_install,
    )
    from abbisect.recipe.loading import eval_items, load_recipe, parse_recipe
    from abbisect.recipe.schema import (
        BUILTIN_PREFIX,
        DEMO_REPO,
        Over,
        PackagedModel,
        Prompt,
        Recipe,
        Sampling,
        Verdicts,
        VersionRange,
    )
    from abbisect.recipe.where import recipe_path

_WHERE = {
    "BUILTIN_PREFIX": "schema",
    "CommandInstall": "install",
    "DEMO_REPO": "schema",
    "EditableInstall": "install",
    "FLAT_INSTALL_DEFAULTS": "install",
    "FromCheckout": "install",
    "Install": "install",
    "InstallCommon": "install",
    "Over": "schema",
    "OverlayInstall": "install",
    "PackagedModel": "schema",
    "PrecompiledInstall": "install",
    "Prompt": "schema",
    "Recipe": "schema",
    "Sampling": "schema",
    "Verdicts": "schema",
    "VersionRange": "schema",
    "VllmWheelsInstall": "install",
    "WheelInstall": "install",
    "eval_items": "loading",
    "load_recipe": "loading",
    "make_install": "install",
    "parse_recipe": "loading",
    "recipe_path": "where",
}
__all__ = [
    "BUILTIN_PREFIX",
    "DEMO_REPO",
    "FLAT_INSTALL_DEFAULTS",
    "CommandInstall",
    "EditableInstall",
    "FromCheckout",
    "Install",
    "InstallCommon",
    "Over",
    "OverlayInstall",
    "PackagedModel",
    "PrecompiledInstall",
    "Prompt",
    "Recipe",
    "Sampling",
    "Verdicts",
    "VersionRange",
    "VllmWheelsInstall",
    "WheelInstall",
    "eval_items",
    "load_recipe",
    "make_install",
    "parse_recipe",
    "recipe_path",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'abbisect.recipe' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"abbisect.recipe.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
