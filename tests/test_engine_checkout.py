"""No recipe needed in an engine checkout: in a stand-in SGLang or vLLM checkout (tests/engine_standins.py)
with no abbisect.yaml, `bisect`, `run` and `check` assemble the recipe from the checkout and the command line
(--model, the server's flags after --), and judge as a recipe written by hand does; `init` writes abbisect.yaml,
which `run` then picks up; a missing model and an unknown engine are one line, exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import abbisect, cli, write_recipe
from engine_standins import HISTORY, PLANTED, sglang_history, vllm_history

from abbisect.infra import git

MODEL = "toy-model"
# The server's flags as the user passes them to `python -m sglang.launch_server` / `vllm serve`.
FLAGS = {"sglang": ["--random-seed", "0"], "vllm": ["--seed", "0"]}
PROMPTS = ["What is the capital of France?", "Explain what a hash table is."]
BUILD = {"sglang": sglang_history, "vllm": vllm_history}


@pytest.fixture(scope="module")
def checkouts(tmp_path_factory) -> dict[str, tuple[Path, list[str]]]:
    made = {}
    for kind, build in BUILD.items():
        repo = tmp_path_factory.mktemp(kind) / kind
        made[kind] = (repo, build(repo, HISTORY))
    return made


def _by_hand(kind: str, repo: Path) -> dict:
    """The recipe a user would write for the same A/B (recipes/README.md), not abbisect's assembly of it."""
    engine = {"kind": kind, "repo": str(repo), **({"subdir": "python"} if kind == "sglang" else {})}
    return {"name": f"{kind}-by-hand", "engine": engine,
            "install": {"strategy": "editable" if kind == "sglang" else "precompiled"}, "model": MODEL,
            "launch": {"flags": FLAGS[kind], **({"entrypoint": "cli"} if kind == "vllm" else {})},
            "prompts": PROMPTS}


def _untouched(repo: Path, shas: list[str]) -> None:
    assert git.git(repo, "status", "--porcelain").strip() == ""
    assert git.git(repo, "rev-parse", "HEAD").strip() == shas[-1]


