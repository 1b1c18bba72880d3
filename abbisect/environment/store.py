"""The venv store: one venv per content key, built under a lock, marked complete atomically.

Modelled on pre-commit's store: lock, re-check after the lock is held, health check, and a
"complete" marker written last — a build killed half-way has no marker and is rebuilt, never reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from abbisect.environment import command, editable, overlay, precompiled, vllm_wheels, wheel
from abbisect.environment.base import BuildContext, SharedDeps, Step, Strategy, index_args, python_version
from abbisect.environment.pins import AfterEngine
from abbisect.infra import supervisor
from abbisect.infra.cache import Cache, hold
from abbisect.infra.errors import InfraError
from abbisect.infra.locks import atomic_write, file_lock
from abbisect.infra.logstream import CappedLog, pump
from abbisect.infra.proc import scrubbed_env
from abbisect.infra.progress import Say, Status
from abbisect.infra.redact import MASK, Redactor, expand_env, looks_secret
from abbisect.recipe import Install

# Typed by the Protocol, one module per entry: the type checker holds each strategy module to it.
STRATEGIES: dict[str, Strategy] = {
    editable.name: editable, command.name: command, precompiled.name: precompiled, wheel.name: wheel,
    overlay.name: overlay, vllm_wheels.name: vllm_wheels,
}
MARKER = "complete.json"


@dataclass(frozen=True)
class EnvResult:
    ok: bool
    key: str
    path: str
    python: str
    reused: bool
    seconds: float
    log: str
    steps: tuple[str, ...]
    error: str | None = None
    # What the strategy derived for this commit, for the report: the CUDA variant (cu12/cu13, cu129),
    # the compiled wheel used and whose commit it is, a Rust build skipped, …
    facts: dict[str, str] = field(default_factory=dict)
    base: str | None = None  # the shared venv of the dependencies this one is layered on
    base_reused: bool | None = None  # that shared venv found built (None: there is none)


@dataclass(frozen=True)
class EnvPlan:
    """A build as planned: the same for `--dry-run`, the trial cache's key and the real build."""

    key: str
    steps: tuple[Step, ...]
    facts: dict[str, str]
    blocker: str | None  # set when this commit cannot be built here: the trial is untestable, with this reason
    shared_steps: int = 0  # the first steps build the shared venv of the dependencies (once for many commits)


def _strategy(install: Install) -> Strategy:
    return STRATEGIES[install.strategy]


def _context(source: Path, sha: str, install: Install, subdir: str | None, cache: Cache | Path,
             git_dir: Path | None = None, after: AfterEngine | None = None
             ) -> tuple[BuildContext, str, tuple[BuildContext, str] | None]:
    """The commit's build context and env key, and the shared venv of its dependencies it is layered on
    (its context and key) when the strategy shares one (see editable.layer_inputs)."""
    probe = BuildContext(source, sha, install, Path("/nonexistent"), cache, subdir, git_dir)
    strategy = _strategy(install)
    # A secret-looking install.env value is not in the key (it is public, in results.json): a build token
    # does not change what is built, and its hash could be checked against guesses (abbisect/infra/redact.py).
    shown = {**install.model_dump(mode="json"), "env": {k: MASK if looks_secret(k) else v for k, v in install.env.items()}}
    common = {"install": shown, "python": python_version(install),
              "index": index_args(install, probe), "subdir": subdir}
    base = None
    layer = strategy.layer_inputs(probe) if isinstance(strategy, SharedDeps) else None
    if layer is not None:
        base_key = _digest({**common, "layer": layer})
        base = (replace(probe, venv=Cache.at(cache).venv(base_key)), base_key)
        probe = replace(probe, base=base[0].venv)
    # Every install setting shapes the venv; the strategy adds what it derives (the sha when the commit's
    # source is installed, the heavy pins it read, the digest of a base wheel, the shared venv it sits on).
    inputs = {**common, **strategy.key_inputs(probe)}
    if after:  # a side's pins or a dependency commit; only when present, so other venvs keep their keys
        inputs["after_engine"] = after.key_inputs()
    key = _digest(inputs)
    return replace(probe, venv=Cache.at(cache).venv(key)), key, base


