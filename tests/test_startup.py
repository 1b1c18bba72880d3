"""What a command loads before it does anything: `import abbisect.cli`, `--help` and a usage error load none of
the heavy libraries (scipy, pandas, rich, httpx) nor abbisect's statistics — a fact about sys.modules, not a
timing (benchmarks/cli_start.py times it). `git bisect run abbisect check` pays this start at every step.

Each case runs in a fresh interpreter (this one has loaded everything already)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import json, sys
argv = json.loads(sys.argv[1])
code = None
if argv is not None:
    sys.argv = ["abbisect", *argv]
    from abbisect.cli import main
    try:
        main()
    except SystemExit as exc:
        code = exc.code
else:
    import abbisect.cli
light = sorted(m for m in sys.modules if m == "pydantic" or m.startswith("abbisect.commands.")
               and m.split(".")[2] not in {"options", "endings", "common"})
heavy = sorted({m.split(".")[0] if not m.startswith("abbisect.") else "abbisect.stats"
                for m in sys.modules if m.split(".")[0] in {"scipy", "pandas", "rich", "httpx", "numpy"}
                or m == "abbisect.stats" or m.startswith("abbisect.stats.")})
print(json.dumps({"code": code, "heavy": heavy, "light": light}))
"""


def loaded(argv: list[str] | None, cwd: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv)], capture_output=True, text=True,
                         cwd=cwd, check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.strip().splitlines()[-1])
    found.pop("light")
    return found


def modules(argv: list[str], cwd: Path) -> list[str]:
    """The command modules and pydantic that `abbisect ARGV` loaded."""
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv)], capture_output=True, text=True,
                         cwd=cwd, check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])["light"]


@pytest.mark.smoke
def test_import_and_help_load_no_heavy_library(tmp_path: Path) -> None:
    assert loaded(None, tmp_path) == {"code": None, "heavy": []}
    assert loaded(["--help"], tmp_path) == {"code": 0, "heavy": []}
    assert loaded(["run", "--help"], tmp_path) == {"code": 0, "heavy": []}


@pytest.mark.smoke
def test_usage_errors_load_no_heavy_library(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nengine: {kind: command, repo: builtin:demo}\nprompts: []\nlaunch: {command: [serve]}\n")
    demo = str(Path(__file__).resolve().parents[1] / "recipes" / "demo.yaml")
    cases = {
        ("check", "missing.yaml"): 128,
        ("run", "missing.yaml"): 2,
        ("run", str(bad)): 2,  # a recipe that does not validate
        ("run", demo, "--expect", "x=y"): 2,
        ("bisect", "missing.yaml", "--good", "a", "--bad", "b"): 2,
        ("bisect", demo): 2,  # no ends
        ("bisect", demo, "--good", "a", "--bad", "b", "--slots", "0"): 2,
        ("narrow", "missing.yaml", "--ref", "x"): 2,
        ("compare", "missing-a", "missing-b"): 2,
        ("scan", "missing.log"): 2,
        ("cache", "gc", "--max-size", "zz"): 2,
    }
    for argv, code in cases.items():
        assert loaded(list(argv), tmp_path) == {"code": code, "heavy": []}, argv


@pytest.mark.smoke
def test_a_trial_loads_them_where_used(tmp_path: Path) -> None:
    """The check above can fail: the probe sees a library once the code that uses it is imported."""
    out = subprocess.run([sys.executable, "-c", PROBE.replace("import abbisect.cli", "import abbisect.cli\n"
                          "    import abbisect.assess.perf, abbisect.report.files, abbisect.query.load"),
                          "null"], capture_output=True, text=True, cwd=tmp_path, check=False, timeout=120)
    heavy = json.loads(out.stdout.strip().splitlines()[-1])["heavy"]
    assert {"scipy", "numpy", "httpx", "abbisect.stats"} <= set(heavy)


@pytest.mark.smoke
def test_help_imports_no_command_and_a_missing_recipe_no_schema(tmp_path: Path) -> None:
    """`abbisect --help` lists the commands from cli.COMMANDS without importing one; a missing recipe is said
    before pydantic (the recipe's schema) loads; a recipe that exists is read with it."""
    assert modules(["--help"], tmp_path) == []
    which = "abbisect.commands.assembled"  # which recipe: the one named, abbisect.yaml or the checkout's
    assert modules(["check", "missing.yaml"], tmp_path) == [which, "abbisect.commands.check"]
    assert modules(["run", "missing.yaml"], tmp_path) == [which, "abbisect.commands.run"]
    assert modules(["narrow", "missing.yaml", "--ref", "x"], tmp_path) == [which, "abbisect.commands.narrow"]
    assert "pydantic" in modules(["run", str(Path(__file__).resolve().parents[1] / "recipes" / "demo.yaml"),
                                  "--dry-run"], tmp_path)


def test_the_help_table_says_what_each_command_says() -> None:
    """cli.COMMANDS holds each command's first docstring paragraph, so `--help` reads as click would print it."""
    import importlib
    import inspect

    from abbisect.cli import COMMANDS

    for name, line in COMMANDS.items():
        command = getattr(importlib.import_module(f"abbisect.commands.{name}"), name)
        first = " ".join(inspect.cleandoc(command.help).split("\n\n")[0].split())
        assert line == first, name
