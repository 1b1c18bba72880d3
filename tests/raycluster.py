"""A real multi-node Ray cluster on this machine, for the cluster tier (tests/test_cluster.py).

Each node is its own `ray start` (the head first, then nodes joining it with `--address`), with its own
folder: its Ray temp dir, its abbisect cache (ABBISECT_CACHE_DIR in the environment of its `ray start`, so
its workers inherit it), its working directory, and its own loopback address 127.0.0.1N. The driver has a
folder of its own (its cache, the engine's repository, the result folders).

Where the kernel allows a private mount namespace (`unshare -m`, or an unprivileged user namespace with
`unshare -Urm`), each node is started inside one in which the driver's folder and every other node's folder
are empty tmpfs mounts: a node that read the driver's repository or cache would find nothing, as on a
cluster that shares no folder.

Loopback only: Ray rewrites the literal addresses 127.0.0.1 and localhost into the machine's outward-facing
address (ray._private.services.resolve_ip_for_localhost), so the nodes take 127.0.0.11, 127.0.0.12, …,
which are loopback addresses Ray leaves as they are. `connections_off_loopback` lists every socket of the
cluster's processes connected anywhere else.

Every process of the cluster (GCS, raylets, agents, workers, and the trials' servers) inherits the
cluster's ABBISECT_TEST_MARK; `stop` ends exactly those, never another Ray on the machine (`ray stop` would
stop every node of every user).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from conftest import marked_pids

REPO_ROOT = Path(__file__).resolve().parents[1]
SLOT = "abbisect_slot"  # the custom resource a GPU host would declare one unit of per slot
NODES = ("n1", "n2", "n3", "n4")  # n1 is the head; n4 joins mid-test
# Ray notices a dead node after health_check_period_ms × health_check_failure_threshold (defaults: 3 s × 5).
FAST_HEALTH = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "4",
               "RAY_health_check_timeout_ms": "1000", "RAY_health_check_initial_delay_ms": "1000"}


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _namespace_prefix() -> tuple[list[str], str]:
    """The `unshare` command line that gives a process a private mount namespace here, and which it is."""
    for argv in (["unshare", "-m", "--propagation", "private"], ["unshare", "-Urm", "--propagation", "private"]):
        if shutil.which(argv[0]) is None:
            break
        probe = subprocess.run([*argv, "sh", "-c", "mount -t tmpfs none \"$1\"", "sh", tempfile.gettempdir()],
                               capture_output=True, check=False)
        if probe.returncode == 0:
            return argv, " ".join(argv[:2])
    return [], ""


@dataclass
class Node:
    name: str
    ip: str
    folder: Path
    head: bool = False
    pids: list[int] = field(default_factory=list)

    @property
    def cache(self) -> Path:
        return self.folder / "cache"

    @property
    def temp_dir(self) -> Path:
        return self.folder / "ray"

    def raylet_pid(self) -> int | None:
        """The raylet of this node: the `raylet` process whose temp dir is this node's."""
        needle = f"--temp_dir={self.temp_dir}".encode()
        for pid in marked_pids_of_cluster():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"/raylet") and needle in argv:
                return pid
        return None


_MARKS: list[str] = []


def marked_pids_of_cluster() -> list[int]:
    return [p for mark in _MARKS for p in marked_pids(mark)]


