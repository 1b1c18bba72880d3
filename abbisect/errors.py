"""abbisect's error tree; the CLI maps it to exit codes in one place.

- `UserError`: bad input from the user (recipe, ref, path): say what is wrong and how to fix it.
- `InfraError`: abbisect's own side failed (download, disk, checkout, port, lock): says nothing about the
  commit under test, so `check` exits 125 (untestable) and a bisect never records it as a verdict.
Anything else is a bug of ours (internal error).
"""


class UserError(Exception):
    """Bad input from the user (recipe, ref, path): say what is wrong and how to fix it."""


class InfraError(Exception):
    """An infrastructure fault on abbisect's side (download, disk, checkout, port, lock): never a verdict."""
