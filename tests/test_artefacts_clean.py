"""What a user copies and greps (issue 29): every report a demo job writes — the A/B of recipes/demo.yaml, the
performance A/B of recipes/perf-demo.yaml, the bisect of the demo, a narrowing with switches and delta
debugging on the toy engine — names no path of the cache or of the home folder, and no artefact (markdown,
JSON, CSV, SVG) holds an invisible character (a zero-width space inside a sha, a switch id or a path would
make a copied id wrong and a grep miss it).

The default job (`abbisect run` on the built-in vllm-cpu recipe) is a real vLLM: its report's renderer is fed
a result whose engine model_tag lies under the cache in tests/test_report_shown.py. The JSON keeps this
machine's paths where they are data (a venv's python, a build log), so paths are looked for in what is
rendered for people: markdown, CSV, SVG.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT, abbisect, toy_recipe, write_recipe

from abbisect.builtin.history import planted_history

pytestmark = pytest.mark.e2e

INVISIBLE = re.compile("[\u200b-\u200d\u2060\ufeff]")
ARTEFACTS = (".md", ".json", ".csv", ".svg")
RENDERED = (".md", ".csv", ".svg")
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


def _hits(roots: list[Path], needles: list[str]) -> list[str]:
    found = []
    for root in roots:
        for path in sorted(root.rglob("*")):
            if not path.is_file() or path.suffix not in ARTEFACTS:
                continue
            text = path.read_text(errors="replace")
            found += [f"{path}: U+{ord(m.group(0)):04X} at {m.start()}" for m in INVISIBLE.finditer(text)]
            if path.suffix in RENDERED:
                found += [f"{path}: {n}" for n in needles if n in text]
    return found


def test_no_demo_artefact_names_the_cache_or_the_home_folder_or_hides_a_character(tmp_path):
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
    home = os.path.expanduser("~")
    assert _hits([work], [str(cache), str(tmp_path), home + "/"]) == []
