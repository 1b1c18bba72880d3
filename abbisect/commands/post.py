"""`abbisect post RESULT_DIR OWNER/REPO#N`: a result's paste-ready markdown as a comment on the upstream issue
or pull request; posted again, the same result updates its own comment (abbisect/report/post.py says what is
the same). `run --post` and `bisect --post` end the same way once their folder is written."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click

from abbisect.commands.endings import exit_code, exit_help
from abbisect.commands.options import dry_run_option, verbosity_options
from abbisect.infra.errors import UserError
from abbisect.infra.github import Api, Comment, GitHub, GitHubError, Target
from abbisect.report.post import Result, comment_body, marked, publishable, read_result


@dataclass(frozen=True)
class Outgoing:
    """One result on its way to one issue: the body exactly as it is sent."""

    result: Result
    target: Target
    api: Api
    body: str


def outgoing(folder: Path, target: Target, api: Api, token: str | None) -> Outgoing:
    result = read_result(folder)
    text = publishable(result.markdown, result.data.get("recipe") or {}, os.environ, [token] if token else [])
    return Outgoing(result, target, api, comment_body(result.key, text, result.kind.markdown))


def refusal(result: Result) -> str | None:
    """Why an inconclusive result is not posted (None: it may be)."""
    judged = result.judged
    if judged.conclusion.conclusive:
        return None
    return f"{result.kind.markdown} is not conclusive: {judged.conclusion.text} ({judged.why})"


def send(out: Outgoing, token: str, ask: Callable[[str], bool] | None = None) -> tuple[Comment, bool] | None:
    """The body posted: the comment already marked with this result updated, else a new one; (the comment,
    whether it was updated), or None when `ask` declined."""
    with GitHub(out.api, token) as gh:
        mine = next((c for c in gh.comments(out.target) if marked(c.body, out.result.key)), None)
        what = (f"update comment {mine.id} on {out.target} ({mine.url})" if mine
                else f"add a comment to {out.target}")
        if ask is not None and not ask(what):
            return None
        if mine is not None:
            return gh.update(out.target, mine.id, out.body), True
        return gh.create(out.target, out.body), False


def _confirm(what: str) -> bool:
    try:
        return click.confirm(f"abbisect: {what}?", default=False, err=True)
    except click.Abort:  # no answer (stdin closed): nothing is posted
        click.echo("", err=True)
        return False


@click.command("post", epilog=exit_help("post") + " 1: you answered no; 3: the result is not conclusive (not sure, "
               "ambiguous, no change, untestable: --anyway posts it); 4: no token; 5: GitHub refused the token "
               "(401, 403); 6: no such issue or pull request (404); 7: rate-limited (the line says when it resets); "
               "8: GitHub could not be reached.")
@click.argument("result_dir", type=click.Path(file_okay=False))
@click.argument("target")
@click.option("--yes", "-y", is_flag=True, help="post without showing the text and asking first")
@dry_run_option("print where it would go and the exact text, and stop: nothing is sent, no token is needed")
@click.option("--anyway", is_flag=True, help="post a result that is not conclusive (not sure, ambiguous, no "
              "change, untestable)")
@verbosity_options
def post(result_dir: str, target: str, yes: bool, dry_run: bool, anyway: bool) -> None:
    """Post a result folder's report as a comment on a GitHub issue or pull request, once per result.

    RESULT_DIR is a folder of `abbisect run` (its report.md is posted) or `abbisect bisect` (its bisect.md).
    TARGET is OWNER/REPO#N or the issue's address. The comment starts with a hidden marker naming the result:
    posting the same result again (a rerun, a resumed bisect) updates that comment; another result adds its
    own. Only conclusive results post unless --anyway. The API is GITHUB_API_URL, else GH_HOST's (GitHub
    Enterprise: https://HOST/api/v3), else api.github.com.
    """
    where = Target.parse(target)
    api = Api.from_env(os.environ)
    token = api.token(os.environ)
    out = outgoing(Path(result_dir), where, api, token)
    if (why := refusal(out.result)) and not anyway:
        click.echo(f"abbisect: not posted: {why}; --anyway posts it all the same", err=True)
        raise SystemExit(exit_code("post", "inconclusive"))
    if dry_run:
        click.echo(f"abbisect: dry run: to {where} through {api.base}, as the comment marked {out.result.key} "
                   f"(updated if it is there, else added); nothing sent", err=True)
        click.echo(out.body)
        return
    try:
        token = api.require_token(os.environ)
        if not yes:
            click.echo(out.body)
            click.echo(f"abbisect: the text above ({len(out.body):,} characters) goes to {where} through {api.base}",
                       err=True)
        sent = send(out, token, None if yes else _confirm)
    except GitHubError as err:
        click.echo(f"abbisect: not posted: {err}", err=True)
        raise SystemExit(exit_code("post", err.failure.value)) from None
    if sent is None:
        click.echo("abbisect: not posted (you answered no)", err=True)
        raise SystemExit(exit_code("post", "declined"))
    comment, updated = sent
    click.echo(f"{'updated' if updated else 'posted'}: {comment.url or f'comment {comment.id} on {where}'}")


# -- `run --post` and `bisect --post` (their option: abbisect.commands.options.post_option) ------------------

def check_post(target: str, dry_run: bool) -> Target:
    """--post checked before anything runs: the target's spelling, a token, and that the token sees the issue
    (a long bisect must not find out at its end). A dry run only checks the spelling."""
    where = Target.parse(target)
    if dry_run:
        return where
    api = Api.from_env(os.environ)
    try:
        with GitHub(api, api.require_token(os.environ)) as gh:
            gh.issue(where)
    except GitHubError as err:
        raise UserError(f"--post {target}: {err}; nothing ran") from None
    return where


def post_after(folder: Path, where: Target, say: Callable[[str], None]) -> bool:
    """The finished folder posted to `where`, without asking (--post named it before the run): True when it
    was posted or, being inconclusive, rightly not; False when posting failed (the line says how to retry)."""
    again = shlex.join(["abbisect", "post", str(folder), str(where)])
    api = Api.from_env(os.environ)
    try:
        token = api.require_token(os.environ)
        out = outgoing(folder, where, api, token)
        if why := refusal(out.result):
            click.echo(f"abbisect: not posted to {where}: {why} (`{again} --anyway` posts it)", err=True)
            return True
        sent = send(out, token)
    except (GitHubError, UserError) as err:
        click.echo(f"abbisect: not posted to {where}: {err} (post it later: {again})", err=True)
        return False
    assert sent is not None  # nothing asked
    comment, updated = sent
    say(f"{'updated' if updated else 'posted'} on {where}: {comment.url or f'comment {comment.id}'}")
    return True
