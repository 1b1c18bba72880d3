"""`abbisect bisect --ends lazy`: the search starts from the labels at once (as `git bisect run`), and an end
is tested only when the answer rests on it; same culprit, same exit codes as the ends-first mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import abbisect, toy_recipe, write_recipe

from abbisect.bisect import gitlog
from abbisect.bisect.search import NEW, OLD, bisect
from abbisect.builtin.history import Commit, build_history

pytestmark = pytest.mark.e2e

BUG = 5  # t5 breaks the answer (the toy engine's wrong scale); t0..t4 are good, t5..t8 bad


@pytest.fixture(scope="module")
def line_repo(tmp_path_factory) -> tuple[Path, list[str]]:
    repo = tmp_path_factory.mktemp("lazy") / "engine"
    commits = [Commit(f"commit {i}" + (": dispatch quantisation to linear layers only" if i == BUG else ""),
                      "break_scale" if i == BUG else None, tag=f"t{i}") for i in range(9)]
    return repo, build_history(repo, commits)


def search_steps(repo: Path, shas: list[str], old: int, new: int) -> int:
    """How many commits the search tests between the ends (the pure search, git's own choice of midpoints)."""
    graph = gitlog.candidate_graph(repo, shas[new], [shas[old]])
    res = bisect(graph, shas[new], [shas[old]], lambda sha: NEW if shas.index(sha) >= BUG else OLD)
    return res.tested


def run_bisect(tmp_path: Path, repo: Path, cache: Path, good: str, bad: str, *args: str, name: str = "out",
               **overrides):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo, **overrides))
    out = tmp_path / name
    proc = abbisect("bisect", str(recipe), "--good", good, "--bad", bad, "--no-cache", *args, "-o", str(out),
                    "--json", cwd=tmp_path, cache=cache)
    data = json.loads(proc.stdout)["data"] if proc.stdout.strip() else {}
    return proc, data, out


def roles(data: dict) -> list[str]:
    return [s["role"] for s in data["steps"]]


def test_lazy_finds_the_same_commit_with_two_launches_fewer(tmp_path, line_repo, cache_dir):
    repo, shas = line_repo
    steps = search_steps(repo, shas, 0, 8)
    first_proc, first, first_out = run_bisect(tmp_path, repo, cache_dir, "t0", "t8", name="first")
    lazy_proc, lazy, out = run_bisect(tmp_path, repo, cache_dir, "t0", "t8", "--ends", "lazy", name="lazy")
    assert first_proc.returncode == 0, first_proc.stderr
    assert lazy_proc.returncode == 0, lazy_proc.stderr
    assert first["first_new"] == lazy["first_new"] == shas[BUG]
    assert first["launches"] == 2 + steps and lazy["launches"] == steps
    assert "old end" not in roles(lazy) and "new end" not in roles(lazy)
    assert lazy["ends"]["mode"] == "lazy" and first["ends"]["mode"] == "first"
    md = (out / "bisect.md").read_text()
    assert "Ends: **lazy**" in md and "not tested; the answer does not rest on it" in md
    assert "Ends: tested first (`bisect.ends: first`)" in (first_out / "bisect.md").read_text()
    # A bisect started ends-first resumes ends-first: asking for lazy on resume is a usage error.
    resumed = abbisect("bisect", "--resume", str(first_out), "--ends", "lazy", cwd=tmp_path, cache=cache_dir)
    assert resumed.returncode == 2 and "--ends 'lazy' differs from the interrupted bisect's 'first'" in resumed.stderr


def test_lazy_tests_the_bad_end_when_it_is_the_culprit(tmp_path, line_repo, cache_dir):
    repo, shas = line_repo
    steps = search_steps(repo, shas, 0, BUG)
    proc, lazy, out = run_bisect(tmp_path, repo, cache_dir, "t0", f"t{BUG}", "--ends", "lazy")
    assert proc.returncode == 0, proc.stderr
    assert lazy["first_new"] == shas[BUG]
    assert lazy["launches"] == steps + 1
    assert roles(lazy)[-1] == "new end" and lazy["steps"][-1]["outcome"] == "bad"
    assert "old end" not in roles(lazy)
    assert "the found commit is the new end itself" in (out / "bisect.md").read_text()


