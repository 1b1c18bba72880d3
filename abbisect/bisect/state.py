"""`state.json`: what an interrupted bisect leaves so that `abbisect bisect --resume DIR` goes on from it.

Written before the ends are tested and after every trial (recipe, ends as shas, options, each finished trial
with its result); a resumed run replays those trials instead of running them again. Read back with its keys
checked, so a damaged or foreign file is one clear line, not a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from abbisect.bisect.bisection import BisectRun, Role, Spent, Step
from abbisect.bisect.search import SearchState
from abbisect.bisect.variables import Variable
from abbisect.checkout import Revision
from abbisect.infra.errors import UserError
from abbisect.infra.locks import atomic_write
from abbisect.infra.serial import dump, load
from abbisect.recipe import Recipe, load_recipe, recipe_path
from abbisect.recipe.fingerprint import fingerprint

STATE_VERSION = 1
STATE_FILE = "state.json"


def save_state(run: BisectRun, state: SearchState | None = None, redact: Callable[[Any], Any] | None = None,
               recorded: Mapping[str, dict] | None = None) -> dict:
    """The record a resumed run starts from. With secrets in the recipe, they are masked here (never
    written), and `masked` tells a resumed run to read the recipe file again (its fingerprint checked).
    `recorded`: the steps an interrupted run recorded (sha → step as state.json holds it); those this run has
    not replayed yet are kept as they were, so that no write loses a launch already paid for."""
    data = {"version": STATE_VERSION, "command": run.command, "recipe": run.recipe.model_dump(mode="json"),
            "fingerprint": fingerprint(run.recipe), "masked": False,
            "good": {"ref": run.good.ref, "sha": run.good.sha}, "bad": {"ref": run.bad.ref, "sha": run.bad.sha},
            "options": run.options,
            "spent": {"launches": run.launches, "builds": run.builds, "wall_s": run.wall_s},
            "steps": [*(dump(s) for s in run.steps), *not_replayed(run, recorded or {})],
            "remaining": state.remaining() if state else None}
    if redact is None:
        return data
    masked = redact(data)
    return {**masked, "masked": masked["recipe"] != data["recipe"]}


def not_replayed(run: BisectRun, recorded: Mapping[str, dict]) -> list[dict]:
    """The recorded steps of commits this run holds no step of (yet), in their recorded order."""
    held = {s.sha for s in run.steps}
    return [step for sha, step in recorded.items() if sha not in held]


def write_state(out: Path, run: BisectRun, state: SearchState | None = None,
                redact: Callable[[Any], Any] | None = None, recorded: Mapping[str, dict] | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # `folder`: where the bisect writes, so that its state copied into another bisect's folder is told apart
    data = {**save_state(run, state, redact, recorded), "folder": str(out)}
    atomic_write(out / STATE_FILE, json.dumps(data, indent=1, default=str))


def load_state(out: Path) -> dict:
    path = out / STATE_FILE
    if not path.is_file():
        raise UserError(f"--resume {out}: no {STATE_FILE} there (give the folder an interrupted bisect printed)")
    try:
        state = json.loads(path.read_text())
    except ValueError as exc:
        raise UserError(f"--resume {out}: {STATE_FILE} is not readable JSON ({exc})") from None
    if not isinstance(state, dict):
        raise UserError(f"--resume {out}: {STATE_FILE} holds {type(state).__name__}, not a bisect's state (damaged, "
                        "or not written by abbisect bisect); start the bisect again")
    found = _Head.model_validate(state).version
    if type(found) is not int:  # "1" or true is damage, not another version
        raise UserError(f"--resume {out}: {STATE_FILE}'s version is {json.dumps(found)}, not a format number "
                        f"(damaged, or not written by abbisect bisect); start the bisect again")
    if found != STATE_VERSION:
        raise UserError(f"--resume {out}: {STATE_FILE} was written by another abbisect version "
                        f"(format {found}, this one reads {STATE_VERSION}); start the bisect again")
    return state


class _Head(BaseModel):
    version: Any = None  # the format; checked first, as a file of another format may hold anything else


class _End(BaseModel):
    model_config = ConfigDict(frozen=True)

    ref: StrictStr
    sha: StrictStr


_Amount = Annotated[StrictInt | StrictFloat, Field(ge=0)]


class _Spent(BaseModel):
    """What the runs before spent (none recorded by an older abbisect: nothing)."""

    model_config = ConfigDict(frozen=True)

    launches: _Amount = 0
    builds: _Amount = 0
    wall_s: _Amount = 0


class _StepHead(BaseModel):
    """A recorded step as far as the state's check reads it (each step is then read whole: `recorded_step`)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    sha: StrictStr


