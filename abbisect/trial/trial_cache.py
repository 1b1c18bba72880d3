"""Never pay twice: trial results cached by (sha, recipe fingerprint, environment fingerprint)."""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from abbisect.environment.pins import after_engine
from abbisect.infra.cache import Cache
from abbisect.infra.locks import atomic_write
from abbisect.infra.redact import Redactor, fingerprint_key
from abbisect.infra.serial import dump, load
from abbisect.recipe.fingerprint import fingerprint
from abbisect.recipe.status import Outcome
from abbisect.trial.dryrun import plan_for
from abbisect.trial.pipeline import run_trial
from abbisect.trial.provenance import CacheOrigin
from abbisect.trial.spec import Progress, TrialResult, TrialSpec

Runner = Callable[[TrialSpec, Progress], TrialResult]


def machine_key() -> str:
    """The host a trial runs on: platform, Python, and the GPUs and driver NVML reports (if any).

    The software stack a side runs with (torch, triton, engine) is in its venv, hence in the env key;
    NVML answers in milliseconds where importing torch to ask would take seconds on every command.
    """
    parts = [platform.machine(), platform.system(), sys.version.split()[0]]
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            parts.append(str(pynvml.nvmlSystemGetDriverVersion()))
            for i in range(pynvml.nvmlDeviceGetCount()):
                parts.append(str(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 -- no NVML here: a CPU machine, keyed by its platform alone
        parts.append("no-nvml")
    return hashlib.sha256(" ".join(parts).encode()).hexdigest()[:12]


def planned_env_key(spec: TrialSpec) -> str:
    """The env key as the build will compute it: planned for the worktree `Cache.worktree` gives the trial,
    from the commit's own tree in the repository (the same before the worktree exists as after)."""
    cache = Cache.at(spec.cache_dir)
    after = after_engine(spec.pins, spec.dependency, cache, planning=True)
    env_key, _ = plan_for(spec.recipe, Path(spec.repo), spec.sha, cache, after)
    return env_key


def trial_key(spec: TrialSpec, machine: str) -> str:
    recipe = spec.recipe
    secret = fingerprint_key(Cache.at(spec.cache_dir).fingerprint_key)  # secrets told apart, never revealed
    parts: list[object] = [spec.sha, fingerprint(recipe, secret), planned_env_key(spec), machine]
    if spec.attempt:  # a further launch of the same commit (repeats) is a trial of its own
        parts.append(spec.attempt)
    if spec.chunk != spec.attempt:  # another part of the eval set than the attempt's own (an A-vs-A's B)
        parts.append(f"chunk {spec.chunk}")
    if spec.items is not None:  # chosen items of the eval set instead of a part
        parts.append(["items", *spec.items])
    blob = json.dumps(parts)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


class TrialCache:
    """`<cache>/trials/<key>.json` (the result, secrets masked) and `<cache>/trials/<key>/` (its logs).

    A hit belongs to the run that asks: its spec's out_dir is the current run's folder and the logs kept
    with the entry are copied there, so no run ever writes into another run's folder.
    """

    def __init__(self, cache_dir: Cache | Path, machine: str, enabled: bool = True) -> None:
        self.cache = Cache.at(cache_dir)
        self.root = self.cache.trials
        self.root.mkdir(parents=True, exist_ok=True)
        self.machine = machine
        self.enabled = enabled

    def get(self, spec: TrialSpec, progress: Progress | None = None) -> TrialResult | None:
        """The cached result re-addressed to `spec` (side, ref, out_dir); nothing is written but for an entry
        that cannot be read (truncated, not a result): it is moved aside, said through `progress`, and missed."""
        if not self.enabled:
            return None
        key = trial_key(spec, self.machine)
        path = self.cache.trial(key)
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text())
            result = load(TrialResult, data)
        except ValueError as exc:  # not JSON, not UTF-8, or not a TrialResult (pydantic's ValidationError)
            why = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
            if progress is not None:
                progress(f"trial cache: entry {path.name} unreadable ({why}); running the trial again")
            try:
                path.replace(path.with_name(path.name + ".unreadable"))
            except FileNotFoundError:  # another abbisect moved it first
                pass
            return None
        if _waited_less(result, spec):
            return None  # it may have run out of a time this run gives longer: run again (put replaces it)
        if _had_less_memory(result, spec):
            return None  # it may have run out of memory this run gives more of: run again
        logs = self.cache.trial_logs(key)
        origin = CacheOrigin(data.get("stored") or _mtime(path), result.spec.out_dir,
                             tuple(sorted(p.name for p in logs.iterdir())) if logs.is_dir() else ())
        launch = result.launch
        if launch is not None:
            launch = replace(launch, log_path=str(Path(spec.out_dir) / Path(launch.log_path).name))
        return replace(result, spec=replace(result.spec, side=spec.side, ref=spec.ref, out_dir=spec.out_dir),
                       launch=launch, extras=replace(result.extras, cache=origin), cached=True)

    def fetch(self, spec: TrialSpec, progress: Progress, run: Runner = run_trial) -> TrialResult:
        """The cached result (marked `cached`, its logs copied into this run's folder), else run the trial and
        keep its result. Either way the result and its logs carry no secret of the recipe."""
        # A measurement of speed belongs to the moment and the machine's load it was taken under: a
        # performance trial is always run now, never replayed (Pinpoint never reuses one either).
        hit = self.get(spec, progress) if spec.recipe.perf is None else None
        if hit is not None:
            copied = self._copy_logs(spec)
            assert hit.extras.cache is not None  # `get` says where a hit came from
            when = hit.extras.cache.stored
            progress(f"cached result from a run at {when}: {hit.verdict.status}"
                     + (f" (its logs copied: {', '.join(copied)})" if copied else ""))
            return hit
        redactor = Redactor.from_recipe(spec.recipe)
        result = run(spec, redactor.guard(progress))  # its logs were masked as they were written
        clean = load(TrialResult, redactor.data(dump(result))) if redactor else result
        if spec.recipe.perf is None:
            self.put(clean, spec)
        return clean

    def put(self, result: TrialResult, spec: TrialSpec | None = None) -> None:
        """Keep a result (and its out_dir's logs); `spec` is the unredacted spec the key is computed from."""
        status = result.verdict.status
        if not status.cacheable:  # it says nothing about the commit (abbisect/recipe/status.py)
            return
        spec = spec or result.spec
        key = trial_key(spec, self.machine)
        seen = self.cache.trial_unconfirmed(key)
        # With repeats every launch is one observation of a rate, kept as it came: waiting for a failure to
        # happen twice would run each failed launch again until it passed, and bias the rate toward passing.
        confirm = status.confirm_first and not spec.recipe.repeats.flaky
        # a damaged mark (not UTF-8, cut short) is a status seen by nobody: read, never trusted
        if confirm and (seen.read_bytes().decode(errors="replace").strip() if seen.is_file() else "") != status:
            atomic_write(seen, status)  # not kept yet: the next attempt runs again, and if it agrees, it is
            return
        seen.unlink(missing_ok=True)
        logs = self.cache.trial_logs(key)
        logs.mkdir(exist_ok=True)
        out = Path(result.spec.out_dir)
        for name in LOG_FILES:
            src = out / name
            if name == "build.log" and not src.is_file() and result.env:
                src = Path(result.env.log)
            if src.is_file():
                shutil.copyfile(src, logs / name)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        atomic_write(self.cache.trial(key), json.dumps({**dump(result), "stored": stamp}, default=str))

    def _copy_logs(self, spec: TrialSpec) -> list[str]:
        logs = self.cache.trial_logs(trial_key(spec, self.machine))
        if not logs.is_dir():
            return []
        dest = Path(spec.out_dir)
        dest.mkdir(parents=True, exist_ok=True)
        names = []
        for src in sorted(logs.iterdir()):
            if src.is_file():
                shutil.copyfile(src, dest / src.name)
                names.append(src.name)
        return names


LOG_FILES = ("server.log", "build.log")


def _waited_less(result: TrialResult, spec: TrialSpec) -> bool:
    """A cached status that a timeout may have caused (timeout: ready; build_failed: build), from a run that
    gave it less time than `spec` does (timeouts are not in the key: abbisect/recipe/fingerprint.py)."""
    bound = result.verdict.status.bounded_by
    return bound is not None and getattr(result.spec.recipe.timeouts, bound) < getattr(spec.recipe.timeouts, bound)


def _had_less_memory(result: TrialResult, spec: TrialSpec) -> bool:
    """A cached result that is not good, from a server that had a smaller share of its GPU than `spec` gives
    (the share is placement, not in the key: abbisect/recipe/fingerprint.py). Too little memory can make a
    server crash or refuse to start; a good result says the commit is fine with less, so it stands."""
    def share(s: TrialSpec) -> float:
        return 1.0 if s.recipe.gpu_share is None else s.recipe.gpu_share

    return result.verdict.outcome != Outcome.GOOD and share(result.spec) < share(spec)


def _mtime(path: Path) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(path.stat().st_mtime))
