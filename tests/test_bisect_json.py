"""bisect.json, pinned: a flaky, a performance and a two-change performance bisect, each run by the real driver,
oracle, posterior search, confirmation and changes search over the simulated trial runner (benchmarks/seam.py),
written as `abbisect bisect` writes its folder (abbisect/commands/bisect.py `_write`), and compared with the file
stored in tests/data/golden/: every key and every value, lists in their order.

What legitimately differs from one run to the next is replaced before comparing, and only that: the durations
(`wall_s`, a step's or a round's `seconds`, a step's `start_s`), the time the run finished and the version of
abbisect (checked to be this one's). A float is compared to 1e-9 of its value: the search's arithmetic runs through
BLAS, whose last bits depend on the CPU's kernel. Paths of this machine never reach the file (the writer replaces
them); a path left in it would differ here and fail.

A change that is meant to change bisect.json rewrites the files with ABBISECT_WRITE_GOLDEN=1 and shows the diff in
its commit."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import seam

from abbisect import __version__
from abbisect.commands.bisect import _write

GOLDEN = Path(__file__).resolve().parent / "data" / "golden"
DURATIONS = {"wall_s", "seconds", "start_s"}
STAMPS = {"finished"}

# name -> (the simulated history, the recipe, slots)
BISECTS = {
    # a crash in 1 launch of 3 from c009 on; the found commit confirmed, every change of the range accounted for
    "flaky": (lambda: seam.World("flaky", 16, 9, seed=2), lambda: seam.recipe_for("flaky"), 1),
    # +10 % TPOT from c011 on, two launches at a time
    "perf": (lambda: seam.World("perf", 24, 11, seed=3), lambda: seam.recipe_for("perf"), 2),
    # a +12 % regression at c010 partly undone by a -5 % fix at c022: both named, the parts searched
    "perf-two": (lambda: seam.World("perf", 32, 10, seed=1, changes=((10, 0.12), (22, -0.05))),
                 lambda: seam.recipe_for("perf"), 1),
}


def normalised(data, path: str = ""):
    """`data` with what legitimately varies replaced by a placeholder (a null stays null: its absence is pinned)."""
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            if key in DURATIONS and isinstance(value, int | float) and not isinstance(value, bool):
                out[key] = "<seconds>"
            elif key in STAMPS and isinstance(value, str):
                out[key] = "<time>"
            else:
                out[key] = normalised(value, f"{path}.{key}")
        if path == "" and "version" in data:
            assert data["version"] == __version__
            out["version"] = "<version>"
        return out
    if isinstance(data, list):
        return [normalised(v, f"{path}[{i}]") for i, v in enumerate(data)]
    return data


def differences(want, got, path: str = "") -> list[str]:
    """Where `got` differs from `want`: a key missing or extra, a value or its type changed, a list's length."""
    if type(want) is not type(got):
        return [f"{path or '.'}: {want!r} ({type(want).__name__}) became {got!r} ({type(got).__name__})"]
    if isinstance(want, dict):
        out = [f"{path}.{k}: missing" for k in want if k not in got]
        out += [f"{path}.{k}: new key" for k in got if k not in want]
        return out + [d for k in want if k in got for d in differences(want[k], got[k], f"{path}.{k}")]
    if isinstance(want, list):
        if len(want) != len(got):
            return [f"{path}: {len(want)} items became {len(got)}"]
        return [d for i, (w, g) in enumerate(zip(want, got, strict=True)) for d in differences(w, g, f"{path}[{i}]")]
    if isinstance(want, float):
        return [] if math.isclose(want, got, rel_tol=1e-9, abs_tol=1e-12) else [f"{path}: {want!r} became {got!r}"]
    return [] if want == got else [f"{path}: {want!r} became {got!r}"]


@pytest.mark.parametrize("name", sorted(BISECTS))
def test_bisect_json_is_the_golden_one(name, tmp_path):
    world, recipe, slots = BISECTS[name]
    out = tmp_path / "20260101-000000"
    run, _ = seam.bisect(world(), recipe(), slots=slots, out=out)
    _write(run, seam.OPTIONS, tmp_path / "cache", out, lambda message: None)
    got = normalised(json.loads((out / "bisect.json").read_text()))
    golden = GOLDEN / f"bisect-{name}.json"
    if os.environ.get("ABBISECT_WRITE_GOLDEN") == "1":
        golden.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n")
    want = json.loads(golden.read_text())
    found = differences(want, got)
    assert not found, f"bisect.json differs from {golden.name} in {len(found)} places:\n" + "\n".join(found[:40])


def test_the_comparison_sees_every_key_and_value():
    """The comparison fails on a value changed, a key added or dropped, a type changed, a list reordered."""
    want = {"a": [1, {"b": "x", "c": 0.5}], "d": None, "e": True}
    assert not differences(want, json.loads(json.dumps(want)))
    assert differences(want, {**want, "d": 0})
    assert differences(want, {**want, "e": 1})
    assert differences(want, {**want, "f": 1})
    assert differences(want, {k: v for k, v in want.items() if k != "d"})
    assert differences(want, {**want, "a": [{"b": "x", "c": 0.5}, 1]})
    assert differences(want, {**want, "a": [1, {"b": "x", "c": 0.5000001}]})
    assert normalised({"wall_s": 1.5, "steps": [{"seconds": 0.1, "start_s": None}], "finished": "2026"}) == {
        "wall_s": "<seconds>", "steps": [{"seconds": "<seconds>", "start_s": None}], "finished": "<time>"}