class StateFile(BaseModel):
    """state.json as a resume reads it: every key write_state writes, each of its kind, and no other."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int
    command: StrictStr
    recipe: dict[str, Any]
    fingerprint: StrictStr
    good: _End
    bad: _End
    options: dict[str, Any]
    steps: list[_StepHead]
    masked: bool = False  # its secrets were never written: the recipe file is read again
    remaining: Any = None
    folder: StrictStr | None = None  # where the bisect writes (a state copied from another folder is refused)
    spent: _Spent = _Spent()


_OPTIONS = ("no_cache", "script", "script_dir", "interactive", "recipe_path")
_STEP_KEYS = {f.name for f in fields(Step)}


def _refusal(out: Path, exc: ValidationError) -> UserError:
    """The one line of the first thing wrong, in the order a reader would check them: a key missing or of the
    wrong kind, an end, a key abbisect does not write, a step, the spending."""
    errors = exc.errors()

    def said(e: Any) -> str:
        key, deep = str(e["loc"][0]), len(e["loc"]) > 1
        if key in ("good", "bad") and deep:
            return f"{STATE_FILE}'s '{key}' end has no ref and sha"
        if e["type"] == "extra_forbidden":
            return (f"{STATE_FILE} has '{key}', a key abbisect does not write (damaged, or not written by abbisect "
                    "bisect)")
        if key == "steps" and deep:
            return f"{STATE_FILE} has a step without a sha"
        return f"{STATE_FILE} has no valid '{key}' (damaged, or not written by abbisect bisect)"

    def rank(e: Any) -> int:
        key, deep = str(e["loc"][0]), len(e["loc"]) > 1
        return (2 if e["type"] == "extra_forbidden" else 3 if key in ("folder", "spent") or (key == "steps" and deep)
                else 1 if deep else 0)

    return UserError(f"--resume {out}: {said(min(errors, key=rank))}; start the bisect again")


def _own(out: Path, state: StateFile) -> None:
    """A state written in another bisect's folder (copied here) is refused, naming both: resumed here it would
    mix two bisects' records. A folder moved or renamed as a whole keeps its stamp (its name) and resumes."""
    folder = state.folder if state.folder is not None else str(out)
    if Path(folder).name != out.name:
        ends = f"{state.good.ref}..{state.bad.ref}"
        raise UserError(f"--resume {out}: its {STATE_FILE} is the record of another bisect, {ends} in {folder}, "
                        f"copied into this bisect's folder {out.name}; resume that one with --resume {folder}, "
                        "or start this one again")


def recorded_step(data: dict, n: int, role: Role) -> Step:
    """A step as state.json recorded it, every field checked (ValueError naming the first bad one), as step `n`
    of a resumed run in `role`."""
    if extra := sorted(set(data) - _STEP_KEYS):
        raise ValueError(f"'{extra[0]}' is not a field of a step")
    try:
        step = load(Step, data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][:4])
        raise ValueError(f"'{where}': {first['msg']}") from None
    return replace(step, n=n, role=role, replayed=True)


