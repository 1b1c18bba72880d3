"""vLLM per-commit wheels: a local index over real HTTP laid out as vLLM's, and a toy "vllm" whose setup.py
takes its compiled part from VLLM_PRECOMPILED_WHEEL_LOCATION, as vLLM's does."""

from __future__ import annotations

import functools
import json
import platform
import subprocess
import threading
import urllib.parse
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_env_upstream import _history, _wheel

from abbisect import checkout
from abbisect.environment import ensure_env
from abbisect.environment.store import env_plan
from abbisect.environment.vllm_wheels import resolve
from abbisect.infra.errors import InfraError
from abbisect.recipe import Install, make_install

ARCH = platform.machine()

SETUP = '''import io, os, urllib.request, zipfile
from setuptools import setup

here = os.path.dirname(os.path.abspath(__file__))
loc = os.environ.get("VLLM_PRECOMPILED_WHEEL_LOCATION")
if os.environ.get("VLLM_USE_PRECOMPILED") and loc:
    data = urllib.request.urlopen(loc).read() if "://" in loc else open(loc, "rb").read()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        compiled = zf.read("vllm/_compiled.py")
    with open(os.path.join(here, "vllm", "_compiled.py"), "wb") as fh:
        fh.write(compiled)
setup()
'''
OLD_SETUP = "from setuptools import setup\n# takes the nightly wheel, whatever the commit\nsetup()\n"
PYPROJECT = ('[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
             '[project]\nname = "vllm"\nversion = "0.0.1"\n\n[tool.setuptools]\npackages = ["vllm"]\n')
TREE = {"pyproject.toml": PYPROJECT, "vllm/__init__.py": "", "setup.py": SETUP}


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def _publish(root: Path, sha: str, variants: dict[str | None, str]) -> None:
    """vLLM's layout: the wheels in <sha>/, one index per variant in <sha>/<variant>/vllm/ (the default
    variant in <sha>/vllm/), each with a metadata.json whose paths are relative and URL-quoted."""
    version = f"0.11.2.dev3+g{sha[:9]}"
    for folder, variant in variants.items():
        local = f"{version}.{variant}" if variant else version
        wheel = _wheel(root / sha, "vllm", local, {"vllm/_compiled.py":
                                                   f"COMMIT = {sha!r}\nVARIANT = {variant or 'cu130'!r}\n".encode()})
        name = f"vllm-{local}-cp38-abi3-manylinux1_{ARCH}.whl"
        wheel.rename(root / sha / name)
        index = root / sha / folder / "vllm" if folder else root / sha / "vllm"
        index.mkdir(parents=True, exist_ok=True)
        up = "../../" if folder else "../"
        meta = json.loads((index / "metadata.json").read_text()) if (index / "metadata.json").exists() else []
        meta.append({"package_name": "vllm", "version": version, "build_tag": None, "python_tag": "cp38",
                     "abi_tag": "abi3", "platform_tag": f"manylinux1_{ARCH}", "variant": variant, "filename": name,
                     "path": up + urllib.parse.quote(name, safe="")})
        (index / "metadata.json").write_text(json.dumps(meta))


