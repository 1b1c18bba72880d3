"""abbisect narrow: delta debugging between a failing and a passing launch, feature switches filtered by
the commit's own --help, the workaround table — through the CLI on real toy-engine processes — and the pure
parts (ddmin, launch differences) on their own."""

from __future__ import annotations

import itertools
import json

import pytest
from conftest import abbisect, toy_recipe, write_recipe

from abbisect.narrow.ddmin import Result, ddmin, split
from abbisect.narrow.deltas import Launch, apply, differences

# --- the pure parts ----------------------------------------------------------------------------------------


def test_ddmin_finds_the_two_changes_that_fail_only_together():
    asked: list[tuple[int, ...]] = []

    def test(subsets):
        asked.extend(subsets)
        return [Result.FAIL if {3, 11} <= set(s) else Result.PASS for s in subsets]

    assert ddmin(list(range(16)), test) == (3, 11)
    assert len(asked) == len(set(asked))  # no subset tried twice
    assert len(asked) < 2 ** 16 // 100  # far fewer than every subset


def test_ddmin_treats_an_unresolved_probe_as_no_failure():
    # a subset without 0 cannot even be tried (a flag missing its partner): unresolved, never a failure
    def test(subsets):
        return [Result.UNRESOLVED if 0 not in s else Result.FAIL if 5 in s else Result.PASS for s in subsets]

    assert ddmin(list(range(8)), test) == (0, 5)


def test_split_keeps_the_order_and_sizes_differ_by_at_most_one():
    assert split(tuple(range(7)), 3) == [(0, 1, 2), (3, 4), (5, 6)]


def test_differences_between_launches_and_applying_some_of_them():
    failing = Launch(("--seed", "0", "--enable-x", "--max-len", "4096", "--dtype", "fp16"), {"A": "1", "B": "2"},
                     ("deep-gemm==2.1.0",))
    passing = Launch(("--seed", "0", "--max-len", "2048", "--old"), {"B": "2", "C": "3"}, ("deep-gemm==2.0.0",))
    deltas = differences(failing, passing)
    assert [d.describe() for d in deltas] == [
        "+ --enable-x", "--max-len 4096 (instead of --max-len 2048)", "+ --dtype fp16", "− --old",
        "+ env A=1", "− env C=3", "pin deep-gemm==2.1.0 (instead of deep-gemm==2.0.0)"]
    assert apply(passing, deltas) == Launch(("--seed", "0", "--max-len", "4096", "--enable-x", "--dtype", "fp16"),
                                            {"B": "2", "A": "1"}, ("deep-gemm==2.1.0",))
    assert apply(passing, [deltas[1]]).flags == ("--seed", "0", "--max-len", "4096", "--old")
    assert apply(passing, []) == Launch(passing.flags, dict(passing.env), passing.pins)


# --- through the CLI -----------------------------------------------------------------------------------------

FAILING = ["--seed", "0", "--enable-prefix-caching", "--max-model-len", "4096", "--enable-chunked-prefill",
           "--dtype", "float32"]
SWITCHES = [
    {"id": "command.enforce-eager", "feature": "fused kernels off (eager)", "flag": ["--enforce-eager"],
     "breadth": 3},
    {"id": "command.attention-naive", "feature": "attention backend swapped for the naive one",
     "flag": ["--attention-backend", "naive"], "breadth": 1},
    {"id": "command.no-prefix-caching", "feature": "prefix caching off", "replaces": ["--enable-prefix-caching"]},
    {"id": "command.short-context", "feature": "a shorter context", "flag": ["--max-model-len", "1024"]},
    {"id": "command.no-log-stats", "feature": "stats logging off", "flag": ["--disable-log-stats"]},
]


@pytest.fixture(scope="module")
def features(planted):
    """Feature flags at 1, a bug that needs two of them together at 5."""
    return planted(8, {1: "feature_flags", 5: "feature_bug"})


def _recipe(tmp_path, repo, **overrides):
    recipe = toy_recipe(repo, prompts=["What is two plus two?", "List three uses of copper."],
                        env={"TOYENGINE_LOAD_SECONDS": "0.1", "HF_TOKEN": "hf_narrowsecret12345"},
                        narrow={"passing": {"flags": ["--seed", "0"], "env": {"HF_TOKEN": "hf_narrowsecret12345"}},
                                "switches": SWITCHES}, **overrides)
    recipe["launch"]["flags"] = FAILING
    return write_recipe(tmp_path / "narrow.yaml", recipe)


def _narrow(tmp_path, cache_dir, path, *args, name="out"):
    out = tmp_path / name
    proc = abbisect("narrow", str(path), "-o", str(out), "--json", *args, cwd=tmp_path, cache=cache_dir)
    data = json.loads(proc.stdout)["data"] if proc.stdout.strip() else {}
    return proc, data, out


