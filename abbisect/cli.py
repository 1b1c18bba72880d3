"""The thin shell: the `abbisect` group (each command is a module of abbisect/commands/), and every ending
mapped to an exit code here.

`EXIT_CODES` is the one table of exit codes (README "Exit codes" and each command's --help repeat it);
`Main.invoke` turns the error tree of `abbisect.infra.errors` into one line on stderr and the command's code.
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

from abbisect import __version__
from abbisect.commands.options import verbosity_options
from abbisect.infra.errors import describe_os_error, kind_of

# The commands, each in abbisect/commands/<name>.py as a click command of that name; imported when used.
COMMANDS = ("bisect", "cache", "check", "compare", "env", "matrix", "narrow", "run", "scan", "schema")

# Every way each command ends → its exit code. "usage": bad input (UserError, a bad option); "infra":
# abbisect's own side failed (InfraError: download, disk, checkout, port, lock; a full or read-only disk);
# "internal": a bug of ours (traceback in crash.log). `check` is a `git bisect run` script: only a bad
# verdict may exit 1..127 (but 125), so everything that is not about the commit exits 125 (skip it) or
# 128 and above (stop the bisection).
_SIGNALS = {"interrupted": 130, "terminated": 143}
_DEFAULT_CODES = {"ok": 0, "usage": 2, "infra": 2, "internal": 70, **_SIGNALS}
EXIT_CODES: dict[str, dict[str, int]] = {
    "check": {"good": 0, "bad": 1, "untestable": 125, "infra": 125, "usage": 128, "internal": 128, **_SIGNALS},
    "run": {"ran": 0, "gate-failed": 1, "usage": 2, "infra": 2, "internal": 70, **_SIGNALS},
    "bisect": {"found": 0, "usage": 2, "infra": 2, "no-change": 3, "untestable-end": 4, "ambiguous": 5,
               "internal": 70, **_SIGNALS},
    "scan": {"clean": 0, "matched": 1, "usage": 2, "infra": 2, "internal": 70, **_SIGNALS},
    # compare's code is its call, as `check`'s is its verdict: a CI step gates on it with no parsing.
    "compare": {"same": 0, "different": 1, "usage": 2, "infra": 2, "not-sure": 3, "internal": 70, **_SIGNALS},
    # narrow: found = a workaround switch or a smallest failing difference; none-passed = nothing tried made
    # the failure go away; not-failing = the recipe's launch does not fail at the commit (nothing to narrow);
    # nothing-to-try = it fails, but the commit accepts none of the switches and no passing launch narrows it
    # (the recipe gave nothing this commit can try: closer to usage than to "none passed").
    "narrow": {"found": 0, "none-passed": 1, "usage": 2, "infra": 2, "not-failing": 3, "nothing-to-try": 4,
               "internal": 70, **_SIGNALS},
    **{name: _DEFAULT_CODES for name in ("env", "matrix", "cache", "schema")},
}


def exit_code(command: str | None, ending: str) -> int:
    return EXIT_CODES.get(command or "", _DEFAULT_CODES).get(ending, _DEFAULT_CODES.get(ending, 70))


def exit_help(command: str) -> str:
    """The command's row of the table, for its --help."""
    codes = EXIT_CODES[command]
    return "Exit codes: " + ", ".join(f"{code} {name}" for name, code in codes.items()) + "."


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
            if exc.code == _SIGNALS["terminated"] and _TERMINATED.is_set():
                click.echo("abbisect: terminated" + _hint(ctx), err=True)
            raise
        except (click.exceptions.Exit, click.ClickException):
            raise
        except BaseException as exc:  # noqa: BLE001 -- every ending gets one line and its command's code
            command, ending = ctx.invoked_subcommand, kind_of(exc)
            if ending == "usage":
                click.echo(f"abbisect: error: {exc}", err=True)
            elif ending == "infra":
                msg = describe_os_error(exc) if isinstance(exc, OSError) else str(exc)
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
    sys.exit(_SIGNALS["terminated"])


def _hint(ctx: click.Context) -> str:
    """What the interrupted command asked to be told (how to resume it, what it left where)."""
    from abbisect.commands.common import HINT_KEY

    hint = ctx.meta.get(HINT_KEY)
    return f"; {hint}" if hint else ""


def _stop_children() -> None:
    """Kill running build steps (servers are torn down by their trial's own finally blocks)."""
    from abbisect.environment.store import stop_builds

    stop_builds()


@click.group(cls=Main, epilog="Exit codes of every command: see its --help and README \"Exit codes\".")
@click.version_option(__version__, prog_name="abbisect")
@verbosity_options
def main() -> None:
    """A/B and bisect LLM serving engines across git commits, with scored outputs and paste-ready reports."""
