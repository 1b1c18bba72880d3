import json
from pathlib import Path

import pytest

from abbisect.infra.serial import dump, load
from abbisect.score.signatures import (
    SEVERITIES,
    Signature,
    SignatureMatch,
    diff_signatures,
    first_exception,
    load_catalogue,
    scan_text,
    severity_at_least,
)

LOGS = Path(__file__).resolve().parent / "data" / "logs"  # short excerpts, see tests/data/README.md


def _ids(text: str) -> list[str]:
    return [m.id for m in scan_text(text, load_catalogue())]


def _one(text: str, sig_id: str) -> SignatureMatch:
    found = [m for m in scan_text(text, load_catalogue()) if m.id == sig_id]
    assert len(found) == 1, (sig_id, scan_text(text, load_catalogue()))
    return found[0]


# Exact text of every row of the engine-facts signature table.
ENGINE_FACTS_LINES = {
    "Parameter lm_head.weight_scale not found in params_dict": "param_not_found",
    "The server is fired up and ready to roll!": "sglang_ready",
    "Received sigquit from a child process. It usually means the child failed.": "sglang_child_failed",
    # sglang 0.5.23's words for the same (the real server, 2026-12-05)
    "[2026-12-05 03:16:39] SIGQUIT received. signum=None, frame=None. It usually means one child failed.": (
        "sglang_child_failed"),
    "[2026-12-05 03:16:39] Subprocess detokenizer (pid=26986) crashed with exit code -15. Triggering SIGQUIT for "
    "cleanup...": "sglang_subprocess_crashed",
    "Scheduler hit an exception: Traceback (most recent call last):": "sglang_scheduler_exception",
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.": "sglang_kv_pool_oom",
    "Initialization failed. warmup error: Traceback": "sglang_warmup_failed",
    "EngineCore failed to start.": "vllm_engine_core_failed",
    "RuntimeError: Engine core initialization failed. See root cause above.": "vllm_engine_core_failed",
    "ValueError: No available memory for the cache blocks. Try increasing": "vllm_no_cache_memory",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB": "cuda_oom",
    "RuntimeError: CUDA error: out of memory": "cuda_oom",
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 102400, "
    "Hardware limit: 101376. Reducing block sizes or `num_stages` may help.": "triton_out_of_resources",
    'sm100_fp8_mqa_logits.cuh(283): error: static assertion failed with "Invalid kNumWeightsInReg"': (
        "static_assertion_failed"
    ),
    "RuntimeError: --fp8-gemm-backend=deep_gemm cannot serve MXFP8 weight shape (2880, 2880) "
    "(needs N % 64 == 0 and K % 128 == 0)": "mxfp8_shape_unsupported",
    "RuntimeError: CUDA error: an illegal memory access was encountered": "cuda_illegal_memory_access",
    "RuntimeError: NCCL error: unhandled system error": "nccl_error",
    "node1:123:456 [0] NCCL WARN Connect to 10.0.0.2 failed": "nccl_warning",
    "Traceback (most recent call last):": "python_traceback",
    "Fatal Python error: Segmentation fault": "fatal_python_error",
    "Segmentation fault (core dumped)": "segfault",
    "INFO:     Application startup complete.": "vllm_ready",
}


@pytest.mark.parametrize("line,sig_id", ENGINE_FACTS_LINES.items())
def test_every_engine_facts_row_is_recognised(line, sig_id):
    assert sig_id in _ids(line)


def test_catalogue_entries_are_complete_and_ids_unique():
    cat = load_catalogue()
    ids = [s.id for s in cat]
    assert len(ids) == len(set(ids))
    for s in cat:
        assert s.severity in SEVERITIES and s.meaning and s.hint and s.engine, s.id


def test_fp8_lm_head_capture_names_the_parameter():
    m = _one("[2026-08-19 TP0] Parameter lm_head.weight_scale not found in params_dict", "param_not_found")
    assert m.groups == ("lm_head.weight_scale",) and m.severity == "error" and m.line_no == 1


def test_triton_shared_memory_captures_required_and_limit():
    log = "step 1\nstep 2\n" + next(
        k for k, v in ENGINE_FACTS_LINES.items() if v == "triton_out_of_resources"
    )
    m = _one(log, "triton_out_of_resources")
    assert m.groups == ("102400", "101376") and m.line_no == 3 and m.severity == "fatal"


def test_deepgemm_static_assertion_captures_the_message():
    line = 'sm100_fp8_mqa_logits.cuh(283): error: static assertion failed with "Invalid kNumWeightsInReg"'
    assert _one(line, "static_assertion_failed").groups == ("Invalid kNumWeightsInReg",)