def _problem(model: type[BaseModel], data: Any) -> str | None:
    """The first thing `model` refuses in `data` ('where': why), or None."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        return f"'{'.'.join(str(p) for p in first['loc'][:4])}': {first['msg']}"
    return None


def _checked(out: Path, state: dict) -> StateFile:
    """The state with every key a resume reads present and of the right kind, else one line naming the key;
    its steps, each checked whole, stay as recorded (`state["steps"]`, replayed as they are)."""
    try:
        st = StateFile.model_validate(state)
    except ValidationError as exc:
        raise _refusal(out, exc) from None
    missing = [k for k in _OPTIONS if k not in st.options]
    if missing:
        raise UserError(f"--resume {out}: {STATE_FILE}'s options lack {', '.join(missing)}; start the bisect again")
    _own(out, st)
    for k, step in enumerate(state["steps"]):
        try:
            recorded_step(step, k, Role.CANDIDATE)
        except ValueError as exc:
            raise UserError(f"--resume {out}: {STATE_FILE}'s step {k} ({step['sha'][:10]}) is damaged: {exc}; "
                            "start the bisect again") from None
    if why := _problem(Recipe, st.recipe):
        raise UserError(f"--resume {out}: {STATE_FILE}'s recipe is damaged: {why}; start the bisect again")
    return st


@dataclass(frozen=True)
class Resumed:
    """An interrupted bisect as its state records it: what a resumed run starts from."""

    out: Path
    recipe: Recipe
    options: dict
    command: str
    ends: dict[str, _End]  # {"good": its ref and sha, "bad": …}
    replay: dict[str, dict]  # sha -> the finished step
    spent: Spent  # what the runs before this one spent (none recorded by an older abbisect: nothing)

    def ends_in(self, variable: Variable, good: str | None, bad: str | None) -> tuple[Revision, Revision]:
        """The ends as recorded (by sha: a branch may have moved since); a repeated --good/--bad must agree."""
        revs = {}
        for end in ("good", "bad"):
            ref, sha = self.ends[end].ref, self.ends[end].sha
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
    state = load_state(out)
    st = _checked(out, state)
    opts = st.options
    if st.masked:
        # Its secrets were never written: the recipe file is read again and must be the same recipe.
        path = Path(recipe or opts["recipe_path"])
        if not path.is_file():
            raise UserError(f"--resume {out}: the recipe has secrets that {STATE_FILE} does not keep; give it: "
                            f"abbisect bisect RECIPE --resume {out}")
        rec = load_recipe(path)[0].model_copy(update={"bisect": Recipe.model_validate(st.recipe).bisect})
        if fingerprint(rec) != st.fingerprint:
            raise UserError(f"--resume {out}: {path} is not the recipe the bisect started with (it changed)")
    else:
        rec = Recipe.model_validate(st.recipe)
    if output and Path(output).resolve() != out:
        _differs(out, "--output", output, str(out))
    if recipe:
        given_rec, _ = load_recipe(recipe_path(recipe))
        if fingerprint(given_rec) != fingerprint(rec) or given_rec.verdict.script != rec.verdict.script:
            _differs(out, "the recipe", recipe, opts["recipe_path"])
    for key, value in given.items():
        if value is not None and value != getattr(rec.bisect, key):
            _differs(out, _OPTION.get(key, f"--{key.replace('_', '-')}"), value, getattr(rec.bisect, key))
    for key, value in flags.items():
        if value is not None and value != opts[key]:
            _differs(out, f"--{key.replace('_', '-')}", value, opts[key])
    return Resumed(out, rec, opts, st.command, {"good": st.good, "bad": st.bad}, {s["sha"]: s for s in state["steps"]},
                   _spent(st.spent))


def spent_of(out: Path, state: dict) -> Spent:
    """What an interrupted bisect had spent, as its state records it (nothing, in a state without the record)."""
    try:
        return _spent(StateFile.model_validate(state).spent)
    except ValidationError as exc:
        raise _refusal(out, exc) from None


def _spent(spent: _Spent) -> Spent:
    return Spent(int(spent.launches), int(spent.builds), float(spent.wall_s))


_OPTION = {"revert": "--confirm-revert", "then_narrow": "--narrow"}  # a bisect option whose flag is not its name


def _differs(out: Path, what: str, mine: Any, theirs: Any) -> None:
    raise UserError(f"--resume {out}: {what} {mine!r} differs from the interrupted bisect's {theirs!r} "
                    f"(resume with --resume alone, or start a new bisect)")
