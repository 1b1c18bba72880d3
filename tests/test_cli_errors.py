"""The CLI's contracts: one `--json` envelope on every command, `abbisect schema`, -q/-v, status lines, and a
timeout that is not cached as the commit's truth until a second attempt confirms it."""

from __future__ import annotations

import io
import json
import time

import pytest
from conftest import REPO_ROOT, abbisect, cli, toy_recipe, write_recipe

from abbisect import __version__
from abbisect.infra import progress
from abbisect.infra.progress import Final, Reporter, Status

LMEVAL = REPO_ROOT / "tests" / "data" / "lmeval" / "a"


def _envelope(stdout: str, command: str) -> dict:
    doc = json.loads(stdout)
    assert set(doc) == {"schema", "abbisect", "command", "data"}, doc.keys()
    assert doc["schema"] == f"abbisect/{command}/v1" and doc["command"] == command
    assert doc["abbisect"] == __version__
    return doc["data"]


@pytest.mark.e2e
def test_every_json_output_has_the_envelope(tmp_path, engine_repo, cache_dir):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo))
    log = tmp_path / "server.log"
    log.write_text("INFO ready\n")
    runs = {
        "run": ["run", str(recipe), "--a", "fixed", "--b", "fixed", "-o", str(tmp_path / "ab"), "--json"],
        "check": ["check", str(recipe), "fixed", "--json"],
        "bisect": ["bisect", str(recipe), "--good", "healthy0", "--bad", "broken", "-o", str(tmp_path / "bis"),
                   "--json"],
        "scan": ["scan", str(log), "--json"],
        "env": ["env", "--json"],
        "cache": ["cache", "list", "--json"],
        # the same lm-eval run on both sides: 60 items, none changed, cannot rule 3 points out: "not sure", exit 3
        "compare": ["compare", str(LMEVAL), str(LMEVAL), "--filter", "flexible-extract", "--json"],
    }
    for command, args in runs.items():
        proc = abbisect(*args, cwd=tmp_path, cache=cache_dir)
        assert proc.returncode == (3 if command == "compare" else 0), (command, proc.stderr)
        data = _envelope(proc.stdout, command)
        assert isinstance(data, dict) and data, command
    assert "first_new" in _envelope(abbisect(*runs["bisect"][:-3], "-o", str(tmp_path / "bis2"), "--json",
                                             cwd=tmp_path, cache=cache_dir).stdout, "bisect")


