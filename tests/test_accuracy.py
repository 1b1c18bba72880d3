"""An accuracy verdict through the CLI on real toy-engine processes: an A/B of a commit that silently
gets 30 of the 340 sums of the built-in set wrong, an A-vs-A, a bisect that names it, more items asked while
not sure, and what a dry run and check say of an eval recipe."""

from __future__ import annotations

import json

import pytest
from conftest import abbisect, toy_recipe, write_recipe

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def drift(planted):
    return planted(8, {5: "arith_drift"})


def _recipe(tmp_path, repo, **section):
    recipe = toy_recipe(repo, prompts=["What is two plus two?"], eval={"set": "builtin:arith_facts", **section})
    return write_recipe(tmp_path / "acc.yaml", recipe)


def _run(tmp_path, cache_dir, path, a, b, name="ab"):
    out = tmp_path / name
    proc = abbisect("run", str(path), "--a", a, "--b", b, "-o", str(out), "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["data"], out


def test_an_accuracy_ab_finds_the_silent_drop_and_lists_the_flipped_items(tmp_path, cache_dir, drift):
    repo, shas = drift
    data, out = _run(tmp_path, cache_dir, _recipe(tmp_path, repo), shas[0], shas[-1])
    s = data["assessment"]
    assert s["kind"] == "accuracy" and (s["a"]["outcome"], s["b"]["outcome"]) == ("good", "bad"), s
    cmp = s["comparison"]["comparison"]
    assert (cmp["n"], cmp["lost"], cmp["gained"], cmp["call"]) == (400, 30, 0, "different"), cmp
    assert cmp["p_mcnemar"] < 1e-6 and cmp["ci"][1] < 0
    # per-item correctness in results.json, paired by id
    items = {i["id"]: i["correct"] for i in data["b"]["extras"]["eval"]["items"]}
    assert len(items) == 400 and sum(v is False for v in items.values()) == 30
    assert set(s["comparison"]["flips"]["lost"]) == {k for k, v in items.items() if v is False}
    md = (out / "report.md").read_text()
    assert "### Accuracy" in md and "B is 7.5 points lower than A" in md and "- power: 400 items" in md
    outputs = (out / "outputs.md").read_text()
    assert "Lost: right on A, wrong on B (30)" in outputs and "Failed requests, not scored (0)" in outputs


def test_an_accuracy_a_vs_a_is_same_and_counts_its_flips(tmp_path, cache_dir, drift):
    repo, shas = drift
    data, out = _run(tmp_path, cache_dir, _recipe(tmp_path, repo), shas[0], shas[0])
    assert data["same_commit"]
    cmp = data["assessment"]["comparison"]["comparison"]
    assert cmp["call"] == "same" and cmp["lost"] + cmp["gained"] == 0, cmp
    assert not data["b"]["cached"]  # B asked the same items in a launch of its own
    assert "A-vs-A: 0 of 400 items flipped between two runs of the same commit" in (out / "report.md").read_text()


def test_an_accuracy_bisect_names_the_commit_and_confirms_it(tmp_path, cache_dir, drift):
    repo, shas = drift
    out = tmp_path / "bis"
    proc = abbisect("bisect", str(_recipe(tmp_path, repo)), "--good", shas[0], "--bad", shas[-1], "-o", str(out),
                    "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)["data"]
    assert data["first_new"] == shas[5]
    assert data["confirmation"]["level"] == "confirmed", data["confirmation"]
    md = (out / "bisect.md").read_text()
    assert "### Accuracy: parent (A) vs the found commit (B)" in md and "Accuracy of the tested commits" in md


def test_not_sure_asks_the_next_items_of_the_sample(tmp_path, cache_dir, drift):
    """40 items at a time (no power plan): 30 wrong sums in 400 are about 3 in 40, not enough to tell; each
    further launch asks the next 40 of the seeded sample, never the same ones again."""
    repo, shas = drift
    path = _recipe(tmp_path, repo, n=40, power=0, min_effect=0.05)
    data, _ = _run(tmp_path, cache_dir, path, shas[0], shas[-1])
    s = data["assessment"]
    assert s["launches"] >= 2, s
    for side in ("a", "b"):
        parts = [t["extras"]["eval"]["items"] for t in (data[side], *data[f"more_{side}"])]
        assert all(len(p) == 40 for p in parts)
        ids = [i["id"] for p in parts for i in p]
        assert len(ids) == len(set(ids))  # no item asked twice
    assert [i["id"] for i in data["a"]["extras"]["eval"]["items"]] == \
        [i["id"] for i in data["b"]["extras"]["eval"]["items"]]  # the same part on both sides


def test_a_dry_run_shows_the_power_plan_and_check_refuses_an_accuracy_recipe(tmp_path, cache_dir, drift):
    repo, shas = drift
    path = _recipe(tmp_path, repo)
    dry = abbisect("run", str(path), "--a", shas[0], "--b", shas[-1], "--dry-run", cwd=tmp_path, cache=cache_dir)
    assert dry.returncode == 0, dry.stderr
    assert "eval: builtin:arith_facts" in dry.stdout and "400 items find a drop of 3 points" in dry.stdout
    check = abbisect("check", str(path), shas[0], cwd=tmp_path, cache=cache_dir)
    assert check.returncode == 128 and "an accuracy verdict compares two" in check.stderr, check.stderr
