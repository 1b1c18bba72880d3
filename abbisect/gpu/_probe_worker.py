"""Standalone: compile (and, on a GPU, launch) one Triton kernel over a sweep; print JSON rows.

Runs under the per-commit venv's python (triton and usually torch, no abbisect), so only the standard
library is imported at top level. Usage: python _probe_worker.py SPEC.json OUT.json

How the sizes stay honest: the kernel's arguments are the ones its own launcher passes (we intercept the
launcher's `kernel[grid](...)` call), and for each target we run Triton's own binder and `_pack_args` on
them — what `JITFunction.run` does before compiling — so the compile sees the same signature, constexprs
and specialization attributes (pointer alignment, divisibility by 16) as a real launch. Compiling an
ASTSource without those attributes yields a different kernel (smaller shared memory on Triton 3.6).
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import re
import sys
import traceback
import types
from pathlib import Path
from typing import Any

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
_TEMPLATE = re.compile(r"\$\{(\w+)\}")


class _Captured(Exception):
    """Raised by the spy so a launcher stops right after handing its arguments to the kernel."""


def _err(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return " | ".join(lines[-3:])[:400]


# ---------------------------------------------------------------- loading the kernel


def _returning(val: Any) -> Any:
    return lambda *a, **kw: val


def _shim_value(v: Any) -> Any:
    if isinstance(v, str) and v.startswith("@module:"):
        return importlib.import_module(v[len("@module:"):])
    if isinstance(v, dict):
        ns = types.SimpleNamespace()
        for k, sub in v.items():
            if k.endswith("()"):
                setattr(ns, k[:-2], _returning(_shim_value(sub)))
            else:
                setattr(ns, k, _shim_value(sub))
        return ns
    return v


def install_shims(shims: dict[str, dict[str, Any]]) -> None:
    """Replace modules the kernel file imports but the probe must not run (platform detection, ...)."""
    for name, attrs in shims.items():
        parts = name.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            if parent not in sys.modules:
                pkg = types.ModuleType(parent)
                pkg.__path__ = []  # a namespace stand-in: submodules come from shims or file loads
                sys.modules[parent] = pkg
        mod = types.ModuleType(name)
        for k, v in attrs.items():
            if k.endswith("()"):
                setattr(mod, k[:-2], _returning(_shim_value(v)))
            else:
                setattr(mod, k, _shim_value(v))
        sys.modules[name] = mod


def load_module(spec: dict[str, Any], source_root: Path) -> types.ModuleType:
    sys.path.insert(0, str(source_root))
    install_shims(spec.get("shims") or {})
    if spec.get("module"):
        return importlib.import_module(spec["module"])
    path = source_root / spec["file"]
    name = "abbisect_probe_" + re.sub(r"\W", "_", spec["file"].removesuffix(".py"))
    mspec = importlib.util.spec_from_file_location(name, path)
    if mspec is None or mspec.loader is None:
        raise FileNotFoundError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(mspec)
    sys.modules[name] = mod  # triton's @jit looks functions up through their module
    mspec.loader.exec_module(mod)
    return mod


def unwrap_jit(obj: Any) -> Any:
    from triton.runtime.jit import JITFunction

    seen = 0
    while not isinstance(obj, JITFunction) and hasattr(obj, "fn") and seen < 5:
        obj = obj.fn  # Autotuner / Heuristics wrap the JITFunction
        seen += 1
    if not isinstance(obj, JITFunction):
        raise TypeError(f"{obj!r} is not a @triton.jit kernel")
    return obj


# ---------------------------------------------------------------- building arguments


def _subst(v: Any, env: dict[str, Any]) -> Any:
    if isinstance(v, str):
        whole = _TEMPLATE.fullmatch(v)
        if whole:
            return env[whole.group(1)]
        return _TEMPLATE.sub(lambda m: str(env[m.group(1)]), v)
    if isinstance(v, list):
        return [_subst(x, env) for x in v]
    if isinstance(v, dict):
        return {k: _subst(x, env) for k, x in v.items()}
    return v


class FakeTensor:
    """Stands in for a tensor when torch is absent: Triton specializes on dtype and data_ptr alone."""

    def __init__(self, dtype: str, shape: list[int]) -> None:
        self.dtype = dtype
        self.shape = shape

    @staticmethod
    def data_ptr() -> int:
        return 0  # aligned, like any fresh allocation


def _make_tensor(a: dict[str, Any], named: dict[str, Any], device: str, torch: Any) -> Any:
    if a.get("view"):
        base = named[a["view"]["of"]]
        dim, start, length = a["view"]["narrow"]
        return base.narrow(dim, start, length)
    shape = [int(s) for s in a["tensor"]]
    if torch is None:
        return FakeTensor(a["dtype"], shape)
    dtype = getattr(torch, a["dtype"])
    fill = a.get("fill", "auto")
    if fill == "auto":
        fill = "randn" if dtype.is_floating_point else "zeros"
    if fill == "randn":
        return (torch.randn(shape, device=device) * 0.1).to(dtype)
    if fill == "arange":
        n = 1
        for s in shape:
            n *= s
        return torch.arange(n, device=device).reshape(shape).to(dtype)
    if fill == "zeros":
        return torch.zeros(shape, device=device, dtype=dtype)
    return torch.full(shape, float(fill), device=device).to(dtype)


def build_args(spec: dict[str, Any], env: dict[str, Any], device: str, torch: Any) -> tuple[list, dict]:
    named: dict[str, Any] = {}

    def one(a: Any) -> Any:
        a = _subst(a, env)
        if isinstance(a, dict) and ("tensor" in a or "view" in a):
            t = _make_tensor(a, named, device, torch)
            if a.get("name"):
                named[a["name"]] = t
            return t
        return a

    args = [one(a) for a in spec.get("args") or []]
    kwargs = {k: one(v) for k, v in (spec.get("kwargs") or {}).items()}
    return args, kwargs


def capture_call(mod: Any, kernel: Any, spec: dict, args: list, kwargs: dict) -> tuple[list, Any, dict]:
    """The (args, grid, kwargs) the launcher hands to `kernel[grid](...)`; without a launcher, ours."""
    if not spec.get("launcher"):
        return list(args), tuple(spec["grid"]), dict(kwargs)
    seen: list[tuple[list, Any, dict]] = []

    def spy(*a: Any, grid: Any, warmup: bool, **kw: Any) -> Any:
        seen.append((list(a), grid, dict(kw)))
        raise _Captured

    kernel.run = spy  # instance attribute shadows JITFunction.run; __getitem__ calls self.run
    try:
        getattr(mod, spec["launcher"])(*args, **kwargs)
    except _Captured:
        pass
    finally:
        del kernel.run
    if not seen:
        raise RuntimeError(f"launcher {spec['launcher']} returned without launching {spec['kernel']}")
    return seen[0]


# ---------------------------------------------------------------- compiling and launching


def _run_kwargs(kw: dict[str, Any]) -> dict[str, Any]:
    from triton import knobs

    kw = dict(kw)
    kw["debug"] = kw.get("debug") or knobs.runtime.debug
    kw["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    return kw


def compile_shared(kernel: Any, args: list, kwargs: dict, cc: int) -> int:
    """Shared memory of the kernel compiled for `cc` with the launch's own specialization; no GPU needed."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", cc, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    kw = _run_kwargs(kwargs)
    bound, specialization, options = binder(*args, **kw)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kw, bound, specialization, options)
    compiled = triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=target,
                              options=options.__dict__)
    return int(compiled.metadata.shared)


