"""What a report says of the launches' JIT and compile caches (abbisect/launch/jit.py): the mode, how each side's
launches started, and a warning when two sides' measured launches did not start alike. Pure functions."""

from __future__ import annotations

from collections.abc import Sequence

from abbisect.launch.jit import JitCache, JitMode, Start
from abbisect.trial.spec import TrialResult


def jit_of(trial: TrialResult) -> JitCache | None:
    """A trial's launch's caches (None: it launched nothing, or abbisect did not record them then)."""
    return trial.launch.jit if trial.launch is not None else None


def starts_of(trials: Sequence[TrialResult]) -> list[Start]:
    """How each launch among `trials` started (a trial that launched nothing, or a result from before abbisect
    recorded it, is left out)."""
    return [caches.start for t in trials if (caches := jit_of(t)) is not None]


_SAID = {Start.COLD: "cold", Start.WARM: "warm", Start.UNKNOWN: "unknown"}


def starts_told(starts: Sequence[Start]) -> str:
    """`1 cold, 3 warm` (the user's caches, or the recipe's own: `4 unknown`); `none` for no launch."""
    said = [f"{n} {_SAID[s]}" for s in _SAID if (n := list(starts).count(s))]
    return ", ".join(said) or "none"


def caches_line(mode: JitMode, sides: Sequence[tuple[str, Sequence[TrialResult]]]) -> str:
    """`JIT and compile caches (launch.jit_cache: commit): <what it means>. Launches: A 1 cold, B 1 cold.`"""
    said = f"JIT and compile caches (`launch.jit_cache: {mode}`): {mode.told}."
    counted = [(name, starts_of(trials)) for name, trials in sides]
    if mode is not JitMode.USER and any(starts for _, starts in counted):
        said += " Launches started: " + "; ".join(f"{name} {starts_told(starts)}" for name, starts in counted) + "."
    if any(c.machine_temporary for _, trials in sides for t in trials if (c := jit_of(t))):
        said += (" The servers kept the machine's temporary folder: in the cache's path an engine's socket names "
                 "would not fit (`ABBISECT_CACHE_DIR` about 38 characters at most keeps it the commit's own).")
    return said


def unlike_starts(a: Sequence[TrialResult], b: Sequence[TrialResult], names: tuple[str, str] = ("A", "B")) -> str:
    """A warning when two sides' measured launches did not start alike (a cold side against a warm one), ""
    when they did: a cold launch compiles and autotunes while it serves, a warm one reuses what an earlier
    launch chose (two fresh autotunes can choose differently)."""
    sa, sb = starts_of(a), starts_of(b)
    if not sa or not sb:
        return ""
    if Start.UNKNOWN in sa or Start.UNKNOWN in sb:
        return ("⚠ JIT caches: the user's own (`launch.jit_cache: user`), or folders the recipe's `env` names: "
                "whether each launch started cold or warm is not known, and either side may have run on kernels and "
                "autotune choices another commit left.")
    if sa.count(Start.COLD) / len(sa) == sb.count(Start.COLD) / len(sb):
        return ""
    return (f"⚠ The sides' launches did not start alike: {names[0]} {starts_told(sa)}, {names[1]} "
            f"{starts_told(sb)}. A cold launch compiles (and autotunes) while it is measured, a warm one reuses "
            "what an earlier launch of its commit chose; `launch.jit_cache: launch` starts every launch cold.")
