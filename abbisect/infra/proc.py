"""The one door for the environment of every process abbisect starts for a build, a server or a tool, and
the one way to run a command into a log (`run_logged`).

`git bisect run` exports GIT_DIR (and a worktree may export GIT_WORK_TREE / GIT_INDEX_FILE); passed on,
they make an engine's own `git rev-parse` or a build's setuptools-scm read abbisect's repository instead
of the commit's tree. A venv abbisect runs from must not leak into the venv it launches either.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# Variables of the caller's Python that would redirect the child's imports.
_PYTHON_VARS = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")


def is_git_var(name: str) -> bool:
    """Git's own per-repository variables (GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE, GIT_PREFIX, …).

    Identity and config variables a user sets on purpose (GIT_AUTHOR_*, GIT_COMMITTER_*, GIT_SSH*,
    GIT_CONFIG_*) are kept: they do not point at a repository.
    """
    keep = ("GIT_AUTHOR_", "GIT_COMMITTER_", "GIT_SSH", "GIT_CONFIG", "GIT_TERMINAL_PROMPT", "GIT_ASKPASS",
            "GIT_HTTP_", "GIT_TRACE")
    return name.startswith("GIT_") and not name.startswith(keep)


def scrubbed_env(extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) without git's repository variables and the caller's
    Python settings, with `extra` on top."""
    src = os.environ if base is None else base
    env = {k: v for k, v in src.items() if k not in _PYTHON_VARS and not is_git_var(k)}
    env.update(extra or {})
    return env


def abbisect_path() -> str:
    """A PYTHONPATH under which a child process imports this very abbisect (the one running, even from a source
    tree), ahead of whatever PYTHONPATH this process has."""
    here = str(Path(__file__).resolve().parents[2])
    rest = os.environ.get("PYTHONPATH", "")
    return f"{here}{os.pathsep}{rest}" if rest else here


@dataclass(frozen=True)
class Logged:
    """How a command run into a log ended: its exit status and the last non-blank lines of the log."""

    returncode: int
    tail: tuple[str, ...]


def run_logged(argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None,
               timeout: float | None = None, cwd: str | Path | None = None, fresh: bool = False,
               header: bool = True, tail_lines: int = 3) -> Logged:
    """Run `argv` with stdout and stderr appended to `log` (emptied first when `fresh`), in the scrubbed
    environment with `env` on top, stdin closed; its exit status and the log's last `tail_lines` lines.

    With `header` the command line goes into the log first (an inline `-c` program shortened to `…`).
    A timeout kills the command and raises `subprocess.TimeoutExpired`; a missing program raises
    `FileNotFoundError`, as `subprocess.run` does."""
    argv = [str(a) for a in argv]
    with Path(log).open("w" if fresh else "a") as fh:
        if header:
            shown = [*argv[: argv.index("-c") + 1], "…"] if "-c" in argv else argv
            fh.write(f"$ {' '.join(shown)}\n")
            fh.flush()
        rc = subprocess.run(argv, check=False, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            cwd=cwd, timeout=timeout, env=scrubbed_env(env)).returncode
    return Logged(rc, tail(log, tail_lines))


def tail(log: Path, n: int = 3) -> tuple[str, ...]:
    """The last `n` non-blank lines of a log (none when it cannot be read)."""
    try:
        lines = Path(log).read_text(errors="replace").splitlines()
    except OSError:
        return ()
    return tuple([ln for ln in lines if ln.strip()][-n:]) if n > 0 else ()


# -- starting a child that must never be lost ------------------------------------------------------------
_HELD = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def signals_held(on_signal: Callable[[int], None] | None = None) -> Iterator[list[int]]:
    """Hold Ctrl-C and SIGTERM while a child is started and handed to whoever stops it; yields the list of
    signals that arrived meanwhile, for `deliver` once the child can be torn down. `on_signal` is told of each
    that is not ignored as it arrives (to stop the work in hand early: an event loop's task cancelled).

    Why: `subprocess.Popen` forks, then waits for the exec. A Ctrl-C raised in that wait, or after it but
    before Popen returns, unwinds with no `Popen` object and a running child that nobody stops (measured:
    9 of 40 interrupted launches left their server running). Python runs signal handlers in the main thread
    only, so other threads need no hold (and cannot install one)."""
    pending: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield pending
        return
    saved = {sig: signal.getsignal(sig) for sig in _HELD}
    saved = {sig: handler for sig, handler in saved.items() if handler is not None}  # set outside Python
    def held(signum: int, _frame: object) -> None:
        pending.append(signum)
        if on_signal is not None and saved[signal.Signals(signum)] != signal.SIG_IGN:
            on_signal(signum)

    for sig in saved:
        signal.signal(sig, held)
    try:
        yield pending
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def deliver(pending: list[int]) -> None:
    """The first held signal, now under its own handler (Ctrl-C: KeyboardInterrupt). One whose default is to
    end the process raises SystemExit instead, so the caller's cleanup still stops the child it started;
    an ignored one is dropped."""
    if not pending:
        return
    sig = pending[0]
    handler = signal.getsignal(sig)
    if handler == signal.SIG_IGN:
        return
    if handler == signal.SIG_DFL:
        raise SystemExit(128 + sig)
    signal.raise_signal(sig)