def _digest(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()[:20]


def env_plan(source: Path, sha: str, install: Install, subdir: str | None, cache: Cache | Path,
             git_dir: Path | None = None, after: AfterEngine | None = None) -> EnvPlan:
    """The build of `sha` in the worktree `source`, without building anything. The commit's files are
    read from `git_dir` when given (any git directory that holds the commit: see tree.py), else from
    `source` itself. `after` (a side's pins, a dependency commit) is installed last, for every strategy."""
    ctx, key, base = _context(source, sha, install, subdir, cache, git_dir, after)
    strategy = _strategy(install)
    blocker = strategy.blocker(ctx)
    facts = strategy.facts(ctx)
    shared = tuple(strategy.base_steps(base[0])) if base and isinstance(strategy, SharedDeps) else ()
    if base:
        facts = {**facts, "dependencies": f"shared venv {base[1]} (commits with the same declared dependencies)"}
    steps = (*shared, *strategy.steps(ctx), *(after.steps(ctx) if after else ()))
    return EnvPlan(key, steps, facts, blocker, len(shared))


def needs_source(install: Install) -> bool:
    """Whether the venv keeps using the commit's worktree after the build (an editable install does;
    `overlay` copies the source in and `wheel` never reads it, so their worktree can go)."""
    return _strategy(install).needs_source_after_build


def _healthy(root: Path) -> str | None:
    """None when the venv can be reused, else the reason it cannot."""
    if not (root / MARKER).is_file():
        return "no completion marker (never built, or a build was interrupted)"
    py = root / "venv" / "bin" / "python"
    if not py.exists():
        return "interpreter missing"
    if subprocess.run([str(py), "-c", "pass"], check=False, capture_output=True, env=scrubbed_env()).returncode:
        return "interpreter does not start"
    return None


def ensure_env(source: Path, sha: str, install: Install, subdir: str | None, cache: Cache | Path,
               timeout: float, on_step=None, after: AfterEngine | None = None,
               redactor: Redactor | None = None, say: Say | None = None) -> EnvResult:
    """Reuse or build the venv for this commit; a failed build is returned, never raised. `redactor` (the
    recipe's secrets) masks the build log as it is written; a wait for another build of it is told to `say`."""
    ctx, key, base = _context(source, sha, install, subdir, cache, after=after)
    plan = env_plan(source, sha, install, subdir, cache, after=after)
    root = ctx.venv.parent
    log = root / "build.log"
    shown = tuple(s.display() for s in plan.steps)
    if plan.blocker:  # untestable here, by the commit's own build: nothing to build, nothing to keep
        return EnvResult(False, key, str(ctx.venv), ctx.python, False, 0.0, str(log), shown, plan.blocker,
                         plan.facts)
    start = time.monotonic()
    facts = dict(plan.facts)
    base_reused: bool | None = None
    if base is not None:
        base_ctx, base_key = base
        ok, base_reused, error = _ensure(base_ctx, base_key, list(plan.steps[:plan.shared_steps]), sha, timeout,
                                         on_step, redactor, say)
        facts["dependencies"] = f"shared venv {base_key} ({'reused' if base_reused else 'built for this commit'})"
        if not ok:
            return EnvResult(False, key, str(ctx.venv), ctx.python, False, round(time.monotonic() - start, 3),
                             str(base_ctx.venv.parent / "build.log"), shown, f"shared dependencies: {error}", facts,
                             base_reused=base_reused)
    # Time spent reusing is waiting for a concurrent (background) build of the same venv.
    ok, reused, error = _ensure(ctx, key, list(plan.steps[plan.shared_steps:]), sha, timeout, on_step, redactor, say)
    return EnvResult(ok, key, str(ctx.venv), ctx.python, reused, round(time.monotonic() - start, 3), str(log), shown,
                     error, facts, str(base[0].venv) if base else None, base_reused)


def _ensure(ctx: BuildContext, key: str, steps: list[Step], sha: str, timeout: float,
            on_step, redactor: Redactor | None = None, say: Say | None = None) -> tuple[bool, bool, str | None]:
    """(ok, reused, error) of one venv of the store: reused when healthy, else built under its lock."""
    root = ctx.venv.parent
    hold(root, say)  # in use by this process: `abbisect cache gc` leaves it alone
    if not getattr(_BACKGROUND, "on", False):
        _promote(key)  # a background build of it, if any, is what this trial waits for now
    with file_lock(Cache.lock(Cache.at(ctx.cache).env(key)), say=say):
        if _healthy(root) is None:
            return True, True, None
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        start = time.monotonic()
        error = _run_steps(steps, root / "build.log", ctx, timeout, on_step, redactor)
        if _STOPPING.is_set():  # an interrupted build says nothing about the commit: never a verdict
            raise InfraError("build interrupted: abbisect is stopping")
        if error is None:
            atomic_write(root / MARKER, json.dumps({"key": key, "sha": sha, "seconds": round(time.monotonic() - start, 3),
                                                    "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
        return error is None, False, error


def bin_dirs(venv: str, base: str | None) -> list[str]:
    """What goes before PATH for a venv: its own scripts, then those of the shared venv it sits on."""
    return [f"{venv}/bin", *([f"{base}/bin"] if base else [])]


# Build steps running now, in any thread (bisect prefetch builds run in background threads): their families
# are ended by `stop_builds` when abbisect is interrupted, so SIGINT/SIGTERM never waits for a build.
_ACTIVE: set[supervisor.Supervised] = set()
_ACTIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()
STATUS_EVERY_S = 10.0
# Build steps of a background (prefetch) build run this much nicer than abbisect, so they yield the CPU to
# the trial that runs meanwhile; a build a trial starts itself runs at normal priority (one it finds under
# way in the background stays niced: an unprivileged process cannot raise a priority back).
BACKGROUND_NICE = 10
_BACKGROUND = threading.local()


class background:
    """`with background():` build steps started by this thread run under `nice -n BACKGROUND_NICE`."""

    def __enter__(self) -> None:
        _BACKGROUND.on = True

    def __exit__(self, *exc) -> None:
        _BACKGROUND.on = False


_NICED: dict[supervisor.Supervised, str] = {}  # running background build steps -> the venv key they build
_PROMOTED: set[str] = set()  # venv keys a trial is waiting for: their further steps run at normal priority


def _niced(argv: tuple[str, ...] | list[str], key: str) -> list[str]:
    on = getattr(_BACKGROUND, "on", False) and key not in _PROMOTED
    nice = shutil.which("nice") if on else None
    return [nice, "-n", str(BACKGROUND_NICE), *argv] if nice else list(argv)


def _promote(key: str) -> None:
    """A trial waits for this venv: a background build of it goes on at abbisect's own priority where the
    system allows raising it back (root, or a RLIMIT_NICE that permits it); else it stays niced."""
    with _ACTIVE_LOCK:
        _PROMOTED.add(key)
        procs = [p for p, k in _NICED.items() if k == key]
    for proc in procs:
        try:
            os.setpriority(os.PRIO_PGRP, proc.pid, os.getpriority(os.PRIO_PROCESS, 0))
        except OSError:
            pass


def stop_builds() -> int:
    """End every running build step's family and start no other step; returns how many. Called from a signal
    handler: it only signals the steps' supervisors and waits for nothing."""
    _STOPPING.set()
    with _ACTIVE_LOCK:
        procs = list(_ACTIVE)
    for proc in procs:
        proc.terminate()
    return len(procs)


def _run_steps(steps: list[Step], log: Path, ctx: BuildContext, timeout: float, on_step,
               redactor: Redactor | None = None) -> str | None:
    """Each step under its own supervisor, its output through a capped log (the recipe's secrets masked
    before a byte is written); ended on timeout or stop."""
    deadline = time.monotonic() + timeout
    base_env = scrubbed_env()
    base_env["PATH"] = os.pathsep.join([*bin_dirs(str(ctx.venv), str(ctx.base) if ctx.base else None),
                                        base_env.get("PATH", "")])
    out = CappedLog(log, append=True, mask=redactor.stream() if redactor else None)
    try:
        for step in steps:
            if _STOPPING.is_set():
                return f"{step.desc}: abbisect is stopping"
            if on_step:
                on_step(step.desc)
            out.write(f"$ {step.display()}\n".encode())
            env = {**base_env, **expand_env(step.env, base_env)}  # ${VAR} references read only now
            error = _run_one(step, env, ctx, out, deadline, timeout, on_step)
            if error:
                return error
    finally:
        out.close()
    return None


def _run_one(step: Step, env: dict[str, str], ctx: BuildContext, out: CappedLog, deadline: float,
             timeout: float, on_step) -> str | None:
    """One build step under its supervisor, like a server: recorded, and ended with its whole family when it
    finishes, times out or abbisect stops (even under SIGKILL)."""
    read_end, write_end = os.pipe()
    try:
        proc = supervisor.spawn(_niced(step.argv, ctx.venv.parent.name), env, ctx.source, write_end, ctx.cache,
                                kind="build step")
    except OSError as exc:
        os.close(read_end)
        out.write(f"\n[abbisect] {exc}\n".encode())
        return f"{step.desc}: {exc}"
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    try:
        return _wait_step(step, proc, read_end, out, deadline, timeout, on_step, ctx.venv.parent.name)
    finally:
        proc.release()


def _wait_step(step: Step, proc: supervisor.Supervised, read_end: int, out: CappedLog, deadline: float,
               timeout: float, on_step, key: str = "") -> str | None:
    reader = pump(read_end, out, close=False)
    with _ACTIVE_LOCK:
        _ACTIVE.add(proc)
        if proc.argv[0] != step.argv[0]:  # started under nice
            _NICED[proc] = key
    if key in _PROMOTED:  # a trial began waiting for it as it started
        _promote(key)
    if _STOPPING.is_set():  # stop_builds ran between this thread's last check and the add above
        proc.kill()
    t0 = time.monotonic()
    next_status = t0 + STATUS_EVERY_S
    try:
        while True:
            try:
                rc = proc.wait(timeout=min(1.0, max(deadline - time.monotonic(), 0.01)))
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if now >= deadline:
                proc.kill()
                reader.join(timeout=2.0)
                out.write(f"\n[abbisect] build timed out after {timeout:.0f} s\n".encode())
                return f"{step.desc}: timed out after {timeout:.0f} s"
            if on_step and now >= next_status:
                on_step(Status(f"{step.desc} ({now - t0:.0f} s)"))
                next_status = now + STATUS_EVERY_S
    except BaseException:  # Ctrl-C / SIGTERM in this thread: the step's own session does not get it
        proc.kill()
        raise
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE.discard(proc)
            _NICED.pop(proc, None)
    proc.kill()  # what the step left running (a build server, a daemon) goes with it
    reader.join(timeout=2.0)
    if _STOPPING.is_set():
        return f"{step.desc}: stopped (abbisect is stopping)"
    if rc != 0:
        tail = [ln for ln in out.tail_lines(20) if ln.strip() and not ln.startswith("$ ")][-1:]
        return f"{step.desc} failed (exit {rc}): {tail[0][:300] if tail else ''}"
    return None
