"""One trial: one commit through the whole pipeline, as a self-contained unit.

`TrialSpec` (plain JSON-able data) goes in, `TrialResult` comes out; nothing else is shared, so an
executor can run a trial in this process, in another process, or on another machine of a cluster.
checkout → environment → launch → query → score → verdict.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from abbisect import checkout
from abbisect.environment import EnvResult, ensure_env, needs_source
from abbisect.environment.inventory import Inventory, installed_packages
from abbisect.environment.pins import after_engine
from abbisect.environment.store import bin_dirs
from abbisect.gpu.sharing import GpuGuard, guard_for
from abbisect.infra.cache import Cache
from abbisect.infra.errors import InfraError
from abbisect.infra.proc import scrubbed_env
from abbisect.infra.progress import Status
from abbisect.infra.redact import Redactor, expand_env
from abbisect.infra.serial import dump, load
from abbisect.launch import jit
from abbisect.launch import server as launch
from abbisect.launch.bytecode import bytecode_folder, disk_fault
from abbisect.launch.engines import adapter
from abbisect.launch.engines.base import LaunchPlan
from abbisect.launch.jit import JitMode, Start
from abbisect.query.chat import Completion, label, ordered, query_all, tag
from abbisect.query.evals import ask_eval
from abbisect.query.logprobs import ask_numerics
from abbisect.query.measure import measure
from abbisect.recipe import Prompt, Recipe
from abbisect.score import (
    AnswerCheck,
    OutputAnalysis,
    Signature,
    SignatureMatch,
    Thresholds,
    analyze,
    check_answer,
    load_catalogue,
    severity_at_least,
)
from abbisect.score.scanner import LineScanner
from abbisect.trial.spec import Extras, LaunchInfo, Progress, Timings, TrialResult, TrialSpec
from abbisect.verdict.rules import Signals, Verdict, judge

LOG_TAIL_LINES = 30
INTERRUPTED_GRACE_S = 2.0


@dataclass
class TrialRecord:
    """A trial in the making: each stage of `run_trial` fills in its part, `result()` freezes it."""

    spec: TrialSpec
    env: EnvResult | None = None
    launch: LaunchInfo | None = None
    outputs: tuple[Completion, ...] = ()
    analyses: tuple[OutputAnalysis, ...] = ()
    answers: tuple[AnswerCheck | None, ...] = ()
    signatures: tuple[SignatureMatch, ...] = ()
    first_exception: tuple[int, str] | None = None
    verdict: Verdict | None = None
    timings: dict[str, float] = field(default_factory=dict)
    extras: Extras = field(default_factory=Extras)  # each stage adds its part (dataclasses.replace)
    t0: float = field(default_factory=time.monotonic)
    described: threading.Thread | None = None  # the venv's fingerprint and packages, read in the background
    # What `described` read, apart from `extras` (which the stages replace meanwhile); `result()` adds them.
    fingerprint: dict | None = None
    packages: Inventory | None = None

    def wait_described(self) -> None:
        if self.described is not None:
            self.described.join()

    def result(self) -> TrialResult:
        if self.verdict is None:
            raise RuntimeError(f"trial {self.spec.sha[:10]} ended without a verdict")
        timings = dict(self.timings)
        timings["total"] = round(time.monotonic() - self.t0, 3)
        spent = sum(timings.get(k, 0.0) for k in ("build", "ready", "query", "eval", "numerics", "perf", "teardown",
                                                    "probe"))
        timings["overhead"] = round(max(timings["total"] - spent, 0.0), 3)
        extras = replace(self.extras, fingerprint=self.fingerprint, packages=self.packages)
        return TrialResult(self.spec, self.env, self.launch, self.outputs, self.analyses, self.answers,
                           self.signatures, self.first_exception, self.verdict, Timings(**timings), extras)


def server_env(recipe: Recipe, plan_env: dict[str, str], venv: str, base: str | None = None,
               jit_env: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment: abbisect's own, scrubbed, in the commit's venv. The server writes its bytecode
    into abbisect's cache even where the caller's environment says PYTHONDONTWRITEBYTECODE: vLLM's other
    processes and the commit's next launch then read it instead of compiling every module again (vLLM's API
    server imports in 8 s instead of 23 s on 2 cores; a start imports it in three processes) — into the
    environment's own bytecode folder, checked before each launch (abbisect/launch/bytecode.py), which `jit_env`
    names with the JIT and compile caches of the launch (abbisect/launch/jit.py), over what the caller's
    environment says. A recipe's `env` can still set any of them."""
    env = scrubbed_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update({"VIRTUAL_ENV": venv, "PATH": os.pathsep.join([*bin_dirs(venv, base), env.get("PATH", "")]),
                "PYTHONUNBUFFERED": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    if recipe.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in recipe.gpus)
    env.update(jit_env or {})
    env.update(plan_env)
    env.update(expand_env(recipe.env, env))  # ${VAR} references are read only now, never stored
    return env


def _caches(recipe: Recipe, variables: tuple[tuple[str, str], ...], cache: Cache,
            env_key: str) -> tuple[jit.JitCache, dict[str, str]]:
    """The JIT and compile caches of one launch of the environment `env_key` (abbisect/launch/jit.py), held until
    `jit.done`, and the variables pointing at them."""
    return jit.prepare(JitMode(recipe.launch.jit_cache), variables, cache, env_key, recipe.env)


def resolve_model(recipe: Recipe, cache: Cache | Path, progress: Progress) -> str | None:
    if recipe.model is None or isinstance(recipe.model, str):
        return recipe.model
    from abbisect.environment.weights import prepare

    return str(prepare(recipe.model, cache, progress))


def run_trial(spec: TrialSpec, progress: Progress | None = None) -> TrialResult:
    try:
        return _trial(spec, progress)
    finally:
        _discard_worktree(spec)


def _discard_worktree(spec: TrialSpec) -> None:
    """After a build that copied the source in (or never read it), the commit's worktree is dead weight
    (vLLM's: about 68 MB a commit); it is removed unless another process uses it."""
    recipe = spec.recipe
    if recipe.probe is None and not needs_source(recipe.install):
        repo = Path(spec.repo)
        where = Cache.at(spec.cache_dir).worktree(repo, spec.sha, tuple(recipe.engine.sparse))
        checkout.discard(repo, where)


_PORT_TAKEN = re.compile(r"Address already in use|\[Errno 98\]|EADDRINUSE")


def _trial(spec: TrialSpec, progress: Progress | None = None) -> TrialResult:
    """The pipeline: each stage fills in its part of the record; a stage with nothing left to do for the
    next one (a failed build, a kernel probe) ends it early."""
    say = progress or (lambda _msg: None)
    recipe = spec.recipe
    rec = TrialRecord(spec)
    Path(spec.out_dir).mkdir(parents=True, exist_ok=True)
    source = _checkout(rec, recipe, say)
    env = _build(rec, recipe, source, say)
    if env is None:
        return rec.result()
    if recipe.probe is not None:
        from abbisect.trial.probe_trial import probe_trial

        caches, jit_env = _caches(recipe, jit.TORCH_STACK, Cache.at(spec.cache_dir), env.key)
        try:  # the probe compiles with Triton and torch: their caches, the recipe's env winning as a server's
            probe = probe_trial(recipe.probe, env.python, source, Path(spec.out_dir), say,
                                {name: recipe.env.get(name, value) for name, value in jit_env.items()})
        finally:
            jit.done(caches)
        rec.timings["probe"], rec.verdict = probe.seconds, probe.verdict
        rec.extras = replace(rec.extras, probe=dump(probe.result))
        return rec.result()
    prompts = ordered(list(recipe.prompts), recipe.prompt_order)
    _launch_and_query(rec, recipe, source, prompts, say)
    if rec.verdict is not None:  # hook (issue 25): refused before the launch (a GPU slot's share never came free)
        rec.wait_described()
        return rec.result()
    rec.wait_described()
    say("score")
    ts = time.monotonic()
    _score(rec, recipe, prompts)
    rec.verdict = judge(_signals(recipe, rec), recipe.verdict)
    if recipe.repeats.passes > 1:  # each pass is one observation of a flaky verdict (abbisect/assess)
        outcomes = tuple(judge(_signals(recipe, rec, k), recipe.verdict).outcome for k in range(recipe.repeats.passes))
        rec.extras = replace(rec.extras, pass_outcomes=outcomes)
    rec.timings["score"] = round(time.monotonic() - ts, 4)
    return rec.result()


def _checkout(rec: TrialRecord, recipe: Recipe, say: Progress) -> Path:
    say("checkout")
    spec = rec.spec
    source = checkout.worktree(Path(spec.repo), spec.sha, Cache.at(spec.cache_dir), tuple(recipe.engine.sparse), say)
    rec.timings["checkout"] = round(time.monotonic() - rec.t0, 3)
    return source


def _build(rec: TrialRecord, recipe: Recipe, source: Path, say: Progress) -> EnvResult | None:
    """The commit's venv; on failure the build log's signatures and the verdict, and None."""
    say("environment")
    spec, cache = rec.spec, Cache.at(rec.spec.cache_dir)
    env = ensure_env(source, spec.sha, recipe.install, recipe.engine.subdir, cache, recipe.timeouts.build,
                     on_step=lambda d: say(Status(f"environment: {d}") if isinstance(d, Status) else f"environment: {d}"),
                     after=after_engine(spec.pins, spec.dependency, cache, say=say), redactor=Redactor.from_recipe(recipe),
                     say=say)
    rec.env = env
    rec.timings["build"] = env.seconds
    if not env.ok and (line := disk_fault(_tail(Path(env.log)) + (env.error or ""))):
        raise InfraError(f"the disk filled while the environment was built ({line}; see {env.log}): free some space "
                         "and run again (nothing is recorded about the commit)")
    if not env.ok:
        # Signatures are shown whatever status wins: a build log names its compiler error too.
        build_scan = _scan_file(Path(env.log), _catalogue(recipe))
        rec.signatures, rec.first_exception = tuple(build_scan.matches), build_scan.first_exception
        rec.verdict = judge(_signals(recipe, rec), recipe.verdict)
        return None
    # The full package list proves what differs between two sides (and what does not). It is read while
    # the server loads; with GPUs (or a kernel probe) before, since reading it may open a CUDA context that
    # must not overlap the engine's own memory sizing or the same-GPU hygiene baseline.
    rec.described = threading.Thread(target=_describe, args=(rec, env.python, recipe), daemon=True)
    rec.described.start()
    if recipe.probe is not None or recipe.gpus is not None or recipe.perf is not None:  # nothing else running
        rec.wait_described()
    return env


def _tail(log: Path, size: int = 65536) -> str:
    """The end of a log (empty when there is none)."""
    try:
        with log.open("rb") as fh:
            fh.seek(max(fh.seek(0, 2) - size, 0))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def _describe(rec: TrialRecord, python: str, recipe: Recipe) -> None:
    """The venv's fingerprint and package list, into the record (`result()` puts them in its extras)."""
    rec.fingerprint, rec.packages = _fingerprint(python, recipe, rec.spec), installed_packages(python)


def _catalogue(recipe: Recipe) -> list[Signature]:
    """The packaged log signatures plus the recipe's own, less those of the other engine: SGLang's server logs
    uvicorn's "Application startup complete." too, which is vLLM's ready line, not SGLang's (the `command`
    engine, any server, is scanned for every engine's)."""
    kind = recipe.engine.kind
    return [s for s in load_catalogue([s.model_dump() for s in recipe.scoring.signatures] or None)
            if kind == "command" or s.engine in ("any", kind) or s.engine not in ("vllm", "sglang")]


@dataclass(frozen=True)
class Crash:
    """A server that died while serving: its exit code, and the prompt in flight and the one answered last where
    the query knows them (an eval or a perf pass does not say which item)."""

    exit_code: int | None
    prompt: str | None = None
    after: str | None = None

    @classmethod
    def of(cls, server: launch.Server, prompt: str | None = None, after: str | None = None) -> Crash:
        return cls(server.proc.returncode, prompt, after)


@dataclass
class Serving:
    """One launch of a trial's server as it goes: what it runs and where it logs, the scanner reading its log, its
    JIT caches, the GPU's guard, its wall-clock times; `teardown` once it is stopped."""

    plan: LaunchPlan
    base_url: str
    log_path: Path
    scanner: LineScanner
    caches: jit.JitCache
    jit_env: dict[str, str]
    gpu: GpuGuard | None
    t0: float  # when it was launched (time.monotonic)
    times: dict[str, float]  # wall clock: launched, ready, stopped (the trial's `server_times`)
    teardown: launch.Teardown | None = None


def _launch_and_query(rec: TrialRecord, recipe: Recipe, source: Path, prompts: list[tuple[str, Prompt]],
                      say: Progress) -> None:
    """Start the server, wait for ready, send the prompts, stop it: the launch, the outputs and the log's
    signatures."""
    env = rec.env
    assert env is not None  # built: the stage before ends the trial otherwise
    cache = Cache.at(rec.spec.cache_dir)
    model = resolve_model(recipe, cache, say)
    mod = adapter(recipe.engine.kind)
    host = "127.0.0.1"
    port = launch.free_port(host)
    plan = mod.plan(recipe, env.python, model, host, port)
    gpu = _gpu_guard(rec, recipe, say)
    if gpu is not None and gpu.refusal is not None:  # the slot's share never came free: untested, the machine's fault
        rec.verdict = gpu.refusal
        return
    say(f"launch: {' '.join(plan.argv)}")
    t0, times = time.monotonic(), {"launched": round(time.time(), 3)}  # wall clock (A/B at once overlap)
    rec.extras = replace(rec.extras, server_times=times)  # filled in as it goes
    scanner = LineScanner(_catalogue(recipe), plan.ready_log, own_client=True)
    caches, jit_env = _caches(recipe, mod.jit_caches, cache, env.key)
    now = Serving(plan, f"http://{host}:{port}", Path(rec.spec.out_dir) / "server.log", scanner, caches, jit_env, gpu,
                  t0, times)
    with _serving(now, rec, recipe, source, say) as server:
        ready, crash = _serve(now, rec, recipe, server, prompts, model or recipe.name, say)
    log_text = _log_checked(now, ready, port)
    rec.signatures, rec.first_exception = tuple(now.scanner.matches), now.scanner.first_exception
    shown_env = Redactor.from_recipe(recipe).env({**plan.env, **plan.shown, **recipe.env})  # a result never holds a secret
    assert now.teardown is not None  # `_serving` stops the server before it returns
    rec.launch = LaunchInfo(plan.argv, shown_env, ready.status, ready.seconds, ready.returncode, str(now.log_path),
                            tuple(log_text.splitlines()[-LOG_TAIL_LINES:]), dump(now.teardown), mod.facts(log_text),
                            crashed_while_serving=crash is not None,
                            crash_exit_code=crash.exit_code if crash is not None else None,
                            crash_prompt=crash.prompt if crash is not None else None,
                            crash_after=crash.after if crash is not None else None,
                            client_gone=now.scanner.client_gone, jit=caches)


def _gpu_guard(rec: TrialRecord, recipe: Recipe, say: Progress) -> GpuGuard | None:
    """Hook (issue 25): same-GPU hygiene, whole-GPU or per slot when slots share a GPU (abbisect/gpu/sharing.py),
    with its check before the launch."""
    spec = rec.spec
    gpu = guard_for(recipe.gpus, recipe.gpu_share, spec.slot, spec.cache_dir, spec.sha, say)
    if gpu is not None:
        rec.extras = replace(rec.extras, gpu_before=gpu.before())
    return gpu


@contextmanager
def _serving(now: Serving, rec: TrialRecord, recipe: Recipe, source: Path, say: Progress) -> Iterator[launch.Server]:
    """The server started with its JIT caches, and stopped whatever happens (`_stop`); the caches are released
    at the teardown, or at once when the server does not start."""
    env = rec.env
    assert env is not None  # built
    cache = Cache.at(rec.spec.cache_dir)
    caches = now.caches
    try:
        if caches.start is not Start.UNKNOWN:
            say(f"JIT caches: {caches.start} ({caches.files} file(s) from earlier launches)" if caches.files
                else f"JIT caches: {caches.start}")
        if caches.machine_temporary:
            say("JIT caches: the server keeps the machine's temporary folder (in the cache's path an engine's "
                "socket names would not fit)")
        bytecode = {"PYTHONPYCACHEPREFIX": str(bytecode_folder(cache, env.key, env.python))}
        served = server_env(recipe, now.plan.env, env.path, env.base, {**now.jit_env, **bytecode})
        server = launch.start(now.plan, served, now.log_path, source, now.base_url, cache=cache, scanner=now.scanner,
                              mask=Redactor.from_recipe(recipe).stream())
    except BaseException:
        jit.done(caches)
        raise
    # Nothing between the start and the try: a Ctrl-C in between would leave the server to its supervisor.
    try:
        yield server
    finally:
        _stop(now, rec, recipe, server, say)


def _stop(now: Serving, rec: TrialRecord, recipe: Recipe, server: launch.Server, say: Progress) -> None:
    """The teardown. Interrupted (Ctrl-C, SIGTERM): nobody waits for this server's answers, so it gets a short
    grace (an engine that is still importing may ignore SIGTERM for the whole timeouts.teardown), and says so."""
    interrupted = isinstance(sys.exc_info()[1], KeyboardInterrupt | SystemExit)
    grace = min(recipe.timeouts.teardown, INTERRUPTED_GRACE_S) if interrupted else recipe.timeouts.teardown
    say(f"teardown (interrupted: stopping the server, at most {grace:.0f} s)" if interrupted else "teardown")
    if not server.alive() and server.reader is not None:  # its last words (the crash): read them all
        server.reader.join(timeout=2.0)
    # What the engine logs while being killed (e.g. vLLM's EngineDeadError) is not evidence about it.
    now.scanner.freeze()
    try:
        now.teardown = launch.stop(server, grace, now.plan.stop_main_first)
    finally:
        jit.done(now.caches)
    now.times["stopped"] = round(time.time(), 3)
    rec.timings["teardown"] = now.teardown.seconds
    if now.gpu is not None:
        rec.extras = replace(rec.extras, gpu_after=now.gpu.after())


def _serve(now: Serving, rec: TrialRecord, recipe: Recipe, server: launch.Server, prompts: list[tuple[str, Prompt]],
           model: str, say: Progress) -> tuple[launch.ReadyOutcome, Crash | None]:
    """Wait for ready, then what the recipe asks of a ready server, each step only while it has not crashed: the
    prompts, the eval set's part, the token log-probabilities, the performance passes."""
    if now.gpu is not None:
        now.gpu.started(server.proc)
    ready = launch.wait_ready(server, now.plan, recipe.timeouts.ready, progress=say)
    rec.timings["ready"] = round(time.monotonic() - now.t0, 3)
    now.times["ready"] = round(time.time(), 3)
    if ready.status != "ready":
        return ready, None
    if now.gpu is not None:  # evidence that the check sees this side's own server on the GPU
        rec.extras = replace(rec.extras, gpu_during=now.gpu.during())
    tq = time.monotonic()
    crash = _query(rec, recipe, server, prompts, model, say)
    rec.timings["query"] = round(time.monotonic() - tq, 3)
    for asked, step in ((recipe.eval, _eval), (recipe.numerics, _numerics), (recipe.perf, _perf)):
        if asked is not None and crash is None:
            step(rec, recipe, server, prompts, model, say)
            if not server.alive():
                crash = Crash.of(server)
    return ready, crash


def _eval(rec: TrialRecord, recipe: Recipe, server: launch.Server, prompts: list[tuple[str, Prompt]], model: str,
          say: Progress) -> None:
    """The eval set's part this launch asks (query/evals.py)."""
    assert recipe.eval is not None  # asked
    te = time.monotonic()
    run = ask_eval(server.base_url, model, recipe.eval, rec.spec.chunk, timeout=recipe.timeouts.request,
                   seed=recipe.sampling.seed, alive=server.alive, only=rec.spec.items)
    rec.extras = replace(rec.extras, eval=run)
    rec.timings["eval"] = round(time.monotonic() - te, 3)
    say(f"eval: {run.n_correct}/{run.n_graded} right" + (f", {run.n_errors} failed request(s)" if run.n_errors else ""))


def _numerics(rec: TrialRecord, recipe: Recipe, server: launch.Server, prompts: list[tuple[str, Prompt]], model: str,
              say: Progress) -> None:
    """The texts' token log-probabilities (query/logprobs.py)."""
    assert recipe.numerics is not None  # asked
    tn = time.monotonic()
    numerics = ask_numerics(server.base_url, model, recipe.numerics, [p.prompt for _, p in prompts], recipe.api,
                            recipe.sampling.max_tokens, recipe.sampling.seed, recipe.timeouts.request, say)
    rec.extras = replace(rec.extras, numerics=numerics)
    rec.timings["numerics"] = round(time.monotonic() - tn, 3)


def _perf(rec: TrialRecord, recipe: Recipe, server: launch.Server, prompts: list[tuple[str, Prompt]], model: str,
          say: Progress) -> None:
    """The pinned load, timed (abbisect/query/measure.py)."""
    assert recipe.perf is not None  # asked
    tp = time.monotonic()
    perf = measure(server.base_url, model, recipe.perf, recipe.api, [p.prompt for _, p in prompts],
                   recipe.timeouts.request, recipe.gpus, say, server.alive)
    rec.extras = replace(rec.extras, perf=perf)
    rec.timings["perf"] = round(time.monotonic() - tp, 3)


def _log_checked(now: Serving, ready: launch.ReadyOutcome, port: int) -> str:
    """The server's log (capped on disk: abbisect.infra.logstream), once it is known to be the commit's evidence:
    a disk that filled, or a port another process took between our probe and the server's bind, is the machine's
    fault, not the commit's (a crash at startup would call it bad): no verdict, nothing cached."""
    log_text = now.log_path.read_bytes().decode(errors="replace")
    if line := disk_fault(log_text):
        raise InfraError(f"the disk filled while the server ran ({line}; see {now.log_path}): free some space and "
                         "run again (nothing is recorded about the commit)")
    if ready.status == "exited" and _PORT_TAKEN.search(log_text):
        raise InfraError(f"the server could not bind its port ({port} or one it opens itself): another process "
                         f"took it (see {now.log_path}); run again")
    return log_text


def passes(recipe: Recipe) -> list[tuple[int, int]]:
    """(pass, requests in flight) of each round of requests a launch makes: `repeats.passes` passes at
    `query.concurrency`, each also sent one at a time first when `query.batch_invariance` asks to compare."""
    n = recipe.query.concurrency
    batches = [1, n] if recipe.query.batch_invariance and n > 1 else [n]
    return [(k, b) for k in range(recipe.repeats.passes) for b in batches]


def _query(rec: TrialRecord, recipe: Recipe, server: launch.Server, prompts: list[tuple[str, Prompt]], model: str,
           say: Progress) -> Crash | None:
    """Every pass over the prompts (each at its concurrency, each prompt `query.repeat` times); the outputs in
    the order sent, and, if the server died while serving, the crash."""
    outputs: list[Completion] = []
    by_id = dict(prompts)
    for n, batch in passes(recipe):
        copies = recipe.query.repeat
        say(f"query: {len(prompts)} prompt(s)" + (f" × {copies}" if copies > 1 else "")
            + (f", {batch} in flight" if batch > 1 else "") + (f" (pass {n + 1})" if n else ""))
        run = query_all(server.base_url, recipe.api, prompts, recipe.sampling, recipe.timeouts.request, model,
                        alive=server.alive, concurrency=batch, repeat=copies)
        outputs += [replace(o, pass_no=n) for o in run.outputs]
        if not server.alive():
            rec.outputs = tuple(outputs)
            crash = Crash.of(server, label(run.in_flight, by_id.get(run.in_flight)) if run.in_flight else None,
                             label(run.died_after, by_id.get(run.died_after)) if run.died_after else None)
            say(f"server exited (code {server.proc.returncode}) while serving"
                + (f" prompt {crash.prompt}" if crash.prompt else ""))
            return crash
    rec.outputs = tuple(outputs)
    return None


def _score(rec: TrialRecord, recipe: Recipe, prompts: list[tuple[str, Prompt]]) -> None:
    """Each output labelled (degeneration) and checked against its prompt's expected answer."""
    thresholds = Thresholds.from_overrides(recipe.scoring.thresholds or None)
    rec.analyses = tuple(analyze(o.text, thresholds) for o in rec.outputs)
    expected = {pid: p.expect for pid, p in prompts}
    rec.answers = tuple(check_answer(o.text, want) if (want := expected[o.prompt_id]) else None for o in rec.outputs)


def _scan_file(path: Path, catalogue) -> LineScanner:
    """Scan a (capped) log file line by line."""
    scanner = LineScanner(catalogue)
    try:
        with path.open("rb") as fh:
            for raw in fh:
                scanner.feed(raw[:65536].decode(errors="replace"))
    except OSError:
        pass
    return scanner


def _fingerprint(python: str, recipe: Recipe, spec: TrialSpec) -> dict:
    """The side's own venv described (torch, triton, engine version) plus the GPU it sees."""
    from abbisect.gpu.fingerprint import collect

    fp = collect(python, extra={"engine": recipe.engine.kind, "engine_sha": spec.sha}, timeout_s=120)
    return fp.to_dict()


def _signals(recipe: Recipe, rec: TrialRecord, only_pass: int | None = None) -> Signals:
    """What the verdict needs of the trial (of one of its passes, with `only_pass`: a launch-level failure is
    every pass's, a crash while serving that of the passes it cut short)."""
    env, info, signatures, exc = rec.env, rec.launch, rec.signatures, rec.first_exception
    assert env is not None  # every trial that reaches a verdict through evidence went through the build
    keep = [i for i, o in enumerate(rec.outputs) if only_pass is None or o.pass_no == only_pass]
    outputs = [rec.outputs[i] for i in keep]
    analyses = [rec.analyses[i] for i in keep]
    answers = [rec.answers[i] for i in keep]
    crashed = bool(info and info.crashed_while_serving) and (only_pass is None or any(o.error for o in outputs))
    warn = recipe.scoring.warn_severity
    named = set(recipe.verdict.bad_signatures)
    rejected = tuple(g for s in signatures if s.id == "flag_rejected" for g in (s.groups or (s.line,)) if g)
    return Signals(
        build_ok=env.ok,
        build_error=env.error,
        ready=info.status if info else None,
        rejected_flags=rejected,
        first_exception=exc[1] if exc else None,
        n_outputs=len(outputs),
        n_errors=sum(1 for o in outputs if o.error),
        exited_while_serving=crashed,
        exit_code=info.crash_exit_code if info else None,
        crash_prompt=info.crash_prompt if info else None,
        crash_after=info.crash_after if info else None,
        request_errors=tuple(f"{tag(o)}: {o.error[:200]}" for o in outputs if o.error and not crashed)
        + _eval_errors(recipe, rec),
        failed_passes=() if crashed else _failed_passes(recipe, rec),
        n_passes=len(rec.extras.passes),
        degenerate=tuple(f"{tag(o)}: {a.reason}" for o, a in zip(outputs, analyses)
                         if a.label == "degenerate" and not o.error),
        late_loops=tuple(f"{tag(o)}: {a.reason}" for o, a in zip(outputs, analyses) if a.label == "late_loop"),
        answer_misses=tuple(f"{tag(o)}: expected /{c.expected}/" for o, c in zip(outputs, answers)
                            if c is not None and not c.passed),
        serious_signatures=tuple(f"{s.id} (line {s.line_no})" for s in signatures
                                 if severity_at_least(s.severity, warn) and s.id != "flag_rejected"),
        bad_signatures=tuple(f"{s.id} (line {s.line_no})" for s in signatures if s.id in named),
        batch_variant=batch_variant(outputs),
    )


def _eval_errors(recipe: Recipe, rec: TrialRecord) -> tuple[str, ...]:
    """The eval's failed requests when they are more than eval.error_threshold of its items (the side failed as
    a side); below it they are counted apart by the accuracy verdict and are no evidence here."""
    run = rec.extras.eval
    if recipe.eval is None or run is None:
        return ()
    if not run.request_errors(recipe.eval.error_threshold):
        return ()
    return tuple(f"eval item {i.id}: {(i.error or '')[:200]}" for i in run.errors())


def _failed_passes(recipe: Recipe, rec: TrialRecord) -> tuple[str, ...]:
    """The performance passes whose failed requests exceed perf.error_threshold: each pass's count and first
    error (a pass of a stream that ends in an error event, a timeout or a malformed event is no measurement)."""
    if recipe.perf is None:
        return ()
    return tuple(f"perf pass {k + 1}: {p.errors}/{p.completed + p.errors} requests failed (over "
                 f"{recipe.perf.error_threshold:.0%}); first: {(p.first_error or '?')[:200]}"
                 for k, p in enumerate(rec.extras.passes) if p.failed)


def batch_variant(outputs: list[Completion]) -> tuple[str, ...]:
    """Prompts whose answer at temperature 0 changes with how many requests were in flight (the first copy of
    each prompt, pass by pass: one at a time against a batch)."""
    alone = {(o.pass_no, o.prompt_id): o.text for o in outputs if o.batch == 1 and o.copy == 0 and not o.error}
    found = []
    for o in outputs:
        ref = alone.get((o.pass_no, o.prompt_id))
        if o.batch > 1 and o.copy == 0 and not o.error and ref is not None and o.text != ref:
            at = next((i for i, (x, y) in enumerate(zip(ref, o.text)) if x != y), min(len(ref), len(o.text)))
            found.append(f"{tag(replace(o, batch=1))}: differs with {o.batch} in flight from one at a time "
                         f"(from char {at})")
    return tuple(found)


def main(argv: list[str] | None = None) -> int:
    """`python -m abbisect.trial SPEC.json`: run one trial anywhere abbisect is installed; JSON out.

    This is the seam for executors that place trials elsewhere (another GPU of the host, a cluster).
    """
    args = sys.argv[1:] if argv is None else argv
    if args == ["--serve"]:
        # A warm worker (executors.LocalParallel): one spec file a line on stdin, one result line on stdout
        # each (after RESULT_MARK), so the next trial starts without a new interpreter and imports. A
        # stopped trial (SIGTERM to the worker's group) unwinds, so its server is torn down in order.
        import signal

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
        for line in sys.stdin:
            print(RESULT_MARK + _one(Path(line.strip())), flush=True)
        return 0
    print(_one(Path(args[0])))
    return 0


RESULT_MARK = "abbisect-trial-result "


def _one(path: Path) -> str:
    import json

    spec = load(TrialSpec, json.loads(path.read_text()))
    from abbisect.infra.redact import Redactor

    red = Redactor.from_recipe(spec.recipe)  # executors log this process's output: no secret in it
    result = run_trial(spec, red.guard(lambda msg: print(f"[{spec.side} {spec.sha[:10]}] {msg}", file=sys.stderr,
                                                         flush=True)))
    return json.dumps(red.data(dump(result)), default=str)


if __name__ == "__main__":
    raise SystemExit(main())
