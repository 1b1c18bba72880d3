"""Where trials run: one interface, three places — this process, local slots in parallel, a Ray cluster.

A trial is `TrialSpec` JSON in, `TrialResult` JSON out (`abbisect.trial`), so an executor only decides
where and on which GPUs: it gives the spec its slot (`recipe.gpus` becomes the slot's GPUs, so the trial
pins CUDA_VISIBLE_DEVICES and checks same-GPU hygiene on exactly those) and hands back a future.
A failure of the executor itself (a trial process that dies, a Ray node that is lost) is an
`infra_error` — untestable, retried or skipped, never recorded as the commit's verdict.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from abbisect.gpu.sharing import SlotPlace
from abbisect.infra.cache import Cache
from abbisect.infra.errors import UserError
from abbisect.infra.proc import abbisect_path, scrubbed_env
from abbisect.infra.serial import dump, load
from abbisect.recipe.gpus import neighbours, parse_gpu_option
from abbisect.trial.pipeline import RESULT_MARK, run_trial
from abbisect.trial.spec import Progress, TrialResult, TrialSpec
from abbisect.verdict.rules import Verdict
from abbisect.verdict.status import Outcome, Status


@dataclass(frozen=True)
class Slot:
    """Where one trial at a time runs: its GPUs (None: no GPU pinning, a CPU engine), the share of each GPU's
    memory its server takes (None: the whole GPU) and the other slots on one of its GPUs."""

    index: int
    gpus: tuple[int, ...] | None
    share: float | None = None
    shared_with: tuple[int, ...] = ()

    @property
    def shared(self) -> bool:
        """Another slot's trials run on one of this slot's GPUs at the same time (timings are not its own)."""
        return bool(self.shared_with)

    def label(self) -> str:
        if self.gpus is None:
            return f"slot {self.index}"
        share = f", share {self.share:g}" if self.share is not None else ""
        return f"slot {self.index} (GPU {','.join(map(str, self.gpus))}{share})"


def slots_for(gpu_slots: list[list[int]], count: int, share: float | None = None) -> list[Slot]:
    """GPU slots when the recipe names them (a GPU in several slots when they share it, each taking `share`
    of it), else `count` slots without GPUs (CPU engines)."""
    if gpu_slots:
        return [Slot(i, tuple(g), share, neighbours(gpu_slots, i)) for i, g in enumerate(gpu_slots)]
    return [Slot(i, None) for i in range(max(count, 1))]


def parse_gpus(text: str) -> list[list[int]]:
    """The slots' GPUs of `--gpus` (0,1,2,3; 0+1,2+3; 0x4 …); its share too: recipe.gpus.parse_gpu_option."""
    return [list(s) for s in parse_gpu_option(text).slots]


def on_slot(spec: TrialSpec, slot: Slot, run: str = "") -> TrialSpec:
    """The spec placed on `slot`: its GPUs and share in the recipe; on a slot that shares its GPUs, the slot's
    place in `run` (whose ledgers per-slot hygiene reads)."""
    if slot.gpus is None:
        return spec
    recipe = spec.recipe.model_copy(update={"gpus": list(slot.gpus), "gpu_share": slot.share})
    place = SlotPlace(slot.index, run, slot.shared_with) if slot.shared else None
    return replace(spec, recipe=recipe, slot=place)


def placed(result: TrialResult, executor: str, slot: Slot, started: float) -> TrialResult:
    """The result with where and when it ran (the timeline of a parallel bisect is drawn from these)."""
    where = {"executor": executor, "slot": slot.index, "gpus": list(slot.gpus) if slot.gpus else None,
             "share": slot.share, "shared_with": list(slot.shared_with),
             "start": round(started, 3), "end": round(time.time(), 3)}
    return replace(result, extras={**result.extras, "placement": where})


def infra_result(spec: TrialSpec, reason: str) -> TrialResult:
    """The result of a trial that the executor could not carry out (not the commit's fault)."""
    return TrialResult(spec, None, None, (), (), (), (), None, Verdict(Status.INFRA_ERROR, Outcome.SKIP, (reason,)),
                       {}, {"executor_error": reason})


class Executor(Protocol):
    name: str
    slots: list[Slot]

    def submit(self, spec: TrialSpec, slot: Slot, progress: Progress) -> Future[TrialResult]: ...

    def cancel(self, future: Future[TrialResult]) -> None: ...

    def shutdown(self) -> None: ...


