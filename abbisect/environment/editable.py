"""`editable`: install the commit's own checkout (optionally a subdir, with extras) plus pins.

With install.read_pins the engine's heavy pins (compiled kernels, torch) are read from the commit's own
pyproject.toml and installed first, as a step of their own; they go into the key as `heavy`, so commits
whose pins match share the heavy part (one uv cache entry, hardlinked) and the report can say which pins
changed between two commits. The CUDA major those pins are built for (cu12, cu13) is a key of the venv.

The build itself changes by era, and is read from the same pyproject.toml (see build_needs): a package
whose build-system requires setuptools-rust compiles Rust (needs cargo) unless its setup.py reads a
`*_BUILD_RUST_EXTS` switch, which is then set to `none`; a version from setuptools-scm gets a pretended
version, because a clone without the release tags would otherwise build 0.0.0.dev0.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement, Requirement

from abbisect.environment.base import (
    BuildContext,
    Step,
    checkout_target,
    options,
    pip_install,
    post_steps,
    read_toml,
    scm_version,
    venv_steps,
)
from abbisect.infra import git
from abbisect.recipe import EditableInstall

name = "editable"
needs_source_after_build = True  # the venv runs the commit's worktree (see store.needs_source)


def _opts(ctx: BuildContext) -> EditableInstall:
    return options(ctx, EditableInstall)

# Compiled or CUDA-built distributions, by name: a rule, so packages an engine starts pinning tomorrow
# are covered too. torch and its family, triton, anything with "kernel" in its name (sgl-kernel,
# sglang-kernel, quack-kernels, humming-kernels), flashinfer and flash-attn, DeepGEMM / DeepEP builds,
# CUDA's own wheels (cuda-*, nvidia-*, cupy), tilelang, xformers, TVM's FFI.
HEAVY_NAME = re.compile(r"^(torch.*|triton.*|xformers|tilelang|.*kernel.*|flashinfer.*|flash-attn.*|flash-mla.*"
                        r"|.*deep-gemm.*|.*deep-ep.*|cuda-.*|nvidia-.*|cupy.*|.*tvm-ffi.*)$")
CUDA_EXTRA = re.compile(r"^cu(\d\d)\d*$")


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(data: dict, extras: tuple[str, ...]) -> list[Requirement]:
    """The project's dependencies plus the optional groups named by `extras` (following self-references
    such as `sglang[srt]` inside a group, as pip does)."""
    project = data.get("project", {})
    me = _canon(str(project.get("name", "")))
    groups = project.get("optional-dependencies", {})
    todo, seen, out = list(extras), set(), []
    raw = list(project.get("dependencies", []))
    while True:
        for text in raw:
            try:
                req = Requirement(text.split("#")[0].strip())
            except InvalidRequirement:
                continue
            if _canon(req.name) == me and me:
                todo += sorted(req.extras)
            else:
                out.append(req)
        todo = [g for g in todo if g not in seen]
        if not todo:
            return out
        group = todo.pop(0)
        seen.add(group)
        raw = list(groups.get(group, []))


def is_heavy(req: Requirement) -> bool:
    """An exact pin of a compiled or CUDA package (by name, or by a CUDA extra such as [cu13])."""
    exact = any(s.operator in ("==", "===") and "*" not in s.version for s in req.specifier)
    cuda_extra = any(CUDA_EXTRA.match(e) for e in req.extras)
    return exact and (bool(HEAVY_NAME.match(_canon(req.name))) or cuda_extra)


def heavy_pins(data: dict, extras: tuple[str, ...] = ()) -> list[str]:
    return sorted({str(r) for r in _requirements(data, extras) if is_heavy(r)})


def sourced_indexes(data: dict) -> dict[str, str]:
    """Packages the commit takes from a named index of its own (`[tool.uv.sources]` → `[[tool.uv.index]]`,
    e.g. torch from PyTorch's cu130 index), for this machine's markers; the default index is left out."""
    uv = data.get("tool", {}).get("uv", {})
    urls = {i.get("name"): i["url"] for i in uv.get("index", [])
            if isinstance(i, dict) and not i.get("default") and isinstance(i.get("url"), str)}
    out: dict[str, str] = {}
    for pkg, src in uv.get("sources", {}).items():
        for entry in src if isinstance(src, list) else [src]:
            if not isinstance(entry, dict) or entry.get("index") not in urls:
                continue
            try:
                if entry.get("marker") and not Marker(entry["marker"]).evaluate():
                    continue
            except InvalidMarker:
                continue
            out[_canon(pkg)] = urls[entry["index"]]
            break
    return out


def heavy_steps_pins(data: dict, extras: tuple[str, ...]) -> list[tuple[str | None, list[str]]]:
    """The heavy pins grouped by where they come from: each index of the commit's own sources first (so
    torch is PyTorch's CUDA build the commit asks for, not the default index's), then the rest."""
    sources = sourced_indexes(data)
    groups: dict[str | None, list[str]] = {}
    for pin in heavy_pins(data, extras):
        groups.setdefault(sources.get(_canon(Requirement(pin).name)), []).append(pin)
    return sorted(groups.items(), key=lambda kv: kv[0] is None)


def cuda_variant(data: dict, extras: tuple[str, ...] = ()) -> str | None:
    """The CUDA major the commit's requirements are built for — `cu12`, `cu13` — or None when they do not
    say. Evidence: a CUDA extra (flashinfer_python[cu13]), a local version (torch==2.9.1+cu128), a
    -cu12/-cu13 name (nvidia-cublas-cu12), the floor of cuda-python (>=13.0), or a package taken from a
    CUDA index of the commit's own (torch from .../whl/cu130). The highest one wins: the build needs it."""
    majors: set[str] = set()
    for req in _requirements(data, extras):
        for e in req.extras:
            if m := CUDA_EXTRA.match(e):
                majors.add(m.group(1))
        for spec in req.specifier:
            if m := re.search(r"\+cu(\d\d)\d", spec.version):
                majors.add(m.group(1))
            if _canon(req.name) in ("cuda-python", "cuda-bindings") and spec.operator in (">=", "==", "~="):
                majors.add(spec.version.split(".")[0])
        if m := re.search(r"-cu(\d\d)$", _canon(req.name)):
            majors.add(m.group(1))
        if m := re.search(r"/cu(\d\d)\d*/?$", sourced_indexes(data).get(_canon(req.name), "")):
            majors.add(m.group(1))
    majors = {m for m in majors if m in ("11", "12", "13", "14")}
    return f"cu{max(majors)}" if majors else None


