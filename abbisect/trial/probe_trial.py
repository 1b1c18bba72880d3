"""A kernel probe as a trial's stage: where a server would be launched and queried, the probe compiles
(and where a GPU is, launches) the kernel per configuration, and its table decides the verdict."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from abbisect.gpu.kernel_probe import ProbeConfig, ProbeResult, probe_status, probe_verdict, run_probe
from abbisect.recipe.status import Outcome
from abbisect.verdict.rules import PROBE_STATUS, Verdict


@dataclass(frozen=True)
class ProbeTrial:
    result: ProbeResult
    verdict: Verdict
    seconds: float


def probe_trial(config: ProbeConfig, python: str, source: Path, out: Path,
                say: Callable[[str], None], env: dict[str, str] | None = None) -> ProbeTrial:
    """Run the recipe's probe under the side's venv `python` against its checkout `source`, with `env` (its
    Triton and torch caches: abbisect/launch/jit.py)."""
    say(f"probe: {config.kernel} over {', '.join(config.targets)}")
    t0 = time.monotonic()
    result = run_probe(config, python, source, out, env)
    seconds = round(time.monotonic() - t0, 3)
    outcome = probe_status(result, config)
    _, evidence = probe_verdict(result, config)
    verdict = Verdict(PROBE_STATUS[outcome], Outcome(outcome), tuple(evidence) or ("every probed configuration fits its targets",))
    return ProbeTrial(result, verdict, seconds)
