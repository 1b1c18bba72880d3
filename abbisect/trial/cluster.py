"""Trials as Ray tasks on a cluster whose nodes share no folder with the driver or with each other.

Each trial is one task that asks for a slot: one unit of the recipe's custom resource (`bisect.ray_resource`,
one unit per GPU slot a node declares) or the slot's number of GPUs. The task is a generator: it says first
which node it runs on, then streams the trial's progress lines, then its delivery (abbisect/trial/remote.py):
the source and the recipe's files go out in the task's parcel, the result and the trial folder's files come
back, and nothing is read from a folder of another machine. Each node builds in its own cache.

A node lost mid-trial (its raylet killed, the host gone) fails the task with a Ray system error: the trial
is sent again, to whichever node has a free slot (`retries` times), and the lost attempts are kept in the
result's placement; if every attempt is lost the trial is `infra_error` — untestable, never the commit's
verdict. A node that joins mid-bisect takes the next trials that wait for a slot.
"""

from __future__ import annotations

import hashlib
import os
import queue
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from abbisect.infra.cache import cache_path, create, enforce_budget
from abbisect.infra.errors import InfraError, UserError
from abbisect.infra.redact import Redactor
from abbisect.infra.serial import dump, load
from abbisect.infra.supervisor import own_process_groups, reap_orphans
from abbisect.trial.pipeline import run_trial
from abbisect.trial.remote import Parcels, delivery, land, localized
from abbisect.trial.slots import Slot, infra_result, placed
from abbisect.trial.spec import Progress, TrialResult, TrialSpec
from abbisect.trial.trial_cache import machine_key


def node_trial(spec_dict: dict, parcel: dict[str, dict]) -> Iterator[tuple[str, object]]:
    """Runs on a Ray worker of some node: ("node", where), then ("say", line)…, then ("delivery", data)."""
    import ray

    own_process_groups()  # Ray kills a worker's process group at once: the supervisors keep out of it (_options)
    gpus = [int(g) for g in ray.get_gpu_ids()]
    # This node's own cache: ABBISECT_CACHE_DIR of its Ray process, else the default.
    yield "node", {"id": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address(),
                   "host": socket.gethostname(), "cache": str(cache_path()), "gpus": gpus or None}
    cache = create()
    spec = load(TrialSpec, spec_dict)
    red = Redactor.from_recipe(spec.recipe)
    for line in reap_orphans(cache):  # a server of a trial whose worker was killed with its supervisor
        yield "say", red.text(line)
    enforce_budget(cache.root, lambda line: None)
    with tempfile.TemporaryDirectory(prefix="abbisect-trial-") as work:
        local = localized(spec, parcel, lambda key: ray.get(parcel[key]["ref"][0]), cache, Path(work))
        if gpus:
            local = replace(local, recipe=local.recipe.model_copy(update={"gpus": gpus}))
        lines: queue.Queue[tuple[str, object]] = queue.Queue()

        def trial() -> None:
            try:
                lines.put(("done", run_trial(local, red.guard(lambda msg: lines.put(("say", msg))))))
            except BaseException as exc:  # noqa: BLE001 -- raised again in the task's own thread, below
                lines.put(("error", exc))

        threading.Thread(target=trial, daemon=True, name="trial").start()
        while True:
            kind, item = lines.get()
            if kind == "say":
                yield "say", item
            elif kind == "error":
                assert isinstance(item, BaseException)
                raise item
            else:
                assert isinstance(item, TrialResult)
                yield "delivery", delivery(item, Path(work), red)
                return


