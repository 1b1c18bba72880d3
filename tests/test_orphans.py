"""The orphan sweep: a server whose helpers leave everything that used to find them — the process group (setsid),
the tree (a double fork) and the environment token (an emptied environment) — still leaves nothing running,
after a normal teardown, after `kill -9` of abbisect, and after `kill -9` of abbisect with its supervisors
(the next command reaps them from the launch's record).

The helpers carry no environment at all, so they are found here by a mark in their command line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import abbisect, toy_recipe, write_recipe

pytestmark = pytest.mark.e2e

PY = sys.executable


def helpers(mark: str) -> str:
    """A shell line that starts the three kinds of escapee, then execs the toy server."""
    sleeper = "import os, time; time.sleep(600)"
    return (
        # setsid, and an empty environment
        f"setsid env -i {PY} -c '{sleeper}' orphan-{mark}-setsid < /dev/null > /dev/null 2>&1 & "
        # a double fork inside a new session: the grandchild's parent exits at once
        f"( setsid env -i {PY} -c 'import os, time; os.fork() and os._exit(0); os.setsid(); time.sleep(600)' "
        f"orphan-{mark}-double < /dev/null > /dev/null 2>&1 & ) ; "
        # a helper started with env={{PATH}} only, that calls setsid itself
        f"env -i PATH=/usr/bin:/bin {PY} -c 'import os, time; os.setsid(); time.sleep(600)' orphan-{mark}-helper "
        f"< /dev/null > /dev/null 2>&1 & "
        f"exec {PY} -m toyengine.server \"$@\"")


def escaped(mark: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"orphan-{mark}-" in cmd and state != "Z":
            found.append(cmd.strip().rsplit(" ", 1)[-1])
    return sorted(found)


def wait_for(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def recipe_for(tmp_path: Path, repo: Path, mark: str, **env: str) -> Path:
    launch = {"command": ["bash", "-c", helpers(mark), "bash", "--host", "{host}", "--port", "{port}"],
              "flags": ["--seed", "0"], "ready": {"http": "/health"}}
    return write_recipe(tmp_path / "r.yaml", toy_recipe(repo, launch=launch, env=env))


def test_helpers_that_leave_group_tree_and_environment_are_gone_after_a_check(tmp_path, engine_repo, cache_dir, test_mark):
    mark = test_mark
    recipe = recipe_for(tmp_path, engine_repo, mark)
    proc = abbisect("check", str(recipe), "fixed", "--no-cache", "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    teardown = json.loads(proc.stdout)["data"]["launch"]["teardown"]
    assert teardown["leftover_pids"] == [] and teardown["signal"] in ("SIGTERM", "SIGKILL")
    assert escaped(mark) == []


@pytest.mark.parametrize("victims", ["abbisect", "abbisect and its supervisors"])
def test_helpers_are_gone_after_kill_9(tmp_path, engine_repo, cache_dir, victims, test_mark):
    mark = test_mark
    busy = tmp_path / "busy"
    recipe = recipe_for(tmp_path, engine_repo, mark, TOYENGINE_REQUEST_SECONDS="60", TOYENGINE_BUSY_FILE=str(busy))
    proc = subprocess.Popen([sys.executable, "-m", "abbisect", "check", str(recipe), "fixed", "--no-cache"],
                            cwd=tmp_path, env={**os.environ, "ABBISECT_CACHE_DIR": str(cache_dir)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait_for(busy.exists, 120), "the server never got its first request"
        assert wait_for(lambda: len(escaped(mark)) == 3, 10), escaped(mark)
        time.sleep(1.5)  # the supervisor has written the family into the record
        if victims == "abbisect":
            proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    if victims == "abbisect":  # the supervisor ends them as soon as abbisect's pipe closes
        assert wait_for(lambda: escaped(mark) == [], 20), escaped(mark)
        return
    assert len(escaped(mark)) == 3, "with the supervisors gone, they run until the next command reaps them"
    nxt = abbisect("cache", "list", cwd=tmp_path, cache=cache_dir)
    assert nxt.returncode == 0 and f"reaped an orphaned server of a dead abbisect (pid {proc.pid})" in nxt.stderr
    assert wait_for(lambda: escaped(mark) == [], 10), escaped(mark)
