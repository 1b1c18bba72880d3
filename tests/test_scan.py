"""`abbisect scan` through the CLI: in process, and once as the real subprocess a user or CI runs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli

SGLANG_OK = "INFO loading\nThe server is fired up and ready to roll!\n"
SGLANG_LM_HEAD = "INFO loading\nParameter lm_head.weight_scale not found in params_dict\nThe server is fired up and ready to roll!\n"
VLLM_CRASH = """INFO Starting vLLM API server
Traceback (most recent call last):
  File "decode.py", line 9, in launch
triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 102400, Hardware limit: 101376.
Traceback (most recent call last):
  File "api_server.py", line 1, in <module>
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def _scan(*args: str, real: bool = False) -> subprocess.CompletedProcess:
    if not real:
        return cli("scan", *args, cwd=Path.cwd(), cache=Path.cwd() / "cache")
    return subprocess.run([sys.executable, "-m", "abbisect", "scan", *args], check=False, capture_output=True,
                          text=True, timeout=60)


def _log(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


def test_clean_log_exits_zero_and_shows_info(tmp_path):
    r = _scan(_log(tmp_path, "ok.log", SGLANG_OK))
    assert r.returncode == 0, r.stderr
    assert "sglang_ready" in r.stdout and "INFO" in r.stdout


def test_error_signature_fails_with_meaning_hint_and_capture(tmp_path):
    r = _scan(_log(tmp_path, "a.log", SGLANG_LM_HEAD))
    assert r.returncode == 1
    assert ":2: ERROR param_not_found [lm_head.weight_scale]" in r.stdout
    assert "hint:" in r.stdout and "5375babb" in r.stdout


def test_fail_on_raises_the_bar(tmp_path):
    path = _log(tmp_path, "a.log", SGLANG_LM_HEAD)
    assert _scan("--fail-on", "fatal", path).returncode == 0
    assert _scan("--fail-on", "info", _log(tmp_path, "ok.log", SGLANG_OK)).returncode == 1


def test_crash_log_points_at_the_first_exception(tmp_path):
    r = _scan(_log(tmp_path, "crash.log", VLLM_CRASH))
    assert r.returncode == 1
    assert ":4: first exception (root cause): triton.runtime.errors.OutOfResources" in r.stdout
    assert "triton_out_of_resources [102400, 101376]" in r.stdout


def test_json_output_covers_every_log(tmp_path):
    a = _log(tmp_path, "a.log", SGLANG_LM_HEAD)
    b = _log(tmp_path, "b.log", VLLM_CRASH)
    r = _scan("--json", a, b)
    assert r.returncode == 1
    out = json.loads(r.stdout)["data"]
    assert out["failed"] is True and out["fail_on"] == "error"
    assert [log["path"] for log in out["logs"]] == [a, b]
    assert out["logs"][0]["matches"][0]["groups"] == ["lm_head.weight_scale"]
    assert out["logs"][0]["first_exception"] is None
    assert out["logs"][1]["first_exception"]["line_no"] == 4


@pytest.mark.smoke
@pytest.mark.parametrize("real", [False, True], ids=["in-process", "subprocess"])
def test_missing_file_is_one_line_and_exit_two(tmp_path, real):
    r = _scan(str(tmp_path / "nope.log"), real=real)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.strip().splitlines() == [f"abbisect: error: log file not found: {tmp_path / 'nope.log'}"]


def test_undecodable_bytes_do_not_crash(tmp_path):
    p = tmp_path / "bin.log"
    p.write_bytes(b"\xff\xfe garbage \x00\nSegmentation fault (core dumped)\n")
    r = _scan(str(p))
    assert r.returncode == 1 and "segfault" in r.stdout
