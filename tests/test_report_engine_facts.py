"""The engine's version and flags read from its own start-up log (lines as vLLM and SGLang print them)."""

from __future__ import annotations

from abbisect.launch.engines import sglang, vllm

P = "(APIServer pid=7095) INFO 11-30 05:01:02"

VLLM_LOGO = f"""{P} [launcher.py:380]
{P} [launcher.py:380]        █     █     █▄   ▄█
{P} [launcher.py:380]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0
{P} [launcher.py:380]   █▄█▀ █     █     █     █  model   /models/smollm2
{P} [launcher.py:380]    ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀
{P} [api_utils.py:286] non-default args: {{'model_tag': '/m', 'host': '127.0.0.1', 'port': 8123, 'enforce_eager': True}}
(EngineCore pid=7115) INFO 11-30 05:02:40 [core.py:402] init engine took 88.10 s
"""


def test_vllm_logo_version_and_args():
    facts = vllm.facts(VLLM_LOGO)
    assert facts["version"] == "0.32.0"
    assert facts["non_default_args"]["enforce_eager"] is True


def test_vllm_logo_in_colour():
    line = f"{P} [launcher.py:380]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version \x1b[1m0.32.0+cpu\x1b[0m\n"
    assert vllm.facts(line)["version"] == "0.32.0+cpu"


def test_vllm_plain_and_older_lines():
    assert vllm.facts(f"{P} [launcher.py:380] vLLM server version 0.32.0, serving model /m\n")["version"] == "0.32.0"
    old = "INFO 05-02 10:11:12 [api_server.py:1043] vLLM API server version 0.8.5.post1\n"
    assert vllm.facts(old)["version"] == "0.8.5.post1"
    assert "version" not in vllm.facts("INFO nothing about versions here\n")


def test_sglang_server_args_and_version():
    log = ("[2026-11-30 05:00:00] server_args=ServerArgs(model_path='/m', tp_size=1, random_seed=0)\n"
           "[2026-11-30 05:00:01] sglang version: 0.5.23\n")
    facts = sglang.facts(log)
    assert facts["server_args"].startswith("model_path='/m'") and facts["version"] == "0.5.23"
    assert "version" not in sglang.facts("[2026-11-30] server_args=ServerArgs(model_path='/m')\n")


def test_sglang_0_5_23_logs_its_arguments_as_a_dict():
    """As the real sglang 0.5.23 logs them (docs/real-engines.md): a dict, and no version line."""
    log = ("[2026-12-05 03:09:59] server_args={'model_path': '/m', 'dtype': 'float32', 'device': 'cpu', "
           "'random_seed': 0, 'attention_backend': 'torch_native', 'disable_cuda_graph': False}\n"
           "[2026-12-05 03:11:19] The server is fired up and ready to roll!\n")
    facts = sglang.facts(log)
    assert facts["server_args"] == {"model_path": "/m", "dtype": "float32", "device": "cpu", "random_seed": 0,
                                    "attention_backend": "torch_native", "disable_cuda_graph": False}
    assert "version" not in facts
