"""An installed abbisect carries what it reads at run time: the default recipe and the toy engine template.

A source checkout reads them from the tree, so every other test passes even when the wheel leaves them out
(as it did: `abbisect run` without a recipe found none, and builtin:demo had no pyproject.toml to install).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from abbisect import builtin
from abbisect.builtin.history import TEMPLATE

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "abbisect"
SKIP = shutil.ignore_patterns(".*", "build", "dist", "*.egg-info", "results", "__pycache__", "tests", "benchmarks")


def test_wheel_ships_the_default_recipe_and_the_template(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=SKIP)  # a copy: the build writes build/ beside the source
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "out"),
                           str(src)], check=False, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp_path / "out").glob("abbisect-*.whl")
    with zipfile.ZipFile(wheel) as z:
        shipped = {name: z.read(name) for name in z.namelist() if name.startswith("abbisect/")}

    recipe = "abbisect/" + builtin.DEFAULT_RECIPE.relative_to(PACKAGE).as_posix()
    assert shipped.get(recipe) == builtin.DEFAULT_RECIPE.read_bytes(), f"{recipe} not in {wheel.name}"
    template = {"abbisect/" + p.relative_to(PACKAGE).as_posix(): p.read_bytes()
                for p in TEMPLATE.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert "abbisect/builtin/template/pyproject.toml" in template
    missing = sorted(name for name, data in template.items() if shipped.get(name) != data)
    assert not missing, f"not shipped (or not as in the tree): {missing}"
