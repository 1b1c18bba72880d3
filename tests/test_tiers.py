"""The tier guard's rule (tests/conftest.py): which commands start abbisect, an engine, a venv build or Ray."""

from __future__ import annotations

import pytest
from conftest import starts_something


@pytest.mark.parametrize("argv", [
    ["/v/bin/python", "-m", "abbisect", "run", "r.yaml"],
    ["python3", "-m", "abbisect.infra.supervisor_main"],
    ["/v/bin/python3.11", "-m", "toyengine.server", "--port", "1"],
    ["python", "-c", "from abbisect.cli import main; main()"],
    ["python", "-c", "from abbisect.launch.server import launch"],
    ["/usr/local/bin/abbisect", "check", "r.yaml"],
    ["git", "-C", "clone", "bisect", "run", "abbisect", "check", "r.yaml"],
    ["git", "bisect", "run", "/v/bin/python", "-m", "abbisect", "check"],
    ["/x/uv", "venv", "/tmp/v"],
    ["uv", "pip", "install", "."],
    ["/x/ray/core/src/ray/raylet/raylet", "--node_ip_address=127.0.0.1"],
    ["python", "-m", "vllm.entrypoints.openai.api_server"],
])
def test_these_start_something(argv: list[str]) -> None:
    assert starts_something(argv)


@pytest.mark.parametrize("argv", [
    ["git", "-C", "vllm", "init"],
    ["git", "-C", "repo", "remote", "add", "origin", "https://github.com/vllm-project/vllm"],
    ["git", "-C", "clone", "bisect", "start"],
    ["python", "-m", "ruff", "check", "abbisect", "tests"],
    ["python", "-m", "mypy"],
    ["python", "-c", "print('abbisected')"],
    ["python", "-c", "from abbisect.infra.locks import file_lock"],  # a helper process, not abbisect's CLI
    ["uv", "--version"],
    ["nvidia-smi"],
])
def test_these_do_not(argv: list[str]) -> None:
    assert not starts_something(argv)