@pytest.fixture(scope="module")
def vllm_history(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("vllm")
    repo = tmp / "vllm"
    old, legacy, a, b = _history(repo, [{**TREE, "setup.py": OLD_SETUP}, TREE, {**TREE, "README": "a\n"},
                                        {**TREE, "README": "b\n"}])
    index = tmp / "index"
    # commit a: the default variant (cu130 builds, alias cu130) and cu129; a mislabelled cu128 folder
    _publish(index, a, {None: None, "cu129": "cu129"})
    _publish(index, a, {"cu130": None})
    _publish(index, a, {"cu128": "cu129"})
    # the era before metadata.json: one wheel per commit under a fixed name
    lw = _wheel(index / legacy, "vllm", "1.0.0.dev", {"vllm/_compiled.py": f"COMMIT = {legacy!r}\n".encode()})
    lw.rename(index / legacy / f"vllm-1.0.0.dev-cp38-abi3-manylinux1_{ARCH}.whl")
    # commit b (and old) have no wheel of their own, like a release-branch commit or a fork's; b's folder
    # lists a's wheel under cu126, as a nightly alias would: another commit's build is never taken as b's
    (index / b / "cu126" / "vllm").mkdir(parents=True)
    (index / b / "cu126" / "vllm" / "metadata.json").write_text((index / a / "cu129" / "vllm" / "metadata.json")
                                                               .read_text().replace('"cu129"', '"cu126"'))
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(index)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    resolve.cache_clear()
    yield {"repo": repo, "old": old, "legacy": legacy, "a": a, "b": b,
           "url": f"http://127.0.0.1:{server.server_address[1]}", "cache": tmp / "cache"}
    server.shutdown()
    server.server_close()


def _install(h: dict, **kw) -> Install:
    return make_install(strategy="vllm-wheels", wheel_index=h["url"], **kw)


def _build(h: dict, sha: str, install: Install):
    source = checkout.worktree(h["repo"], sha, h["cache"])
    return ensure_env(source, sha, install, None, h["cache"], timeout=300)


def _compiled(python: str) -> str:
    code = "import vllm._compiled as c; print(c.COMMIT, getattr(c, 'VARIANT', '-'))"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.e2e
def test_the_commits_own_wheel_of_the_asked_variant_is_built_in(vllm_history: dict) -> None:
    h = vllm_history
    env = _build(h, h["a"], _install(h, variant="cu129"))
    assert env.ok, Path(env.log).read_text()
    assert _compiled(env.python) == f"{h['a']} cu129"
    assert env.facts["wheel"] == f"vllm-0.11.2.dev3+g{h['a'][:9]}.cu129-cp38-abi3-manylinux1_{ARCH}.whl"
    url = f"{h['url']}/{h['a']}/vllm-0.11.2.dev3%2Bg{h['a'][:9]}.cu129-cp38-abi3-manylinux1_{ARCH}.whl"
    assert any(f"VLLM_PRECOMPILED_WHEEL_LOCATION={url} " in s for s in env.steps), env.steps

    cu130 = _build(h, h["a"], _install(h, variant="cu130"))
    assert cu130.ok and cu130.key != env.key  # the variant is a key of the venv
    assert _compiled(cu130.python) == f"{h['a']} cu130"


def test_missing_commit_and_wrong_variant_are_untestable_with_the_reason(vllm_history: dict) -> None:
    h = vllm_history
    missing = _build(h, h["b"], _install(h, variant="cu129"))
    assert not missing.ok and missing.error.startswith(f"no per-commit wheel for {h['b']} (variant cu129)")
    assert not Path(missing.path).exists()  # nothing was built
    alias = _build(h, h["b"], _install(h, variant="cu126"))
    assert not alias.ok and alias.error.startswith(f"no per-commit wheel for {h['b']} (variant cu126)")
    for variant in ("cu126", "cu128"):  # not published / a folder listing another variant's wheel
        wrong = _build(h, h["a"], _install(h, variant=variant))
        assert not wrong.ok and f"no per-commit wheel for {h['a']} (variant {variant})" in wrong.error


@pytest.mark.e2e
def test_nearest_wheel_only_when_the_recipe_allows_it_and_says_so(vllm_history: dict) -> None:
    h = vllm_history
    env = _build(h, h["b"], _install(h, variant="cu129", nearest_wheel=True))
    assert env.ok, env.error
    assert _compiled(env.python) == f"{h['a']} cu129"  # b's own Python source, a's compiled part
    assert env.facts["wheel commit"] == h["a"]
    assert env.facts["note"].startswith(f"compiled parts from {h['a']}, the nearest first-parent ancestor")


@pytest.mark.e2e
def test_eras_without_metadata_and_without_the_location_switch(vllm_history: dict) -> None:
    h = vllm_history
    legacy = _build(h, h["legacy"], _install(h))
    assert legacy.ok, legacy.error
    assert _compiled(legacy.python) == f"{h['legacy']} -"
    # a CUDA variant asked for by name is never replaced by the one-build-per-commit wheel of that era
    assert "no per-commit wheel" in _build(h, h["legacy"], _install(h, variant="cu129")).error
    old = _build(h, h["old"], _install(h))
    assert not old.ok and "does not read VLLM_PRECOMPILED_WHEEL_LOCATION" in old.error


def test_an_unreachable_index_is_an_infrastructure_fault(vllm_history: dict, tmp_path: Path) -> None:
    h = vllm_history
    with pytest.raises(InfraError, match="wheel index unreachable"):
        env_plan(h["repo"], h["a"], make_install(strategy="vllm-wheels", wheel_index="http://127.0.0.1:9",
                                            variant="cu129"), None, tmp_path)


def test_index_urls_are_filled_per_commit(vllm_history: dict, tmp_path: Path) -> None:
    h = vllm_history
    install = make_install(strategy="editable", extra_index_urls=[h["url"] + "/{sha}/cu129"],
                      index_url="https://example.invalid/{short:9}/{short}/{version}")
    plan = env_plan(tmp_path / "wt", h["a"], install, None, tmp_path, git_dir=h["repo"])
    argv = next(s for s in plan.steps if s.desc == "install checkout").argv
    short = subprocess.run(["git", "-C", str(h["repo"]), "rev-parse", "--short", h["a"]], capture_output=True,
                           text=True, check=True).stdout.strip()
    assert argv[argv.index("--extra-index-url") + 1] == f"{h['url']}/{h['a']}/cu129"
    assert argv[argv.index("--index-url") + 1] == f"https://example.invalid/{h['a'][:9]}/{short}/0.0.1"
