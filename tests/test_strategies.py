"""Install strategies on real venvs built by uv: overlay, wheel, precompiled plans, editable read_pins."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import zipfile
from pathlib import Path

import pytest

from abbisect.environment import ensure_env
from abbisect.environment.base import BuildContext, index_args, pip_config_find_links, read_toml
from abbisect.environment.editable import heavy_pins
from abbisect.environment.editable import key_inputs as editable_key
from abbisect.environment.store import env_plan
from abbisect.recipe import make_install

SHA1 = "1" * 40
SHA2 = "2" * 40


def _wheel(dest: Path, files: dict[str, bytes], name: str = "toypkg", version: str = "1.0") -> Path:
    """A minimal valid wheel, written by hand so the test needs no build backend."""
    dist = f"{name}-{version}.dist-info"
    files = {**files, f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    out = dest / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
        zf.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return out


@pytest.fixture()
def wheel(tmp_path: Path) -> Path:
    return _wheel(tmp_path, {"toypkg/__init__.py": b'ORIGIN = "wheel"\n', "toypkg/core.py": b"X = 1\n",
                             "toypkg/stale.py": b"", "toypkg/_C.abi3.so": b"\x7fELF compiled part"})


def _checkout(root: Path, origin: str) -> Path:
    (root / "toypkg").mkdir(parents=True)
    (root / "toypkg" / "__init__.py").write_text(f'ORIGIN = "{origin}"\n')
    (root / "toypkg" / "core.py").write_text("X = 2\n")
    return root


def _py(python: str, code: str) -> str:
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.e2e
def test_overlay_keeps_the_wheels_compiled_files_and_takes_the_commits_python(tmp_path: Path, wheel: Path) -> None:
    cache = tmp_path / "cache"
    install = make_install(strategy="overlay", wheel=str(wheel))
    env = ensure_env(_checkout(tmp_path / "c1", "commit-1"), SHA1, install, None, cache, timeout=300)
    assert env.ok, Path(env.log).read_text()
    site = _py(env.python, "import toypkg, os; print(os.path.dirname(toypkg.__file__))")
    assert _py(env.python, "import toypkg, toypkg.core; print(toypkg.ORIGIN, toypkg.core.X)") == "commit-1 2"
    assert (Path(site) / "_C.abi3.so").read_bytes() == b"\x7fELF compiled part"
    assert not (Path(site) / "stale.py").exists()  # gone from the commit, so gone from the venv

    again = ensure_env(_checkout(tmp_path / "c1b", "commit-1"), SHA1, install, None, cache, timeout=300)
    assert again.reused and again.key == env.key

    env2 = ensure_env(_checkout(tmp_path / "c2", "commit-2"), SHA2, install, None, cache, timeout=300)
    assert env2.ok and env2.key != env.key
    assert _py(env2.python, "import toypkg; print(toypkg.ORIGIN)") == "commit-2"
    assert _py(env.python, "import toypkg; print(toypkg.ORIGIN)") == "commit-1"
    # The overlay must not have written through uv's hardlinks into its cache: a plain install of the
    # same wheel still gets the wheel's own file.
    plain = ensure_env(tmp_path, SHA1, make_install(strategy="wheel", wheel=str(wheel)), None, cache, timeout=300)
    assert plain.ok, Path(plain.log).read_text()
    assert _py(plain.python, "import toypkg; print(toypkg.ORIGIN)") == "wheel"


def test_wheel_strategy_keys_by_requirement_not_by_commit(tmp_path: Path) -> None:
    pkg = make_install(strategy="wheel", package="toypkg==1.0")
    assert env_plan(tmp_path, SHA1, pkg, None, tmp_path).key == env_plan(tmp_path, SHA2, pkg, None, tmp_path).key
    tpl = make_install(strategy="wheel", wheel_url_template="https://wheels.invalid/{sha}/toypkg-{short:10}.whl")
    plan = env_plan(tmp_path, SHA1, tpl, None, tmp_path)
    k1, steps1 = plan.key, list(plan.steps)
    plan = env_plan(tmp_path, SHA2, tpl, None, tmp_path)
    k2, _ = plan.key, list(plan.steps)
    assert k1 != k2
    assert f"https://wheels.invalid/{SHA1}/toypkg-{SHA1[:10]}.whl" in steps1[1].argv


def test_precompiled_passes_the_full_sha_or_the_given_wheel(tmp_path: Path) -> None:
    plan = env_plan(tmp_path, SHA1, make_install(strategy="precompiled"), None, tmp_path)
    _, steps = plan.key, list(plan.steps)
    install = next(s for s in steps if "-e" in s.argv)
    assert install.env["VLLM_USE_PRECOMPILED"] == "1" and install.env["VLLM_PRECOMPILED_WHEEL_COMMIT"] == SHA1
    plan = env_plan(tmp_path, SHA1, make_install(strategy="precompiled", wheel="/w/vllm.whl"), None, tmp_path)
    _, steps = plan.key, list(plan.steps)
    install = next(s for s in steps if "-e" in s.argv)
    assert install.env["VLLM_PRECOMPILED_WHEEL_LOCATION"] == "/w/vllm.whl"
    assert "VLLM_PRECOMPILED_WHEEL_COMMIT" not in install.env


def _sglang_tree(root: Path, kernel: str, extra: str = "") -> Path:
    (root / "python").mkdir(parents=True)
    (root / "python" / "pyproject.toml").write_text(
        '[project]\nname = "sglang"\nversion = "0"\n'
        f'dependencies = ["sgl-kernel=={kernel}", "flashinfer_python==0.7.2", "torch==2.9.1", "requests"{extra}]\n')
    return root


def test_read_pins_shares_the_heavy_key_between_commits_with_identical_pins(tmp_path: Path) -> None:
    install = make_install(strategy="editable", read_pins=True)
    a = _sglang_tree(tmp_path / "a", "0.3.1")
    b = _sglang_tree(tmp_path / "b", "0.3.1", ', "tqdm"')
    c = _sglang_tree(tmp_path / "c", "0.3.2")
    assert heavy_pins(read_toml((a / "python" / "pyproject.toml").read_text())) == ["flashinfer_python==0.7.2", "sgl-kernel==0.3.1", "torch==2.9.1"]

    def heavy(src: Path, sha: str) -> object:
        return editable_key(BuildContext(src, sha, install, tmp_path / "v", tmp_path, "python"))["heavy"]

    assert heavy(a, SHA1) == heavy(b, SHA2) != heavy(c, SHA2)
    plan = env_plan(a, SHA1, install, "python", tmp_path)
    _, steps = plan.key, list(plan.steps)
    assert steps[1].desc == "install the commit's heavy pins" and "sgl-kernel==0.3.1" in steps[1].argv
    # a dry run has no checkout: the plan still renders, without the heavy step
    plan = env_plan(Path("<worktree of main>"), SHA1, install, "python", tmp_path)
    _, steps = plan.key, list(plan.steps)
    assert [s.desc for s in steps] == ["create venv", "install checkout"]


def test_pip_config_find_links_resolves_to_this_machines_setting() -> None:
    links = pip_config_find_links()
    args = index_args(make_install(find_links=["pip-config"]))
    assert args == [a for fl in links for a in ("--find-links", fl)]
    assert "pip-config" not in args
