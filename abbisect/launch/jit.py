"""A server's JIT, compile and autotune caches: where the engine and its kernel stack write what they compiled.

Left alone, an engine writes them under the user's home and /tmp (vLLM's torch.compile cache in ~/.cache/vllm,
inductor's in /tmp/torchinductor_$USER, Triton's in ~/.triton/cache, FlashInfer's, DeepGEMM's, CUDA's PTX cache),
so one commit's compiled graphs, kernels and autotune choices can serve another commit's launch, and a launch
starts cold or warm by chance. `launch.jit_cache` says where they go instead:

- `commit` (the default): one folder per commit's environment (its venv key) in abbisect's cache, warm across
  that environment's own launches, never seen by another's. On a cluster each node has its own cache, so
  its own folders.
- `launch`: a fresh folder for every launch, removed after it: every launch compiles from nothing (for a bug
  that lives in the compile step, which a warm cache would skip).
- `user`: nothing is set: the engine's own defaults, shared with everything else the user runs.

Each engine adapter lists the variables its stack reads (`jit_caches`); `prepare` points each at a subfolder,
and the trial hands them to the server's environment under the recipe's `env`, which wins where it sets one.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from abbisect.infra.cache import Cache, hold, release, remove_if_unused

TEMPORARY = "tmpdir"  # the server's temporary folder: named so that no path of it reads as the machine's /tmp
# A Unix socket's name holds 107 bytes, and engines name theirs <temporary folder>/<uuid4> (vLLM's ZMQ sockets,
# multiprocessing's listeners): a server whose folder's temporary folder would be longer than this keeps the
# machine's (a cache at most about 38 characters deep fits: ~/.cache/abbisect does).
SOCKET_ROOM = 107 - 1 - 36

# (variable, subfolder) of each cache, by the library that reads it (recipes/README.md, "JIT and compile caches",
# says what each relocates).
TORCH_STACK: tuple[tuple[str, str], ...] = (
    ("TORCHINDUCTOR_CACHE_DIR", "inductor"),  # inductor's FX graph, AOTAutograd and autotune caches
    ("TRITON_CACHE_DIR", "triton"),  # compiled Triton kernels
    ("CUDA_CACHE_PATH", "cuda"),  # the driver's PTX JIT ComputeCache
    ("TORCH_EXTENSIONS_DIR", "torch_extensions"),  # torch.utils.cpp_extension's JIT builds
    # inductor's precompiled C++ headers (about 150 MB) go to the temporary folder whatever its cache folder says,
    # and a later "cold" start of any commit would reuse them: the server's temporary folder is the commit's own
    ("TMPDIR", TEMPORARY),
)
KERNEL_LIBS: tuple[tuple[str, str], ...] = (
    ("FLASHINFER_WORKSPACE_BASE", "flashinfer"),  # FlashInfer's JIT ops under <base>/.cache/flashinfer
    ("DG_JIT_CACHE_DIR", "deep_gemm"),  # DeepGEMM's JIT kernels
    ("TVM_FFI_CACHE_DIR", "tvm_ffi"),
    ("TILELANG_CACHE_DIR", "tilelang"),
)
VLLM: tuple[tuple[str, str], ...] = (("VLLM_CACHE_ROOT", "vllm"),)  # torch.compile cache, FlashInfer autotune
SGLANG: tuple[tuple[str, str], ...] = (
    ("SGLANG_CACHE_DIR", "sglang"),  # its JIT kernels, DeepGEMM's and FlashInfer's autotune in recent versions
    ("SGLANG_DG_CACHE_DIR", "deep_gemm"),  # DeepGEMM's cache as older versions name it
)


class JitMode(StrEnum):
    """`launch.jit_cache`: where a launch's JIT and compile caches go."""

    COMMIT = "commit"
    LAUNCH = "launch"
    USER = "user"

    @property
    def told(self) -> str:
        return {JitMode.COMMIT: "a folder per commit's environment in abbisect's cache, warm across its own "
                                "launches, never shared with another commit",
                JitMode.LAUNCH: "a fresh folder every launch: every launch compiles from nothing",
                JitMode.USER: "the user's own caches (home and /tmp), shared with every other commit and "
                              "program: a launch may start warm on another commit's kernels"}[self]


class Start(StrEnum):
    """How a launch's caches started."""

    COLD = "cold"  # its folder held nothing: everything the engine compiles, it compiles now
    WARM = "warm"  # its folder held what earlier launches of the same environment wrote
    UNKNOWN = "unknown"  # the user's caches (or the recipe's own): warm or cold by what ran before


@dataclass(frozen=True)
class JitCache:
    """A launch's JIT caches, as its result records them."""

    mode: JitMode
    start: Start
    folder: str | None = None  # None: the user's caches
    files: int = 0  # files the folder held when the launch started
    variables: tuple[str, ...] = ()  # the variables pointed into the folder (TMPDIR left out when it would not fit)
    overridden: tuple[str, ...] = ()  # of those, what the recipe's env sets itself (the recipe's value wins)

    @property
    def machine_temporary(self) -> bool:
        """Whether the server kept the machine's temporary folder in abbisect's cache (a socket named in its own
        would not have fit: `prepare`)."""
        return self.folder is not None and "TMPDIR" not in self.variables


def count_files(folder: Path) -> int:
    """Files the compile caches under `folder` hold (0 when there is none): the server's temporary folder left out
    (an eager launch leaves its temporary files and sockets there, which compile nothing)."""
    return sum(len(files) for root, dirs, files in os.walk(folder)
               if Path(root).relative_to(folder).parts[:1] != (TEMPORARY,))


def prepare(mode: JitMode, variables: tuple[tuple[str, str], ...], cache: Cache, env_key: str,
            recipe_env: dict[str, str]) -> tuple[JitCache, dict[str, str]]:
    """The launch's caches and the variables that point the server at them. The folder is held (in use) until
    `done` — held before it is made, so `abbisect cache gc` never removes it under a launch. A start is `unknown`
    when the recipe's env points a compile cache elsewhere (what that holds is not abbisect's to count)."""
    if mode is JitMode.USER:
        return JitCache(mode, Start.UNKNOWN), {}
    folder = cache.jit(env_key if mode is JitMode.COMMIT else f"{env_key}.{uuid.uuid4().hex[:8]}")
    hold(folder)
    try:
        env = {name: str(folder / sub) for name, sub in variables}
        if len(env.get("TMPDIR", "")) > SOCKET_ROOM:  # a socket an engine names in it would not fit: the server
            del env["TMPDIR"]  # keeps the machine's temporary folder (the report says so)
        for path in set(env.values()):
            Path(path).mkdir(parents=True, exist_ok=True)
        files = count_files(folder)
    except BaseException:
        release(folder)
        raise
    overridden = tuple(name for name in env if name in recipe_env)
    start = (Start.UNKNOWN if set(overridden) - {"TMPDIR"} else Start.WARM if files else Start.COLD)
    caches = JitCache(mode, start, str(folder), files, tuple(env), overridden)
    if "TMPDIR" in env:  # Ray names its sockets under its temporary folder too (…/ray/session_…/sockets/…): it
        # keeps the machine's, which holds no compiled code
        env["RAY_TMPDIR"] = os.environ.get("RAY_TMPDIR", tempfile.gettempdir())
    return caches, env


def done(jit: JitCache) -> None:
    """The launch is over: its folder is released, and removed when it was the launch's own."""
    if jit.folder is None:
        return
    folder = Path(jit.folder)
    release(folder)
    if jit.mode is JitMode.LAUNCH:
        remove_if_unused(folder)