def test_lazy_tests_the_good_end_when_it_is_the_culprits_parent(tmp_path, line_repo, cache_dir):
    repo, shas = line_repo
    steps = search_steps(repo, shas, BUG - 1, 8)
    proc, lazy, _ = run_bisect(tmp_path, repo, cache_dir, f"t{BUG - 1}", "t8", "--ends", "lazy")
    assert proc.returncode == 0, proc.stderr
    assert lazy["first_new"] == shas[BUG] and lazy["launches"] == steps + 1
    assert roles(lazy)[-1] == "old end" and lazy["steps"][-1]["outcome"] == "good"


def test_lazy_mislabelled_good_end_ends_as_first_mode(tmp_path, line_repo, cache_dir):
    """--good t6 is actually bad (so is t8): both modes stop with no change, exit 3."""
    repo, _ = line_repo
    first_proc, first, _ = run_bisect(tmp_path, repo, cache_dir, "t6", "t8", name="first")
    lazy_proc, lazy, _ = run_bisect(tmp_path, repo, cache_dir, "t6", "t8", "--ends", "lazy", name="lazy")
    assert first_proc.returncode == lazy_proc.returncode == 3, (first_proc.stderr, lazy_proc.stderr)
    assert first["mode"] == lazy["mode"] == "no-change" and lazy["first_new"] is None
    assert "old end" in roles(lazy) and "new end" in roles(lazy)
    assert "against its label" in lazy_proc.stderr


def test_lazy_swapped_labels_find_the_regression_as_first_mode(tmp_path, line_repo, cache_dir):
    """--good t8 --bad t0 (both wrong): lazy searches for a fix, meets the contradiction at the answer, tests
    the other end and searches the observed direction, reusing the verdicts it has: same answer, exit 0."""
    repo, shas = line_repo
    first_proc, first, _ = run_bisect(tmp_path, repo, cache_dir, "t8", "t0", name="first")
    lazy_proc, lazy, _ = run_bisect(tmp_path, repo, cache_dir, "t8", "t0", "--ends", "lazy", name="lazy")
    assert first_proc.returncode == lazy_proc.returncode == 0, (first_proc.stderr, lazy_proc.stderr)
    assert first["mode"] == lazy["mode"] == "regression"
    assert first["first_new"] == lazy["first_new"] == shas[BUG]
    # The cost of lazy here: the wrong-way search's commits and both ends; none is launched twice.
    tested = [s["sha"] for s in lazy["steps"]]
    assert len(set(tested)) == len(tested) == lazy["launches"] > first["launches"]


def test_relative_verdict_falls_back_to_ends_first(tmp_path, line_repo, cache_dir):
    repo, shas = line_repo
    proc, res, out = run_bisect(tmp_path, repo, cache_dir, "t0", "t8", "--ends", "lazy",
                                verdict={"bad_if": ["differs_from_good"]})
    assert proc.returncode == 0, proc.stderr
    assert "bisect.ends lazy is not possible here: the verdict compares each commit with the good end" in proc.stderr
    assert res["ends"]["mode"] == "first" and res["ends"]["asked"] == "lazy"
    assert roles(res)[:2] == ["old end", "new end"] and res["first_new"] == shas[BUG]
    # the ends, the good end once more (its noise baseline), the search
    assert res["launches"] == 3 + search_steps(repo, shas, 0, 8)
    assert "fell back: the verdict compares" in (out / "bisect.md").read_text()


def test_dry_run_says_how_the_ends_will_be_treated(tmp_path, line_repo, cache_dir):
    repo, _ = line_repo
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo))
    relative = write_recipe(tmp_path / "rel.yaml", toy_recipe(repo, verdict={"bad_if": ["differs_from_good"]}))

    def plan(path: Path, *args: str) -> str:
        proc = abbisect("bisect", str(path), "--good", "t0", "--bad", "t8", "--dry-run", *args, cwd=tmp_path,
                        cache=cache_dir)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert "both ends are tested first; the direction (regression or fix) is observed" in plan(recipe)
    assert "ends lazy: the search starts from --good/--bad at once" in plan(recipe, "--ends", "lazy")
    four = plan(recipe, "--ends", "lazy", "--slots", "4")
    assert "lazy is not possible here (4 slots test the two ends at once anyway)" in four
    assert "4 slots: the ends at once, with 2 commit(s) splitting the range beside them" in four
    rel = plan(relative, "--ends", "lazy", "--slots", "4")
    assert "not possible here (the verdict compares each commit with the good end" in rel
    assert "4 slots: the ends at once" in rel and "splitting the range" not in rel
