"""Trust, issue 19: what a hostile or unlucky input must not do (hang, grow memory, crash), through the real CLI
with stand-in servers (tests/echo_server.py), real git and real logs."""

from __future__ import annotations

import json
import time
from pathlib import Path

from conftest import REPO_ROOT, abbisect, toy_recipe, write_recipe


def _echo_recipe(engine_repo: Path, prompts: list, **extra) -> dict:
    recipe = toy_recipe(engine_repo, prompts=prompts, **extra)
    recipe["launch"] = {"command": ["{python}", str(REPO_ROOT / "tests" / "echo_server.py"), "--host", "{host}",
                                    "--port", "{port}"], "ready": {"http": "/health"}}
    return recipe


# -- item 8: a request's timeout bounds the whole request ---------------------------------------------------

def test_trickling_answer_ends_at_the_request_deadline(tmp_path, engine_repo, cache_dir):
    """Headers that promise a megabyte, then a byte a second: the request ends at timeouts.request (3 s), as
    an error on that output, and the check goes on (per-read timeouts would wait 100 s here)."""
    recipe = _echo_recipe(engine_repo, ["TRICKLE: 100"],
                          timeouts={"build": 300, "ready": 20, "request": 3, "teardown": 5})
    path = write_recipe(tmp_path / "r.yaml", recipe)
    t0 = time.monotonic()
    proc = abbisect("check", str(path), "fixed", "--no-cache", "--json", cwd=tmp_path, cache=cache_dir, timeout=90)
    assert proc.returncode == 1, proc.stderr  # request errors are bad by default
    (out,) = json.loads(proc.stdout)["data"]["outputs"]
    assert out["error"] == "no complete answer within 3 s", out
    assert out["latency_s"] < 4.5, out
    assert time.monotonic() - t0 < 80
