"""Whether a host's drift, not a change, is the likeliest reason a performance search cannot decide. Pure.

A commit launched several times measures the same code each time: its launches' means differ by the passes' own
noise (a pass's spread over the square root of the passes a launch) and by whatever the host did between them (a
busy loop switching on and off, another job's build, thermal throttling). The ends are launched most (every round
may measure one again), so their launches show the host's part: the spread of their launch means beyond what the
passes explain. When that part alone is at least half the smallest change that matters, a change of that size
cannot be told from the host's moods in the launches a search can afford, and the report says so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class HostDrift:
    """The launch-to-launch spread of the same commits beyond their passes' (`drift`, a log-scale sd), how many
    launches it is measured on, and the passes' own spread."""

    drift: float
    launches: int
    pass_sd: float

    def blamed(self, least: float) -> bool:
        """Whether the host's drift is at least half the smallest change that matters (`least`, a log ratio): then
        it, not a change, is the likeliest reason a search of such a change cannot decide."""
        return self.launches >= 4 and self.drift >= least / 2


def host_drift(commits: Sequence[Sequence[Sequence[float]]]) -> HostDrift | None:
    """The host's drift from several commits' launches, each launch its passes' values (positive, a metric's):
    each commit's launch means (log scale) about its own mean, pooled, less what the passes within a launch
    explain. None with fewer than two launches of one commit, or passes too few to tell."""
    launch_ss = pass_ss = 0.0
    launch_df = pass_df = 0
    per_launch: list[int] = []
    for launches in commits:
        logs = [[math.log(v) for v in passes] for passes in launches if len(passes) >= 2 and min(passes) > 0]
        if len(logs) < 2:
            continue
        means = [statistics.fmean(p) for p in logs]
        centre = statistics.fmean(means)
        launch_ss += sum((m - centre) ** 2 for m in means)
        launch_df += len(means) - 1  # each commit's own mean taken out
        for p, m in zip(logs, means):
            pass_ss += sum((v - m) ** 2 for v in p)
            pass_df += len(p) - 1
            per_launch.append(len(p))
    if launch_df < 1 or pass_df < 1:
        return None
    launch_var, pass_var = launch_ss / launch_df, pass_ss / pass_df
    k = statistics.fmean(per_launch)
    return HostDrift(math.sqrt(max(launch_var - pass_var / k, 0.0)), len(per_launch), math.sqrt(pass_var))
