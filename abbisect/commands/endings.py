"""How each command ends: the one table of exit codes, and a command's row of it for its --help.

`EXIT_CODES` is the table docs/exit-codes.md and each command's --help repeat; the commands end on it, and the
CLI group (`abbisect.cli`) maps the error tree of `abbisect.infra.errors` onto it. It sits below both, so a
command never imports the group that finds it.
"""

from __future__ import annotations

# Every way each command ends → its exit code. "usage": bad input (UserError, a bad option); "infra":
# abbisect's own side failed (InfraError: download, disk, checkout, port, lock; a full or read-only disk);
# "internal": a bug of ours (traceback in crash.log). `check` is a `git bisect run` script: only a bad
# verdict may exit 1..127 (but 125), so everything that is not about the commit exits 125 (skip it) or
# 128 and above (stop the bisection).
SIGNALS = {"interrupted": 130, "terminated": 143}
_DEFAULT_CODES = {"ok": 0, "usage": 2, "infra": 2, "internal": 70, **SIGNALS}
EXIT_CODES: dict[str, dict[str, int]] = {
    "check": {"good": 0, "bad": 1, "untestable": 125, "infra": 125, "usage": 128, "internal": 128, **SIGNALS},
    # post-failed: --post could not post the finished result (its folder is written; the line says how to retry).
    "run": {"ran": 0, "gate-failed": 1, "usage": 2, "infra": 2, "post-failed": 6, "internal": 70, **SIGNALS},
    "bisect": {"found": 0, "usage": 2, "infra": 2, "no-change": 3, "untestable-end": 4, "ambiguous": 5,
               "post-failed": 6, "internal": 70, **SIGNALS},
    "scan": {"clean": 0, "matched": 1, "usage": 2, "infra": 2, "internal": 70, **SIGNALS},
    # compare's code is its call, as `check`'s is its verdict: a CI step gates on it with no parsing.
    "compare": {"same": 0, "different": 1, "usage": 2, "infra": 2, "not-sure": 3, "internal": 70, **SIGNALS},
    # narrow: found = a workaround switch or a smallest failing difference; none-passed = nothing tried made
    # the failure go away; not-failing = the recipe's launch does not fail at the commit (nothing to narrow);
    # nothing-to-try = it fails, but the commit accepts none of the switches and no passing launch narrows it
    # (the recipe gave nothing this commit can try: closer to usage than to "none passed").
    "narrow": {"found": 0, "none-passed": 1, "usage": 2, "infra": 2, "not-failing": 3, "nothing-to-try": 4,
               "internal": 70, **SIGNALS},
    # post: the rows of abbisect.infra.github.Failure from 4 on; "infra" is any other refusal by GitHub.
    "post": {"posted": 0, "declined": 1, "usage": 2, "infra": 2, "inconclusive": 3, "tokenless": 4, "denied": 5,
             "not-found": 6, "rate-limited": 7, "network": 8, "internal": 70, **SIGNALS},
    **{name: _DEFAULT_CODES for name in ("env", "matrix", "cache", "schema", "init")},
}


def exit_code(command: str | None, ending: str) -> int:
    return EXIT_CODES.get(command or "", _DEFAULT_CODES).get(ending, _DEFAULT_CODES.get(ending, 70))


def exit_help(command: str) -> str:
    """The command's row of the table, for its --help."""
    codes = EXIT_CODES[command]
    return "Exit codes: " + ", ".join(f"{code} {name}" for name, code in codes.items()) + "."