class RayExecutor:
    """Each trial a Ray task on a slot of some node (see the module's docstring): the cluster at `address`
    ("auto": the one running here; None: RAY_ADDRESS, else a Ray of this machine started for this run, its
    trials in `cache`), `resource` the custom resource of a slot."""

    name = "ray"
    remote = True

    def __init__(self, slots: list[Slot], address: str | None = None, resource: str | None = None,
                 retries: int = 2, init: dict | None = None, cache: Path | None = None):
        try:
            import ray
        except ImportError:
            raise UserError("the Ray executor needs Ray: pip install 'abbisect[ray]'") from None
        if any(s.shared for s in slots):
            raise UserError("slots that share a GPU (gpus.per_gpu, --gpus 0x4) run on the local executor: "
                            "Ray places its tasks on GPUs itself, so a slot's previous server cannot be told "
                            "apart")
        self.ray = ray
        self.slots, self.resource, self.retries = slots, resource, retries
        _notices_to_stderr(ray)
        if not ray.is_initialized():
            if address or os.environ.get("RAY_ADDRESS"):
                ray.init(address=address, log_to_driver=False, **(init or {}))
            else:  # a Ray of this machine started for this run: its trials build in this run's cache
                env = {"ABBISECT_CACHE_DIR": str(cache)} if cache is not None else {}
                ray.init(address="local", include_dashboard=False, log_to_driver=False,
                         runtime_env={"env_vars": env}, **(init or {}))
        self._check_resources()
        self.task = ray.remote(node_trial)
        self.parcels = Parcels(ray.put)
        self.pool = ThreadPoolExecutor(max_workers=max(len(slots), 1), thread_name_prefix="ray-slot")
        self.running: dict[Future[TrialResult], dict] = {}

    def _check_resources(self) -> None:
        """A slot asks for what no node has: one line now, not a trial that waits for ever."""
        have = self.ray.cluster_resources()
        gpus = max((len(s.gpus) for s in self.slots if s.gpus), default=0)
        if self.resource and not have.get(self.resource):
            raise UserError(f"no node of the Ray cluster declares the resource {self.resource!r} (bisect."
                            f"ray_resource): start each node with --resources '{{\"{self.resource}\": N}}', one "
                            "unit per slot")
        if gpus and have.get("GPU", 0) < gpus:
            raise UserError(f"a slot needs {gpus} GPU(s) and the Ray cluster has {have.get('GPU', 0):g}")

    def machine_key(self) -> str:
        """The nodes' own machine keys, asked of each live node with a slot: one key when they are alike (the
        same as a local run's on such a machine), else one for the mix, so a cluster's results are never
        served to a run on other hardware. A node that joins later is not asked."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        need = self.resource or ("GPU" if any(s.gpus for s in self.slots) else "CPU")
        ask = self.ray.remote(_node_machine_key)
        refs = [ask.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
                            ).remote() for n in self.ray.nodes() if n["Alive"] and n["Resources"].get(need)]
        keys = sorted(set(self.ray.get(refs, timeout=300)))
        if len(keys) == 1:
            return keys[0]
        return hashlib.sha256(("cluster " + " ".join(keys)).encode()).hexdigest()[:12]

    def submit(self, spec: TrialSpec, slot: Slot, progress: Progress) -> Future[TrialResult]:
        holder: dict = {}
        progress(f"{slot.label()}: sent to Ray")
        future = self.pool.submit(self._run, spec, slot, progress, holder)
        self.running[future] = holder
        future.add_done_callback(lambda f: self.running.pop(f, None))
        return future

    def _options(self, slot: Slot) -> dict:
        # Ray kills a worker's direct children when the worker ends (a dead driver, a cancel, a lost raylet),
        # the supervisors among them (abbisect/infra/supervisor.py), which would leave their servers running;
        # without that, a supervisor (in a process group of its own) sees the worker's pipe close and ends them.
        env = {"RAY_kill_child_processes_on_worker_exit": "false"}
        opts: dict = {"num_returns": "streaming", "max_retries": 0, "num_cpus": 0, "runtime_env": {"env_vars": env}}
        if self.resource:
            opts["resources"] = {self.resource: 1}
        if slot.gpus:
            opts["num_gpus"] = len(slot.gpus)
        return opts

    def _run(self, spec: TrialSpec, slot: Slot, progress: Progress, holder: dict) -> TrialResult:
        """The trial's attempts until one gives a result, `retries` more after a node is lost."""
        try:
            parcel = self.parcels.of(spec)
        except Exception as exc:  # noqa: BLE001 -- a bundle that cannot be made is the driver's, not the commit's
            return infra_result(spec, f"cannot send the trial to the cluster: {exc}")
        lost: list[dict] = []
        for n in range(self.retries + 1):
            got = None if holder.get("cancelled") else self._attempt(spec, slot, parcel, progress, holder, n, lost)
            if isinstance(got, TrialResult):
                return got
            if got is None or holder.get("cancelled"):
                return infra_result(spec, f"cancelled on {slot.label()}: its verdict was no longer needed")
            lost.append(got)
            progress(f"{slot.label()}: node {_where(got['node'])} lost mid-trial ({got['error'].split(':')[0]}); "
                     + ("sent again" if n < self.retries else "no retries left"))
        reason = "; ".join(f"attempt {n + 1} on node {_where(x['node'])}: {x['error']}" for n, x in enumerate(lost))
        return placed(infra_result(spec, f"Ray could not run the trial ({len(lost)} attempt(s) lost): {reason}"),
                      self.name, slot, time.time(), lost=lost)

    def _attempt(self, spec: TrialSpec, slot: Slot, parcel: dict, progress: Progress, holder: dict, n: int,
                 lost: list[dict]) -> TrialResult | dict | None:
        """One task of the trial: its result, the record of an attempt lost with its node ({"node", "error"}),
        or None once cancelled."""
        ray = self.ray
        node: dict | None = None
        started = time.time()
        # A streaming generator (num_returns="streaming"): the items as the node yields them.
        gen: Iterator = self.task.options(**self._options(slot)).remote(dump(spec), parcel)  # type: ignore[assignment]
        holder["gen"] = gen
        try:
            for ref in gen:
                kind, item = ray.get(ref)
                if kind == "node":
                    node, started = item, time.time()
                    progress(f"{slot.label()}: on node {item['ip']}" + (f" (attempt {n + 1})" if n else ""))
                elif kind == "say":
                    progress(f"{slot.label()} on {_where(node)}: {item}")
                else:
                    gpus = node["gpus"] if node else None
                    return placed(land(item, spec), self.name, slot, started, node=node, gpus=gpus, lost=lost)
        except ray.exceptions.TaskCancelledError:
            return None
        except (ray.exceptions.RayTaskError, InfraError) as exc:  # the trial raised (abbisect's side, there)
            why = f"the trial failed on node {_where(node)}: {_said(exc, last=True)}"
            return placed(infra_result(spec, why), self.name, slot, started, node=node, lost=lost)
        except ray.exceptions.RayError as exc:  # the node, its worker or its objects lost
            return {"node": node, "error": f"{type(exc).__name__}: {_said(exc)}"}
        return {"node": node, "error": "the task ended without a result"}

    def cancel(self, future: Future[TrialResult]) -> None:
        if future.cancel():
            return
        holder = self.running.get(future, {})
        holder["cancelled"] = True
        gen = holder.get("gen")
        if gen is not None:
            try:
                self.ray.cancel(gen, force=True)
            except self.ray.exceptions.RayError:  # its node already gone
                pass

    def shutdown(self) -> None:
        for future in list(self.running):
            self.cancel(future)
        self.pool.shutdown(wait=False, cancel_futures=True)


def _node_machine_key() -> str:
    """Runs on a node: its machine key (platform, Python, GPUs and driver)."""
    return machine_key()


def _notices_to_stderr(ray) -> None:
    """Ray's driver prints the cluster's notices (a node marked dead, a raylet gone) on stdout, where `--json`
    writes abbisect's envelope for scripts: they go to stderr, beside abbisect's own progress. (Ray has no
    setting for it: its printer, looked up at each notice, is wrapped.)"""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    show = getattr(worker, "print_to_stdstream", None)
    if show is None or getattr(show, "abbisect", False):
        return

    def to_stderr(data: dict, ignore_prefix: bool) -> None:
        show({**data, "is_err": True}, ignore_prefix)

    to_stderr.abbisect = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr  # type: ignore[union-attr]


def _where(node: dict | None) -> str:
    return node["ip"] if node else "(not known: lost before it started)"


def _said(exc: BaseException, last: bool = False) -> str:
    """A Ray error in one line: a system error's first line, a failed task's last (its exception, after the
    node's traceback)."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return (lines[-1] if last else lines[0])[:300] if lines else type(exc).__name__
