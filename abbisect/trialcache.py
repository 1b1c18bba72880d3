"""Never pay twice: trial results cached by (sha, recipe fingerprint, environment fingerprint)."""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from abbisect.locks import atomic_write
from abbisect.plan import plan_for
from abbisect.recipe import Recipe
from abbisect.trial import Progress, TrialResult, TrialSpec, run_trial

Runner = Callable[[TrialSpec, Progress], TrialResult]

# Outcomes that say something about the commit; an infrastructure failure may pass on a retry.
CACHEABLE = {"ok", "degenerate", "wrong_answer", "warned", "crashed_at_startup", "build_failed", "flag_rejected",
             "timeout"}


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


def trial_key(spec: TrialSpec, machine: str) -> str:
    recipe = Recipe.model_validate(spec.recipe)
    # The env key as the build will compute it, from the commit's own tree in the repository.
    env_key, _ = plan_for(recipe, Path(spec.repo), spec.sha, Path(spec.cache_dir))
    blob = json.dumps([spec.sha, recipe.fingerprint(), env_key, machine])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


class TrialCache:
    def __init__(self, cache_dir: Path, machine: str, enabled: bool = True) -> None:
        self.root = cache_dir / "trials"
        self.root.mkdir(parents=True, exist_ok=True)
        self.machine = machine
        self.enabled = enabled

    def get(self, spec: TrialSpec) -> TrialResult | None:
        if not self.enabled:
            return None
        path = self.root / f"{trial_key(spec, self.machine)}.json"
        if not path.is_file():
            return None
        result = TrialResult.from_dict(json.loads(path.read_text()))
        return replace(result, spec=replace(result.spec, side=spec.side, ref=spec.ref), cached=True)

    def fetch(self, spec: TrialSpec, progress: Progress, run: Runner = run_trial) -> TrialResult:
        """The cached result (marked `cached`), else run the trial and keep its result."""
        hit = self.get(spec)
        if hit is not None:
            progress(f"cached result from an earlier run: {hit.verdict.status}")
            return hit
        result = run(spec, progress)
        self.put(result)
        return result

    def put(self, result: TrialResult) -> None:
        if result.verdict.status in CACHEABLE:
            path = self.root / f"{trial_key(result.spec, self.machine)}.json"
            atomic_write(path, json.dumps(result.to_dict(), default=str))
