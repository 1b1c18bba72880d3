"""The numerics verdict end to end on the toy engine: its planted numerics change (`logit_shift`, each lm_head row's
scale kept with a 2-bit mantissa) moves every text's log-probabilities yet none of the built-in eval set's answers;
the A/B calls it different from the eight default texts while the accuracy verdict on the same launches cannot;
its A-vs-A is same; a bisect names it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import abbisect, toy_recipe, write_recipe

from abbisect.assess.accuracy import Accuracy
from abbisect.infra.serial import load
from abbisect.recipe import Recipe
from abbisect.stats.decide import Call
from abbisect.trial.spec import TrialResult

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def shifted(planted):
    return planted(10, {6: "logit_shift"})


def _recipe(tmp_path, repo, **extra):
    return write_recipe(tmp_path / "num.yaml", toy_recipe(repo, numerics={}, **extra))


def _run(tmp_path, cache_dir, path, a, b, name="ab"):
    out = tmp_path / name
    proc = abbisect("run", str(path), "--a", a, "--b", b, "-o", str(out), "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["data"], out


def test_the_numerics_ab_calls_the_shift_that_the_accuracy_verdict_cannot(tmp_path, cache_dir, shifted):
    repo, shas = shifted
    path = _recipe(tmp_path, repo, eval={"set": "builtin:arith_facts"})
    data, out = _run(tmp_path, cache_dir, path, shas[0], shas[-1])
    s = data["assessment"]
    assert s["kind"] == "numerics" and (s["a"]["outcome"], s["b"]["outcome"]) == ("good", "bad"), s
    cmp = s["comparison"]["comparison"]
    assert cmp["call"] == "different" and cmp["texts"] == 8 and cmp["floor"] == 0.0, cmp
    assert cmp["lo"] > cmp["least"] and cmp["far"] == 0, cmp  # surely above what matters; no pick beyond a tie
    assert s["launches"] == 1  # a deterministic engine: one launch a side
    # the same launches' eval answers: not one of the 400 items flips, so accuracy cannot tell the sides apart
    recipe = Recipe.model_validate(data["recipe"])
    a, b = load(TrialResult, data["a"]), load(TrialResult, data["b"])
    acc = Accuracy(recipe).compare([a], [b])
    assert acc.numbers is not None and acc.flips is not None, acc
    assert acc.numbers["n"] == 400 and acc.flips.lost == acc.flips.gained == (), acc
    assert acc.call is not Call.DIFFERENT
    md = (out / "report.md").read_text()
    assert "### Numerics: token log-probabilities" in md and "largest divergence" in md
    assert "A top:" in md and "B top:" in md
    svg = (out / "numerics.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<polyline") >= 8


def test_the_plan_names_the_numerics_stage(tmp_path, cache_dir, shifted):
    repo, shas = shifted
    proc = abbisect("run", str(_recipe(tmp_path, repo)), "--a", shas[0], "--b", shas[-1], "--dry-run", cwd=tmp_path,
                    cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    assert "numerics: 8 text(s) scored teacher-forced (completions, echo, top 5), one at a time and 8 at once" \
        in proc.stdout


def test_the_numerics_a_vs_a_is_same(tmp_path, cache_dir, shifted):
    repo, shas = shifted
    data, out = _run(tmp_path, cache_dir, _recipe(tmp_path, repo), shas[-1], shas[-1])
    s = data["assessment"]
    cmp = s["comparison"]["comparison"]
    assert cmp["call"] == "same" and cmp["effect"] == 0.0 and cmp["parted"] == 0, cmp
    assert (s["a"]["outcome"], s["b"]["outcome"]) == ("good", "good")
    assert "this is the A-vs-A" in (out / "report.md").read_text()


def _bisect(tmp_path, cache_dir, recipe, shas) -> tuple[dict, Path]:
    """A bisect of the whole history with `recipe`: its JSON data and its result folder."""
    out = tmp_path / "bisect"
    proc = abbisect("bisect", str(recipe), "--good", shas[0], "--bad", shas[-1], "-o", str(out), "--json",
                    cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["data"], out


def test_a_numerics_bisect_names_the_shift(tmp_path, cache_dir, shifted):
    repo, shas = shifted
    data, out = _bisect(tmp_path, cache_dir, _recipe(tmp_path, repo), shas)
    assert data["first_new"] == shas[6], data.get("outcome")
    assert data["confirmation"]["level"] == "confirmed", data["confirmation"]
    md = (out / "bisect.md").read_text()
    assert shas[6] in md and "nats/token" in md and "### Numerics: parent (A) vs the found commit (B)" in md
    assert (out / "numerics.svg").read_text().startswith("<svg")


def _noisy(tmp_path, repo):
    return write_recipe(tmp_path / "noisy.yaml", toy_recipe(
        repo, env={"TOYENGINE_LOGPROB_NOISE": "0.004"}, numerics={"deterministic": False, "max_launches": 3}))


def test_a_noisy_engines_floor_is_measured_and_its_a_vs_a_is_same_while_the_shift_is_different(
        tmp_path, cache_dir, shifted):
    """Log-probabilities that wobble on every request (TOYENGINE_LOGPROB_NOISE, σ 0.004 nats): each launch's two
    passes (one at a time, batched) measure the floor; the A-vs-A's difference is that floor, same; the shift
    stands above it, different."""
    repo, shas = shifted
    path = _noisy(tmp_path, repo)
    data, _ = _run(tmp_path, cache_dir, path, shas[-1], shas[-1], "aa")
    cmp = data["assessment"]["comparison"]["comparison"]
    assert cmp["call"] == "same" and 0.002 < cmp["floor"] < 0.008, cmp
    assert abs(cmp["effect"] - cmp["floor"]) < 0.002  # the A-vs-A's difference is the floor
    data, _ = _run(tmp_path, cache_dir, path, shas[0], shas[-1], "ab")
    cmp = data["assessment"]["comparison"]["comparison"]
    assert cmp["call"] == "different" and cmp["lo"] > 0.01 and cmp["floor"] > 0.002, cmp


def test_a_noisy_engines_numerics_bisect_names_the_shift_through_the_posterior_search(tmp_path, cache_dir, shifted):
    repo, shas = shifted
    data, out = _bisect(tmp_path, cache_dir, _noisy(tmp_path, repo), shas)
    assert data["first_new"] == shas[6] and data["confirmation"]["level"] == "confirmed", data["confirmation"]
    assert (out / "posterior.svg").is_file()
