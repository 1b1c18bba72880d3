"""What crosses between a cluster's driver and a node that share no folder (abbisect/trial/remote.py), and the
report of where a cluster's trials ran (abbisect/report/nodes.py): in process, with real git repositories and
no Ray (the cluster itself: tests/test_cluster.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import toy_recipe

from abbisect import checkout
from abbisect.bisect.bisection import BisectRun, Role, Step
from abbisect.builtin.history import Commit, build_history
from abbisect.environment import EnvResult
from abbisect.infra.cache import Cache
from abbisect.infra.errors import InfraError
from abbisect.infra.git import IDENTITY, git
from abbisect.infra.redact import Redactor
from abbisect.infra.serial import load
from abbisect.recipe import parse_recipe
from abbisect.recipe.status import Outcome
from abbisect.report.nodes import node_caches, nodes_block, nodes_json
from abbisect.trial.provenance import Placement
from abbisect.trial.remote import Parcels, delivery, land, localized
from abbisect.trial.slots import infra_result
from abbisect.trial.spec import Extras, TrialSpec


@pytest.fixture
def repo(tmp_path) -> tuple[Path, list[str]]:
    path = tmp_path / "driver" / "engine"
    return path, build_history(path, [Commit("one", tag="v1"), Commit("two"), Commit("three")])


def _spec(repo: Path, sha: str, out: Path, **recipe) -> TrialSpec:
    return TrialSpec(parse_recipe(toy_recipe(repo, **recipe)), "t", sha[:10], sha, "", str(repo), "/driver/cache",
                     str(out))


class Store:
    """Ray's object store as the tests see it: what was put, and what a node read back."""

    def __init__(self) -> None:
        self.items: list[bytes] = []
        self.read: list[str] = []

    def put(self, data: bytes) -> int:
        self.items.append(data)
        return len(self.items) - 1

    def fetch(self, parcel: dict):
        def read(key: str) -> bytes:
            self.read.append(key)
            return self.items[parcel[key]["ref"][0]]
        return read


def test_a_node_gets_the_commit_from_a_bundle_once(tmp_path, repo):
    path, shas = repo
    store = Store()
    parcels = Parcels(store.put)
    # A commit on no branch (a revert abbisect made, a sha someone pasted): bundled too.
    loose = git(path, "commit-tree", "-p", shas[-1], "-m", "on no branch", f"{shas[-1]}^{{tree}}",
                env=IDENTITY).strip()
    first = parcels.of(_spec(path, shas[0], tmp_path / "t0"))
    assert parcels.of(_spec(path, shas[2], tmp_path / "t1"))["repo"] is first["repo"]  # on a branch: one bundle
    again = parcels.of(_spec(path, loose, tmp_path / "t2"))
    assert again["repo"] is not first["repo"] and len(store.items) == 2
    assert git(path, "for-each-ref", "refs/abbisect") == ""  # the user's repository only read

    node = Cache(tmp_path / "node-cache")
    work = tmp_path / "node-trial"
    spec = localized(_spec(path, loose, tmp_path / "t2"), again, store.fetch(again), node, work)
    assert Path(spec.repo).is_relative_to(node.root) and spec.cache_dir == str(node.root)
    assert spec.out_dir == str(work) and checkout.resolve(Path(spec.repo), loose).sha == loose
    assert store.read == ["repo"]
    spec = localized(_spec(path, shas[1], tmp_path / "t3"), again, store.fetch(again), node, work)
    assert store.read == ["repo"]  # the node held it already: nothing read from the store


def test_the_recipes_files_go_by_content_and_a_missing_model_is_the_clusters_fault(tmp_path, repo):
    path, shas = repo
    items = tmp_path / "driver" / "set.jsonl"
    items.write_text("".join(f'{{"id": "q{n}", "prompt": "{n} + 1 =", "answer": "{n + 1}"}}\n' for n in range(12)))
    store = Store()
    spec = _spec(path, shas[0], tmp_path / "t0", eval={"set": str(items), "power": 0})
    parcel = Parcels(store.put).of(spec)
    node = Cache(tmp_path / "node-cache")
    placed = localized(spec, parcel, store.fetch(parcel), node, tmp_path / "w")
    assert placed.recipe.eval is not None and Path(placed.recipe.eval.set).read_bytes() == items.read_bytes()
    assert Path(placed.recipe.eval.set).is_relative_to(node.root)
    model = _spec(path, shas[0], tmp_path / "t0", model=str(tmp_path / "driver" / "weights"))
    with pytest.raises(InfraError, match="not on this node"):
        localized(model, Parcels(store.put).of(model), store.fetch(parcel), node, tmp_path / "w")