def launch_shared(kernel: Any, args: list, grid: Any, kwargs: dict, torch: Any) -> tuple[int | None, str | None]:
    from triton.runtime.jit import JITFunction

    try:
        compiled = JITFunction.run(kernel, *args, grid=grid, warmup=False, **kwargs)
        torch.cuda.synchronize()
        return int(compiled.metadata.shared), None
    except Exception as exc:  # noqa: BLE001
        m = re.search(r"Required: (\d+)", str(exc))
        return (int(m.group(1)) if m else None), _err(exc)


# ---------------------------------------------------------------- the sweep


def _combos(sweep: dict[str, list[Any]]) -> list[dict[str, Any]]:
    keys = list(sweep)
    return [dict(zip(keys, vals)) for vals in itertools.product(*(sweep[k] for k in keys))]


def _overrides(combo: dict, fixed: dict, kernel: Any) -> dict[str, Any]:
    names = set(kernel.arg_names) | set(LAUNCH_OPTIONS)
    out = {k: v for k, v in fixed.items() if k in names}
    out.update({k: v for k, v in combo.items() if k in names and v != "launcher"})
    return out


def _local_gpu(torch: Any) -> dict[str, Any] | None:
    if torch is None or not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(0)
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "class": f"sm_{major}{minor}", "cc": major * 10 + minor,
            "limit": getattr(props, "shared_memory_per_block_optin", None)}


