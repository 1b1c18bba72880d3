"""What a commit changes in its dependencies' pins, read from real git commits (abbisect/bisect/pinchange.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from abbisect.bisect.pinchange import PinChange, exact, is_dependency_file, pin_diff, pins_at, pins_only
from abbisect.infra import git

PYPROJECT = """[project]
name = "engine"
version = "{version}"
dependencies = ["requests>=2", "sgl-kernel=={kernel}", "engine[extra]"]

[project.optional-dependencies]
extra = ["Deep_GEMM=={gemm}"]
"""


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git.git(repo, "add", "-A")
    git.git(repo, "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-q", "-m", message)
    return git.git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def repo(tmp_path) -> tuple[Path, list[str]]:
    repo = tmp_path / "engine"
    repo.mkdir()
    git.git(repo, "init", "-q", "-b", "main")
    shas = [
        _commit(repo, {"python/pyproject.toml": PYPROJECT.format(version="1", kernel="0.3.20", gemm="2.0"),
                       "python/engine/core.py": "x = 1\n", "requirements/cuda.txt": "# cuda\ntriton==3.4.0\n",
                       "setup.py": "setup(install_requires=['numpy>=1.26', 'torch==2.8.0'])\n"}, "initial"),
        # a pin bump and nothing else
        _commit(repo, {"python/pyproject.toml": PYPROJECT.format(version="1", kernel="0.3.21", gemm="2.0")}, "bump"),
        # a pin bump (in an optional group and a requirements file) with code and a version change of its own
        _commit(repo, {"python/pyproject.toml": PYPROJECT.format(version="2", kernel="0.3.21", gemm="2.1"),
                       "requirements/cuda.txt": "# cuda\ntriton==3.5.0\n", "python/engine/core.py": "x = 2\n",
                       "python/engine/new.py": "y = 1\n"}, "bump and code"),
        # code only; setup.py's pin lowered
        _commit(repo, {"python/engine/core.py": "x = 3\n",
                       "setup.py": "setup(install_requires=['numpy>=1.26', 'torch==2.7.1'])\n"}, "code"),
    ]
    return repo, shas


def test_pins_of_a_commit_come_from_every_dependency_file(repo):
    path, shas = repo
    pins = pins_at(path, shas[0], "python")
    assert pins == {"requests": ">=2", "sgl-kernel": "==0.3.20", "deep-gemm": "==2.0", "triton": "==3.4.0",
                    "numpy": ">=1.26", "torch": "==2.8.0"}  # the project's self-reference left out
    assert "sgl-kernel" not in pins_at(path, shas[0], "")  # python/pyproject.toml is the engine's only with subdir


def test_a_pin_bump_alone_touches_no_file_of_its_own(repo):
    path, shas = repo
    d = pin_diff(path, shas[0], shas[1], "python")
    assert d.changes == (PinChange("sgl-kernel", "==0.3.20", "==0.3.21"),)
    assert d.own == () and d.files == ("python/pyproject.toml",)
    assert d.told() == "bumps sgl-kernel 0.3.20 → 0.3.21, and touches no file of its own"
    assert [c.package for c in d.followable] == ["sgl-kernel"]


def test_a_bump_with_code_counts_its_own_files(repo):
    path, shas = repo
    d = pin_diff(path, shas[1], shas[2], "python")
    assert [c.told() for c in d.changes] == ["bumps deep-gemm 2.0 → 2.1", "bumps triton 3.4.0 → 3.5.0"]
    # pyproject also changes the project's version: a file of its own; the requirements file only pins
    assert set(d.own) == {"python/pyproject.toml", "python/engine/core.py", "python/engine/new.py"}
    assert d.told().endswith(", and touches 3 files of its own")
    lowered = pin_diff(path, shas[2], shas[3], "python")
    assert lowered.told() == "lowers torch 2.8.0 → 2.7.1, and touches 1 file of its own"


def test_no_pin_changed_is_said_too(repo):
    path, shas = repo
    git.git(path, "checkout", "-q", "-b", "side", shas[3])
    sha = _commit(path, {"python/engine/core.py": "x = 4\n", "python/engine/b.py": "b = 1\n"}, "code only")
    assert pin_diff(path, shas[3], sha, "python").told() == "changes no pin of its dependencies (2 files of its own)"


def test_added_dropped_and_ranged_pins():
    assert PinChange("x", None, "==1").told() == "adds x==1"
    assert PinChange("x", ">=1", None).told() == "drops x>=1"
    ranged = PinChange("torch", ">=2.1", ">=2.2")
    assert ranged.told() == "changes torch >=2.1 → >=2.2" and not ranged.followable
    assert exact("==1.2.0") == "1.2.0" and exact("==1.*") is None and exact(">=1") is None
    assert exact("==1 | ==2") is None
    assert is_dependency_file("requirements-dev.txt") and is_dependency_file("python/requirements/a/b.txt", "python")
    assert not is_dependency_file("docs/requirements.txt") and not is_dependency_file("tests/setup.py")
    assert pins_only(["--- a/x", "+++ b/x", '-  "sgl_kernel==1",', '+  "sgl-kernel==2",'], ["sgl-kernel"])
    assert not pins_only(['-version = "1"', '+version = "2"'], ["sgl-kernel"])