def test_the_trial_folder_comes_back_and_lands_in_the_runs_folder(tmp_path, repo):
    path, shas = repo
    work = tmp_path / "node-trial"
    (work / "probe").mkdir(parents=True)
    (work / "server.log").write_text("INFO started\n")
    (work / "probe" / "kernel.txt").write_text("ptx\n")
    build_log = tmp_path / "node-cache" / "envs" / "k" / "build.log"
    build_log.parent.mkdir(parents=True)
    build_log.write_text("$ uv venv\n")
    spec = _spec(path, shas[0], tmp_path / "run" / "trials" / "t-0")
    env = EnvResult(True, "k", str(build_log.parent / "venv"), "python", False, 1.0, str(build_log), ())
    node_result = infra_result(spec, "stand-in")
    sent = delivery(replace(node_result, env=env), work, Redactor())
    assert sorted(sent["files"]) == ["build.log", "probe/kernel.txt", "server.log"]
    landed = land(sent, spec)
    out = Path(spec.out_dir)
    assert (out / "server.log").read_text() == "INFO started\n" and (out / "probe" / "kernel.txt").is_file()
    assert landed.env is not None and landed.env.log == str(out / "build.log") and landed.spec == spec
    with pytest.raises(InfraError, match="outside its trial folder"):
        land({**sent, "files": {"../escape.txt": b"x"}}, spec)
    assert not (out.parent / "escape.txt").exists()


def _trial(spec: TrialSpec, node: dict | None, reused: bool, base_reused: bool, lost: list | None = None):
    env = EnvResult(True, "k", "/n/cache/envs/k/venv", "python", reused, 1.0, "log", (), base_reused=base_reused)
    placement = load(Placement, {"executor": "ray", "slot": 0, "gpus": None, "share": None, "shared_with": [],
                                 "start": 0.0, "end": 1.0, "node": node, "lost": lost or []})
    result = infra_result(spec, "stand-in")
    return replace(result, env=env, extras=Extras(placement=placement))


def test_the_report_counts_each_nodes_trials_builds_and_losses(tmp_path, repo):
    path, shas = repo
    a = {"id": "a" * 56, "ip": "10.0.0.1", "cache": "/nodes/a/cache", "gpus": None}
    b = {"id": "b" * 56, "ip": "10.0.0.2", "cache": "/nodes/b/cache", "gpus": None}
    spec = _spec(path, shas[0], tmp_path / "t")
    lost = [{"node": b, "error": "NodeDiedError: the node died"}]
    trials = [_trial(spec, a, False, False), _trial(spec, a, False, True), _trial(spec, a, True, True),
              _trial(spec, a, False, True, lost), _trial(spec, None, False, False, lost)]
    steps = [Step(n, shas[0], Role.CANDIDATE, Outcome.GOOD, "ok", "", 1.0, False, t) for n, t in enumerate(trials)]
    rev = checkout.Revision("v1", shas[0], "one")
    run = BisectRun(spec.recipe, path, rev, rev, rev, rev, None, steps=steps)  # type: ignore[arg-type]
    assert nodes_json(run) == [
        {"id": a["id"], "name": "10.0.0.1", "trials": 4, "venvs_built": 3, "venvs_reused": 1, "deps_built": 1,
         "deps_reused": 3, "lost": 0},
        {"id": b["id"], "name": "10.0.0.2", "trials": 0, "venvs_built": 0, "venvs_reused": 0, "deps_built": 0,
         "deps_reused": 0, "lost": 2}]
    text = "\n".join(nodes_block(run))
    assert "| `10.0.0.1` | 4 | 3 / 1 | 1 / 3 | 0 |" in text
    assert "- step 3 `" in text and "`10.0.0.2` lost mid-trial (NodeDiedError: the node died); it ran again on `10.0.0.1`" in text
    assert "- step 4 `" in text and "it is untestable here (infra_error)" in text
    assert node_caches(run) == ["/nodes/a/cache"]
    # a cached result carries the placement of the run that made it: not a trial of this run
    steps[0].result = replace(_trial(spec, a, False, False), cached=True)
    assert nodes_json(run)[0]["trials"] == 3