def test_mxfp8_shape_captures_n_and_k():
    line = next(k for k, v in ENGINE_FACTS_LINES.items() if v == "mxfp8_shape_unsupported")
    assert _one(line, "mxfp8_shape_unsupported").groups == ("2880", "2880")


@pytest.mark.parametrize("name,sig_id", [("sglang-fp8-lmhead-load.log", "param_not_found"),
                                         ("deepgemm-jit-static-assert.log", "static_assertion_failed"),
                                         ("sglang-mxfp8-shape.log", "mxfp8_shape_unsupported")])
def test_seed_logs_trigger_their_signatures(name, sig_id):
    m = _one((LOGS / name).read_text(encoding="utf-8"), sig_id)
    assert severity_at_least(m.severity, "error") and m.groups


def test_ready_signatures_are_info():
    for line in ("The server is fired up and ready to roll!", "INFO:     Application startup complete."):
        (m,) = scan_text(line, load_catalogue())
        assert m.severity == "info"


def test_flag_rejected_captures_the_flags():
    m = _one("launch_server.py: error: unrecognized arguments: --tp 2 --foo", "flag_rejected")
    assert m.severity == "error" and m.groups == ("--tp 2 --foo",)
    m = _one(
        "api_server.py: error: argument --attention-backend: invalid choice: 'fa9' (choose from 'fa3')",
        "flag_rejected",
    )
    assert m.groups == ("--attention-backend",)


def test_plain_log_lines_match_nothing():
    assert _ids("INFO 11-29 starting server\nloading weights 50%\nUvicorn running") == []


# --- first exception ------------------------------------------------------------------------------

VLLM_LOG = """INFO starting
(EngineCore_DP0 pid=7) ERROR [core.py:1] EngineCore failed to start.
(EngineCore_DP0 pid=7) ERROR [core.py:1] Traceback (most recent call last):
(EngineCore_DP0 pid=7) ERROR [core.py:1]   File "core.py", line 10, in run
(EngineCore_DP0 pid=7) ERROR [core.py:1]     kernel[grid](...)
(EngineCore_DP0 pid=7) ERROR [core.py:1] triton.runtime.errors.OutOfResources: out of resource: shared memory
Traceback (most recent call last):
  File "api_server.py", line 3, in <module>
    main()
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def test_first_exception_is_the_root_cause_not_the_last():
    line_no, summary = first_exception(VLLM_LOG)
    assert line_no == 6
    assert summary.startswith("triton.runtime.errors.OutOfResources: out of resource")


def test_first_exception_skips_chained_sections():
    log = (
        "Traceback (most recent call last):\n  File 'a.py', line 1\n    x()\n"
        "KeyError: 'lm_head.weight_scale'\n\nDuring handling of the above exception, another exception "
        "occurred:\n\nTraceback (most recent call last):\n  File 'b.py'\nRuntimeError: load failed\n"
    )
    assert first_exception(log) == (4, "KeyError: 'lm_head.weight_scale'")


def test_first_exception_without_traceback_falls_back_to_an_error_line():
    assert first_exception("ok\nRuntimeError: Not enough memory.\n") == (
        2,
        "RuntimeError: Not enough memory.",
    )
    assert first_exception("all good\nready\n") is None


# --- diff, severities, extras ---------------------------------------------------------------------


def test_diff_signatures_between_sides():
    cat = load_catalogue()
    a = scan_text("The server is fired up and ready to roll!\nNCCL WARN slow", cat)
    b = scan_text("Parameter lm_head.weight_scale not found in params_dict\nNCCL WARN x", cat)
    assert diff_signatures(a, b) == {
        "appeared": ["param_not_found"],
        "disappeared": ["sglang_ready"],
        "both": ["nccl_warning"],
    }


def test_severity_order():
    assert severity_at_least("fatal", "error") and severity_at_least("error", "error")
    assert not severity_at_least("warning", "error") and severity_at_least("info", "info")
    with pytest.raises(ValueError, match="critical"):
        severity_at_least("critical", "error")


def test_recipe_extras_add_and_replace():
    extra = [
        {"id": "my_warn", "pattern": r"weird thing (\d+)", "severity": "warning"},
        {"id": "sglang_ready", "pattern": "READY", "severity": "info", "meaning": "custom"},
    ]
    cat = load_catalogue(extra)
    assert len(cat) == len(load_catalogue()) + 1
    (m,) = scan_text("a weird thing 42 happened", cat)
    assert (m.id, m.severity, m.groups) == ("my_warn", "warning", ("42",))
    assert [s.meaning for s in cat if s.id == "sglang_ready"] == ["custom"]


def test_recipe_extra_with_bad_regex_names_the_id():
    with pytest.raises(ValueError, match="broken_one"):
        load_catalogue([{"id": "broken_one", "pattern": "unclosed (group", "severity": "error"}])
    with pytest.raises(ValueError, match="sev_typo"):
        load_catalogue([{"id": "sev_typo", "pattern": "x", "severity": "critical"}])


def test_results_round_trip_through_json():
    cat = load_catalogue()
    for sig in cat:
        assert load(Signature, json.loads(json.dumps(dump(sig)))) == sig
    for m in scan_text("\n".join(ENGINE_FACTS_LINES), cat):
        assert load(SignatureMatch, json.loads(json.dumps(dump(m)))) == m


# --- abbisect's own client going away is not evidence -----------------------------------

RESET = """INFO toyengine: 127.0.0.1 "POST /v1/chat/completions HTTP/1.1" 200 -
----------------------------------------
Exception occurred during processing of request from ('127.0.0.1', 57648)
Traceback (most recent call last):
  File "/usr/lib/python3.11/socketserver.py", line 691, in process_request_thread
    self.finish_request(request, client_address)
  File "/usr/lib/python3.11/http/server.py", line 404, in handle_one_request
    self.raw_requestline = self.rfile.readline(65537)
