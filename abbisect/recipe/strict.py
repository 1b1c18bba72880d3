"""How every model of the recipe's schema and install sections validates: an unknown key is an error (a misspelt
key never passes silently), a value is frozen once validated, and no string is longer than `MAX_STRING_CHARS`.

Each module declares its own `_Strict(BaseModel)` with this config (so ruff sees the models are pydantic's)."""

from __future__ import annotations

from pydantic import ConfigDict

MAX_STRING_CHARS = 100_000  # a prompt, a flag, a path: any one string of a recipe
STRICT = ConfigDict(extra="forbid", frozen=True, str_max_length=MAX_STRING_CHARS)