def test_schema_command_prints_the_recipe_json_schema(tmp_path, cache_dir):
    proc = cli("schema", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    assert schema["title"] == "Recipe" and {"engine", "prompts", "scoring", "probe"} <= set(schema["properties"])
    assert schema["$defs"]["Signature"]["properties"]["severity"]["enum"] == ["info", "warning", "error", "fatal"]
    assert schema["properties"]["name"]["maxLength"] == 100
    assert "Any" not in proc.stdout and "additionalProperties" in proc.stdout


@pytest.mark.e2e
def test_quiet_shows_only_the_final_lines(tmp_path, engine_repo, cache_dir):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo))
    loud = abbisect("run", str(recipe), "--a", "fixed", "--b", "fixed", "-o", str(tmp_path / "1"), cwd=tmp_path,
                    cache=cache_dir)
    quiet = abbisect("-q", "run", str(recipe), "--a", "fixed", "--b", "fixed", "-o", str(tmp_path / "2"),
                     cwd=tmp_path, cache=cache_dir)
    assert loud.returncode == quiet.returncode == 0, quiet.stderr
    lines = quiet.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("A: ok → good") and lines[1].startswith("report: "), quiet.stderr
    assert len(loud.stderr.strip().splitlines()) > 2


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_status_is_a_live_line_on_a_terminal_and_throttled_lines_otherwise(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")  # a terminal that can rewrite a line (rich draws nothing live on a dumb one)
    tty = _Tty()
    say = Reporter(tty, level=progress.NORMAL)
    for _ in range(3):
        say(Status("environment: uv pip install (12 packages)"))
    say("launch: server")
    out = tty.getvalue()
    after_last_erase = out.rsplit("\x1b[2K", 1)[1]
    # rewritten in place, then cleared by a line: after the last erase only that line is on screen
    assert out.count("\r\x1b[2K") >= 3 and after_last_erase.endswith("launch: server\n")
    assert after_last_erase.count("\n") == 1 and "environment" not in after_last_erase
    assert "environment: uv pip install (12 packages) (0 s)" in out

    plain = io.StringIO()
    say = Reporter(plain, level=progress.NORMAL)
    for _ in range(5):
        say(Status("waiting for another abbisect building abc", kind="lock"))
    say(Status("ready: waiting for /health", kind="ready"))
    lines = plain.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in plain.getvalue()  # one per kind within THROTTLE_S

    verbose = io.StringIO()
    say = Reporter(verbose, level=progress.VERBOSE)
    for _ in range(3):
        say(Status("waiting", kind="lock"))
    assert len(verbose.getvalue().splitlines()) == 3

    quiet = io.StringIO()
    say = Reporter(quiet, level=progress.QUIET)
    say("step")
    say(Status("waiting"))
    say(Final("A: ok"))
    assert quiet.getvalue() == "A: ok\n"


@pytest.mark.e2e
@pytest.mark.parametrize("attempts", [3])
def test_a_timeout_is_cached_only_once_confirmed(tmp_path, engine_repo, cache_dir, attempts):
    """The first timeout may be the machine's load: the next attempt runs again; a second timeout is kept."""
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, name="toy-timeout",
                                                          timeouts={"build": 300, "ready": 2, "request": 20,
                                                                    "teardown": 5}))
    cached = []
    for _ in range(attempts):
        t = time.monotonic()
        proc = abbisect("check", str(recipe), "hang", "--json", cwd=tmp_path, cache=cache_dir)
        assert proc.returncode == 125, proc.stderr
        data = _envelope(proc.stdout, "check")
        assert data["verdict"]["status"] == "timeout"
        cached.append((data["cached"], round(time.monotonic() - t)))
    assert [c for c, _ in cached] == [False, False, True], cached


LMEVAL_B = REPO_ROOT / "tests" / "data" / "lmeval" / "b"
LOG = REPO_ROOT / "tests" / "data" / "logs" / "deepgemm-jit-static-assert.log"


@pytest.mark.e2e
@pytest.mark.parametrize(("args", "code"), [
    (["compare", str(LMEVAL), str(LMEVAL_B), "--task", "gsm8k", "--filter", "flexible-extract"], 1),
    (["compare", str(LMEVAL), str(LMEVAL_B), "--task", "gsm8k", "--filter", "flexible-extract", "--json"], 1),
    (["scan", str(LOG)], 1),  # it holds a known signature
    (["schema"], 0),
    (["cache", "list"], 0),
    (["run", "RECIPE", "--a", "healthy0", "--b", "fixed", "--dry-run"], 0),
], ids=["compare", "compare-json", "scan", "schema", "cache-list", "run-dry-run"])
def test_a_reader_that_goes_away_ends_no_command(tmp_path, engine_repo, cache_dir, args, code):
    """`abbisect compare … | head -1` crashed with BrokenPipeError (exit 70, a crash.log). A closed pipe is the
    reader's choice: the rest of the output is dropped and the command ends with its own exit code (compare's
    is its call). Here the pipe is closed before abbisect writes a byte, so every write finds it closed."""
    import os
    import subprocess
    import sys

    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo))
    argv = [str(recipe) if a == "RECIPE" else a for a in args]
    cache = tmp_path / "cache"
    for closed in ("stdout", "stderr"):
        proc = subprocess.Popen([sys.executable, "-m", "abbisect", *argv], cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env={**os.environ, "ABBISECT_CACHE_DIR": str(cache)})
        shut, kept = (proc.stdout, proc.stderr) if closed == "stdout" else (proc.stderr, proc.stdout)
        assert shut is not None and kept is not None
        shut.close()
        said = kept.read().decode()
        assert proc.wait(timeout=300) == code, (closed, said)
        assert "internal error" not in said and "BrokenPipeError" not in said, said
    assert not list(tmp_path.rglob("crash.log"))
