"""A launch's performance passes: the recipe's pinned load (abbisect/recipe/perf.py) run `perf.passes` times
against the ready server by abbisect's own load generator (load.py), each pass reduced to one value of every
metric and recorded with what could have disturbed it (the host's load and CPU frequency, the GPUs' clocks,
temperature, power and memory).

Pass k of every launch of every commit sends the same prompts (seed + k), so pass k of A and pass k of B
are the same work; the passes of one launch differ, so a prefix cache cannot answer a pass from the one
before it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from abbisect.gpu.hygiene import GpuConditions, gpu_conditions
from abbisect.infra import procfs
from abbisect.infra.serial import NoneLeftOut
from abbisect.query.workload import Workload
from abbisect.recipe.perf import Perf

if TYPE_CHECKING:  # the client (and its HTTP libraries) is loaded to measure, not by a result naming a PerfRun
    from abbisect.query.load import PassResult, Summary

MS = 1000.0


@dataclass(frozen=True)
class Conditions(NoneLeftOut):
    """What could disturb a pass, read just before it: the host's 1-minute load average and its cores (None in a
    result from before they were kept), the CPU clock, and each pinned GPU's state (no key without GPUs)."""

    load1: float | None = None
    cores: int | None = None
    cpu_mhz: float | None = None
    gpus: tuple[GpuConditions, ...] | None = None


    left_out: ClassVar[tuple[str, ...]] = ("gpus",)


@dataclass(frozen=True)
class PerfPass:
    """What a trial keeps of one pass: one value of every metric (`values`), its measured requests answered in
    full and failed, whether it failed as a pass (its failed requests over perf.error_threshold: its values are
    no measurement), the warm-up's failed requests, its wall time and output tokens, what could have disturbed
    it (`conditions`, read just before it) and its first failed request's error."""

    values: dict[str, float | None]
    completed: int
    errors: int
    failed: bool | None = None  # None: a pass recorded before the mark (failed when none completed: `is_failed`)
    warmup_errors: int = 0
    wall_s: float = 0.0
    output_tokens: int = 0
    conditions: Conditions = Conditions()
    first_error: str | None = None

    @property
    def is_failed(self) -> bool:
        """No measurement: marked failed when it ran, or, in a result from before that mark, no completed request."""
        return self.failed if self.failed is not None else not self.completed


@dataclass(frozen=True)
class PerfRun:
    """Every pass of one launch: pass 0's load (pass k's differs only in its seed + k), the recipe's metric, and
    the passes in the order they ran (they stop when the server dies)."""

    workload: Workload
    metric: str
    passes: tuple[PerfPass, ...]


def workload(perf: Perf, api: str, prompts: Sequence[str], k: int = 0) -> Workload:
    """The load of pass k."""
    synthetic = perf.input_words is not None
    return Workload(requests=perf.requests, prompts=() if synthetic else tuple(prompts),
                    input_words=perf.input_words, max_concurrency=perf.concurrency,
                    request_rate=perf.request_rate, warmup=perf.warmup, max_tokens=perf.max_tokens,
                    ignore_eos=perf.ignore_eos, api=api, seed=perf.seed + k)  # type: ignore[arg-type]


def values(p: PassResult) -> dict[str, float | None]:
    """One value of every metric of abbisect/recipe/perf.py METRICS for the pass (latencies in ms)."""
    def ms(s: Summary, which: str) -> float | None:
        v = getattr(s, which)
        return None if v is None else round(v * MS, 4)

    return {"output_throughput": round(p.output_throughput, 4) if p.completed else None,
            "request_throughput": round(p.request_throughput, 4) if p.completed else None,
            "ttft_median": ms(p.ttft, "median"), "ttft_p90": ms(p.ttft, "p90"), "ttft_p99": ms(p.ttft, "p99"),
            "tpot_median": ms(p.tpot, "median"), "itl_median": ms(p.itl, "median"),
            "e2e_median": ms(p.e2e, "median"), "e2e_p90": ms(p.e2e, "p90"), "e2e_p99": ms(p.e2e, "p99")}


def failed(p: PassResult, threshold: float) -> bool:
    """A failed pass: none of its measured requests answered in full, or more than `threshold` of them failed
    (its timings would be those of the requests that happened to get through)."""
    return not p.completed or p.errors > threshold * (p.completed + p.errors)


def conditions(gpus: Sequence[int] | None) -> Conditions:
    """What could disturb a pass, read just before it: the host's load (and its cores, to read the load
    against), the CPU clock, the GPUs' clocks, temperature, power and memory."""
    return Conditions(procfs.load_average(), os.cpu_count(), procfs.cpu_mhz(),
                      tuple(gpu_conditions(list(gpus))) if gpus else None)


def measure(base_url: str, model: str, perf: Perf, api: str, prompts: Sequence[str], timeout: float,
            gpus: Sequence[int] | None, say: Callable[[str], None], alive: Callable[[], bool]) -> PerfRun:
    """Every pass of one launch (`PerfRun`); a pass is `failed` when its failed requests exceed
    `perf.error_threshold` (its values are no measurement). Passes stop when the server dies (the trial's status
    says so)."""
    from abbisect.query.load import run_pass

    passes: list[PerfPass] = []
    for k in range(perf.passes):
        load = workload(perf, api, prompts, k)
        before = conditions(gpus)
        result = run_pass(base_url, model, load, timeout)
        passes.append(record(result, perf, before))
        shown, first_error = passes[-1].values[perf.metric], passes[-1].first_error
        say(f"perf pass {k + 1}/{perf.passes}: {perf.metric} "
            + (f"{shown:,.4g}" if shown is not None else "—")
            + (f", {result.errors} of {result.completed + result.errors} request(s) failed: {first_error}"[:300]
               if result.errors else ""))
        if not alive():
            break
    return PerfRun(workload(perf, api, prompts), perf.metric, tuple(passes))


def record(result: PassResult, perf: Perf, before: Conditions) -> PerfPass:
    """What a trial keeps of one pass."""
    return PerfPass(values(result), result.completed, result.errors, failed(result, perf.error_threshold),
                    result.warmup_errors, round(result.wall_s, 4), result.output_tokens, before,
                    next((r.error for r in result.records if r.error), None))
