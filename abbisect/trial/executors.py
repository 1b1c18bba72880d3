"""Where trials run: one interface (`slots.Executor`), three places — this process, local slots in parallel
(here), a Ray cluster (`cluster.py`).

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
from pathlib import Path

from abbisect.infra.cache import Cache
from abbisect.infra.errors import UserError
from abbisect.infra.proc import abbisect_path, scrubbed_env
from abbisect.infra.serial import dump, load
from abbisect.trial.pipeline import RESULT_MARK
from abbisect.trial.slots import Executor, Slot, infra_result, on_slot, placed, slots_for
from abbisect.trial.spec import Progress, TrialResult, TrialSpec
from abbisect.trial.trial_cache import machine_key


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
    remote = False

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

    def machine_key(self) -> str:
        return machine_key()  # this machine's

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


def from_recipe(recipe, cache: Path | None = None) -> Executor | None:
    """The executor a recipe's bisect options ask for; None: trials one after the other in this process.
    `cache`: the run's, for a Ray that the executor starts on this machine itself."""
    opts = recipe.bisect
    slots = slots_for(recipe.gpu_slots, opts.slots, recipe.gpu_share)
    kind = opts.executor if opts.executor != "auto" else ("local" if len(slots) > 1 else "sequential")
    if kind == "sequential":
        if len(slots) > 1:
            raise UserError(f"{len(slots)} slots need an executor that runs trials at once: --executor local or ray")
        return None
    if kind == "local":
        return LocalParallel(slots)
    from abbisect.trial.cluster import RayExecutor

    return RayExecutor(slots, address=opts.ray_address, resource=opts.ray_resource, cache=cache)