ConnectionResetError: [Errno 104] Connection reset by peer
----------------------------------------"""
REAL = """(APIServer pid=7) ERROR 12-01 10:00:00 serving.py:99] Error in chat completion stream
(APIServer pid=7) Traceback (most recent call last):
(APIServer pid=7)   File "/venv/lib/python3.11/site-packages/vllm/entrypoints/openai/serving_chat.py", line 300
(APIServer pid=7)     raise RuntimeError("CUDA error: an illegal memory access was encountered")
(APIServer pid=7) RuntimeError: CUDA error: an illegal memory access was encountered"""


def _scan(text: str, own_client: bool, freeze_at: int | None = None):
    from abbisect.score.scanner import LineScanner

    scanner = LineScanner(load_catalogue(), own_client=own_client)
    for n, line in enumerate(text.splitlines()):
        if n == freeze_at:
            scanner.freeze()
        scanner.feed(line)
    return scanner


def test_a_traceback_of_the_client_going_away_is_not_evidence_of_a_server_abbisect_alone_talks_to():
    """The toy engine's log after abbisect's load client reset a kept-alive connection: socketserver prints the
    ConnectionResetError's traceback, which `python_traceback` matched (a side 'warned' for our own doing)."""
    ours = _scan(RESET * 3, own_client=True)
    assert not ours.matches and ours.first_exception is None and ours.client_gone == 3
    anyone = _scan(RESET, own_client=False)  # `abbisect scan` of a log whose clients are anyone's: as before
    assert [m.id for m in anyone.matches] == ["python_traceback"]
    assert anyone.first_exception == (9, "ConnectionResetError: [Errno 104] Connection reset by peer")
    # A real traceback after (or before) a reset is kept, and is the first exception.
    mixed = _scan(RESET + "\n" + REAL + "\n" + RESET, own_client=True)
    assert [m.id for m in mixed.matches if m.id == "python_traceback"] == ["python_traceback"]
    assert mixed.first_exception[1].startswith("RuntimeError: CUDA error") and mixed.client_gone == 2
    assert any(m.id == "cuda_illegal_memory_access" for m in mixed.matches)
    # A reset whose traceback began before the freeze (the pass's end) and ends after it is still taken back.
    frozen = _scan(RESET, own_client=True, freeze_at=6)
    assert not frozen.matches and frozen.client_gone == 1 and frozen.first_exception is None
    # As the log streams (abbisect/infra/logstream.py): chunks of lines, the traceback's end in a later one.
    from abbisect.score.scanner import LineScanner

    streamed = LineScanner(load_catalogue(), own_client=True)
    lines = (RESET + "\n" + REAL + "\n" + RESET).splitlines()
    for k in range(0, len(lines), 4):
        streamed.feed_many("\n".join(lines[k:k + 4]), len(lines[k:k + 4]))
    assert (streamed.matches, streamed.first_exception, streamed.client_gone) == \
        (mixed.matches, mixed.first_exception, mixed.client_gone)