class LocalCluster:
    """The nodes, the driver's folder and how to reach the head; `start_head`, `add_node`, `kill`, `stop`."""

    def __init__(self) -> None:
        # Short: a Ray node's socket paths (<temp dir>/session_<stamp>_<pid>/sockets/plasma_store) must fit
        # the 107 bytes of a Unix socket's name.
        self.root = Path(tempfile.mkdtemp(prefix="abc-"))
        self.mark = f"cluster-{secrets.token_hex(8)}"
        _MARKS.append(self.mark)
        self.token = secrets.token_hex(32)
        self.driver = self.root / "driver"
        self.driver.mkdir()
        (self.driver / "cache").mkdir()
        self.nodes: dict[str, Node] = {}
        for n, name in enumerate(NODES, start=1):
            (self.root / name).mkdir()
            self.nodes[name] = Node(name, f"127.0.0.{10 + n}", self.root / name, head=n == 1)
        self.unshare, self.isolation = _namespace_prefix()
        self.port = free_port("127.0.0.11")

    @property
    def address(self) -> str:
        return f"127.0.0.11:{self.port}"

    def ray_env(self) -> dict[str, str]:
        """What every member of the cluster (nodes and drivers) needs: the token, the test mark."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token, "ABBISECT_TEST_MARK": self.mark,
                "RAY_USAGE_STATS_ENABLED": "0"}

    def driver_env(self) -> dict[str, str]:
        return {**os.environ, **self.ray_env(), "ABBISECT_CACHE_DIR": str(self.driver / "cache")}

    def _start(self, node: Node, *args: str) -> None:
        node.cache.mkdir(exist_ok=True)
        env = {**os.environ, **self.ray_env(), **FAST_HEALTH, "ABBISECT_CACHE_DIR": str(node.cache)}
        env.pop("RAY_ADDRESS", None)
        ray_start = [sys.executable, "-m", "ray.scripts.scripts", "start", "--node-ip-address", node.ip,
                     "--num-cpus", "1", "--num-gpus", "0", "--object-store-memory", str(100 * 1024 * 1024),
                     "--temp-dir", str(node.temp_dir), "--disable-usage-stats",
                     "--dashboard-agent-listen-port", str(free_port(node.ip)),
                     "--resources", json.dumps({SLOT: 1}), *args]
        argv = ray_start
        if self.unshare:  # the driver's folder and the other nodes' folders: empty, for this node
            hidden = [str(self.driver), *(str(n.folder) for n in self.nodes.values() if n is not node)]
            script = "".join(f'mount -t tmpfs none "{d}" && ' for d in hidden) + 'exec "$@"'
            argv = [*self.unshare, "sh", "-c", script, "sh", *ray_start]
        proc = subprocess.run(argv, cwd=node.folder, env=env, capture_output=True, text=True, timeout=180,
                              check=False)
        (node.folder / "ray-start.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise RuntimeError(f"ray start of {node.name} failed ({proc.returncode}): {proc.stderr[-2000:]}")

    def start_head(self) -> None:
        self._start(self.nodes["n1"], "--head", "--port", str(self.port), "--include-dashboard=false")

    def add_node(self, name: str) -> Node:
        node = self.nodes[name]
        self._start(node, "--address", self.address)
        return node

    def query(self, code: str, timeout: float = 120) -> object:
        """Run `code` in a fresh driver attached to the cluster (from the driver's folder); what it prints
        as JSON on its last line."""
        script = ("import json, ray\n"
                  f"ray.init(address={self.address!r}, log_to_driver=False)\n" + code)
        proc = subprocess.run([sys.executable, "-c", script], cwd=self.driver, env=self.driver_env(),
                              capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"cluster query failed: {proc.stderr[-2000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def alive(self) -> dict[str, dict]:
        """The cluster's live nodes by IP: {ip: {"id", "name", "resources"}}."""
        nodes = self.query("print(json.dumps([{'ip': n['NodeManagerAddress'], 'id': n['NodeID'], "
                           "'name': n['NodeName'], 'resources': n['Resources']} for n in ray.nodes() "
                           "if n['Alive']]))")
        assert isinstance(nodes, list)
        return {n["ip"]: n for n in nodes}

    def wait_for(self, names: list[str], timeout: float = 120) -> dict[str, dict]:
        """Until exactly the named nodes are alive (a killed one gone, a new one registered)."""
        want = {self.nodes[n].ip for n in names}
        deadline = time.monotonic() + timeout
        while True:
            alive = self.alive()
            if set(alive) == want or time.monotonic() > deadline:
                assert set(alive) == want, f"alive nodes {sorted(alive)}, expected {sorted(want)}"
                return alive
            time.sleep(1)

    def by_ip(self, ip: str) -> Node:
        return next(n for n in self.nodes.values() if n.ip == ip)

    def kill_raylet(self, node: Node) -> int:
        """kill -9 of the node's raylet (found by its temp dir): the node is lost as a host would be."""
        pid = node.raylet_pid()
        assert pid is not None, f"no raylet of {node.name} found"
        os.kill(pid, signal.SIGKILL)
        return pid

    def processes(self) -> list[int]:
        """Every process of this cluster: those carrying its mark, and whatever a node started with another
        mark (a trial's server, under its recipe's) — they all carry a node's ABBISECT_CACHE_DIR."""
        caches = [f"ABBISECT_CACHE_DIR={n.cache}".encode() for n in self.nodes.values()]
        mine = set(marked_pids(self.mark))
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) not in mine:
                try:
                    env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                if any(c in env for c in caches):
                    mine.add(int(entry))
        return sorted(mine)

    def stop(self) -> None:
        """End every process of this cluster: raylets first, gracefully, then all that is left."""
        for node in self.nodes.values():
            pid = node.raylet_pid()
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    pass
        deadline = time.monotonic() + 10
        while marked_pids(self.mark) and time.monotonic() < deadline:
            time.sleep(0.5)
        for _ in range(5):
            left = self.processes()
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.5)
        shutil.rmtree(self.root, ignore_errors=True)


def _address(hexaddr: str) -> str:
    """/proc/net/tcp's hex address (little-endian IPv4, or IPv6 in four little-endian words) as text."""
    ip = bytes.fromhex(hexaddr.split(":")[0])
    if len(ip) == 4:
        return socket.inet_ntop(socket.AF_INET, ip[::-1])
    words = b"".join(ip[i:i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def _loopback(addr: str) -> bool:
    return addr.startswith(("127.", "::ffff:127.")) or addr in ("::1", "0.0.0.0", "::")


def connections_off_loopback(mark: str) -> list[str]:
    """Sockets of the marked processes whose peer is not a loopback address (a listening or unconnected socket
    has the peer 0.0.0.0 / :: and counts as loopback)."""
    inodes: dict[str, int] = {}
    for pid in marked_pids(mark):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes[target[8:-1]] = pid
        except OSError:
            continue
    bad = []
    for table in ("tcp", "tcp6", "udp", "udp6"):
        try:
            lines = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 9 and parts[9] in inodes:
                local, peer = _address(parts[1]), _address(parts[2])
                if not (_loopback(peer) and _loopback(local)):
                    bad.append(f"pid {inodes[parts[9]]} {table} {local} -> {peer}")
    return bad