class _Worker:
    """A warm `python -m abbisect.trial --serve` process of one slot: trials one after the other, without a
    new interpreter and abbisect's imports each time (about a second of CPU a trial)."""

    def __init__(self, slot: Slot):
        env = scrubbed_env({"PYTHONPATH": abbisect_path()})
        self.slot = slot
        self.progress: Progress = lambda _m: None
        self.proc = subprocess.Popen([sys.executable, "-m", "abbisect.trial", "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                     start_new_session=True)
        threading.Thread(target=self._relay, daemon=True).start()

    def _relay(self) -> None:
        assert self.proc.stderr is not None  # PIPE
        for line in self.proc.stderr:  # the trial's progress lines, as they come
            self.progress(f"{self.slot.label()}: {line.rstrip().split('] ', 1)[-1]}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, spec_file: str, progress: Progress) -> str | None:
        """The result line of one trial; None when the worker died (killed: cancelled, or crashed)."""
        self.progress = progress
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None  # PIPE
        try:
            stdin.write(spec_file + "\n")
            stdin.flush()
            while True:
                line = stdout.readline()
                if not line:
                    return None
                if line.startswith(RESULT_MARK):
                    return line[len(RESULT_MARK):]
        except (BrokenPipeError, OSError, ValueError):
            return None
        finally:
            self.progress = lambda _m: None

    def stop(self) -> None:
        if self.proc.stdin:
            try:
                self.proc.stdin.close()  # the worker's loop ends
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _kill_group(self.proc)


class LocalParallel:
    """One warm trial process a slot (`python -m abbisect.trial --serve`), trials on all slots at once; a
    cancelled trial's process group is killed (its server goes with it: servers die with their parent) and
    the slot's next process is started at once, so it is warm when the next round comes."""

    name = "local"

    def __init__(self, slots: list[Slot]):
        self.slots = slots
        # This run's name for the ledgers of slots that share a GPU (<cache>/gpu-slots/<run>/, gpu/sharing.py).
        self.run = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.ledger_dirs: set[Path] = set()
        self.pool = ThreadPoolExecutor(max_workers=len(slots), thread_name_prefix="slot")
        self.running: dict[Future[TrialResult], dict] = {}
        self.workers: dict[int, _Worker] = {}
        self.lock = threading.Lock()
        self.closed = False

    def submit(self, spec: TrialSpec, slot: Slot, progress: Progress) -> Future[TrialResult]:
        holder: dict = {}
        if slot.shared:
            self.ledger_dirs.add(Cache.at(spec.cache_dir).gpu_slots(self.run))
        future = self.pool.submit(self._run, on_slot(spec, slot, self.run), slot, progress, holder)
        self.running[future] = holder
        future.add_done_callback(lambda f: self.running.pop(f, None))
        return future

    def _worker(self, slot: Slot) -> _Worker:
        with self.lock:
            worker = self.workers.get(slot.index)
            if worker is None or not worker.alive():
                worker = self.workers[slot.index] = _Worker(slot)
            return worker

    def _run(self, spec: TrialSpec, slot: Slot, progress: Progress, holder: dict) -> TrialResult:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(dump(spec), fh)
        started = time.time()
        try:
            if holder.get("cancelled"):
                return infra_result(spec, f"cancelled on {slot.label()}: its verdict was no longer needed")
            worker = self._worker(slot)
            holder["proc"], holder["slot"] = worker.proc, slot
            line = worker.run(fh.name, progress)
        finally:
            os.unlink(fh.name)
        if holder.get("cancelled"):
            return infra_result(spec, f"cancelled on {slot.label()}: its verdict was no longer needed")
        if line is None:
            return infra_result(spec, f"the trial process on {slot.label()} exited with {worker.proc.wait()}")
        try:
            result = load(TrialResult, json.loads(line))
        except (ValueError, KeyError, TypeError) as exc:
            return infra_result(spec, f"the trial process on {slot.label()} gave no result ({exc})")
        return placed(result, self.name, slot, started)

    def cancel(self, future: Future[TrialResult]) -> None:
        if future.cancel():
            return
        holder = self.running.get(future, {})
        holder["cancelled"] = True
        if "proc" in holder:
            _kill_group(holder["proc"])
            # The slot's next trial (the next round) finds a warm process instead of paying for a new one.
            threading.Thread(target=self._respawn, args=(holder["proc"], holder["slot"]), daemon=True).start()

    def _respawn(self, old: subprocess.Popen, slot: Slot) -> None:
        try:
            old.wait(timeout=30)
        except subprocess.TimeoutExpired:
            return  # the next trial on this slot finds it dead or alive, and acts then
        with self.lock:
            current = self.workers.get(slot.index)
            if not self.closed and (current is None or current.proc is old):
                self.workers[slot.index] = _Worker(slot)

    def shutdown(self) -> None:
        with self.lock:
            self.closed = True  # no slot gets a new process from now on
        for future in list(self.running):
            self.cancel(future)
        self.pool.shutdown(wait=False, cancel_futures=True)
        with self.lock:
            workers, self.workers = list(self.workers.values()), {}
        for worker in workers:
            worker.stop()
        for folder in self.ledger_dirs:  # every server of this run is gone: nothing left to attribute
            shutil.rmtree(folder, ignore_errors=True)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def _ray_trial(spec_dict: dict, pid_file: str | None = None) -> dict:
    """Runs on a Ray worker: the trial with the GPUs Ray gave this task, JSON back."""
    import ray

    if pid_file:  # lets a test find (and kill) the worker that runs this trial
        Path(pid_file).write_text(str(os.getpid()))
    spec = load(TrialSpec, spec_dict)
    gpus = ray.get_gpu_ids()
    if gpus:
        spec = replace(spec, recipe=spec.recipe.model_copy(update={"gpus": [int(g) for g in gpus]}))
    return dump(run_trial(spec))


class RayExecutor:
    """Each trial a Ray task: `num_gpus` = the slot's size (or one unit of a custom resource standing in
    for a slot); a worker or node lost mid-trial is retried elsewhere by Ray (`retries`), and if it is
    still lost the trial is `infra_error`. Venvs and worktrees are built on the node that runs the trial,
    in the spec's cache folder: on a cluster, a path every node has (a shared file system) or the same
    local path on each node."""

    name = "ray"

    def __init__(self, slots: list[Slot], address: str | None = None, resource: str | None = None,
                 retries: int = 2, init: dict | None = None):
        try:
            import ray
        except ImportError:
            raise UserError("the Ray executor needs Ray: pip install 'abbisect[ray]'") from None
        if any(s.shared for s in slots):
            raise UserError("slots that share a GPU (gpus.per_gpu, --gpus 0x4) run on the local executor: Ray "
                            "places its tasks on GPUs itself, so a slot's previous server cannot be told apart")
        self.ray = ray
        self.slots, self.resource, self.retries = slots, resource, retries
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False, **(init or {}))
        self.task = ray.remote(_ray_trial)
        self.refs: dict[Future[TrialResult], object] = {}
        self.pid_files: dict[str, str] = {}  # sha -> file, for tests that kill a worker

    def submit(self, spec: TrialSpec, slot: Slot, progress: Progress) -> Future[TrialResult]:
        opts: dict = {"max_retries": self.retries, "num_cpus": 0}
        if self.resource:
            opts["resources"] = {self.resource: 1}
        if slot.gpus:
            opts["num_gpus"] = len(slot.gpus)
        progress(f"{slot.label()}: sent to Ray")
        ref = self.task.options(**opts).remote(dump(spec), self.pid_files.get(spec.sha))
        raw = ref.future()
        result: Future[TrialResult] = Future()
        started = time.time()

        def done(f) -> None:
            try:
                result.set_result(placed(load(TrialResult, f.result()), self.name, slot, started))
            except Exception as exc:  # noqa: BLE001 -- any Ray failure is the executor's, not the commit's
                result.set_result(infra_result(spec, f"Ray could not run the trial: {type(exc).__name__}: "
                                                     f"{str(exc).splitlines()[0] if str(exc) else ''}"))

        raw.add_done_callback(done)
        self.refs[result] = ref
        return result

    def cancel(self, future: Future[TrialResult]) -> None:
        ref = self.refs.pop(future, None)
        if ref is not None:
            self.ray.cancel(ref, force=True)

    def shutdown(self) -> None:
        for future in list(self.refs):
            self.cancel(future)


def from_recipe(recipe) -> Executor | None:
    """The executor a recipe's bisect options ask for; None: trials one after the other in this process."""
    opts = recipe.bisect
    slots = slots_for(recipe.gpu_slots, opts.slots, recipe.gpu_share)
    kind = opts.executor if opts.executor != "auto" else ("local" if len(slots) > 1 else "sequential")
    if kind == "sequential":
        if len(slots) > 1:
            raise UserError(f"{len(slots)} slots need an executor that runs trials at once: --executor local or ray")
        return None
    if kind == "local":
        return LocalParallel(slots)
    return RayExecutor(slots, address=opts.ray_address, resource=opts.ray_resource)
