"""Reports a stranger can rerun and paste: escaped model text, one GitHub comment, no local path, links."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT, abbisect, toy_recipe, write_recipe

from abbisect.report.ab import COMMENT_LIMIT, fence
from abbisect.report.portable import reproduce_command
from abbisect.report.text import cell, esc

NASTY = "<think>plan</think> a|b ```code``` <details><summary>x</summary> **bold** [link](http://x) & ~~s~~"


def test_cell_renders_literally():
    out = cell(NASTY, 500)
    assert "<" not in out and ">" not in out and "`" not in out
    assert "&lt;think&gt;" in out and "&amp;" in out and "&#96;&#96;&#96;" in out
    assert re.search(r"(?<!\\)\|", out) is None  # no bare pipe: the table keeps its columns
    assert "\\*\\*bold\\*\\*" in out and "\\[link\\]" in out and "\\~\\~" in out
    assert cell("a\nb", 10) == "a ⏎ b" and cell("x" * 100, 10) == "x" * 9 + "…"
    assert esc("a<b") == "a&lt;b"


def test_fence_cannot_be_closed_by_its_content():
    for text in ("plain", "has ``` inside", "has ```` four", "`` two"):
        block = fence(text)
        ticks = re.match(r"`+", block).group(0)
        assert len(ticks) >= 3 and ticks not in text
        assert block.endswith("\n" + ticks)


def test_reproduce_command_drops_local_folders(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("x")
    cmd = reproduce_command([str(recipe), "--a", "v1", "-o", "/x/out", "--cache-dir=/c", "--json"], recipe)
    assert cmd == "abbisect r.yaml --a v1 --json"


def _echo_recipe(engine_repo: Path, prompts: list, **extra) -> dict:
    recipe = toy_recipe(engine_repo, sides={"a": "fixed", "b": "healthy0"}, prompts=prompts, **extra)
    recipe["launch"] = {"command": ["{python}", str(REPO_ROOT / "tests" / "echo_server.py"), "--host", "{host}",
                                    "--port", "{port}"], "ready": {"http": "/health"}}
    return recipe


def _tables_have_headers(md: str) -> None:
    lines = md.splitlines()
    for n, line in enumerate(lines[1:], 1):
        if re.fullmatch(r"\|(-+\|)+", line):
            header = [c.strip() for c in lines[n - 1].strip("|").split(" | ")]
            assert all(header), f"empty table header: {lines[n - 1]}"


@pytest.mark.e2e
def test_forty_long_outputs_fit_one_comment(tmp_path, engine_repo, cache_dir):
    prompts = [f"LONG: {3000 + n}" for n in range(40)] + [f"ECHO: {NASTY}"]
    path = write_recipe(tmp_path / "r.yaml", _echo_recipe(engine_repo, prompts))
    out = tmp_path / "out"
    proc = abbisect("run", str(path), "-o", str(out), cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    report = (out / "report.md").read_text()
    assert len(report) < COMMENT_LIMIT, len(report)
    assert "outputs.md" in report
    full = (out / "outputs.md").read_text()
    assert len(full) > COMMENT_LIMIT and "LONG: 3039" in full
    assert "<think>" in full  # fenced: literal as it is
    prose = re.sub(r"^(`{3,})\w*\n.*?\n\1$", "", report, flags=re.DOTALL | re.MULTILINE)  # all but the code blocks
    assert "<think>" not in prose and "&lt;think&gt;" in prose  # escaped outside code blocks
    _tables_have_headers(report)
    for local in (str(tmp_path), str(cache_dir), str(engine_repo), str(Path.home()), "worktrees/", "venvs/"):
        assert local not in report and local not in full, local
    # the recipe is inlined, with the engine named portably, and the command runs it by file name
    recipe = yaml.safe_load(re.search(r"```yaml\n(.*?)\n```", report, re.DOTALL).group(1))
    assert recipe["name"] == "toy" and len(recipe["prompts"]) == 41
    assert recipe["engine"]["repo"].startswith("<a local checkout named")
    assert "abbisect run r.yaml" in report and "started 20" in report and "save as <code>r.yaml</code>" in report


@pytest.mark.e2e
def test_twenty_megabyte_answer_gives_bounded_files(tmp_path, engine_repo, cache_dir):
    path = write_recipe(tmp_path / "r.yaml", _echo_recipe(engine_repo, ["BIG: 20", "ECHO: short"]))
    out = tmp_path / "out"
    proc = abbisect("run", str(path), "-o", str(out), cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    sizes = {p.name: p.stat().st_size for p in out.iterdir() if p.is_file()}
    assert sizes["report.md"] < COMMENT_LIMIT
    assert sizes["results.json"] < 2_000_000 and sizes["outputs.csv"] < 1_000_000, sizes
    assert sizes["outputs.md"] < 17_000_000, sizes
    assert "more characters" in (out / "outputs.md").read_text()[-3_000_000:]
    data = json.loads((out / "results.json").read_text())
    assert "more characters cut" in data["a"]["outputs"][0]["text"]


@pytest.mark.e2e
def test_github_links_and_portable_repo(tmp_path, engine_repo, cache_dir):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(engine_repo), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "remote", "set-url", "origin", "https://github.com/acme/toyengine.git"],
                   check=True)
    recipe = toy_recipe(clone, sides={"a": "broken", "b": "fixed"})
    path = write_recipe(tmp_path / "r.yaml", recipe)
    out = tmp_path / "out"
    proc = abbisect("run", str(path), "-o", str(out), "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    report = (out / "report.md").read_text()
    a, b = res["a"]["spec"]["sha"], res["b"]["spec"]["sha"]
    base = "https://github.com/acme/toyengine"
    assert f"{base}/commit/{b}" in report and f"{base}/compare/{a}...{b}" in report
    assert f"{base}/pull/23" in report  # "Route lm_head through the quantised method (#23)"
    assert "repo: https://github.com/acme/toyengine.git" in report
    assert str(clone) not in report
    # the printed command, run as printed from the recipe's folder, gives the same verdicts (from the cache)
    block = report.rsplit("<summary>Reproduce</summary>", 1)[1]
    (command,) = re.search(r"```sh\n(.*?)\n```", block, re.DOTALL).group(1).splitlines()
    assert command == "abbisect run r.yaml --json"
    again = subprocess.run(command.replace("abbisect", f"{sys.executable} -m abbisect", 1), shell=True, cwd=tmp_path,
                           capture_output=True, text=True, check=False,
                           env={**os.environ, "ABBISECT_CACHE_DIR": str(cache_dir)},
                           timeout=600)
    assert again.returncode == 0, again.stderr
    rerun = json.loads(again.stdout)["data"]
    assert [rerun[s]["verdict"]["status"] for s in "ab"] == [res[s]["verdict"]["status"] for s in "ab"]


@pytest.mark.e2e
def test_bisect_report_one_reproduce_and_nested_headings(tmp_path, engine_repo, cache_dir):
    path = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo))
    out = tmp_path / "bis"
    proc = abbisect("bisect", str(path), "--good", "healthy0", "--bad", "broken", "-o", str(out), cwd=tmp_path,
                    cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    md = (out / "bisect.md").read_text()
    assert md.count("<summary>Reproduce</summary>") == 1 and md.count("Environment fingerprint") <= 1
    assert md.count("<summary>Recipe") == 1
    decisive = md.split("### Decisive A/B")[1].split("### Trail")[0]
    decisive = re.sub(r"^(`{3,})\w*\n.*?\n\1$", "", decisive, flags=re.DOTALL | re.MULTILINE)  # not code
    assert not re.search(r"^#{1,3} ", decisive, re.MULTILINE) and re.search(r"^#### Summary", decisive, re.MULTILINE)
    _tables_have_headers(md)
    assert not re.search(r"started\s*$", md, re.MULTILINE)
    for local in (str(tmp_path), str(cache_dir), str(engine_repo)):
        assert local not in md, local
    assert "abbisect bisect r.yaml --good healthy0 --bad broken" in md and "save as <code>r.yaml</code>" in md
    assert len(md) < COMMENT_LIMIT and (out / "outputs.md").is_file()
