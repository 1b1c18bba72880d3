"""`bisect.follow`: an engine answer that bumps a pin, followed into the dependency's versions and commits, through
the CLI on built-in histories: a toy engine pinning `toydep` (wheels 1.0.0 … 1.4.0 in a --find-links folder, 1.2.0
the first that drops the scales) and toydep's own tagged history (the culprit between v1.1 and v1.2)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import abbisect, machine_traces, toy_recipe, write_recipe

from abbisect.bisect.bisection import Mode
from abbisect.bisect.follow import _blame, _metadata_url, _tag, source_url
from abbisect.builtin import toydep

VERSIONS = ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0"]
STEPS = ["parent-new-pins", "answer-old-pins", "versions", "commits"]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    """toydep 1.0.0 … 1.4.0; 1.2.0 the first broken; from 1.3.0 on it has row_scales_fused."""
    return toydep.publish(tmp_path_factory.mktemp("wheels"), VERSIONS, first_broken="1.2.0", fused_from="1.3.0")


@pytest.fixture(scope="module")
def dep(tmp_path_factory) -> tuple[Path, list[str]]:
    repo = tmp_path_factory.mktemp("toydep") / "toydep"
    return repo, toydep.tagged_history(repo)


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    made: dict[tuple, tuple[Path, list[str]]] = {}

    def make(bump: str, new: str) -> tuple[Path, list[str]]:
        if (bump, new) not in made:
            repo = tmp_path_factory.mktemp(bump) / "engine"
            made[bump, new] = repo, toydep.pinned_engine(repo, bump, "1.0.0", new)
        return made[bump, new]

    return make


def recipe(tmp: Path, engine: Path, wheels: Path, dep_repo: Path | None = None) -> Path:
    bisect: dict = {}
    if dep_repo is not None:
        bisect["dependencies"] = {"toydep": {"repo": str(dep_repo)}}
    return write_recipe(tmp / "r.yaml", toy_recipe(engine, install={"strategy": "editable", "find_links": [str(wheels)]},
                                                   bisect=bisect))


def bisect(rec: Path, good: str, out: Path, cache: Path, *more: str) -> dict:
    proc = abbisect("bisect", str(rec), "--good", good, "--bad", "main", "-o", str(out), "--json", *more,
                    cwd=out.parent, cache=cache)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["data"]


@pytest.mark.e2e
def test_a_pin_bump_is_followed_to_the_version_and_the_dependency_commit(tmp_path, engines, wheels, dep, cache_dir):
    engine, shas = engines("pin", "1.4.0")
    dep_repo, dep_shas = dep
    out = tmp_path / "out"
    res = bisect(recipe(tmp_path, engine, wheels, dep_repo), shas[0], out, cache_dir)
    x = shas[2]
    assert res["first_new"] == x and res["mode"] == "regression"
    pins = res["pins"][x]
    assert [(c["package"], c["old"], c["new"]) for c in pins["changes"]] == [("toydep", "==1.0.0", "==1.4.0")]
    assert pins["own"] == [] and pins["files"] == ["pyproject.toml"]
    f = res["follow"]
    assert (f["package"], f["old"], f["new"], f["engine"]) == ("toydep", "1.0.0", "1.4.0", x)
    assert f["blame"] == "pins", f["said"]
    assert [link["step"] for link in f["links"]] == STEPS
    parent, answer, versions, commits = f["links"]
    assert parent["found"] == "1.4.0" and answer["found"] == "1.4.0"  # the parent breaks with 1.4.0; x runs 1.0.0
    assert (f["version"], f["version_parent"]) == ("1.2.0", "1.1.0")
    assert versions["found"] == "1.2.0" and "engine fixed at " + x in versions["walked"]
    assert (commits["good"], commits["bad"]) == ("v1.1", "v1.2")
    assert f["commit"] == dep_shas[toydep.TAGGED_CULPRIT] == commits["found"]
    assert f["commit_subject"] == "Copy scales on a faster path" and f["stopped"] == ""
    md = (out / "bisect.md").read_text()
    assert "It bumps toydep 1.0.0 → 1.4.0, and touches no file of its own." in md
    assert (f"Chain: engine `{x[:10]}` → `toydep 1.2.0` → toydep `{dep_shas[3][:10]}` "
            "(Copy scales on a faster path).") in md
    assert "The pin is to blame: toydep 1.0.0 → 1.4.0 alone breaks it on the parent." in md
    for link in f["links"]:  # each step is a bisect of its own, with its own report and state
        assert (out / link["folder"] / "bisect.md").is_file() and (out / link["folder"] / "state.json").is_file()
    # every file of the chain's folders but state.json is shareable: no folder of this machine in it
    hits, read = machine_traces([out], [str(cache_dir), str(tmp_path), str(dep_repo.parent), str(wheels)])
    assert not hits and {".md", ".json"} <= read, hits
    step = json.loads((out / "follow" / "3-versions" / "bisect.json").read_text())
    assert step["first_new"] == "1.2.0" and step["recipe"]["bisect"]["over"]["package"] == "toydep"
    # bisect.follow: off stops at the engine commit (its pins still said)
    off = bisect(recipe(tmp_path, engine, wheels, dep_repo), shas[0], tmp_path / "off", cache_dir,
                 "--follow", "off")
    assert off["first_new"] == x and off["follow"] is None and off["pins"][x]["changes"]


@pytest.mark.e2e
def test_a_statistical_verdict_carries_over_to_every_chained_step(tmp_path, engines, wheels, dep, cache_dir):
    engine, shas = engines("pin", "1.4.0")
    dep_repo, dep_shas = dep
    rec = recipe(tmp_path, engine, wheels, dep_repo)
    data = yaml.safe_load(rec.read_text())
    data["repeats"] = {"passes": 3}  # a failure rate over passes: the posterior search, in every step too
    out = tmp_path / "out"
    res = bisect(write_recipe(rec, data), shas[0], out, cache_dir)
    assert res["first_new"] == shas[2] and res["posterior"]
    f = res["follow"]
    assert (f["blame"], f["version"], f["commit"]) == ("pins", "1.2.0", dep_shas[toydep.TAGGED_CULPRIT])
    for link in f["links"]:
        step = json.loads((out / link["folder"] / "bisect.json").read_text())
        assert step["posterior"] and step["recipe"]["repeats"]["passes"] == 3, link["step"]


@pytest.mark.e2e
def test_a_bump_whose_code_is_to_blame_is_named_as_the_code(tmp_path, engines, wheels, cache_dir):
    engine, shas = engines("pin_and_code", "1.1.0")  # 1.1.0 is a good version: the commit's code breaks it
    out = tmp_path / "out"
    res = bisect(recipe(tmp_path, engine, wheels), shas[0], out, cache_dir)
    assert res["first_new"] == shas[2]
    assert res["pins"][shas[2]]["own"] == ["toyengine/loader.py"]
    f = res["follow"]
    assert f["blame"] == "code", f["said"]
    assert [link["step"] for link in f["links"]] == STEPS[:2] and f["version"] is None
    assert f["links"][0]["mode"] == "no-change" and f["links"][1]["mode"] == "no-change"
    md = (out / "bisect.md").read_text()
    assert "It bumps toydep 1.0.0 → 1.1.0, and touches 1 file of its own." in md
    assert "The code is to blame: the answer breaks it with toydep==1.0.0 too" in md
    assert "The chain stops here: the pin alone does not account for the change" in md


@pytest.mark.e2e
def test_a_commit_that_cannot_run_the_old_pin_is_said_so(tmp_path, engines, wheels, cache_dir):
    engine, shas = engines("pin_needed", "1.4.0")  # the commit imports what only toydep >= 1.3 has
    out = tmp_path / "out"
    res = bisect(recipe(tmp_path, engine, wheels), shas[0], out, cache_dir)
    f = res["follow"]
    assert res["first_new"] == shas[2] and f["blame"] == "pins", f["said"]
    answer = f["links"][1]
    assert "needs the new pin" in answer["said"] and "untestable with the old pin" in answer["said"]
    assert "row_scales_fused" in answer["said"]
    # the versions are walked on the parent, which runs both pins; no repository is known: the chain stops there
    assert f["version"] == "1.2.0" and f"engine fixed at {shas[1]}" in f["links"][2]["walked"]
    assert f["links"][-1]["step"] == "versions" and "no repository known for toydep" in f["stopped"]
    md = (out / "bisect.md").read_text()
    assert "untestable with the old pin" in md and "bisect.dependencies.toydep.repo" in md


def _interrupted(cmd: list[str], cwd: Path, cache: Path, out: Path, step: int) -> str:
    """Run the bisect; SIGINT once chained step `step` has recorded a trial in its state.json."""
    import os

    proc = subprocess.Popen(cmd, cwd=cwd, env={**os.environ, "ABBISECT_CACHE_DIR": str(cache)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 500
    while proc.poll() is None and time.monotonic() < deadline:
        states = list((out / "follow").glob(f"{step}-*/state.json"))
        if states and json.loads(states[0].read_text() or "{}").get("steps"):
            proc.send_signal(signal.SIGINT)
            break
        time.sleep(0.05)
    proc.wait(timeout=120)
    reader.join(timeout=30)
    assert proc.returncode != 0, "".join(lines)
    return "".join(lines)


@pytest.mark.e2e
@pytest.mark.parametrize("step", [1, 3])
def test_each_chained_step_resumes_after_ctrl_c(tmp_path, engines, wheels, dep, cache_dir, step):
    """Ctrl-C in a chained step, then --resume: the steps it finished are replayed, the one it was in goes on from
    what it recorded, the later ones run. Two points stand for the four: the first step (nothing before it) and the
    third (two finished steps replayed, one after it to run); every step's state is written and read by the same
    code, so the second and the fourth add no path."""
    engine, shas = engines("pin", "1.4.0")
    dep_repo, dep_shas = dep
    rec = recipe(tmp_path, engine, wheels, dep_repo)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "abbisect", "bisect", str(rec), "--good", shas[0], "--bad", "main", "--no-cache",
           "-o", str(out)]
    err = _interrupted(cmd, tmp_path, cache_dir, out, step)
    assert f"resume with: abbisect bisect --resume {out}" in err
    recorded = {p.parent.name: len(json.loads(p.read_text())["steps"]) for p in (out / "follow").glob("*/state.json")}
    proc = abbisect("bisect", "--resume", str(out), "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    f = res["follow"]
    assert f["version"] == "1.2.0" and f["commit"] == dep_shas[toydep.TAGGED_CULPRIT]
    assert all(s["replayed"] for s in res["steps"])  # the engine's bisect is replayed, not run again
    links = {link["folder"].split("/")[-1]: link for link in f["links"]}
    for name, n in recorded.items():  # every chained step goes on from what it recorded
        assert links[name]["replayed"] >= n > 0, (name, links[name])
    assert links[f"{step}-{STEPS[step - 1]}"]["replayed"] < links[f"{step}-{STEPS[step - 1]}"]["tested"] or step == 4


def test_which_part_is_to_blame_reads_both_probes():
    regression = Mode.REGRESSION
    assert _blame(True, False, "", "p", "1", "2", regression)[0] == "pins"
    assert _blame(False, True, "", "p", "1", "2", regression)[0] == "code"
    assert _blame(True, True, "", "p", "1", "2", regression)[0] == "both"
    assert _blame(False, False, "", "p", "1", "2", regression)[0] == "together"
    pins, said = _blame(True, None, "it needs the new pin", "p", "1", "2", Mode.FIX)
    assert pins == "pins" and "fixes it on the parent (it needs the new pin)" in said
    assert _blame(False, None, "x", "p", "1", "2", regression)[0] == "code"
    assert _blame(None, None, "", "p", "1", "2", regression)[0] == "unknown"


def test_the_dependency_repository_and_tags_are_found(tmp_path, dep):
    folder = toydep.publish(tmp_path / "w", ["1.0.0", "1.1.0"], None, source="https://github.com/toy/toydep")
    assert source_url("toydep", "1.1.0", ["--find-links", str(folder)]) == "https://github.com/toy/toydep"
    assert source_url("other", "1.1.0", ["--find-links", str(folder)]) is None
    plain = toydep.write_wheel(tmp_path / "plain", "1.0.0", broken=False)
    assert _metadata_url(plain) is None
    repo, _ = dep
    assert _tag(repo, "1.1.0") == "v1.1" and _tag(repo, "1.2") == "v1.2" and _tag(repo, "9.0") is None


@pytest.mark.e2e
def test_the_seed_002_recipe_dry_runs_with_its_follow_plan(tmp_path):
    """recipes/sglang-deepgemm-follow.yaml on a local SGLang-shaped history whose commit bumps sgl-deep-gemm."""
    from conftest import REPO_ROOT
    from test_env_upstream import _history

    pyproject = ('[project]\nname = "sglang"\nversion = "0.5.9"\n'
                 'dependencies = ["requests>=2", "sgl-deep-gemm=={}", "torch==2.9.1"]\n')
    _history(tmp_path / "sglang", [{"python/pyproject.toml": pyproject.format("0.1.4")},
                                   {"python/pyproject.toml": pyproject.format("0.2.5")},
                                   {"python/sglang/x.py": "x = 1\n"}], tags={0: "v0.5.9"})
    data = yaml.safe_load((REPO_ROOT / "recipes" / "sglang-deepgemm-follow.yaml").read_text())
    assert data["bisect"]["follow"] == "auto" and "sgl-deep-gemm" in data["bisect"]["dependencies"]
    data["engine"]["repo"] = str(tmp_path / "sglang")
    rec = write_recipe(tmp_path / "r.yaml", data)
    proc = abbisect("bisect", str(rec), "--bad", "v0.5.9", "--good", "main", "--dry-run", cwd=tmp_path,
                    cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "bisect.follow: auto" in out
    assert "from v0.5.9 to main the pins change: bumps sgl-deep-gemm 0.1.4 → 0.2.5" in out
    assert ("sgl-deep-gemm: commits of https://github.com/sgl-project/DeepGEMM, each installed with: git submodule "
            "update --init --recursive; {uv} pip install --python {python} --no-build-isolation --no-deps . "
            "(env DG_FORCE_BUILD=1)") in out
    assert not (tmp_path / "results").exists()
    off = abbisect("bisect", str(rec), "--bad", "v0.5.9", "--good", "main", "--dry-run", "--follow", "off",
                   cwd=tmp_path, cache=tmp_path / "cache")
    assert off.returncode == 0 and "bisect.follow: off" in off.stdout
