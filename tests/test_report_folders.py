"""Each run owns its folder: unique even under races, and a cached trial never writes into an older run's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import abbisect, toy_recipe, write_recipe

_RACE = """
import sys, time
from abbisect.report.files import new_output_dir
start = float(sys.argv[1])
time.sleep(max(start - time.time(), 0))
print(new_output_dir("toy", None))
"""


def test_racing_processes_get_distinct_folders(tmp_path):
    start = time.time() + 1.5  # all processes ask within the same second: the same stamp
    procs = [subprocess.Popen([sys.executable, "-c", _RACE, str(start)], cwd=tmp_path, stdout=subprocess.PIPE,
                              text=True, env={**os.environ}) for _ in range(6)]
    folders = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(set(folders)) == 6, folders
    assert all(Path(f).is_dir() and not any(Path(f).iterdir()) for f in folders)


@pytest.mark.e2e
def test_output_pointing_at_a_file_is_a_user_error(tmp_path, engine_repo, cache_dir):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, sides={"a": "fixed", "b": "fixed"}))
    (tmp_path / "afile").write_text("keep me")
    proc = abbisect("run", str(recipe), "--output", str(tmp_path / "afile"), cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 2 and "is a file" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert (tmp_path / "afile").read_text() == "keep me"


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


@pytest.mark.e2e
def test_cached_run_writes_only_its_own_folder(tmp_path, engine_repo, cache_dir):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, sides={"a": "broken", "b": "fixed"}))
    first, second, third = tmp_path / "first", tmp_path / "second", tmp_path / "third"
    proc = abbisect("run", str(recipe), "-o", str(first), "--no-cache", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    before = _snapshot(first)
    proc = abbisect("run", str(recipe), "-o", str(second), "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["data"]
    assert res["a"]["cached"] and res["b"]["cached"]
    assert _snapshot(first) == before  # the earlier run's folder is not touched
    for side in ("a", "b"):
        spec = res[side]["spec"]
        assert Path(spec["out_dir"]).parent == second.resolve()
        assert res[side]["launch"]["log_path"].startswith(str(second.resolve()))
        folder = second / f"{side}-{spec['sha'][:10]}"
        assert (folder / "server.log").is_file() and (folder / "build.log").is_file()
        assert res[side]["extras"]["cache"]["stored"]
    report = (second / "report.md").read_text()
    assert "cached" in report and "server.log" in report
    # an earlier run's folder that became a file does not break a later cached run
    for p in sorted(first.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    first.rmdir()
    first.write_text("now a file")
    proc = abbisect("run", str(recipe), "-o", str(third), cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    assert first.read_text() == "now a file"
