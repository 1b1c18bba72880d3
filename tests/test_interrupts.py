"""Interrupted while an engine starts: the exit is quick and says what happens, and what an
interrupted run leaves behind is said, once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import marked_pids, toy_recipe, write_recipe

pytestmark = [pytest.mark.e2e, pytest.mark.alone]


def test_ctrl_c_while_a_server_that_ignores_sigterm_starts_exits_quickly_and_says_so(tmp_path, engine_repo,
                                                                                     cache_dir):
    """A server still importing (vLLM's first 15 s) ignores SIGTERM: with Ctrl-C nobody waits for its answers,
    so it gets a short grace, not timeouts.teardown (15 s here), and the console says what is going on."""
    mark = f"{os.getpid()}-{time.monotonic_ns()}"
    launch = {"command": ["bash", "-c", 'trap "" TERM; exec "$0" -m toyengine.server "$@"', "{python}",
                          "--host", "{host}", "--port", "{port}"], "ready": {"http": "/health"}}
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(
        engine_repo, sides={"a": "fixed", "b": "fixed"}, launch=launch,
        env={"TOYENGINE_LOAD_SECONDS": "60", "ABBISECT_TEST_MARK": mark}, timeouts={"ready": 90, "teardown": 15}))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "abbisect", "run", str(recipe), "-o", str(out), "--no-cache"],
                            cwd=tmp_path, env={**os.environ, "ABBISECT_CACHE_DIR": str(cache_dir)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not marked_pids(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marked_pids(mark), "the server never started"
        time.sleep(1.0)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert took < 15, f"{took:.1f} s to exit"  # the 2 s grace, not timeouts.teardown's 15 s
    assert "teardown (interrupted: stopping the server, at most 2 s)" in err, err
    said = [line for line in err.splitlines() if line.startswith("abbisect: interrupted")]
    assert said == [f"abbisect: interrupted; {out} holds what ran before the interruption: logs, no report"], err
    assert not marked_pids(mark)


def test_resume_from_a_state_without_its_keys_is_one_line(tmp_path, cache_dir):
    """A damaged or foreign state.json (keys missing or of the wrong kind) is a usage error naming the key,
    never an internal error."""
    import json

    from conftest import abbisect

    for state, key in (({"version": 1}, "command"), ({"version": 1, "command": "x", "recipe": {}, "fingerprint": "f",
                                                      "good": {"ref": "a"}, "bad": {"ref": "b", "sha": "c"},
                                                      "options": {}, "steps": []}, "'good' end"),
                       ({"version": 1, "command": "x", "recipe": {}, "fingerprint": "f",
                         "good": {"ref": "a", "sha": "b"}, "bad": {"ref": "c", "sha": "d"}, "options": {},
                         "steps": []}, "options lack no_cache")):
        folder = tmp_path / f"s{len(key)}"
        folder.mkdir()
        (folder / "state.json").write_text(json.dumps(state))
        proc = abbisect("bisect", "--resume", str(folder), cwd=tmp_path, cache=cache_dir)
        assert proc.returncode == 2, proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith(f"abbisect: error: --resume {folder}: state.json") and key in line, line
