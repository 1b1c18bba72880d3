"""How every model of the recipe's schema and install sections validates: an unknown key is an error (a misspelt
key never passes silently), a value is frozen once validated, and no string is longer than `MAX_STRING_CHARS`.

schema.py's `_RecipeModel` and install.py's `_InstallModel` are this config's bases, each declared in its module (so
ruff sees the models are pydantic's)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

MAX_STRING_CHARS = 100_000  # a prompt, a flag, a path: any one string of a recipe
STRICT = ConfigDict(extra="forbid", frozen=True, str_max_length=MAX_STRING_CHARS)


def derived(key: str, default: Any, **checks: Any) -> Any:
    """A field the recipe's models carry but a user never writes: `Recipe` fills it from the one key `key`, and
    loading refuses it in a recipe file, naming that key (abbisect/recipe/vocabulary.py)."""
    return Field(default, json_schema_extra={"derived_from": key}, **checks)
