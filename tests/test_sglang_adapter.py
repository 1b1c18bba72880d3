"""The SGLang adapter as the real sglang 0.5.23 showed it (docs/real-engines.md), and the CPU scaffolding of
builtin:sglang-0.5.23 (abbisect/builtin/sglang_cpu): given only to that built-in on a machine without a CUDA
driver, and its two CPU ops doing what SGLang's CPU engine asks of them."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import yaml

from abbisect.builtin import sglang_cpu
from abbisect.launch.engines import sglang
from abbisect.recipe import parse_recipe
from abbisect.score.signatures import scan_text
from abbisect.trial import pipeline

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "sglang-cpu-smollm2.yaml"
CPU_FLAGS = ["--device", "cpu", "--sleep-on-idle"]


def _recipe(repo: str = "builtin:sglang-0.5.23", flags: list[str] = CPU_FLAGS, **launch: object):
    return parse_recipe({"name": "x", "engine": {"kind": "sglang", "repo": repo}, "model": "m",
                         "launch": {"flags": flags, **launch}, "prompts": ["p"]})


@pytest.fixture
def no_cuda_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sglang_cpu, "cuda_driver", lambda: False)


def test_both_entry_points_take_the_same_options() -> None:
    module = sglang.plan(_recipe(flags=["--tp-size", "1"]), "/v/bin/python", "m", "127.0.0.1", 8000)
    assert module.argv[:3] == ("/v/bin/python", "-m", "sglang.launch_server")
    cli = sglang.plan(_recipe(flags=["--tp-size", "1"], entrypoint="cli"), "/v/bin/python", "m", "127.0.0.1", 8000)
    assert cli.argv[:2] == ("/v/bin/sglang", "serve")
    assert module.argv[3:] == cli.argv[2:] == ("--model-path", "m", "--host", "127.0.0.1", "--port", "8000",
                                               "--tp-size", "1")
    # Ready after the warm-up request: the line and /health (/v1/models answers before the warm-up has run).
    assert module.ready_log == sglang.READY_LINE and module.ready_http == "/health"
    # narrow reads the recipe's own entry point's --help first, the other as a fallback
    assert sglang.help_argv(_recipe(entrypoint="cli"), "/v/bin/python")[0] == ("/v/bin/sglang", "serve", "--help")
    assert sglang.help_argv(_recipe(), "/v/bin/python")[0] == ("/v/bin/python", "-m", "sglang.launch_server",
                                                             "--help")


def test_the_builtin_recipe_on_a_cpu_machine_gets_the_scaffolding(no_cuda_driver: None) -> None:
    recipe = parse_recipe(yaml.safe_load(RECIPE.read_text()))
    plan = sglang.plan(recipe, "/v/bin/python", "m", "127.0.0.1", 8000)
    assert plan.env["SGLANG_USE_CPU_ENGINE"] == "1"
    standin = Path(plan.env["PYTHONPATH"])
    assert (standin / "sgl_kernel" / "__init__.py").is_file()
    # a report shows it by name, never by this machine's path
    assert plan.shown == {"SGLANG_USE_CPU_ENGINE": "1", "PYTHONPATH": "<abbisect>/builtin/sglang_cpu"}
    assert plan.argv[:2] == ("/v/bin/sglang", "serve") and "--sleep-on-idle" in plan.argv


@pytest.mark.parametrize("recipe", [
    _recipe(repo="https://github.com/sgl-project/sglang"),  # a user's SGLang, even on the CPU
    _recipe(repo="/home/me/sglang"),
    _recipe(flags=["--tp-size", "1"]),  # the built-in, not on the CPU
    _recipe(flags=["--device", "cuda"]),
])
def test_no_other_launch_gets_it(no_cuda_driver: None, recipe) -> None:
    plan = sglang.plan(recipe, "py", "m", "127.0.0.1", 8000)
    assert plan.env == {} and plan.shown == {}


def test_not_on_a_machine_with_a_cuda_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sglang_cpu, "cuda_driver", lambda: True)
    assert sglang.plan(_recipe(), "py", "m", "127.0.0.1", 8000).env == {}


def test_an_sglang_log_is_read_for_sglangs_signatures_not_vllms() -> None:
    """The real 0.5.23 server logs uvicorn's "Application startup complete.", vLLM's ready line: an SGLang
    launch's log is scanned without vLLM's signatures (and the `command` engine's with every engine's)."""
    log = ("[2026-12-05 03:11:03] Parameter lm_head.weight_scale not found in params_dict\n"
           "[2026-12-05 03:11:13] INFO:     Application startup complete.\n"
           "[2026-12-05 03:11:19] The server is fired up and ready to roll!\n")
    found = [m.id for m in scan_text(log, pipeline._catalogue(_recipe()))]
    assert found == ["param_not_found", "sglang_ready"]
    command = parse_recipe({"name": "x", "engine": {"kind": "command", "repo": "."},
                            "launch": {"command": ["{python}", "s.py"]}, "prompts": ["p"]})
    assert "vllm_ready" in [m.id for m in scan_text(log, pipeline._catalogue(command))]


def test_the_log_says_which_sgl_kernel_served() -> None:
    line = "sgl_kernel: abbisect's CPU stand-in (test scaffolding of builtin:sglang-0.5.23)\n"
    assert "stand-in" in str(sglang.facts(line)["sgl_kernel"])
    assert "sgl_kernel" not in sglang.facts("[2026-12-05 03:00:00] Load weight end.\n")


@pytest.fixture(scope="module")
def standin():
    torch = pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("sgl_kernel_standin",
                                                  sglang_cpu.STANDIN / "sgl_kernel" / "__init__.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return torch, mod


def test_standin_assigns_each_requests_slots_in_order(standin) -> None:
    torch, k = standin
    req_to_token = torch.zeros((4, 8), dtype=torch.int32)
    # rows 2 and 0 get 3 and 2 new slots: 3 from out_cache_loc's start, then the next 2
    k.assign_req_to_token_pool_cpu(torch.tensor([2, 0]), req_to_token, torch.tensor([1, 5]), torch.tensor([4, 7]),
                                   torch.tensor([10, 11, 12, 13, 14], dtype=torch.int64), 8)
    assert req_to_token[2].tolist() == [0, 10, 11, 12, 0, 0, 0, 0]
    assert req_to_token[0].tolist() == [0, 0, 0, 0, 0, 13, 14, 0]
    assert req_to_token[1].sum() == 0 and req_to_token[3].sum() == 0


def test_standin_copies_kv_rows_in_every_layer(standin) -> None:
    torch, k = standin
    layers = [torch.arange(24, dtype=torch.float32).reshape(6, 4) + 100 * n for n in range(2)]
    before = [t.clone() for t in layers]
    ptrs = torch.tensor([t.data_ptr() for t in layers], dtype=torch.int64)
    strides = torch.tensor([t.stride(0) * t.element_size() for t in layers], dtype=torch.int64)
    k.copy_all_layer_kv_cache_cpu(ptrs, strides, torch.tensor([5, 0]), torch.tensor([1, 3]))
    for t, old in zip(layers, before):
        assert t[5].tolist() == old[1].tolist() and t[0].tolist() == old[3].tolist()
        assert t[1:5].tolist() == old[1:5].tolist()


def test_standin_names_what_it_lacks_when_called(standin) -> None:
    _, k = standin
    from_import = k.fused_add_rmsnorm  # a module-level import of an unrelated path passes
    with pytest.raises(NotImplementedError, match="fused_add_rmsnorm"):
        from_import()


# A server shaped as SGLang's: a main process whose SIGTERM handler ends its own child (SGLang's kill_process_tree)
# and a child that reports a SIGTERM from anyone else (SGLang's main process takes a child dying first for a crash).
# The main process gives a child that was signalled too the time to say so before it kills it: the two handlers
# would otherwise race on a busy host.
_CHILD = ("import signal, sys, time\n"
          "def term(*_):\n    print('child: SIGTERM from outside', flush=True); sys.exit(0)\n"
          "signal.signal(signal.SIGTERM, term); print('child up', flush=True)\n"
          "while True: time.sleep(0.05)\n")
_MAIN = ("import signal, subprocess, sys, time\n"
         f"child = subprocess.Popen([sys.executable, '-c', {_CHILD!r}])\n"
         "def term(*_):\n    print('main: SIGTERM', flush=True)\n"
         "    try:\n        child.wait(timeout=3)\n"  # a child signalled too ends itself (its line is written)
         "    except subprocess.TimeoutExpired:\n        child.kill(); child.wait()\n"
         "    sys.exit(0)\n"
         "signal.signal(signal.SIGTERM, term)\n"
         "while True: time.sleep(0.05)\n")


@pytest.mark.e2e
@pytest.mark.parametrize("main_first", [True, False])
def test_sglangs_teardown_signals_the_main_process_first(tmp_path: Path, main_first: bool) -> None:
    from abbisect.launch import server as launch
    from abbisect.launch.engines.base import LaunchPlan
    from abbisect.score.scanner import LineScanner

    assert sglang.plan(_recipe(), "py", "m", "127.0.0.1", 8000).stop_main_first
    plan = LaunchPlan((sys.executable, "-c", _MAIN), {}, None, "child up")
    server = launch.start(plan, dict(os.environ), tmp_path / "server.log", tmp_path, "http://127.0.0.1:9",
                          cache=tmp_path / "cache", scanner=LineScanner(ready="child up"))
    assert launch.wait_ready(server, plan, 60).status == "ready"
    teardown = launch.stop(server, 10.0, main_first)
    log = (tmp_path / "server.log").read_text()
    assert "main: SIGTERM" in log and teardown.signal == "SIGTERM" and teardown.leftover_pids == ()
    # main first: the child is ended by its parent, never by us; all at once: it is signalled too
    assert ("child: SIGTERM from outside" in log) is not main_first