@pytest.mark.e2e
def test_narrow_names_both_flags_and_the_switches_that_work_around_the_bug(tmp_path, cache_dir, features):
    repo, shas = features
    proc, data, out = _narrow(tmp_path, cache_dir, _recipe(tmp_path, repo), "--ref", shas[-1])
    assert proc.returncode == 0, proc.stderr
    minimal = [data["deltas"][i] for i in data["minimal"]]
    assert [(d["kind"], d["key"]) for d in minimal] == [("option", "--enable-prefix-caching"),
                                                       ("option", "--enable-chunked-prefill")]
    # the narrowest passing switch first; the one the commit's --help does not declare was never tried
    assert data["workarounds"] == ["command.attention-naive", "command.no-prefix-caching", "command.enforce-eager"]
    assert data["not_accepted"] == ["command.no-log-stats"]
    tried = {p["switch"]: p["outcome"] for p in data["probes"] if p["kind"] == "switch"}
    assert tried == {"command.attention-naive": "good", "command.no-prefix-caching": "good",
                     "command.enforce-eager": "good", "command.short-context": "bad"}
    md = (out / "narrow.md").read_text()
    assert "Narrowest workaround: `command.attention-naive`" in md
    assert "| `command.short-context` | a shorter context | `− --max-model-len 4096, + --max-model-len 1024` | " \
           "still fails (degenerate)" in md
    for where in (md, (out / "narrow.json").read_text(), proc.stdout):
        assert "hf_narrowsecret12345" not in where

    # the same command again: every probe from the trial cache, no server launched
    proc, again, _ = _narrow(tmp_path, cache_dir, _recipe(tmp_path, repo), "--ref", shas[-1], name="again")
    assert proc.returncode == 0, proc.stderr
    assert again["launches"] == 0 and all(p["cached"] for p in again["probes"])
    assert again["workarounds"] == data["workarounds"] and again["minimal"] == data["minimal"]


@pytest.mark.e2e
def test_probes_run_at_once_on_free_slots(tmp_path, cache_dir, features):
    repo, shas = features
    proc, data, _out = _narrow(tmp_path, cache_dir, _recipe(tmp_path, repo), "--ref", shas[-1], "--slots", "2",
                              "--no-cache")
    assert proc.returncode == 0, proc.stderr
    assert data["workarounds"][0] == "command.attention-naive" and len(data["minimal"]) == 2
    spans = sorted((p["server_times"]["launched"], p["server_times"]["stopped"]) for p in data["probes"])
    assert any(b[0] < a[1] for a, b in itertools.pairwise(spans)), spans  # some probes' servers ran at once


@pytest.mark.e2e
def test_a_bisect_with_narrow_puts_the_workaround_table_in_bisect_md(tmp_path, cache_dir, features):
    repo, shas = features
    out = tmp_path / "bis"
    proc = abbisect("bisect", str(_recipe(tmp_path, repo)), "--good", shas[1], "--bad", shas[-1], "--narrow",
                    "-o", str(out), "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)["data"]
    assert data["first_new"] == shas[5]
    assert data["narrowing"]["sha"] == shas[5] and data["narrowing"]["workarounds"][0] == "command.attention-naive"
    md = (out / "bisect.md").read_text()
    assert f"### Narrowed at `{shas[5][:10]}` (the found commit)" in md
    assert "#### Workarounds: feature switches at this commit" in md and "Narrowest workaround" in md


@pytest.mark.e2e
def test_a_launch_that_does_not_fail_has_nothing_to_narrow(tmp_path, cache_dir, features):
    repo, shas = features
    proc, data, _ = _narrow(tmp_path, cache_dir, _recipe(tmp_path, repo), "--ref", shas[2])
    assert proc.returncode == 3, proc.stderr
    assert "does not fail" in data["message"] and len(data["probes"]) == 1


@pytest.mark.e2e
def test_nothing_to_try_is_said_so_never_none_passed(tmp_path, cache_dir, features):
    """With nothing to try, narrow says so; never "No switch made the failure go away" and exit 1 (none-passed)."""
    repo, shas = features
    bare = toy_recipe(repo, prompts=["What is two plus two?"])
    bare["launch"]["flags"] = FAILING
    # A command engine has no built-in catalogue: with no narrow.switches and no narrow.passing, refused at once.
    proc, _, out = _narrow(tmp_path, cache_dir, write_recipe(tmp_path / "bare.yaml", bare), "--ref", shas[5])
    assert proc.returncode == 2 and not out.exists(), proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("abbisect:")]
    assert lines == [("abbisect: error: nothing to narrow with: engine command has no built-in switch catalogue "
                      "and the recipe names no narrow.switches; give narrow.switches (this engine's own feature "
                      "flags) or narrow.passing (a launch that passes)")], proc.stderr
    # Switches this commit does not declare: the failing launch runs, nothing else can; said so, exit 4.
    bare["narrow"] = {"switches": [{"id": "command.no-such", "feature": "a flag of another engine",
                                    "flag": ["--no-such-flag"]}]}
    proc, data, out = _narrow(tmp_path, cache_dir, write_recipe(tmp_path / "other.yaml", bare), "--ref", shas[5])
    assert proc.returncode == 4, proc.stderr
    assert [p["kind"] for p in data["probes"]] == ["failing"] and data["probes"][0]["outcome"] == "bad"
    assert data["message"].startswith("nothing to try at this commit: of the 1 switch(es) for engine command, 1 not "
                                      "declared by this commit's"), data["message"]
    md = (out / "narrow.md").read_text()
    assert "Nothing narrowed: nothing to try at this commit" in md and "No switch made the failure go away" not in md
