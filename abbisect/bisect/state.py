"""`state.json`: what an interrupted bisect leaves so that `abbisect bisect --resume DIR` goes on from it.

Written before the ends are tested and after every trial (recipe, ends as shas, options, each finished trial
with its result); a resumed run replays those trials instead of running them again. Read back with its keys
checked, so a damaged or foreign file is one clear line, not a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from abbisect.bisect.bisection import BisectRun, Spent
from abbisect.bisect.search import SearchState
from abbisect.bisect.variables import Variable
from abbisect.checkout import Revision
from abbisect.infra.errors import UserError
from abbisect.infra.locks import atomic_write
from abbisect.infra.serial import dump
from abbisect.recipe import Recipe, load_recipe, recipe_path
from abbisect.recipe.fingerprint import fingerprint

STATE_VERSION = 1
STATE_FILE = "state.json"


def save_state(run: BisectRun, state: SearchState | None = None, redact: Callable[[Any], Any] | None = None) -> dict:
    """The record a resumed run starts from. With secrets in the recipe, they are masked here (never
    written), and `masked` tells a resumed run to read the recipe file again (its fingerprint checked)."""
    data = {"version": STATE_VERSION, "command": run.command, "recipe": run.recipe.model_dump(mode="json"),
            "fingerprint": fingerprint(run.recipe), "masked": False,
            "good": {"ref": run.good.ref, "sha": run.good.sha}, "bad": {"ref": run.bad.ref, "sha": run.bad.sha},
            "options": run.options,
            "spent": {"launches": run.launches, "builds": run.builds, "wall_s": run.wall_s},
            "steps": [dump(s) for s in run.steps],
            "remaining": state.remaining() if state else None}
    if redact is None:
        return data
    masked = redact(data)
    return {**masked, "masked": masked["recipe"] != data["recipe"]}


def write_state(out: Path, run: BisectRun, state: SearchState | None = None,
                redact: Callable[[Any], Any] | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / STATE_FILE, json.dumps(save_state(run, state, redact), indent=1, default=str))


def load_state(out: Path) -> dict:
    path = out / STATE_FILE
    if not path.is_file():
        raise UserError(f"--resume {out}: no {STATE_FILE} there (give the folder an interrupted bisect printed)")
    try:
        state = json.loads(path.read_text())
    except ValueError as exc:
        raise UserError(f"--resume {out}: {STATE_FILE} is not readable JSON ({exc})") from None
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        found = state.get("version") if isinstance(state, dict) else None
        raise UserError(f"--resume {out}: {STATE_FILE} was written by another abbisect version "
                        f"(format {found}, this one reads {STATE_VERSION}); start the bisect again")
    return state


# What a state file must hold for a resume; checked before anything is read from it.
_KEYS = {"command": str, "recipe": dict, "fingerprint": str, "good": dict, "bad": dict, "options": dict,
         "steps": list}
_OPTIONS = ("no_cache", "script", "script_dir", "interactive", "recipe_path")


def _checked(out: Path, state: dict) -> dict:
    """The state with every key a resume reads present and of the right kind, else one line naming the key."""
    for key, kind in _KEYS.items():
        if not isinstance(state.get(key), kind):
            raise UserError(f"--resume {out}: {STATE_FILE} has no valid '{key}' (damaged, or not written by "
                            f"abbisect bisect); start the bisect again")
    for end in ("good", "bad"):
        if not all(isinstance(state[end].get(k), str) for k in ("ref", "sha")):
            raise UserError(f"--resume {out}: {STATE_FILE}'s '{end}' end has no ref and sha; start the bisect again")
    missing = [k for k in _OPTIONS if k not in state["options"]]
    if missing:
        raise UserError(f"--resume {out}: {STATE_FILE}'s options lack {', '.join(missing)}; start the bisect again")
    if not all(isinstance(s, dict) and isinstance(s.get("sha"), str) for s in state["steps"]):
        raise UserError(f"--resume {out}: {STATE_FILE} has a step without a sha; start the bisect again")
    return state


@dataclass(frozen=True)
class Resumed:
    """An interrupted bisect as its state records it: what a resumed run starts from."""

    out: Path
    recipe: Recipe
    options: dict
    command: str
    ends: dict[str, dict[str, str]]  # {"good": {"ref", "sha"}, "bad": …}
    replay: dict[str, dict]  # sha -> the finished step
    spent: Spent  # what the runs before this one spent (none recorded by an older abbisect: nothing)

    def ends_in(self, variable: Variable, good: str | None, bad: str | None) -> tuple[Revision, Revision]:
        """The ends as recorded (by sha: a branch may have moved since); a repeated --good/--bad must agree."""
        revs = {}
        for end in ("good", "bad"):
            ref, sha = self.ends[end]["ref"], self.ends[end]["sha"]
            revs[end] = variable.recorded(ref, sha)
            if revs[end].sha != sha:
                raise UserError(f"--resume {self.out}: {ref} no longer names {sha}")
        for end, text in (("good", good), ("bad", bad)):
            if text is None:
                continue
            mine = variable.resolve_end(text, revs["bad" if end == "good" else "good"])
            if mine.sha != revs[end].sha:
                _differs(self.out, f"--{end}", text, f"{revs[end].ref} ({revs[end].short})")
        return revs["good"], revs["bad"]


def resume(folder: Path, recipe: str | None, given: dict[str, Any], flags: dict[str, Any],
           output: str | None) -> Resumed:
    """The interrupted bisect in `folder`; what the command line repeats (the recipe, --output, options) must
    agree with its state."""
    out = folder.resolve()
    st = _checked(out, load_state(out))
    opts = st["options"]
    if st.get("masked"):
        # Its secrets were never written: the recipe file is read again and must be the same recipe.
        path = Path(recipe or opts["recipe_path"])
        if not path.is_file():
            raise UserError(f"--resume {out}: the recipe has secrets that {STATE_FILE} does not keep; give it: "
                            f"abbisect bisect RECIPE --resume {out}")
        rec = load_recipe(path)[0].model_copy(update={"bisect": Recipe.model_validate(st["recipe"]).bisect})
        if fingerprint(rec) != st["fingerprint"]:
            raise UserError(f"--resume {out}: {path} is not the recipe the bisect started with (it changed)")
    else:
        rec = Recipe.model_validate(st["recipe"])
    if output and Path(output).resolve() != out:
        _differs(out, "--output", output, str(out))
    if recipe:
        given_rec, _ = load_recipe(recipe_path(recipe))
        if fingerprint(given_rec) != fingerprint(rec) or given_rec.verdict.script != rec.verdict.script:
            _differs(out, "the recipe", recipe, opts.get("recipe_path"))
    for key, value in given.items():
        if value is not None and value != getattr(rec.bisect, key):
            _differs(out, _OPTION.get(key, f"--{key.replace('_', '-')}"), value, getattr(rec.bisect, key))
    for key, value in flags.items():
        if value is not None and value != opts[key]:
            _differs(out, f"--{key.replace('_', '-')}", value, opts[key])
    return Resumed(out, rec, opts, st["command"], {"good": st["good"], "bad": st["bad"]},
                   {s["sha"]: s for s in st["steps"]}, spent_of(out, st))


def spent_of(out: Path, state: dict) -> Spent:
    """What an interrupted bisect had spent, as its state records it (nothing, in a state without the record)."""
    spent = state.get("spent", {})
    values: list[float] = []
    for key in ("launches", "builds", "wall_s"):
        v = spent.get(key, 0) if isinstance(spent, dict) else None
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
            raise UserError(f"--resume {out}: {STATE_FILE} has no valid 'spent' (damaged, or not written by "
                            "abbisect bisect); start the bisect again")
        values.append(v)
    return Spent(int(values[0]), int(values[1]), float(values[2]))


_OPTION = {"revert": "--confirm-revert", "then_narrow": "--narrow"}  # a bisect option whose flag is not its name


def _differs(out: Path, what: str, mine: Any, theirs: Any) -> None:
    raise UserError(f"--resume {out}: {what} {mine!r} differs from the interrupted bisect's {theirs!r} "
                    f"(resume with --resume alone, or start a new bisect)")
