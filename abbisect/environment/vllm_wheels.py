"""`vllm-wheels`: the commit's own Python source over the compiled parts of the wheel built from that commit.

vLLM's CI publishes a wheel per main commit and CUDA variant under a per-commit folder of its wheel index:
`<index>/<sha>/<variant>/vllm/metadata.json` (the index's default variant: `<index>/<sha>/vllm/…`), whose
entries name the wheel file and its relative path; file names carry the version with a 9-character
`+g<hash>` (`vllm-0.11.2.dev399+g3c7461c18.cu130-cp38-abi3-manylinux1_x86_64.whl`). Before that index
existed, a commit's folder held one wheel under a fixed name (`vllm-1.0.0.dev-cp38-abi3-<platform>.whl`).

setup.py's own choice of wheel depends on its era (a full-sha `VLLM_PRECOMPILED_WHEEL_COMMIT` only since
late 2025; before, `git merge-base` with the current branch, empty on a detached worktree, then the nightly
wheel: today's compiled code under old Python). So abbisect resolves the wheel itself and hands it over as
`VLLM_PRECOMPILED_WHEEL_LOCATION`, which every setup.py since the python-only dev setup honours; a commit
whose setup.py does not read it is untestable, as is one without a wheel (release branches, forks), unless
the recipe allows the nearest first-parent ancestor's wheel (`nearest_wheel`), which the result states.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass

from abbisect.environment.base import (
    BuildContext,
    Step,
    checkout_target,
    options,
    pip_install,
    post_steps,
    venv_steps,
)
from abbisect.infra.errors import InfraError
from abbisect.recipe import VllmWheelsInstall

name = "vllm-wheels"
needs_source_after_build = True  # the venv runs the commit's worktree (see store.needs_source)


def _opts(ctx: BuildContext) -> VllmWheelsInstall:
    return options(ctx, VllmWheelsInstall)

DEFAULT_INDEX = "https://wheels.vllm.ai"  # vLLM's own per-commit wheel index
NEAREST_LIMIT = 64  # first-parent ancestors searched for a wheel when the recipe allows one
LEGACY_NAME = "vllm-1.0.0.dev-cp38-abi3-manylinux1_{arch}.whl"
# CUDA major → the variant vLLM publishes for it (vLLM's setup.py maps them the same way).
VARIANT_OF_MAJOR = {"12": "cu129", "13": "cu130"}


@dataclass(frozen=True)
class Wheel:
    url: str
    filename: str
    variant: str  # "default" for the index's default variant
    commit: str  # the commit whose wheel this is
    size: int | None

    def identity(self) -> dict[str, object]:
        return asdict(self)


def _base(ctx: BuildContext) -> str:
    base = (_opts(ctx).wheel_index or DEFAULT_INDEX).rstrip("/")
    if "://" not in base:  # a local mirror of the index
        base = "file://" + os.path.abspath(os.path.expanduser(base))
    return base


def _fetch(url: str, head: bool = False) -> tuple[bytes | None, int | None]:
    """(body, size) of a URL; (None, None) when it is not there (404, missing file); InfraError when the
    index cannot be asked at all — that says nothing about the commit."""
    req = urllib.request.Request(url, method="HEAD" if head else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            body = b"" if head else resp.read()
            size = resp.headers.get("Content-Length")
            return body, int(size) if size and size.isdigit() else None
    except urllib.error.HTTPError as exc:
        if exc.code in (403, 404, 410):  # object stores answer 403 for a missing key
            return None, None
        raise InfraError(f"wheel index: {url} answered HTTP {exc.code}") from None
    except urllib.error.URLError as exc:
        if url.startswith("file://") and isinstance(exc.reason, FileNotFoundError | NotADirectoryError):
            return None, None
        raise InfraError(f"wheel index unreachable: {url}: {exc.reason}") from None
    except (TimeoutError, OSError) as exc:
        if url.startswith("file://"):
            return None, None
        raise InfraError(f"wheel index unreachable: {url}: {exc}") from None


@functools.lru_cache(maxsize=4096)
def resolve(base: str, sha: str, variant: str | None, legacy_ok: bool, arch: str) -> Wheel | None:
    """The wheel built from `sha` for `variant` (None: the index's default), or None if there is none."""
    folder = f"{base}/{sha}/{variant}/vllm/" if variant else f"{base}/{sha}/vllm/"
    body, _ = _fetch(folder + "metadata.json")
    if body is not None:
        try:
            entries = json.loads(body)
        except ValueError:
            raise InfraError(f"wheel index: {folder}metadata.json is not JSON") from None
        for e in entries if isinstance(entries, list) else []:
            if e.get("package_name") != "vllm" or arch not in str(e.get("platform_tag", "")):
                continue
            if e.get("variant") not in (None, variant):
                continue  # another CUDA build listed here: never a substitute
            hashed = re.search(r"\+g([0-9a-f]{7,40})", str(e.get("filename", "")))
            if hashed and not sha.startswith(hashed.group(1)):
                continue  # a wheel of another commit (a nightly alias): not this commit's build
            url = urllib.parse.urljoin(folder, str(e.get("path") or e.get("filename")))
            _, size = _fetch(url, head=True)
            return Wheel(url, str(e.get("filename") or url.rsplit("/", 1)[-1]), variant or "default", sha, size)
        return None
    if legacy_ok:
        url = f"{base}/{sha}/{LEGACY_NAME.format(arch=arch)}"
        found, size = _fetch(url, head=True)
        if found is not None:
            return Wheel(url, url.rsplit("/", 1)[-1], "default (one build per commit, before variants)", sha, size)
    return None


@functools.cache
def detected_variant() -> str | None:
    """The variant for this machine's driver (nvidia-smi's "CUDA Version"), None without one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi], check=False, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"CUDA Version:\s*(\d+)\.", out)
    return VARIANT_OF_MAJOR.get(found.group(1)) if found else None


def _variant(ctx: BuildContext) -> tuple[str | None, bool]:
    """(variant, explicit): from the recipe, else detected; None means the index's default."""
    if _opts(ctx).variant:
        return _opts(ctx).variant, True
    return detected_variant(), False


@dataclass(frozen=True)
class Choice:
    wheel: Wheel | None
    variant: str | None
    note: str | None = None  # when the wheel is another commit's
    missing: str | None = None  # why there is none


@functools.lru_cache(maxsize=1024)
def _choose(base: str, tree_root: str, sha: str, variant: str | None, explicit: bool, nearest: bool) -> Choice:
    from pathlib import Path

    from abbisect.environment.tree import CommitTree

    arch = platform.machine()
    label = variant or "default"
    wheel = resolve(base, sha, variant, not explicit, arch)
    if wheel is not None:
        return Choice(wheel, variant)
    missing = f"no per-commit wheel for {sha} (variant {label}) in {base}"
    if not nearest:
        return Choice(None, variant, missing=missing)
    ancestors = CommitTree(Path(tree_root), sha).first_parents(NEAREST_LIMIT + 1)[1:]
    for n, parent in enumerate(ancestors, 1):
        wheel = resolve(base, parent, variant, not explicit, arch)
        if wheel is not None:
            return Choice(wheel, variant, note=(f"compiled parts from {parent}, the nearest first-parent ancestor "
                                                f"with a wheel ({n} back): {sha[:12]} has none (variant {label})"))
    return Choice(None, variant, missing=f"{missing}, nor for its {len(ancestors)} nearest first-parent ancestors")


def choose(ctx: BuildContext) -> Choice:
    if not re.fullmatch(r"[0-9a-f]{40}", ctx.sha):  # a plan of a remote repository: the sha comes later
        return Choice(None, _variant(ctx)[0], missing="the sha is known once the repository is fetched")
    if not _setup_honours_location(ctx):  # untestable whatever the index holds: do not ask it
        return Choice(None, _variant(ctx)[0], missing="setup.py cannot be given the wheel")
    variant, explicit = _variant(ctx)
    return _choose(_base(ctx), str(ctx.tree.root), ctx.sha, variant, explicit, _opts(ctx).nearest_wheel)


def _setup_honours_location(ctx: BuildContext) -> bool:
    return "VLLM_PRECOMPILED_WHEEL_LOCATION" in (ctx.read_package("setup.py") or "")


def key_inputs(ctx: BuildContext) -> dict[str, object]:
    c = choose(ctx)
    return {"sha": ctx.sha, "variant": c.variant or "default",
            "wheel": c.wheel.identity() if c.wheel else {"missing": c.missing}}


def facts(ctx: BuildContext) -> dict[str, str]:
    c = choose(ctx)
    out = {"variant": c.variant or "default (the index's)"}
    if c.wheel:
        out["wheel"] = c.wheel.filename
        out["wheel commit"] = c.wheel.commit
        if c.note:
            out["note"] = c.note
    return out


def blocker(ctx: BuildContext) -> str | None:
    if not re.fullmatch(r"[0-9a-f]{40}", ctx.sha):
        return None  # a plan before the sha is known: nothing to say yet
    if not _setup_honours_location(ctx):
        return (f"setup.py of {ctx.sha[:12]} does not read VLLM_PRECOMPILED_WHEEL_LOCATION (older than vLLM's "
                "python-only dev setup): its precompiled build would take the nightly wheel")
    return choose(ctx).missing


def steps(ctx: BuildContext) -> list[Step]:
    c = choose(ctx)
    if c.wheel:
        location = c.wheel.url
    elif re.fullmatch(r"[0-9a-f]{40}", ctx.sha):
        location = "<no wheel: untestable>"
    else:
        location = f"<the wheel listed in {_base(ctx)}/<sha>/{c.variant + '/' if c.variant else ''}vllm/metadata.json>"
    env = {"VLLM_USE_PRECOMPILED": "1", "VLLM_PRECOMPILED_WHEEL_LOCATION": location,
           **ctx.install.env}
    return [*venv_steps(ctx),
            pip_install(ctx, "-e", checkout_target(ctx), *ctx.install.pins,
                        desc="install checkout over its commit's compiled wheel", env=env),
            *post_steps(ctx)]
