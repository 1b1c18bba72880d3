"""The cluster tier: bisects of the toy engine on a real multi-node Ray cluster of this machine whose nodes
share no folder (tests/raycluster.py): trials on several nodes with the answer of one slot, each node's own
build cache reused, a node killed mid-trial, a node joining mid-bisect, and a resume after the driver dies.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO_ROOT, abbisect, marked_pids, toy_recipe, write_recipe
from raycluster import SLOT, LocalCluster, connections_off_loopback

from abbisect.builtin.history import Commit, build_history

pytestmark = pytest.mark.cluster

BROKEN_AT = 9  # the commit that drops the lm_head scale: the answer of every bisect here
HISTORY = [Commit("Initial engine", tag="good"),
           *(Commit(f"Housekeeping {n}") for n in range(1, BROKEN_AT)),
           Commit("Dispatch quantisation to linear layers only", "break_scale"),
           *(Commit(f"Housekeeping {n}") for n in range(BROKEN_AT + 1, 15)),
           Commit("Housekeeping 15", tag="bad")]
SECRET = "hf_clusterSecretValue0123456789"


@pytest.fixture(scope="module")
def cluster():
    """The head and two nodes joined to it; stopped (its own processes only) when the module ends."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'abbisect[ray]')")
    c = LocalCluster()
    try:
        c.start_head()
        c.add_node("n2")
        c.add_node("n3")
        c.wait_for(["n1", "n2", "n3"])
        yield c
        assert connections_off_loopback(c.mark) == []
    finally:
        c.stop()


@pytest.fixture(scope="module")
def history(cluster) -> tuple[Path, list[str]]:
    """The toy engine's history in the driver's folder (hidden from every node)."""
    repo = cluster.driver / "engine"
    return repo, build_history(repo, HISTORY)


def recipe_file(cluster: LocalCluster, repo: Path, name: str, mark: str, **env: str) -> Path:
    recipe = toy_recipe(repo, env={"ABBISECT_TEST_MARK": mark, "HF_TOKEN": SECRET, **env},
                        bisect={"ray_resource": SLOT})
    recipe["timeouts"] = {"build": 300, "ready": 30, "request": 20, "teardown": 5}
    return write_recipe(cluster.driver / f"{name}.yaml", recipe)


def bisect_args(recipe: Path, out: Path, cluster: LocalCluster, slots: int = 3) -> list[str]:
    return ["bisect", str(recipe), "--good", "good", "--bad", "bad", "--executor", "ray", "--ray-address",
            cluster.address, "--slots", str(slots), "--no-cache", "-o", str(out), "--json"]


def run_cli(cluster: LocalCluster, *args: str, timeout: float = 600) -> dict:
    proc = abbisect(*args, cwd=cluster.driver, cache=cluster.driver / "cache", timeout=timeout,
                    env=cluster.ray_env())
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)["data"]


def ran(data: dict) -> list[dict]:
    """The trials that ran on a node (not one cancelled before it started, or lost on every attempt)."""
    return [t for t in data["trials"] if (t["placement"] or {}).get("node")]


def nodes_of(data: dict) -> list[str]:
    return [t["placement"]["node"]["ip"] for t in ran(data)]