@dataclass(frozen=True)
class BuildNeeds:
    """What building the commit's package needs, read from its own files."""

    env: dict[str, str] = field(default_factory=dict)  # set for the build (switches, pretended version)
    rust: bool = False
    blocker: str | None = None  # why this commit cannot be built here (the trial is untestable)


def build_needs(ctx: BuildContext) -> BuildNeeds:
    data = read_toml(ctx.read_package("pyproject.toml"))
    if not data:
        return BuildNeeds()
    requires = [_canon(r.split(";")[0]) for r in data.get("build-system", {}).get("requires", [])]
    env: dict[str, str] = {}
    rust = any(r.startswith("setuptools-rust") for r in requires) or "setuptools-rust" in data.get("tool", {})
    blocker = None
    if rust:
        switches = set(re.findall(r"\b([A-Z][A-Z0-9_]*_BUILD_RUST_EXTS)\b",
                                  (ctx.read_package("setup.py") or "") + (ctx.read_package("pyproject.toml") or "")))
        for var in sorted(switches):
            env[var] = ctx.install.env.get(var, "none")
        if not switches and shutil.which("cargo") is None:
            where = f"{ctx.install_subdir}/pyproject.toml" if ctx.install_subdir else "pyproject.toml"
            blocker = (f"needs cargo: {where} of {ctx.sha[:12]} builds Rust extensions (setuptools-rust) and "
                       "its build has no switch to skip them; install a Rust toolchain to test it")
    project = data.get("project", {})
    scm = any(r.startswith("setuptools-scm") for r in requires) and "version" in project.get("dynamic", [])
    if scm and project.get("name"):
        var = "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_" + re.sub(r"[-_.]+", "_", str(project["name"])).upper()
        env[var] = ctx.install.env.get(var) or scm_version(ctx)
    return BuildNeeds(env, rust, blocker)


def _data(ctx: BuildContext) -> dict:
    return read_toml(ctx.read_package("pyproject.toml"))


def _heavy(ctx: BuildContext) -> list[str] | None:
    data = _data(ctx)
    return heavy_pins(data, tuple(_opts(ctx).extras)) if data else None


