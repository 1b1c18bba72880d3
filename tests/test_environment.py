"""The venv store: reuse when healthy, rebuild after an interrupted build, never reuse half a venv."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from abbisect import checkout
from abbisect.environment import ensure_env
from abbisect.environment.store import MARKER
from abbisect.recipe import make_install

pytestmark = pytest.mark.e2e

# The second command sleeps only when the test asks (a shell variable: not part of the env key).
SLOW = make_install(strategy="command", commands=["{uv} pip install --python {python} -e {src}",
                                             "sleep ${ABBISECT_TEST_SLEEP:-0}"])


def test_killed_build_is_rebuilt_then_reused(tmp_path, engine_repo):
    cache = tmp_path / "cache"
    sha = checkout.resolve(engine_repo, "fixed").sha
    source = checkout.worktree(engine_repo, sha, cache)
    script = textwrap.dedent(f"""
        from pathlib import Path
        from abbisect.environment import ensure_env
        from abbisect.recipe import make_install
        ensure_env(Path({str(source)!r}), {sha!r}, make_install(**{SLOW.model_dump()!r}), None,
                   Path({str(cache)!r}), 600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True,
                            env={**os.environ, "ABBISECT_TEST_SLEEP": "60"})
    deadline = time.monotonic() + 120
    logs: list[Path] = []
    while time.monotonic() < deadline:
        logs = list((cache / "envs").glob("*/build.log"))
        if logs and "sleep ${ABBISECT_TEST_SLEEP" in logs[0].read_text():
            break
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)  # the build dies half-way (kill -9, a power cut)
    proc.wait()
    root = logs[0].parent
    assert (root / "venv" / "bin" / "python").exists() and not (root / MARKER).exists()

    rebuilt = ensure_env(source, sha, SLOW, None, cache, 600)
    assert rebuilt.ok and not rebuilt.reused and Path(rebuilt.path).parent == root
    assert (root / MARKER).is_file()
    reused = ensure_env(source, sha, SLOW, None, cache, 600)
    assert reused.reused and reused.path == rebuilt.path

    os.unlink(reused.python)  # an unhealthy venv (its interpreter is gone) is rebuilt too
    healed = ensure_env(source, sha, SLOW, None, cache, 600)
    assert healed.ok and not healed.reused and Path(healed.python).exists()


def test_failed_build_is_an_outcome_with_its_log(tmp_path, engine_repo):
    cache = tmp_path / "cache"
    sha = checkout.resolve(engine_repo, "noinstall").sha
    source = checkout.worktree(engine_repo, sha, cache)
    env = ensure_env(source, sha, make_install(), None, cache, 600)
    assert not env.ok and "install checkout failed" in env.error
    assert Path(env.log).is_file() and not (Path(env.path).parent / MARKER).exists()