def server_env(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def test_nodes_run_this_abbisect_in_folders_of_their_own(cluster):
    """What the tier rests on: every node imports this checkout's abbisect, has its own cache, and (where
    the kernel allows a mount namespace) sees nothing of the driver's folder or of another node's."""
    seen = cluster.query(
        "import os\n"
        "from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as At\n"
        "@ray.remote(num_cpus=0)\n"
        "def look(driver, folders):\n"
        "    import abbisect\n"
        "    return {'abbisect': abbisect.__file__, 'cache': os.environ.get('ABBISECT_CACHE_DIR'),\n"
        "            'ip': ray.util.get_node_ip_address(),\n"
        "            'driver': os.listdir(driver), 'others': {f: len(os.listdir(f)) for f in folders}}\n"
        f"folders = {[str(n.folder) for n in cluster.nodes.values()]!r}\n"
        "refs = [look.options(scheduling_strategy=At(n['NodeID'], soft=False)).remote("
        f"{str(cluster.driver)!r}, folders) for n in ray.nodes() if n['Alive']]\n"
        "print(json.dumps(ray.get(refs)))\n")
    assert isinstance(seen, list)
    assert sorted(s["ip"] for s in seen) == ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
    for s in seen:
        node = cluster.by_ip(s["ip"])
        assert Path(s["abbisect"]).resolve() == REPO_ROOT / "abbisect" / "__init__.py"
        assert s["cache"] == str(node.cache)
        if cluster.isolation:
            assert s["driver"] == []
            assert all(n == 0 for f, n in s["others"].items() if f != str(node.folder)), s["others"]
    print(f"cluster: 3 nodes, isolation: {cluster.isolation or 'none (no mount namespace here)'}")


def test_bisect_on_the_cluster_matches_one_slot(cluster, history, test_mark, tmp_path):
    repo, shas = history
    recipe = recipe_file(cluster, repo, "toy", test_mark)
    out = cluster.driver / "cluster-run"
    data = run_cli(cluster, *bisect_args(recipe, out, cluster))
    assert data["first_new"] == shas[BROKEN_AT] and data["executor"] == "ray"

    # The same bisect on one slot (this process, the driver's machine, a cache of its own).
    one = abbisect("bisect", str(recipe), "--good", "good", "--bad", "bad", "-o", str(tmp_path / "one"), "--json",
                   cwd=tmp_path, cache=tmp_path / "one-cache")
    assert one.returncode == 0, one.stderr[-4000:]
    single = json.loads(one.stdout)["data"]
    assert single["first_new"] == data["first_new"] and single["mode"] == data["mode"]

    # The trials landed on several nodes, each built in the node's own cache (nothing built on the driver).
    placed = nodes_of(data)
    assert len(set(placed)) >= 2, placed
    for trial in ran(data):
        node = cluster.by_ip(trial["placement"]["node"]["ip"])
        assert trial["placement"]["node"]["cache"] == str(node.cache)
    assert not (cluster.driver / "cache" / "envs").exists()
    # Its JIT caches too: each trial's in its node's own cache, a folder per commit's venv, the kernels in it.
    for trial in ran(data):
        folder = Path(trial["jit"]["folder"])
        assert folder.parent == cluster.by_ip(trial["placement"]["node"]["ip"]).cache / "jit"
        assert list(folder.glob("triton/*/toy_kernels.json")) and trial["jit"]["starts"] == ["cold"]
    assert not (cluster.driver / "cache" / "jit").exists()
    for ip in set(placed):  # each node got the commits through a bundle, into a repository of its own
        assert list((cluster.by_ip(ip).cache / "repos").iterdir())
    # Each node's build cache: the shared venv of the dependencies built once there, reused by the rest.
    rows = {r["name"]: r for r in data["nodes"]}
    assert sorted(rows) == sorted(set(placed))
    for name, row in rows.items():
        assert row["trials"] == placed.count(name) and row["lost"] == 0
        assert row["deps_built"] == 1 and row["deps_reused"] == row["trials"] - 1, row
    assert any(r["deps_reused"] >= 1 for r in rows.values())

    # What the report needs came back: logs in the run's trial folders, the node of each step in the report,
    # no secret and no folder of a node in it.
    folders = sorted((out / "trials").iterdir())
    assert len(folders) == len(ran(data))
    for folder in folders:
        assert (folder / "server.log").read_text().strip() and (folder / "build.log").is_file()
    report = (out / "bisect.md").read_text()
    assert "### Nodes" in report and "| node |" in report
    assert all(f"`{ip}`" in report for ip in set(placed))
    assert str(cluster.root) not in report
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
    print(f"cluster: bisect on {len(set(placed))} nodes, trials per node "
          f"{ {ip: placed.count(ip) for ip in sorted(set(placed))} }, wall {data['wall_s']:.1f} s; one slot: "
          f"{len(single['trials'])} trials, wall {single['wall_s']:.1f} s")


def test_resume_after_the_driver_dies(cluster, history, test_mark):
    """kill -9 of the driver mid-bisect: the cluster ends its trials, and `--resume` finishes the bisect
    with the same answer, replaying what the state recorded and running only the rest."""
    repo, shas = history
    recipe = recipe_file(cluster, repo, "resume", test_mark, TOYENGINE_LOAD_SECONDS="1.5")
    out = cluster.driver / "resume-run"
    proc = subprocess.Popen([sys.executable, "-m", "abbisect", *bisect_args(recipe, out, cluster)],
                            cwd=cluster.driver, env=cluster.driver_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    state = out / "state.json"
    deadline = time.monotonic() + 300
    recorded: list[str] = []
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            recorded = [s["sha"] for s in json.loads(state.read_text())["steps"]]
        except (OSError, ValueError, KeyError):
            recorded = []
        if len(recorded) >= 3 and marked_pids(test_mark):  # the ends' round done, the next trials running
            break
        time.sleep(0.2)
    assert proc.poll() is None, f"the bisect ended before it could be killed: {proc.stderr.read()[-3000:]}"
    proc.kill()
    proc.wait(timeout=30)
    recorded = [s["sha"] for s in json.loads(state.read_text())["steps"]]
    deadline = time.monotonic() + 60
    while marked_pids(test_mark) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not marked_pids(test_mark), "a trial's server outlived the driver"

    data = run_cli(cluster, "bisect", "--resume", str(out), "--json")
    assert data["first_new"] == shas[BROKEN_AT]
    replayed = [s["sha"] for s in data["steps"] if s["replayed"]]
    assert replayed == recorded and len(recorded) >= 3
    # Nothing recorded was run again: the resumed run launched one server for each new step (but those it
    # cancelled before they launched, once other verdicts decided the range); `launches` counts the whole
    # bisect's, `before` those of the run that died.
    fresh = [s for s in data["steps"] if not s["replayed"] and not s["evidence"].startswith("cancelled")]
    assert data["launches"] - data["before"]["launches"] == len(fresh)
    # every trial the answer rests on ran on a node, those before the resume too (their placement kept)
    assert {s["sha"] for s in data["steps"] if s["needed"]} <= {t["sha"] for t in ran(data)}


def test_a_node_killed_mid_trial_and_a_node_joining(cluster, history, test_mark):
    """kill -9 of the raylet of the node running a trial: the trial runs again elsewhere (or is untestable),
    never taking the lost node's fate as the commit's verdict; a node started meanwhile takes trials (four
    slots on three nodes: a trial waits for a slot from the start, and the node that joins gives it one)."""
    repo, shas = history
    recipe = recipe_file(cluster, repo, "lost", test_mark, TOYENGINE_LOAD_SECONDS="4")
    out = cluster.driver / "lost-run"
    proc = subprocess.Popen([sys.executable, "-m", "abbisect", *bisect_args(recipe, out, cluster, slots=4)],
                            cwd=cluster.driver, env=cluster.driver_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    victim = None
    deadline = time.monotonic() + 300
    while victim is None and time.monotonic() < deadline and proc.poll() is None:
        for pid in marked_pids(test_mark):  # a trial's server loading on a node that is not the head
            node = next((n for n in cluster.nodes.values() if not n.head
                         and server_env(pid).get("ABBISECT_CACHE_DIR") == str(n.cache)), None)
            if node is not None:
                victim = node
                break
        time.sleep(0.1)
    assert victim is not None, "no trial started on a node other than the head"
    cluster.kill_raylet(victim)
    cluster.add_node("n4")
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-4000:]
    data = json.loads(stdout)["data"]
    assert data["first_new"] == shas[BROKEN_AT]

    lost = [t for t in data["trials"] if (t["placement"] or {}).get("lost")]
    assert lost, "no trial recorded the node it lost"
    by_sha = {s["sha"]: s for s in data["steps"]}
    for trial in lost:
        assert [x["node"]["ip"] for x in trial["placement"]["lost"]] == [victim.ip]
        step = by_sha[trial["sha"]]
        truth = "good" if shas.index(trial["sha"]) < BROKEN_AT else "bad"
        if trial["placement"].get("node"):  # ran again on another node: the commit's own verdict
            assert trial["placement"]["node"]["ip"] != victim.ip and step["outcome"] == truth
        else:  # every attempt lost: untestable, never a verdict
            assert step["status"] == "infra_error" and step["outcome"] == "skip"
    placed = nodes_of(data)
    assert cluster.nodes["n4"].ip in placed, placed  # the node that joined mid-bisect took trials
    rows = {r["name"]: r for r in data["nodes"]}
    assert rows[victim.ip]["lost"] == len(lost)
    report = (out / "bisect.md").read_text()
    assert f"`{victim.ip}` lost mid-trial" in report
    # Nothing of the lost node's trial lives on: its server went with its worker.
    assert not [p for p in marked_pids(test_mark) if server_env(p).get("ABBISECT_CACHE_DIR") == str(victim.cache)]
    cluster.wait_for(["n1", "n3" if victim.name == "n2" else "n2", "n4"])
    assert connections_off_loopback(cluster.mark) == []
    print(f"cluster: killed {victim.name} ({victim.ip}) mid-trial; trials per node "
          f"{ {ip: placed.count(ip) for ip in sorted(set(placed))} }, wall {data['wall_s']:.1f} s")

