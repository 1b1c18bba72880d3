"""The options several commands share, as decorators: one spelling, one envvar, one help text each.

A command states what differs (what `--json` prints, which trial `--script` judges); the rest is here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from abbisect.infra.errors import UserError
from abbisect.infra.progress import NORMAL, QUIET, VERBOSE

F = TypeVar("F", bound=Callable[..., Any])
Decorator = Callable[[F], F]

RESULTS_HELP = "result folder (default results/<recipe>/<UTC stamp>)"
CACHE_HELP = "worktrees, venvs and trial cache"

# RECIPE: the recipe's path; without it ./abbisect.yaml (and, for `run`, the built-in default recipe).
recipe_argument = click.argument("recipe", required=False)


LEVEL_KEY = "abbisect.level"  # where -q / -v leave the level (click's meta is shared by the group and its command)


def _level(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:  # given: the last of -q / -v wins; not given: whatever was said before the command stands
        ctx.meta[LEVEL_KEY] = QUIET if param.name == "quiet" else VERBOSE


def verbosity(ctx: click.Context | None) -> int:
    """The progress level -q / -v asked for (NORMAL when neither was given)."""
    return NORMAL if ctx is None else int(ctx.meta.get(LEVEL_KEY, NORMAL))


def verbosity_options(f: F) -> F:
    """-q / -v, before the command (`abbisect -q bisect`) or after it (`abbisect bisect -q`)."""
    quiet = click.option("-q", "--quiet", is_flag=True, expose_value=False, callback=_level,
                         help="errors and the final lines only")
    verbose = click.option("-v", "--verbose", is_flag=True, expose_value=False, callback=_level,
                           help="every step, status updates unthrottled")
    return quiet(verbose(f))


def output_option(text: str = RESULTS_HELP) -> Decorator:
    return click.option("--output", "-o", help=text)


def cache_dir_option(text: str = CACHE_HELP) -> Decorator:
    return click.option("--cache-dir", envvar="ABBISECT_CACHE_DIR", help=text)


def json_option(text: str) -> Decorator:
    return click.option("--json", "as_json", is_flag=True, help=text)


def dry_run_option(text: str) -> Decorator:
    return click.option("--dry-run", is_flag=True, help=text)


def no_cache_option(text: str, **flag: Any) -> Decorator:
    return click.option("--no-cache", is_flag=True, help=text, **flag)


def judge_options(judged: str, like_git: bool = False, **flag: Any) -> Decorator:
    """--script and --interactive, the two ways to override verdict.script for `judged` ("each side")."""
    as_git = "as git bisect run: " if like_git else ""
    script = click.option("--script", help=f"a command that judges {judged} ({as_git}exit 0 good, "
                          "1-124/126/127 bad, 125 skip; the trial's JSON on stdin); overrides verdict.script")
    interactive = click.option("--interactive", is_flag=True,
                               help=f"show {judged}'s outputs and ask good/bad/skip/retry", **flag)

    def apply(f: F) -> F:
        return script(interactive(f))

    return apply


def check_output_option(output: str | None) -> None:
    """--output must be a folder (or not exist yet); refused before anything runs."""
    if not output:
        return
    path = Path(output).expanduser()
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                raise UserError(f"--output {output}: {p} is a file, not a folder (give a new folder)")
            break


def post_option(f: F) -> F:
    """--post OWNER/REPO#N (run, bisect): the finished result posted as `abbisect post` would, without asking."""
    return click.option("--post", "post_to", metavar="OWNER/REPO#N",
                        help="when the result is conclusive, post its report as a comment on this GitHub issue or "
                             "pull request (a token in GH_TOKEN or GITHUB_TOKEN; checked before anything runs); "
                             "the same result posted again updates its comment")(f)
