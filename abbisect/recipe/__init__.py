"""The recipe: one YAML file that says what to build, launch, ask and judge.

One module per job: `schema` (the pydantic models, `Recipe` and its sections; `eval`, `perf`, `gpus` and `probe`
hold the sections with rules of their own, `devices` the GPU device classes a probe names), `install` (the
install strategies' models and their registry), `bounded` (a recipe's files read bounded), `loading` (a file
into a `Recipe`: validated, every problem one line naming the key, its paths resolved) and `fingerprint`
(what of a recipe keys a cached trial). The names the rest of abbisect uses are importable from here.
"""

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
from abbisect.recipe.loading import eval_items, load_recipe, parse_recipe, recipe_path
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

__all__ = [
    "BUILTIN_PREFIX", "DEMO_REPO", "FLAT_INSTALL_DEFAULTS", "CommandInstall", "EditableInstall", "FromCheckout",
    "Install", "InstallCommon", "Over", "OverlayInstall", "PackagedModel", "PrecompiledInstall", "Prompt", "Recipe",
    "Sampling", "Verdicts", "VersionRange", "VllmWheelsInstall", "WheelInstall", "eval_items", "load_recipe",
    "make_install", "parse_recipe", "recipe_path",
]