def layer_inputs(ctx: BuildContext) -> dict[str, object] | None:
    """What a venv of the commit's dependencies depends on, when they can be shared: the commit declares
    them statically (pyproject [project], not `dynamic`) and the recipe keeps `share_deps`. Commits with
    equal inputs share that venv; each gets a thin venv of its own source on top (see `steps`). None: a
    full venv per commit (dependencies computed by setup.py, or sharing switched off)."""
    i = _opts(ctx)
    if not i.share_deps or i.system_site_packages:
        return None
    data = _data(ctx)
    project = data.get("project")
    if not isinstance(project, dict):
        return None
    dynamic = set(project.get("dynamic", []))
    if "dependencies" in dynamic or ("optional-dependencies" in dynamic and i.extras):
        return None
    deps = sorted({str(r) for r in _requirements(data, tuple(i.extras))})
    inputs: dict[str, object] = {"deps": deps, "pins": list(i.pins)}
    if i.read_pins:
        inputs["heavy"] = heavy_steps_pins(data, tuple(i.extras))
    return inputs


def base_steps(ctx: BuildContext) -> list[Step]:
    """The shared venv of the dependencies (`ctx.venv` is the shared one): heavy pins first, then the rest."""
    out = venv_steps(ctx)
    data = _data(ctx)
    if _opts(ctx).read_pins:
        for index, pins in heavy_steps_pins(data, tuple(_opts(ctx).extras)):
            where = ("--extra-index-url", index) if index else ()
            out.append(pip_install(ctx, *where, *pins, env=dict(ctx.install.env),
                                   desc="install the commit's heavy pins" + (f" from {index}" if index else "")))
    deps = sorted({str(r) for r in _requirements(data, tuple(_opts(ctx).extras))}) + list(ctx.install.pins)
    if deps:
        out.append(pip_install(ctx, *deps, desc="install the dependencies (shared)", env=dict(ctx.install.env)))
    return [*out, *post_steps(ctx)]


# Runs in the thin venv: a .pth line is a folder added to sys.path, here the shared venv's site-packages
# (the same Python, so the same layout under the other prefix).
_LAYER = ("import pathlib, sys, sysconfig; site = sysconfig.get_paths()['purelib']; "
          "pathlib.Path(site, '_abbisect_layer.pth').write_text(site.replace(sys.prefix, sys.argv[1], 1) + '\\n')")


# Re-points an editable install of another commit (same build files, same shared venv) at this commit's
# source: the donor's site-packages files are copied with its source path replaced (new files, never the
# donor's: uv hard-links them from its cache), RECORD hashes redone. Anything unexpected (the donor gone,
# a file that is not text, an entry-point script) and the step runs the real install instead.
_REPOINT = r"""
import base64, hashlib, json, os, pathlib, subprocess, sys, sysconfig
record, src, fallback = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
def install():
    sys.exit(subprocess.run(fallback).returncode)
try:
    donor = json.loads(record.read_text())
    dsite = pathlib.Path(donor["site"])
    if not (pathlib.Path(donor["root"]) / "complete.json").is_file() or not dsite.is_dir():
        install()
    old, site = donor["src"], pathlib.Path(sysconfig.get_paths()["purelib"])
    files = [p for p in dsite.rglob("*") if p.is_file() and p.name != "_abbisect_layer.pth"
             and "__pycache__" not in p.parts]
    if any(p.name == "entry_points.txt" for p in files):  # scripts in bin/ name the donor's venv
        install()
    texts = {p.relative_to(dsite): p.read_text() for p in files}
except (OSError, ValueError, KeyError, UnicodeDecodeError):
    install()
new = {rel: t.replace(old, src).replace(pathlib.Path(old).as_uri(), pathlib.Path(src).as_uri())
       for rel, t in texts.items()}
def digest(t):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=").decode()
for rel, t in new.items():
    if rel.name == "RECORD":
        lines = []
        for line in t.splitlines():
            name, _, rest = line.partition(",")
            if pathlib.PurePath(name) in new and rest:
                body = new[pathlib.PurePath(name)]
                line = f"{name},{digest(body)},{len(body.encode())}"
            lines.append(line)
        t = "\n".join(lines) + "\n"
    out = site / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(t)
print(f"re-pointed the editable install of {old} at {src}")
"""


def _build_files(ctx: BuildContext) -> str | None:
    """A digest of what an editable install of the package is made from, besides its source files: the
    build files and the top-level names (a package added at the top is found by discovery). None: the
    install may run code per commit (setup.py, a compiled or another build backend): always installed."""
    data = _data(ctx)
    backend = (data.get("build-system") or {}).get("build-backend")
    if (backend not in ("setuptools.build_meta", "hatchling.build", "flit_core.buildapi", "pdm.backend")
            or ctx.read_package("setup.py") is not None or build_needs(ctx).env or build_needs(ctx).rust
            or "ext-modules" in ((data.get("tool") or {}).get("setuptools") or {})):
        return None
    sub = (ctx.install_subdir or "").strip("/")
    top = git.call(["ls-tree", "--name-only", f"{ctx.sha}:{sub}" if sub else ctx.sha], ctx.git_dir or ctx.source)
    if top.returncode != 0:
        return None
    parts = [ctx.read_package(f) or "" for f in ("pyproject.toml", "setup.cfg", "MANIFEST.in")]
    return hashlib.sha256(json.dumps([parts, sorted(top.stdout.split()), sorted(_opts(ctx).extras),
                                      ctx.install.env], sort_keys=True).encode()).hexdigest()[:20]


