"""What two launches differ by — options (an option with its values), environment variables, pins — as a list
of single changes, and the launch that applies some of them to the passing one. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from abbisect.environment.pins import requirement_name
from abbisect.launch.switches import option_items, option_name


@dataclass(frozen=True)
class Launch:
    """The parts of a launch a narrowing changes: the recipe's launch.flags, its env, a side's pins."""

    flags: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    pins: tuple[str, ...] = ()


@dataclass(frozen=True)
class Delta:
    """One difference: the failing launch's value of one option, variable or pin (None: it has none) where
    the passing launch has `was`."""

    kind: Literal["option", "env", "pin"]
    key: str
    value: tuple[str, ...] | str | None
    was: tuple[str, ...] | str | None

    def describe(self) -> str:
        def shown(v: tuple[str, ...] | str | None) -> str:
            return " ".join(v) if isinstance(v, tuple) else str(v)

        where = {"option": "", "env": "env ", "pin": "pin "}[self.kind]
        if self.kind == "env":
            now = f"{self.key}={self.value}" if self.value is not None else None
            before = f"{self.key}={self.was}" if self.was is not None else None
        else:
            now = shown(self.value) if self.value is not None else None
            before = shown(self.was) if self.was is not None else None
        if before is None:
            return f"+ {where}{now}"
        if now is None:
            return f"− {where}{before}"
        return f"{where}{now} (instead of {before})"


def _options(flags: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """option name (or a positional token) → the item (the option and its values), in order."""
    out: dict[str, tuple[str, ...]] = {}
    for item in option_items(flags):
        key = option_name(item[0]) if item[0].startswith("-") else f"arg:{item[0]}"
        out[key] = tuple(item)
    return out


def _pins(pins: Iterable[str]) -> dict[str, str]:
    return {(requirement_name(p) or p).lower(): p for p in pins}


def differences(failing: Launch, passing: Launch) -> list[Delta]:
    """Every single change that turns `passing` into `failing`, in the failing launch's order (options,
    then environment variables, then pins)."""
    deltas = []
    fo, po = _options(failing.flags), _options(passing.flags)
    for key in [*fo, *(k for k in po if k not in fo)]:
        if fo.get(key) != po.get(key):
            deltas.append(Delta("option", key, fo.get(key), po.get(key)))
    for name in [*failing.env, *(k for k in passing.env if k not in failing.env)]:
        if failing.env.get(name) != passing.env.get(name):
            deltas.append(Delta("env", name, failing.env.get(name), passing.env.get(name)))
    fp, pp = _pins(failing.pins), _pins(passing.pins)
    for name in [*fp, *(k for k in pp if k not in fp)]:
        if fp.get(name) != pp.get(name):
            deltas.append(Delta("pin", name, fp.get(name), pp.get(name)))
    return deltas


def apply(passing: Launch, deltas: Iterable[Delta]) -> Launch:
    """The passing launch with `deltas` made: an option replaced where it stood (added at the end), a variable
    or pin set or dropped."""
    parts: dict[str, dict] = {"option": _options(passing.flags), "env": dict(passing.env),
                              "pin": _pins(passing.pins)}
    for d in deltas:
        if d.value is None:
            parts[d.kind].pop(d.key, None)
        else:
            parts[d.kind][d.key] = d.value
    options, env, pins = parts["option"], parts["env"], parts["pin"]
    return Launch(tuple(t for item in options.values() for t in item), env, tuple(pins.values()))