def _verdicts(data: dict) -> tuple:
    return tuple((data[s]["verdict"]["status"], data[s]["verdict"]["outcome"]) for s in ("a", "b"))


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_bisect_in_a_checkout_without_a_recipe_names_the_planted_commit(kind, checkouts, cache_dir, tmp_path):
    repo, shas = checkouts[kind]
    out = tmp_path / "bisect"
    proc = abbisect("bisect", "--good", "v0.1", "--bad", "main", "--model", MODEL, "--json", "-o", str(out), "--",
                    *FLAGS[kind], cwd=repo, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["data"]["first_new"] == shas[PLANTED]
    # the assembled recipe is kept in the result folder, ready to save and edit; the flags went through as given
    kept = yaml.safe_load((out / "recipe.yaml").read_text())
    assert kept["engine"]["kind"] == kind and kept["model"] == MODEL and kept["launch"]["flags"] == FLAGS[kind]
    launched = (out / "trials").rglob("server.log")
    assert any(("ready to roll" in p.read_text()) if kind == "sglang" else ("vLLM API server" in p.read_text())
               for p in launched)
    _untouched(repo, shas)


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_run_and_check_judge_as_the_recipe_written_by_hand(kind, checkouts, cache_dir, tmp_path):
    repo, shas = checkouts[kind]
    prompts = [a for p in PROMPTS for a in ("--prompt", p)]
    assembled = abbisect("run", "--a", "v0.1", "--b", "main", "--model", MODEL, *prompts, "--json", "-o",
                         str(tmp_path / "assembled"), "--", *FLAGS[kind], cwd=repo, cache=cache_dir)
    assert assembled.returncode == 0, assembled.stderr[-3000:]
    recipe = write_recipe(tmp_path / "by-hand.yaml", _by_hand(kind, repo))
    by_hand = abbisect("run", str(recipe), "--a", "v0.1", "--b", "main", "--json", "--no-cache", "-o",
                       str(tmp_path / "by-hand"), cwd=tmp_path, cache=cache_dir)
    assert by_hand.returncode == 0, by_hand.stderr[-3000:]
    got, want = json.loads(assembled.stdout)["data"], json.loads(by_hand.stdout)["data"]
    assert _verdicts(got) == _verdicts(want) == (("ok", "good"), ("degenerate", "bad"))
    assert [o["prompt"] for o in got["b"]["outputs"]] == PROMPTS
    for ref, code in (("v0.1", 0), ("main", 1)):
        mine = abbisect("check", ref, "--model", MODEL, *prompts, "--", *FLAGS[kind], cwd=repo, cache=cache_dir)
        theirs = abbisect("check", str(recipe), ref, cwd=tmp_path, cache=cache_dir)
        assert (mine.returncode, theirs.returncode) == (code, code), mine.stderr[-2000:] + theirs.stderr[-2000:]
    _untouched(repo, shas)


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_init_then_run_gives_the_same_verdict(kind, checkouts, cache_dir, tmp_path):
    origin, shas = checkouts[kind]
    repo = tmp_path / "clone"
    git.git(tmp_path, "clone", "-q", str(origin), str(repo))
    proc = abbisect("init", "--model", MODEL, "--", *FLAGS[kind], cwd=repo, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    written = (repo / "abbisect.yaml").read_text()
    assert "# " in written and yaml.safe_load(written)["launch"]["flags"] == FLAGS[kind]
    run = abbisect("run", "--a", "v0.1", "--b", "main", "--json", "-o", str(tmp_path / "out"), cwd=repo,
                   cache=cache_dir)
    assert run.returncode == 0, run.stderr[-3000:]
    assert _verdicts(json.loads(run.stdout)["data"]) == (("ok", "good"), ("degenerate", "bad"))
    bisect = abbisect("bisect", "--good", "v0.1", "--bad", "main", "--json", "-o", str(tmp_path / "bis"), cwd=repo,
                      cache=cache_dir)
    assert bisect.returncode == 0 and json.loads(bisect.stdout)["data"]["first_new"] == shas[PLANTED]
    again = abbisect("init", "--model", "other", cwd=repo, cache=cache_dir)
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1 and "not overwritten" in again.stderr
    assert (repo / "abbisect.yaml").read_text() == written


# -- usage: one line, exit 2, nothing started ---------------------------------------------------------------------
def _one_line(proc, code: int, *needles: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def bare_checkouts(tmp_path_factory) -> dict[str, Path]:
    """Stand-in checkouts of one commit each, for the usage errors (no venv is ever built from them)."""
    made = {}
    for kind, build in BUILD.items():
        repo = tmp_path_factory.mktemp(f"{kind}-usage") / kind
        build(repo, HISTORY[:1])
        made[kind] = repo
    return made


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
@pytest.mark.parametrize("command", [["run", "--a", "v0.1", "--b", "v0.1"], ["bisect", "--good", "v0.1", "--bad",
                                     "main"], ["check"], ["narrow"], ["init"]])
def test_a_missing_model_is_one_line_saying_how_to_give_it(kind, command, bare_checkouts, cache_dir):
    how = {"sglang": "python -m sglang.launch_server", "vllm": "vllm serve"}[kind]
    _one_line(cli(*command, "--", *FLAGS[kind], cwd=bare_checkouts[kind], cache=cache_dir),
              128 if command == ["check"] else 2, "no model: give --model M", how)
    assert not (bare_checkouts[kind] / "abbisect.yaml").exists()


@pytest.mark.parametrize("command", [["run"], ["bisect", "--good", "a", "--bad", "b"], ["check"], ["init"]])
def test_an_unknown_engine_is_one_line(command, bare_checkouts, tmp_path, cache_dir):
    _one_line(cli(*command, "--model", MODEL, "--engine", "tgi", cwd=bare_checkouts["sglang"], cache=cache_dir),
              128 if command == ["check"] else 2, "unknown engine 'tgi'", "sglang or vllm")
    other = tmp_path / "other"  # a git checkout of neither engine
    shutil.copytree(bare_checkouts["vllm"], other)
    (other / "pyproject.toml").write_text('[project]\nname = "tgi"\n')
    _one_line(cli(*command, "--model", MODEL, cwd=other, cache=cache_dir), 128 if command == ["check"] else 2,
              "not an SGLang or vLLM checkout", "--engine sglang|vllm")


def test_the_dry_run_prints_the_assembled_recipe_and_a_recipe_wins(bare_checkouts, cache_dir, tmp_path):
    repo = bare_checkouts["sglang"]
    proc = cli("run", "--a", "v0.1", "--b", "v0.1", "--model", "org/Some-Model_1", "--dry-run", "--", "--tp-size",
               "2", cwd=repo, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    recipe = yaml.safe_load(proc.stdout.split("\nrecipe: ")[0])
    assert recipe["name"] == "sglang-Some-Model_1" and recipe["engine"]["subdir"] == "python"
    assert recipe["launch"]["flags"] == ["--tp-size", "2"] and len(recipe["prompts"]) >= 3
    assert "-m sglang.launch_server --model-path org/Some-Model_1 --host 127.0.0.1 --port 0 --tp-size 2" in proc.stdout
    # given a recipe, the options that assemble one are refused rather than silently ignored
    path = write_recipe(tmp_path / "r.yaml", _by_hand("sglang", repo))
    _one_line(cli("run", str(path), "--model", "x", "--dry-run", cwd=tmp_path, cache=cache_dir), 2, "--model",
              "is the recipe")


def test_with_a_recipe_the_words_after_dashes_are_bisects_pathspec(checkouts, cache_dir, tmp_path):
    """init writes abbisect.yaml; from then on bisect's words after -- are its PATHSPEC again, as with any recipe."""
    repo = tmp_path / "clone"
    git.git(tmp_path, "clone", "-q", str(checkouts["vllm"][0]), str(repo))
    assert cli("init", "--model", MODEL, cwd=repo, cache=cache_dir).returncode == 0
    whole = cli("bisect", "--good", "v0.1", "--bad", "main", "--dry-run", cwd=repo, cache=cache_dir)
    narrowed = cli("bisect", "--good", "v0.1", "--bad", "main", "--dry-run", "--", "toyengine/loader.py", cwd=repo,
                   cache=cache_dir)
    assert whole.returncode == narrowed.returncode == 0, whole.stderr + narrowed.stderr
    assert "candidates v0.1..main: 5 in the full history" in whole.stdout
    assert "candidates v0.1..main: 1 in the full history" in narrowed.stdout  # only the planted commit
    assert "# assembled by abbisect" not in narrowed.stdout  # the recipe is the file, not an assembled one