def _layer_steps(ctx: BuildContext, base: Path) -> list[Step]:
    env = {**build_needs(ctx).env, **ctx.install.env}
    install = pip_install(ctx, "--no-deps", "-e", checkout_target(ctx), desc="install checkout", env=env)
    steps = [venv_steps(ctx)[0], Step((ctx.python, "-c", _LAYER, str(base)), "see the shared venv of the dependencies")]
    build = _build_files(ctx)
    if build is None:
        return [*steps, install]
    # Commits with the same build files on the same shared venv: the first one installs; the others re-point
    # its editable install at their own source (a few milliseconds instead of a PEP 660 build).
    record = base.parent / "editables" / f"{build}.json"
    if record.is_file():
        return [*steps, Step((ctx.python, "-c", _REPOINT, str(record), str(ctx.package_dir), *install.argv),
                             "install checkout (re-point an editable install of the same build files)", env)]
    donor = json.dumps({"root": str(ctx.venv.parent), "src": str(ctx.package_dir)})
    keep = ("import json, pathlib, sys, sysconfig; r = pathlib.Path(sys.argv[1]); r.parent.mkdir(exist_ok=True); "
            "d = json.loads(sys.argv[2]); d['site'] = sysconfig.get_paths()['purelib']; "
            "t = r.with_suffix('.tmp' + str(__import__('os').getpid())); t.write_text(json.dumps(d)); t.replace(r)")
    return [*steps, install, Step((ctx.python, "-c", keep, str(record), donor),
                                  "note this install for commits with the same build files")]


def key_inputs(ctx: BuildContext) -> dict[str, object]:
    inputs: dict[str, object] = {"sha": ctx.sha}
    if ctx.base is not None:
        inputs["layered_on"] = ctx.base.parent.name  # the shared venv's key
    if _opts(ctx).read_pins:
        inputs["heavy"] = _heavy(ctx)
        inputs["cuda"] = cuda_variant(_data(ctx), tuple(_opts(ctx).extras))
    needs = build_needs(ctx)
    if needs.env or needs.rust:
        # Without a switch, cargo's presence decides between a build and "needs cargo": a machine that gains
        # cargo rebuilds. A switch set to `none` skips the Rust build: cargo is not used, whether there or not.
        switches = [v for k, v in needs.env.items() if k.endswith("_BUILD_RUST_EXTS")]
        uses_cargo = needs.rust and not (switches and all(v == "none" for v in switches))
        inputs["build"] = {"env": needs.env, "cargo": uses_cargo and shutil.which("cargo") is not None}
    return inputs


def facts(ctx: BuildContext) -> dict[str, str]:
    """What the report shows about this venv besides its steps."""
    out: dict[str, str] = {}
    if _opts(ctx).read_pins:
        out["cuda"] = cuda_variant(_data(ctx), tuple(_opts(ctx).extras)) or "not stated by the pins"
    needs = build_needs(ctx)
    switches = [f"{k}={v}" for k, v in needs.env.items() if k.endswith("_BUILD_RUST_EXTS")]
    if needs.rust:
        out["rust"] = (f"skipped ({', '.join(switches)})" if switches else
                       "needs cargo, not on PATH" if needs.blocker else "built with cargo")
    return out


def blocker(ctx: BuildContext) -> str | None:
    return build_needs(ctx).blocker


def steps(ctx: BuildContext) -> list[Step]:
    if ctx.base is not None:
        return _layer_steps(ctx, ctx.base)
    out = venv_steps(ctx)
    if _opts(ctx).read_pins:
        for index, pins in heavy_steps_pins(_data(ctx), tuple(_opts(ctx).extras)):
            where = ("--extra-index-url", index) if index else ()
            out.append(pip_install(ctx, *where, *pins, env=dict(ctx.install.env),
                                   desc="install the commit's heavy pins" + (f" from {index}" if index else "")))
    env = {**build_needs(ctx).env, **ctx.install.env}
    out.append(pip_install(ctx, "-e", checkout_target(ctx), *ctx.install.pins, desc="install checkout", env=env))
    return [*out, *post_steps(ctx)]
