"""The real-engine tier, SGLang: the sglang 0.5.23 wheel serving SmolLM2-135M on CPU, driven through the CLI.

Builds builtin:sglang-0.5.23 (the sglang package as shipped in the wheel, under python/, then 17 commits:
row-scaled lm_head support, a [Quant] commit after which the lm_head's weight_scale is no longer registered
for the unquantized row-scaled checkpoint, the v0.5.24 release, later the fix), converts the model, installs
each commit with the `overlay` strategy (a 9.7 GB venv, hard-linked from uv's cache) and launches real servers
with the built-in's CPU scaffolding (abbisect/builtin/sglang_cpu). Each start takes 60-80 s on 2 idle cores,
so the tier keeps them few: the A/B launches both ends, the bisect reuses those two trials from the shared
cache and launches only commits between, narrow replays the bad end's launch and starts one switch. Set
ABBISECT_TEST_CACHE to keep the cache (model, venvs, trial results) between runs.
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

from abbisect.builtin.realengine import fetch_wheel, shipped_source
from abbisect.builtin.realsglang import SUBDIR, WHEEL, ensure_sglang_repo

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sglang-cpu")]  # one worker: conftest.py

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "sglang-cpu-smollm2.yaml"
CLI = [sys.executable, "-c", "from abbisect.cli import main; main()"]
SIGNATURE = "Parameter lm_head.weight_scale not found in params_dict"


@pytest.fixture(scope="module")
def cache(real_engine_cache: Path) -> Path:
    return real_engine_cache


@pytest.fixture(scope="module")
def repo(cache: Path) -> Path:
    return ensure_sglang_repo(cache)


def _abbisect(cache: Path, *args: str, timeout: float = 3600) -> tuple[int, dict]:
    out = subprocess.run([*CLI, *args, "--cache-dir", str(cache), "--json"], capture_output=True, text=True,
                         timeout=timeout, check=False)
    assert out.stdout.strip(), out.stderr[-3000:]
    return out.returncode, json.loads(out.stdout.strip().splitlines()[-1])["data"]


def test_history_starts_from_the_wheel_and_has_one_break_and_one_fix(repo: Path, cache: Path) -> None:
    wheel = fetch_wheel(cache, WHEEL)
    shipped = set(shipped_source(wheel, "sglang"))
    with zipfile.ZipFile(wheel) as zf:
        compiled = [n for n in zf.namelist() if n.startswith("sglang/") and n.endswith(".so")]
        lmhead = zf.read("sglang/srt/layers/vocab_parallel_embedding.py").decode()
    first = git_out(repo, "rev-list", "--max-parents=0", "main")
    tracked = set(git_out(repo, "ls-tree", "-r", "--name-only", first).splitlines())
    # as in SGLang's repository, under python/; the compiled extensions are left to overlay (from the wheel)
    assert tracked - {"CHANGES.md"} == {f"{SUBDIR}/{n}" for n in shipped}
    assert compiled and not any(f"{SUBDIR}/{n}" in tracked for n in compiled)
    path = f"{SUBDIR}/sglang/srt/layers/vocab_parallel_embedding.py"
    assert git_out(repo, "show", f"{first}:{path}") + "\n" == lmhead
    brk = sha_of_subject(repo, "[Quant] ParallelLMHead")
    fix = sha_of_subject(repo, "[Bugfix] Register lm_head.weight_scale")
    diff = git_out(repo, "show", "--format=", brk)
    assert "quant_config is not None" in diff and diff.count("\n+") == 2  # one line: a small, plausible edit
    assert git_out(repo, "merge-base", "--is-ancestor", brk, "v0.5.24") == ""  # the release has the bug
    assert git_out(repo, "merge-base", "--is-ancestor", "v0.5.24", fix) == ""  # the fix came after it
    assert len(git_out(repo, "log", "--format=%s", "main").splitlines()) >= 15


def test_ab_release_loops_with_the_signature_and_main_is_ok(cache: Path, tmp_path: Path) -> None:
    rc, res = _abbisect(cache, "run", str(RECIPE), "-o", str(tmp_path / "ab"))
    a, b = res["a"], res["b"]
    assert rc == 0, res  # ran (the verdicts are the data's)
    assert a["verdict"]["outcome"] == "bad" and a["verdict"]["status"] == "degenerate", a["verdict"]
    assert b["verdict"]["outcome"] == "good", b["verdict"]
    assert sum(x["label"] == "degenerate" for x in a["analyses"]) >= 3
    # the seed's line, from the real Llama loader, in the bad side's load log only
    logs = {side: next((tmp_path / "ab").glob(f"{side}-*/server.log")).read_text() for side in "ab"}
    assert SIGNATURE in logs["a"] and SIGNATURE not in logs["b"]
    assert any("weight_scale" in str(s) for s in a["signatures"]), a["signatures"]
    assert "paris" in b["outputs"][0]["text"].lower()
    assert res["same_launch"]
    # the CPU scaffolding served both sides, and the report says so by name
    for side in (a, b):
        assert side["launch"]["env"]["SGLANG_USE_CPU_ENGINE"] == "1"
        assert side["launch"]["env"]["PYTHONPATH"] == "<abbisect>/builtin/sglang_cpu"
        assert "stand-in" in side["launch"]["facts"]["sgl_kernel"]
        assert side["launch"]["facts"]["server_args"]["device"] == "cpu"
    report = (tmp_path / "ab" / "report.md").read_text()
    assert "degenerate" in report and "lm_head.weight_scale" in report
    hits, _read = machine_traces([tmp_path / "ab"], [str(cache), str(tmp_path), os.path.expanduser("~") + "/",
                                                     tempfile.gettempdir() + "/", str(REPO_ROOT), sys.prefix])
    assert hits == [], "\n".join(hits[:40])
    print("A/B timings:", json.dumps({"a": a["timings"], "b": b["timings"]}))


def test_bisect_from_the_release_names_the_fix(repo: Path, cache: Path, tmp_path: Path) -> None:
    """The ends are the A/B's sides: their trials come from the shared cache, only commits between launch."""
    rc, res = _abbisect(cache, "bisect", str(RECIPE), "--good", "v0.5.24", "--bad", "main",
                        "-o", str(tmp_path / "bisect"))
    assert rc == 0 and res["mode"] == "fix", res["message"]
    assert res["first_new"] == sha_of_subject(repo, "[Bugfix] Register lm_head.weight_scale"), res["message"]
    between = len(git_out(repo, "rev-list", "--first-parent", "v0.5.24..main").splitlines()) - 1
    assert res["launches"] <= between
    print("bisect (fix):", res["wall_s"], "s,", res["launches"], "launches,", res["builds"], "builds")


