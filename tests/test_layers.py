"""The import graph of abbisect/, as CI checks it: no module imports another in a loop, and no module imports
one of a higher layer. The layers (docs/architecture.md draws them) from the bottom:

0. infra      the machinery every stage uses: errors, git, processes, the cache, locks, logs, masking
1. inputs     the recipe and its schema (with the table of GPU device classes its probe names, and the
              statuses its verdict rules name), and the pure functions every stage may call (scoring,
              statistics): never a stage, so the recipe does not import gpu/ (gpu/ reads the device classes
              from the recipe's table) nor verdict/ (verdict/ reads the statuses from the recipe)
2. stages     checkout, environment, launch, query, verdict, the GPU tools and the histories abbisect
              builds itself: each imports only infra, inputs and the stages before it
3. trial      one commit through the stages (and where trials run)
4. drivers    what runs trials: the A/B, the bisect (search, policies, variables, state), narrowing
              — and `testing`, the bisect's seam simulated (a history in memory, seeded trials) that the tests and
              the benchmarks drive the real bisect with: it stands where the drivers stand, nothing imports it
5. outputs    reports and the serving matrix: they render what the drivers return
6. commands   one module per command, and the exit-code table they end on
7. cli        the CLI group: it finds the commands by name; a command never imports it

Every import counts, also one inside a function: a lazy import that runs upward is still a module doing jobs
at two heights (STYLE.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "abbisect"

# Module-name prefixes per layer, bottom first. A module belongs to the layer of its longest matching prefix.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("abbisect.infra",),
    ("abbisect.recipe", "abbisect.score", "abbisect.stats"),
    ("abbisect.checkout", "abbisect.environment", "abbisect.launch", "abbisect.query", "abbisect.verdict",
     "abbisect.gpu", "abbisect.builtin"),
    ("abbisect.trial", "abbisect.assess"),
    ("abbisect.ab", "abbisect.bisect", "abbisect.narrow", "abbisect.testing"),
    ("abbisect.report", "abbisect.matrix"),
    ("abbisect.commands",),
    ("abbisect.cli", "abbisect.__main__"),
)
# The package's own __init__ (its version) may be imported from anywhere.
ANYWHERE = ("abbisect",)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for p in root.rglob("*.py"):
        if "template" in p.relative_to(root).parts:  # the toy engine's own package, not abbisect
            continue
        rel = p.relative_to(root.parent).with_suffix("")
        out[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = p
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the package's modules it imports (at the top or inside a function)."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            found: list[str] = []
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                found = [base, *(f"{base}.{a.name}" for a in node.names)]
            for target in found:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def layer_of(module: str) -> int | None:
    best, where = "", None
    for n, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, where = prefix, n
    return where


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def upward(graph: dict[str, set[str]]) -> list[str]:
    arrows = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            if target in ANYWHERE:
                continue
            ls, lt = layer_of(source), layer_of(target)
            if ls is not None and lt is not None and lt > ls:
                arrows.append(f"{source} (layer {ls}) -> {target} (layer {lt})")
    return arrows


def both_ways(graph: dict[str, set[str]]) -> list[str]:
    """Pairs of the package's folders that import each other (module by module there is no loop, but the
    drawing of the folders would show an arrow running back up)."""
    def folder(m: str) -> str:
        return ".".join(m.split(".")[:2])

    arrows = {(folder(s), folder(t)) for s, ts in graph.items() for t in ts
              if folder(s) != folder(t) and t not in ANYWHERE and s not in ANYWHERE}
    return sorted(f"{a} <-> {b}" for a, b in arrows if (b, a) in arrows and a < b)


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in modules() if m not in ANYWHERE and layer_of(m) is None)
    assert not unplaced, f"modules in no layer of tests/test_layers.py LAYERS: {unplaced}"


def test_no_import_circle() -> None:
    found = circles(imports(modules()))
    assert not found, "modules that import each other in a loop:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_nothing_imports_upward() -> None:
    found = upward(imports(modules()))
    assert not found, "imports from a lower layer to a higher one:\n" + "\n".join(found)


def test_no_two_folders_import_each_other() -> None:
    found = both_ways(imports(modules()))
    assert not found, "folders that import each other:\n" + "\n".join(found)


def test_nothing_in_the_package_imports_its_test_stand_ins() -> None:
    """abbisect/testing/ is for the tests and the benchmarks: no module of abbisect runs on a simulated trial."""
    graph = imports(modules())
    found = sorted(f"{s} -> {t}" for s, ts in graph.items() for t in ts
                   if t.startswith("abbisect.testing") and not s.startswith("abbisect.testing"))
    assert not found, "modules importing abbisect.testing:\n" + "\n".join(found)


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """A planted loop and a planted upward import are both found (the checks are not vacuous)."""
    pkg = tmp_path / "abbisect"
    for rel, text in {"__init__.py": "", "infra/__init__.py": "", "infra/a.py": "from abbisect.infra import b\n",
                      "infra/b.py": "def f():\n    from abbisect.infra import a\n",
                      "trial/__init__.py": "", "trial/t.py": "",
                      "infra/c.py": "import abbisect.trial.t\n", "trial/u.py": "from abbisect.infra import c\n"}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    graph = imports(modules(pkg))
    assert circles(graph) == [["abbisect.infra.a", "abbisect.infra.b"]]
    assert upward(graph) == ["abbisect.infra.c (layer 0) -> abbisect.trial.t (layer 3)"]
    assert both_ways(graph) == ["abbisect.infra <-> abbisect.trial"]
