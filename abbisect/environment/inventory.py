"""A venv's package list: every distribution it holds, its version, where it came from and what it requires.

Read by the venv's own interpreter, so a diff of two sides' lists (abbisect/report/packages.py) can tell a
package pulled in by the variable from one that differs for another reason.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field

from pydantic import ValidationError

from abbisect.infra.proc import scrubbed_env
from abbisect.infra.serial import load


@dataclass(frozen=True)
class Dist:
    """One distribution of a venv: its version, where it came from (PEP 610's URL) and the names it requires."""

    version: str
    url: str | None = None
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class Inventory:
    """A venv's package list: `uv pip freeze`'s lines and every distribution by its normalised name."""

    freeze: tuple[str, ...] = ()
    dists: dict[str, Dist] = field(default_factory=dict)

# Run by the venv's own interpreter: every distribution it sees, its version, where it came from (PEP 610)
# and what it requires, so a diff can tell "pulled in by the pin" from "differs for another reason".
_INVENTORY = r"""
import importlib.metadata as m, json, re, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
out = {}
for d in m.distributions():
    name = d.metadata["Name"]
    if not name:
        continue
    reqs = sorted({norm(re.split(r"[\s<>=!~;\[@(]", r.strip(), maxsplit=1)[0])
                   for r in (d.requires or []) if "extra ==" not in r.replace("extra==", "extra ==")})
    url = None
    try:
        url = json.loads(d.read_text("direct_url.json") or "null")["url"]
    except Exception:
        pass
    out.setdefault(norm(name), {"version": d.version, "url": url, "requires": reqs})
print(json.dumps(out))
"""


def installed_packages(python: str, uv_bin: str | None = None) -> Inventory:
    """The venv's package list; what could not be read is empty."""
    import uv

    env = scrubbed_env()
    freeze = subprocess.run([uv_bin or uv.find_uv_bin(), "pip", "freeze", "--python", python], check=False,
                            capture_output=True, text=True, env=env, timeout=120)
    inv = subprocess.run([python, "-c", _INVENTORY], check=False, capture_output=True, text=True, env=env,
                         timeout=120)
    try:
        dists = load(dict[str, Dist], json.loads(inv.stdout)) if inv.returncode == 0 else {}
    except (json.JSONDecodeError, ValidationError):
        dists = {}
    return Inventory(tuple(freeze.stdout.splitlines()) if freeze.returncode == 0 else (), dists)