def test_narrow_at_the_release_reads_the_real_help(cache: Path, tmp_path: Path) -> None:
    """narrow tries a switch only when the commit's own `sglang serve --help` declares it:
    --disable-radix-cache is declared (and does not work around a dropped scale), --disable-flashinfer (gone
    since 2024) is not."""
    doc = yaml.safe_load(RECIPE.read_text())
    doc["narrow"] = {"catalogue": False, "switches": [
        {"id": "sglang.radix-off", "engine": "sglang", "feature": "the radix (prefix) cache off",
         "flag": ["--disable-radix-cache"], "source": "python/sglang/srt/server_args.py"},
        {"id": "sglang.flashinfer-off-2024", "engine": "sglang",
         "feature": "FlashInfer off, the 2024 spelling",
         "flag": ["--disable-flashinfer"], "source": "python/sglang/srt/server_args.py"}]}
    recipe = tmp_path / "narrow.yaml"
    recipe.write_text(yaml.safe_dump(doc, sort_keys=False))
    rc, res = _abbisect(cache, "narrow", str(recipe), "--ref", "v0.5.24", "-o", str(tmp_path / "narrow"))
    assert rc == 1, res  # none-passed: a radix cache off does not bring a dropped scale back
    assert res["not_accepted"] == ["sglang.flashinfer-off-2024"]  # never launched: the real --help lacks it
    tried = {p["switch"]: p["outcome"] for p in res["probes"] if p["kind"] == "switch"}
    assert tried == {"sglang.radix-off": "bad"} and res["workarounds"] == []
    # the failing launch itself is the A/B's bad side (narrow is not in the trial's key): one engine start at most
    assert res["launches"] <= 1 and res["probes"][0]["cached"], res["probes"]
    md = (tmp_path / "narrow" / "narrow.md").read_text()
    assert "`sglang.radix-off`" in md and "not declared by this commit's `sglang serve --help`" in md
    print("narrow:", res["launches"], "launch(es)")
