"""The one user-facing error type: the CLI prints its message on one line and exits with code 2."""


class UserError(Exception):
    """Bad input from the user (recipe, ref, path): say what is wrong and how to fix it."""
