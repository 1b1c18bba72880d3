"""What a user copies, greps and shares: every file each demo job leaves in its result folder — the
A/B of recipes/demo.yaml, the performance A/B of recipes/perf-demo.yaml, the bisect of the demo, a narrowing
with switches and delta debugging on the toy engine, a bisect that narrows at its answer — names no folder of
this machine (the cache, the home folder, the temp and work folders, abbisect's own checkout) and holds no
invisible character (a zero-width space inside a sha, a switch id or a path would make a copied id wrong and
a grep miss it). Every file: the reports, the JSON and CSV, the SVG, the server and build logs copied into
each trial's folder; all but a bisect's state.json, this machine's record for `--resume` (docs/usage.md).

The default job (`abbisect run` on the built-in vllm-cpu recipe) is a real vLLM: the same grep runs on its
A/B's folder in tests/test_vllm_cpu_e2e.py (slow tier), and its report's renderer is fed a result whose engine
model_tag lies under the cache in tests/test_report_shown.py.
"""

from __future__ import annotations

import os
import sys
import tempfile

import pytest
from conftest import REPO_ROOT, abbisect, machine_traces, toy_recipe, write_recipe

from abbisect.builtin.history import planted_history

pytestmark = pytest.mark.e2e

# Switch ids longer than the 24 characters after which a zero-width space used to be put into a cell.
SWITCHES = [
    {"id": "command.disable-prefix-caching-everywhere", "feature": "prefix caching off",
     "replaces": ["--enable-prefix-caching"]},
    {"id": "command.attention-backend-naive-fallback", "feature": "attention backend swapped for the naive one",
     "flag": ["--attention-backend", "naive"], "breadth": 1},
    {"id": "command.a-shorter-context-for-every-request", "feature": "a shorter context",
     "flag": ["--max-model-len", "1024"]},
]
FAILING = ["--seed", "0", "--enable-prefix-caching", "--max-model-len", "4096", "--enable-chunked-prefill"]


def test_no_file_of_a_demo_jobs_folder_names_this_machines_folders_or_hides_a_character(tmp_path):
    cache, work = tmp_path / "cache", tmp_path / "work"
    work.mkdir()

    def cli(*args: str, expect: int) -> None:
        proc = abbisect(*args, cwd=work, cache=cache, timeout=600)
        assert proc.returncode == expect, (args, proc.returncode, proc.stderr[-3000:])

    demo, perf = str(REPO_ROOT / "recipes" / "demo.yaml"), str(REPO_ROOT / "recipes" / "perf-demo.yaml")
    cli("run", demo, "-o", str(work / "demo"), expect=0)
    cli("run", perf, "-o", str(work / "perf"), expect=0)
    cli("bisect", demo, "--good", "v0.2", "--bad", "main", "-o", str(work / "bisect"), expect=0)
    # a narrowing that finds both a workaround and the smallest failing difference, bisected to as well
    repo = tmp_path / "features"
    shas = planted_history(repo, 6, {1: "feature_flags", 5: "feature_bug"})
    recipe = toy_recipe(repo, name="features", prompts=["What is two plus two?", "List three uses of copper."],
                        env={"TOYENGINE_LOAD_SECONDS": "0.1"},
                        narrow={"passing": {"flags": ["--seed", "0"]}, "switches": SWITCHES})
    recipe["launch"]["flags"] = FAILING
    path = write_recipe(tmp_path / "features.yaml", recipe)
    cli("narrow", str(path), "--ref", shas[-1], "-o", str(work / "narrow"), expect=0)
    cli("bisect", str(path), "--good", shas[1], "--bad", shas[-1], "--narrow", "-o", str(work / "bisect-narrow"),
        expect=0)

    reports = {p.relative_to(work).as_posix() for p in work.rglob("*.md")}
    assert {"demo/report.md", "demo/outputs.md", "perf/report.md", "bisect/bisect.md", "narrow/narrow.md",
            "bisect-narrow/bisect.md"} <= reports, reports
    assert (work / "perf" / "perf.svg").is_file()
    narrowed = (work / "narrow" / "narrow.md").read_text()
    assert "| `command.attention-backend-naive-fallback` |" in narrowed  # whole, as a user copies it
    hits, read = machine_traces([work], [str(cache), str(tmp_path), os.path.expanduser("~") + "/",
                                         tempfile.gettempdir() + "/", str(REPO_ROOT), sys.prefix])
    assert {".md", ".json", ".csv", ".svg", ".log"} <= read, read
    assert (work / "bisect" / "state.json").is_file()  # the one file left out: --resume reads it back
    assert hits == [], "\n".join(hits[:40])
