"""What a newcomer reads: report.md says its verdict first, keeps its columns on
screen, explains its own words and names no path of this machine; bisect.md neither."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, abbisect, run_ab, toy_recipe, write_recipe

from abbisect.recipe import parse_recipe
from abbisect.report.ab import _args
from abbisect.report.portable import Portable, engine_source
from abbisect.report.text import RUN_SHOWN, Notes, cell, table
from abbisect.verdict.rules import SHOWN, _listed


@pytest.mark.e2e
def test_a_report_says_its_verdict_first_and_explains_its_words(tmp_path, engine_repo, cache_dir):
    _, out = run_ab(tmp_path, engine_repo, cache_dir, "broken", "fixed")
    report = (out / "report.md").read_text()
    lines = report.splitlines()
    assert lines[2].startswith("**Verdict: A `broken` is bad (degenerate), B `fixed` is good (ok)**"), lines[:4]
    assert "the outcome changes between the sides" in lines[2]
    assert "| signatures ⚠ changed | `param_not_found` (+1 info) | none serious (+1 info) |" in report
    assert "_result_: fresh = run now, cached = replayed from the trial cache" in report
    assert "`overhead` is the trial's time outside the stages above" in report
    # the engine itself differs between two commits of it: that is the variable, not a warning
    assert "| `toyengine` |" in report and "the engine under test (each side's own commit)" in report
    assert "not explained by the named packages" not in report


@pytest.mark.e2e
def test_identical_package_lists_are_said_once_not_printed_twice(tmp_path, engine_repo, cache_dir):
    _, out = run_ab(tmp_path, engine_repo, cache_dir, "fixed", "fixed")
    report = (out / "report.md").read_text()
    assert re.search(r"The two venvs' package lists are identical \(\d+ packages\)\.", report)
    assert "Full package lists" not in report


INVISIBLE = re.compile("[\u200b-\u200d\u2060\ufeff]")


def test_a_long_unbroken_run_is_shortened_in_its_cell_and_listed_in_full_below_the_table():
    """No invisible break points (a user copies and greps what the report shows): a run too long for a column
    is shortened, and the table lists it in full; a full sha and a switch id are never shortened."""
    looping = "Cement" * 40
    notes = Notes()
    sha = "903fef3ace96402133e626cdf5802395abf85f97"
    rows = [[cell(looping, 90, notes), cell(f"probe sglang.disable-cuda-graph at {sha}", 90, notes)]]
    shown = table(["output", "probe"], rows, notes)
    assert not INVISIBLE.search(shown)
    assert f"| {looping[:RUN_SHOWN]}…[1] | probe sglang.disable-cuda-graph at {sha} |" in shown
    assert shown.endswith(f"- [1] `{looping}`")
    assert cell(looping, 90) == looping[:89] + "…"  # prose (no notes): cut at its limit only
    assert cell("two plus two is four", 90, notes) == "two plus two is four" and len(notes.values) == 1
    quiet = Notes(listed=False)  # the outputs table: the full outputs follow it
    assert cell(looping, 90, quiet) == looping[:RUN_SHOWN] + "…" and table(["a"], [["x"]], quiet).count("\n") == 2


def test_non_default_args_are_cut_between_arguments_never_inside_one():
    args = {f"option_number_{n}": f"value-{n}" * 3 for n in range(30)}
    shown = _args(args)
    listed = re.sub(r" \(\+\d+ more; all in server\.log\)$", "", shown)
    assert shown.endswith("more; all in server.log)") and "…" not in listed
    assert all(re.fullmatch(r"option\\_number\\_\d+='(value-\d+){3}'", item) for item in listed.split(", "))
    assert _args({"dtype": "float32"}) == "dtype='float32'" and _args({}) == "— (none)"


def test_a_count_of_degenerate_outputs_is_followed_by_every_one_or_a_count_of_the_rest():
    four = tuple(f"p{n}: loops" for n in range(4))
    assert _listed(four) == list(four)
    many = tuple(f"p{n}: loops" for n in range(SHOWN + 3))
    assert _listed(many) == [*many[:SHOWN], "… and 3 more (all in results.json)"]


@pytest.mark.e2e
def test_a_dist_shim_version_is_said_to_be_the_shims(tmp_path, engine_repo, cache_dir):
    """The engine reads its version through the recipe's dist-info shim: the report says so."""
    res, out = run_ab(tmp_path, engine_repo, cache_dir, "fixed", "fixed",
                      install={"strategy": "editable", "dist_shims": {"toyengine-shim": "0.3.0"}})
    assert res["a"]["verdict"]["status"] == "ok"
    report = (out / "report.md").read_text()
    assert "0.3.0 (= the recipe's dist-info shim; the engine may read it, not the commit's own version)" in report


def test_any_path_of_this_machine_becomes_its_name():
    script = REPO_ROOT / "tests" / "echo_server.py"
    text = f"launch: python {script} --port $PORT; GET /v1/models; $VENV/bin/python; judge `python {script}`"
    assert Portable(()).text(text) == ("launch: python <local: echo_server.py> --port $PORT; GET /v1/models; "
                                       "$VENV/bin/python; judge `python <local: echo_server.py>`")


def test_a_remote_that_is_a_local_folder_is_no_source_for_a_stranger(tmp_path):
    repo = tmp_path / "engine"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "remote", "add", "origin", str(tmp_path / "upstream")], check=True)
    recipe = parse_recipe({"name": "r", "engine": {"kind": "vllm", "repo": str(repo)}, "model": "m",
                           "prompts": ["hi"]})
    assert engine_source(recipe) == "<a local checkout named engine, with no public remote>"


@pytest.mark.e2e
def test_bisect_md_names_no_path_of_this_machine(tmp_path, engine_repo, cache_dir):
    """A local engine whose origin is a local folder, a stand-in launch script and a --script judge, all at
    paths of this machine: bisect.md and its outputs name none of them."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(engine_repo), str(clone)], check=True)
    judge = tmp_path / "judge.py"
    judge.write_text("import json, sys; r = json.load(sys.stdin); sys.exit(1 if r['verdict']['status'] != 'ok' "
                     "else 0)\n")
    launcher = tmp_path / "serve.sh"
    launcher.write_text('#!/bin/sh\nexec "$0.python" -m toyengine.server "$@"\n')
    launch = {"command": ["{python}", "-m", "toyengine.server", "--host", "{host}", "--port", "{port}",
                          "--model", str(launcher)], "ready": {"http": "/health"}}
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(clone, launch=launch))
    proc = abbisect("bisect", str(recipe), "--good", "healthy0", "--bad", "broken", "--script",
                    f"{sys.executable} {judge}", "-o", str(tmp_path / "out"), cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    for name in ("bisect.md", "outputs.md"):
        text = (tmp_path / "out" / name).read_text()
        assert str(tmp_path) not in text and str(Path.home()) + "/" not in text, name
    bisect_md = (tmp_path / "out" / "bisect.md").read_text()
    assert "<local: judge.py>" in bisect_md and "<local: serve.sh>" in bisect_md
    assert "a git clone of <a local checkout named clone, with no public remote>" in bisect_md
