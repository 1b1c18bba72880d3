"""A stand-in for `sgl_kernel`, CPU test scaffolding of builtin:sglang-0.5.23: never what a user with a GPU runs.

The real `sgl_kernel` (the sglang-kernel wheel SGLang 0.5.23 pins) loads only where libcuda.so.1 exists. On a
machine without a GPU, SGLang's CPU engine (SGLANG_USE_CPU_ENGINE=1) imports two CPU ops from it; this module
gives them in plain PyTorch. Any other name resolves to a function that raises when called, so the module-level
imports of unrelated paths (speculative decoding, CUDA kernels) pass and a path that really needs one fails
loudly. It is first on the server's PYTHONPATH; the installed files stay untouched.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

import torch

__version__ = "0.0.0+abbisect-cpu-standin"
# One line in the server's log, so its report says which sgl_kernel served (abbisect/launch/engines/sglang.py).
MARK = "sgl_kernel: abbisect's CPU stand-in (test scaffolding of builtin:sglang-0.5.23)"
print(MARK, file=sys.stderr, flush=True)


def assign_req_to_token_pool_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                  start_offset: torch.Tensor, end_offset: torch.Tensor,
                                  out_cache_loc: torch.Tensor, pool_len: int) -> None:
    """For each request r in order: req_to_token[req_pool_indices[r], start[r]:end[r]] takes the next
    end[r] - start[r] entries of out_cache_loc."""
    taken = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist()):
        n = end - start
        if n <= 0:
            continue
        assert end <= pool_len, (end, pool_len)
        req_to_token[row, start:end] = out_cache_loc[taken:taken + n].to(req_to_token.dtype)
        taken += n


def copy_all_layer_kv_cache_cpu(data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor,
                                src_loc: torch.Tensor) -> None:
    """In every layer's buffer (its address in data_ptrs, its row size in bytes in strides), copy row src_loc[i]
    onto row tgt_loc[i]."""
    pairs = list(zip(tgt_loc.tolist(), src_loc.tolist()))
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist()):
        for tgt, src in pairs:
            ctypes.memmove(ptr + tgt * stride, ptr + src * stride, stride)


def __getattr__(name: str) -> Callable[..., None]:
    if name.startswith("__"):
        raise AttributeError(name)

    def missing(*args: object, **kwargs: object) -> None:
        raise NotImplementedError(f"sgl_kernel.{name}: not in abbisect's CPU stand-in (builtin:sglang-0.5.23 "
                                  "serves on the CPU with two ops only)")
    missing.__name__ = name
    return missing