def probe(spec: dict[str, Any], source_root: Path) -> dict[str, Any]:
    import triton

    try:
        import torch
    except ImportError:
        torch = None  # type: ignore[assignment]  # a compile-only probe runs without torch
    notes: list[str] = []
    if torch is None and spec.get("launcher"):
        raise RuntimeError("driving a launcher needs torch in this interpreter")
    mod = load_module(spec, source_root)
    kernel = unwrap_jit(getattr(mod, spec["kernel"]))
    gpu = _local_gpu(torch)
    want_launch = spec.get("mode", "both") in ("launch", "both")
    if want_launch and gpu is None:
        notes.append("no GPU here: launch rows skipped, compile rows only")
    compile_targets = list(spec["targets"]) if spec.get("mode", "both") != "launch" else []
    if gpu is not None and want_launch and all(t["name"] != gpu["class"] for t in compile_targets):
        # the GPU's own class is always cross-compiled too, so compile and launch can be compared
        compile_targets.append({"name": gpu["class"], "cc": gpu["cc"], "limit": gpu["limit"]})
    rows: list[dict[str, Any]] = []
    for combo in _combos(spec.get("sweep") or {}):
        env = {**combo}
        over = _overrides(combo, spec.get("constexprs") or {}, kernel)
        base: dict[str, Any] = {"combo": combo, "overrides": over}
        try:
            args, kwargs = build_args(spec, env, "cpu", torch)
            c_args, _grid, c_kw = capture_call(mod, kernel, spec, args, kwargs)
        except Exception as exc:  # noqa: BLE001
            rows += [{**base, "target": t["name"], "method": "compile", "error": _err(exc)} for t in compile_targets]
            continue
        default = all(c_kw.get(k, object()) == v for k, v in over.items())
        effective = {k: c_kw.get(k) for k in LAUNCH_OPTIONS if k in c_kw} | over
        base |= {"launcher_default": default, "effective": effective}
        for t in compile_targets:
            row = {**base, "target": t["name"], "method": "compile", "limit": t["limit"], "launched": None}
            try:
                row["shared_bytes"] = compile_shared(kernel, c_args, {**c_kw, **over}, t["cc"])
            except Exception as exc:  # noqa: BLE001
                row["error"] = _err(exc)
            rows.append(row)
        if want_launch and gpu is not None:
            row = {**base, "target": gpu["class"], "method": "launch", "limit": gpu["limit"], "gpu": gpu["name"]}
            try:
                g_args, g_kw = build_args(spec, env, "cuda", torch)
                l_args, l_grid, l_kw = capture_call(mod, kernel, spec, g_args, g_kw)
                row["shared_bytes"], row["error"] = launch_shared(kernel, l_args, l_grid, {**l_kw, **over}, torch)
                row["launched"] = row["error"] is None
            except Exception as exc:  # noqa: BLE001
                row["launched"], row["error"] = False, _err(exc)
            rows.append(row)
    return {
        "rows": rows, "notes": notes, "gpu": gpu, "triton": triton.__version__,
        "torch": getattr(torch, "__version__", None), "kernel": spec["kernel"], "file": spec["file"],
    }


def main(argv: list[str]) -> int:
    spec_path, out_path = Path(argv[1]), Path(argv[2])
    spec = json.loads(spec_path.read_text())
    try:
        result = probe(spec, Path(spec["source_root"]))
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        result = {"rows": [], "error": _err(exc), "kernel": spec.get("kernel"), "file": spec.get("file")}
    out_path.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
