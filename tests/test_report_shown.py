"""What a report shows is what a user may copy and grep: the renderers fed results that hold this
machine's paths and the recipe's secrets, with no server started. Paths are replaced and secrets masked
before a text is cut or escaped, no invisible character is added, a long cell is shortened with its full
value below the table, and a `${VAR}` reference stays a reference in the rerun recipe."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import toy_recipe

from abbisect.ab import compare
from abbisect.builtin import DEFAULT_RECIPE
from abbisect.checkout import Revision
from abbisect.environment.store import EnvResult
from abbisect.infra.redact import Redactor
from abbisect.narrow.deltas import Delta, Launch
from abbisect.narrow.narrowing import NarrowRun, Probe, masked
from abbisect.query.chat import Completion
from abbisect.recipe import load_recipe, parse_recipe
from abbisect.recipe.status import Outcome, Status
from abbisect.report.narrow import narrow_json, render_narrow
from abbisect.report.render import ab_files, model_path, portable_for
from abbisect.score.degeneration import OutputAnalysis
from abbisect.trial.spec import LaunchInfo, Timings, TrialResult, TrialSpec
from abbisect.verdict.rules import Verdict

INVISIBLE = re.compile("[\u200b-\u200d\u2060\ufeff]")
SHA_A, SHA_B = "903fef3ace96402133e626cdf5802395abf85f97", "7b18977842343176fbd1570304fbdfd7f9942bb0"


def _trial(recipe, side: str, sha: str, cache: Path, out: Path, model: str, error: str = "") -> TrialResult:
    venv = cache / "envs" / f"{side}_key" / "venv"
    spec = TrialSpec(recipe, side, "v0.2" if side == "a" else "main", sha, "Release v0.2", str(cache / "repo"),
                     str(cache), str(out / f"{side}-{sha[:10]}"))
    env = EnvResult(True, f"{side}_key", str(venv), str(venv / "bin" / "python"), False, 1.0,
                    str(cache / "envs" / f"{side}_key" / "build.log"), ())
    facts = {"version": "0.32.0", "non_default_args": {
        "model_tag": model, "model": model, "dtype": "float32", "enforce_eager": True,
        "download_dir": str(cache / "hf_hub_cache" / "models--SmolLM2--135M"), "max_model_len": 2048}}
    tail = (f"INFO loading weights from {model}/model-00001-of-00001.safetensors",
            f"ERROR in {cache}/worktrees/0b77bd7def43/{sha}/vllm/engine/arg_utils.py line 7: {error}")
    launch = LaunchInfo(("python", "-m", "vllm.entrypoints.openai.api_server", "--model", model), {}, "crashed",
                        3.0, 1, str(out / f"{side}-{sha[:10]}" / "server.log"), tail, {}, facts)
    looping = "Cement" * 40
    outputs = (Completion("p0", "The capital of France is", looping if side == "a" else "Paris.", "length", 5, 64,
                          0.5),)
    analyses = (OutputAnalysis("degenerate" if side == "a" else "healthy", "loops", ()),)
    status = Status.CRASHED_AT_STARTUP if error else Status.OK
    verdict = Verdict(status, Outcome.BAD if error else Outcome.GOOD,
                      (f"{error} (see {cache}/envs/{side}_key/build.log)",) if error else ())
    return TrialResult(spec, env, launch, outputs, analyses, (None,), (), (7, f"RuntimeError: {error}"), verdict,
                       Timings(build=1.0))


def test_the_default_jobs_report_shows_no_cache_or_home_path_and_no_invisible_character(tmp_path, monkeypatch):
    """The engine's model_tag row (its non-default args) names the prepared model under the cache: the row
    shows `$MODEL`; every other path of the cache or the home folder its placeholder; no zero-width space
    inside a path, a sha or an error."""
    home = tmp_path / "home_of_user"
    cache = home / ".cache" / "abbisect_cache"
    monkeypatch.setenv("HOME", str(home))
    out = tmp_path / "results" / "vllm-cpu-smollm2" / "20261201T000000Z"
    recipe, _ = load_recipe(DEFAULT_RECIPE)
    model = model_path(recipe, cache)
    assert model is not None and model.startswith(str(cache))
    error = f"unsupported_option_in_module_vllm.model_executor.layers.quantization.fp8 at {home}/notes.txt"
    a = _trial(recipe, "a", SHA_A, cache, out, model, error)
    b = _trial(recipe, "b", SHA_B, cache, out, model)
    ab = compare(recipe, a, b, "abbisect run", "2026-12-01T00:00:00Z")
    files = ab_files(ab, recipe, cache, None, DEFAULT_RECIPE, out)
    assert set(files) == {"report.md", "outputs.md"}
    for name, text in files.items():
        for needle in (str(cache), str(home), str(tmp_path), "/root/", "\u200b"):
            assert needle not in text, (name, needle)
        assert not INVISIBLE.search(text), name
    report = files["report.md"]
    assert "| A | 0.32.0 | model\\_tag='$MODEL', model='$MODEL', dtype='float32', enforce\\_eager=True, " in report
    # a run too long for its column (the cache's download folder, as shown) is shortened, and listed in full
    assert report.count("download\\_dir='$ABBISECT\\_CACHE\\_DIR/hf\\_hub…[1] (+1 more; all in server.log) |") == 2
    assert "\n\n- [1] `download_dir='$ABBISECT_CACHE_DIR/hf_hub_cache/models--SmolLM2--135M'`\n" in report
    assert f"ERROR in <checkout of {SHA_A[:10]}>/vllm/engine/arg_utils.py" in report and "~/notes.txt" in report
    assert f"`{SHA_A[:10]}`" in files["outputs.md"] or f"({SHA_A[:10]})" in files["outputs.md"]

DEMO = {"kind": "command", "repo": "builtin:demo"}


def test_a_reference_stays_a_reference_in_the_rerun_recipe(tmp_path):
    recipe = parse_recipe(toy_recipe(Path("demo"), engine=DEMO,
                                     env={"HF_TOKEN": "${HF_TOKEN}", "DB_PASSWORD": "hunter2"}))
    out = tmp_path / "out"
    a = _trial(recipe, "a", SHA_A, tmp_path / "cache", out, "toy-model")
    b = _trial(recipe, "b", SHA_B, tmp_path / "cache", out, "toy-model")
    ab = compare(recipe, a, b, "abbisect run r.yaml", "2026-12-01T00:00:00Z")
    report = ab_files(ab, recipe, tmp_path / "cache", None, None, out)["report.md"]
    recipe_yaml = report[report.index("```yaml"):]
    assert "HF_TOKEN: ${HF_TOKEN}" in recipe_yaml and "DB_PASSWORD: '***'" in recipe_yaml
    assert "hunter2" not in report


PASS_LITERAL = "hf_PASSLITERAL_abcdef123456"
SWITCH_SECRET = "sw_SWITCHSECRET_0123456789"


@pytest.fixture
def narrowed(tmp_path):
    """A narrowing whose passing launch and switch hold secrets, one of them short and under its name."""
    data = toy_recipe(Path("demo"), engine=DEMO, env={"HF_TOKEN": "${HF_TOKEN}", "MODE": "fast"},
                      narrow={"passing": {"env": {"HF_TOKEN": PASS_LITERAL, "SHORT_TOKEN": "short2x", "MODE": "fast"}},
                              "switches": [{"id": "sglang.disable-cuda-graph-and-more", "feature": "graphs",
                                            "env": {"SWITCH_TOKEN": SWITCH_SECRET}}]})
    recipe = parse_recipe(data)
    failing = Launch(("--seed", "0"), dict(recipe.env))
    passing = Launch(("--seed", "0"), {"HF_TOKEN": PASS_LITERAL, "SHORT_TOKEN": "short2x", "MODE": "fast"})
    deltas = [Delta("env", "HF_TOKEN", "${HF_TOKEN}", PASS_LITERAL), Delta("env", "SHORT_TOKEN", None, "short2x")]
    label = ", ".join(d.describe() for d in deltas)
    switch = Launch(("--seed", "0"), {**recipe.env, "SWITCH_TOKEN": SWITCH_SECRET})
    probes = [Probe(0, "failing", "the recipe's launch", failing, Outcome.BAD, "degenerate", "loops", 1.0, False),
              Probe(1, "passing", "narrow.passing", passing, Outcome.GOOD, "ok", "fine", 1.0, False),
              Probe(2, "differences", label, failing, Outcome.BAD, "degenerate", "loops", 1.0, False, deltas=(0, 1)),
              Probe(3, "switch", "sglang.disable-cuda-graph-and-more", switch, Outcome.GOOD, "ok", "fine", 1.0,
                    False, switch="sglang.disable-cuda-graph-and-more", feature="graphs",
                    change=f"+ SWITCH_TOKEN={SWITCH_SECRET}")]
    run = NarrowRun(recipe, tmp_path / "engine", Revision("v2", SHA_B, "release"), failing, passing, deltas, probes,
                    minimal=(0, 1), command="abbisect narrow r.yaml --ref v2")
    return recipe, run, tmp_path


def test_narrow_md_and_json_show_no_secret_of_the_passing_launch_or_a_switch(narrowed):
    recipe, run, tmp_path = narrowed
    red = Redactor.from_recipe(recipe, {"HF_TOKEN": "hf_from_the_environment_1"})
    shown = masked(run, red)
    md = portable_for(recipe, tmp_path / "cache", None, None, tmp_path / "out").render(
        lambda: render_narrow(shown, shown.command))
    data = json.dumps(red.data(narrow_json(shown)))
    for text in (md, data):
        for secret in (PASS_LITERAL, PASS_LITERAL[:20], SWITCH_SECRET, "short2x"):
            assert secret not in text, secret
        assert not INVISIBLE.search(text)
    # the mask replaces the value only: the code span stays closed, the reference stays one
    assert "`env HF_TOKEN=${HF_TOKEN} (instead of HF_TOKEN=***)`" in md
    assert "`− env SHORT_TOKEN=***`" in md and "`+ SWITCH_TOKEN=***`" in md
    assert "`sglang.disable-cuda-graph-and-more`" in md and "| sglang.disable-cuda-graph-and-more |" in md
    json_deltas = json.loads(data)["deltas"]
    assert [(d["key"], d["value"], d["was"]) for d in json_deltas] == [("HF_TOKEN", "${HF_TOKEN}", "***"),
                                                                       ("SHORT_TOKEN", None, "***")]
    assert json.loads(data)["probes"][1]["launch"]["env"] == {"HF_TOKEN": "***", "SHORT_TOKEN": "***",
                                                              "MODE": "fast"}
