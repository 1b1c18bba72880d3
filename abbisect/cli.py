"""The thin shell: the `abbisect` group (each command is a module of abbisect/commands/), and every ending
mapped to its exit code.

`Main.invoke` turns the error tree of `abbisect.infra.errors` into one line on stderr and the command's code
from the one table of exit codes (`abbisect.commands.endings.EXIT_CODES`; docs/exit-codes.md and each
command's --help repeat it).
"""

from __future__ import annotations

import importlib
import os
import shlex
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import click

from abbisect.commands.endings import SIGNALS, exit_code
from abbisect.commands.options import verbosity_options
from abbisect.infra.errors import describe_os_error, kind_of

# The commands, each in abbisect/commands/<name>.py as a click command of that name, imported when used; beside
# each, the first sentence of its docstring: its line in `abbisect --help`, which so imports no command
# (tests/test_startup.py holds the two equal).
COMMANDS = {
    "bisect": "Find the commit between --good and --bad where the verdict changes (a regression or a fix).",
    "cache": "List and clean the cache (worktrees, venvs, models, trial results, clones, JIT caches).",
    "check": "Judge one commit and exit like a `git bisect run` script: 0 good, 1 bad, 125 untestable.",
    "compare": "Compare two per-item result files with the paired test (exact McNemar, Wilson intervals, a paired "
               "bootstrap): lm-eval --log_samples output or abbisect results. Launches nothing.",
    "init": "Write abbisect.yaml for this SGLang or vLLM checkout: `abbisect init --model M -- FLAGS`.",
    "env": "Print GPU(s), driver, CUDA, torch, triton and engine versions, and a stable key for this stack.",
    "matrix": "Every verified cell of model × engine@commit × GPU stack from the results of run, bisect and check.",
    "narrow": "Narrow a failing launch at one commit: which flags, variables or pins are to blame, and which "
              "feature switch makes the failure go away.",
    "post": "Post a result folder's report as a comment on a GitHub issue or pull request, once per result.",
    "run": "A/B: the recipe on two commits, same flags, temperature 0; writes report.md, results.json, outputs.csv.",
    "scan": "Scan server logs for known failure signatures and explain them.",
    "schema": "Print the recipe's JSON Schema (for editors: yaml-language-server, VS Code).",
}


def _invocation() -> str:
    return shlex.join(["abbisect", *sys.argv[1:]])


def _crash_log(text: str, opened: Path | None) -> Path | None:
    """Keep a traceback where it can be written: the cache the command opened (else the default one), else
    the temp folder; never raise from here."""
    from abbisect.infra.cache import Cache, cache_path

    for folder in (opened or cache_path(), Path(tempfile.gettempdir())):
        temp = folder == Path(tempfile.gettempdir())
        log = folder / "abbisect-crash.log" if temp else Cache(folder).crash_log
        try:
            with log.open("a") as fh:
                fh.write(text)
            return log
        except OSError:
            continue
    return None


class Main(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            self.add_command(getattr(importlib.import_module(f"abbisect.commands.{cmd_name}"), cmd_name))
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands' list from COMMANDS, as click would print it from each command's docstring."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        # a command not yet imported is shortened as click shortens a loaded one's (its public call; the helper
        # behind it is private from click 8.5 on)
        rows = [(name, (self.commands.get(name) or click.Command(name, help=COMMANDS[name])).get_short_help_str(limit))
                for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:  # a bad option before the command (`abbisect --bogus`)
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            _usage(exc)
            sys.exit(exit_code(None, "usage"))

    def invoke(self, ctx: click.Context):
        # SIGTERM unwinds like Ctrl-C, so every running server is torn down on the way out.
        signal.signal(signal.SIGTERM, _on_sigterm)
        sys.stdout, sys.stderr = ReaderMayGo.around(sys.stdout), ReaderMayGo.around(sys.stderr)
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            command = ctx.invoked_subcommand
            _usage(exc)
            ctx.exit(exit_code(command, "usage"))
        except SystemExit as exc:
            if exc.code == SIGNALS["terminated"] and _TERMINATED.is_set():
                click.echo("abbisect: terminated" + _hint(ctx), err=True)
            raise
        except (click.exceptions.Exit, click.ClickException):
            raise
        except BaseException as exc:  # noqa: BLE001 -- every ending gets one line and its command's code
            command, ending = ctx.invoked_subcommand, kind_of(exc)
            if ending == "usage":
                click.echo(f"abbisect: error: {exc}", err=True)
            elif ending == "infra":
                from abbisect.infra.cache import OPENED, cache_path

                msg = describe_os_error(exc, OPENED[0] if OPENED else cache_path()) if isinstance(exc, OSError) \
                    else str(exc)
                note = " (untestable: exit 125, git bisect skips this commit)" if command == "check" else ""
                click.echo(f"abbisect: infrastructure error: {msg}{note}", err=True)
            elif ending == "interrupted":
                # Torn down already: a second Ctrl-C while Python shuts down must not turn 130 into a signal death.
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                _stop_children()
                click.echo("abbisect: interrupted" + _hint(ctx), err=True)
            else:
                from abbisect.commands.common import META_KEY

                log = _crash_log(f"--- {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {_invocation()}\n"
                                 + traceback.format_exc(), ctx.meta.get(META_KEY))
                where = f"traceback in {log}" if log else "no writable place for the traceback"
                click.echo(f"abbisect: internal error: {type(exc).__name__}: {exc} ({where})", err=True)
            ctx.exit(exit_code(command, ending))


_TERMINATED = threading.Event()


class ReaderMayGo:
    """A console stream whose reader may go away (`abbisect compare A B | head -1`): once a write finds the pipe
    closed, the stream's descriptor is pointed at the null device and the rest of the output is dropped, so the
    command ends as it would have — its work done, its exit code its answer — instead of on a BrokenPipeError
    (an internal error, exit 70, a crash.log)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    @classmethod
    def around(cls, stream: Any) -> Any:
        return stream if stream is None or isinstance(stream, cls) else cls(stream)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def _gone(self) -> None:
        """What is still buffered, and everything after, goes to the null device (the interpreter's own flush
        at exit would fail on the closed pipe too)."""
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _usage(exc: click.UsageError) -> None:
    """click's usage error as one line naming the problem and where help is (click prints three or four)."""
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):  # a bare `abbisect` or `abbisect cache`: the help
        exc.show()
        return
    where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
    click.echo(f"abbisect: error: {exc.format_message()}{where}", err=True)


def _on_sigterm(*_) -> None:
    _TERMINATED.set()
    _stop_children()  # builds in background threads must not hold the exit
    sys.exit(SIGNALS["terminated"])


def _hint(ctx: click.Context) -> str:
    """What the interrupted command asked to be told (how to resume it, what it left where)."""
    from abbisect.commands.common import HINT_KEY

    hint = ctx.meta.get(HINT_KEY)
    return f"; {hint}" if hint else ""


def _stop_children() -> None:
    """Kill running build steps (servers are torn down by their trial's own finally blocks)."""
    from abbisect.environment.store import stop_builds

    stop_builds()


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """`abbisect --version`: the installed distribution's version, looked up only when asked."""
    if value and not ctx.resilient_parsing:
        from abbisect import __version__

        click.echo(f"abbisect, version {__version__}")
        ctx.exit()


@click.group(cls=Main, epilog="Exit codes of every command: see its --help and docs/exit-codes.md.")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Show the version and exit.")
@verbosity_options
def main() -> None:
    """A/B and bisect LLM serving engines across git commits, with scored outputs and paste-ready reports."""
