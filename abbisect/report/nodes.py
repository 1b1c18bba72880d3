"""Where a cluster's trials ran (the Ray executor): each node's trials, how often its own build cache served
them, and the attempts lost with a node. Pure: read from the trials' placements (abbisect/trial/cluster.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from abbisect.bisect.bisection import BisectRun
from abbisect.report.text import table
from abbisect.trial.provenance import Placement
from abbisect.trial.spec import TrialResult


def _run_here(run: BisectRun) -> Iterable[tuple[int, str, TrialResult, Placement]]:
    """(step, sha, trial, its placement) of every trial this run ran on a cluster node (not from the trial
    cache)."""
    for step in run.steps:
        for trial in step.trials:
            where = trial.extras.placement
            if not trial.cached and where is not None and (where.node or where.lost):
                yield step.n, step.sha, trial, where


def _labels(run: BisectRun) -> dict[str, str]:
    """Node id → how a report names it: its address, with the id's start where two nodes share one."""
    nodes: dict[str, str] = {}
    for _, _, _, where in _run_here(run):
        for node in [where.node, *(x.node for x in where.lost or ())]:
            if node:
                nodes[node.id] = node.ip
    shared = {ip for ip in nodes.values() if list(nodes.values()).count(ip) > 1}
    return {nid: f"{ip} ({nid[:8]})" if ip in shared else ip for nid, ip in nodes.items()}


def node_of(run: BisectRun, trial: TrialResult | None) -> str:
    """The node a trial ran on, as the report names it ("" when not on a cluster node)."""
    where = trial.extras.placement if trial is not None else None
    node = where.node if where is not None else None
    return _labels(run).get(node.id, "") if node is not None else ""


def nodes_json(run: BisectRun) -> list[dict]:
    """Per node: its trials, its venvs built and reused (the commit's own, and the shared venv of the
    dependencies it sits on), and the attempts lost with it."""
    labels = _labels(run)
    counts = ("trials", "venvs_built", "venvs_reused", "deps_built", "deps_reused", "lost")
    rows: dict[str, dict[str, Any]] = {nid: {"id": nid, "name": name, **dict.fromkeys(counts, 0)}
                                       for nid, name in labels.items()}
    for _, _, trial, where in _run_here(run):
        for attempt in where.lost or ():
            if attempt.node:
                rows[attempt.node.id]["lost"] += 1
        if not where.node:
            continue
        row = rows[where.node.id]
        row["trials"] += 1
        env = trial.env
        if env is not None and env.ok:
            row["venvs_reused" if env.reused else "venvs_built"] += 1
            if env.base_reused is not None:
                row["deps_reused" if env.base_reused else "deps_built"] += 1
    return sorted(rows.values(), key=lambda r: r["name"])


def nodes_block(run: BisectRun) -> list[str]:
    """The markdown: a table of the nodes, and each attempt lost with a node (and where it ran instead)."""
    rows = nodes_json(run)
    if not rows:
        return []
    lines = ["### Nodes", "", (f"The trials ran on {sum(1 for r in rows if r['trials'])} node(s) of a Ray cluster, "
                               "each building in its own cache."), "",
             table(["node", "trials", "commit venvs built / reused", "shared dependency venvs built / reused",
                    "lost mid-trial"],
                   [[f"`{r['name']}`", str(r["trials"]), f"{r['venvs_built']} / {r['venvs_reused']}",
                     f"{r['deps_built']} / {r['deps_reused']}", str(r["lost"])] for r in rows]), ""]
    labels = _labels(run)
    for n, sha, trial, where in _run_here(run):
        node = where.node
        for attempt in where.lost or ():
            lost_on = labels[attempt.node.id] if attempt.node else "a node not known"
            then = (f"it ran again on `{labels[node.id]}`" if node
                    else f"it is untestable here ({trial.verdict.status})")
            lines.append(f"- step {n} `{sha[:10]}`: `{lost_on}` lost mid-trial ({attempt.error[:120]}); {then}.")
    if lines[-1] != "":
        lines.append("")
    return lines


def node_caches(run: BisectRun) -> list[str]:
    """The nodes' cache folders (paths of other machines, which a report replaces like this one's cache)."""
    return sorted({where.node.cache for _, _, _, where in _run_here(run) if where.node and where.node.cache})
