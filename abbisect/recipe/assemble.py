"""The recipe of an engine checkout with no recipe: what `abbisect run`, `bisect`, `check` and `narrow` assemble
from the checkout and the command line, and what `abbisect init` writes as abbisect.yaml.

The checkout says which engine it is (SGLang: python/pyproject.toml names `sglang`; vLLM: pyproject.toml names
`vllm`), and so how a commit of it is installed and launched; the command line gives the model, the server's
flags exactly as the user passes them to `python -m sglang.launch_server` or `vllm serve`, and the prompts (else
`PROMPTS`). Everything else is the recipe's defaults: temperature 0, the default verdict rules.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from abbisect.infra.errors import UserError


@dataclass(frozen=True)
class EngineCheckout:
    """How abbisect installs and launches a checkout of one engine."""

    kind: str
    pyproject: str  # the file whose [project] name says the checkout is this engine
    subdir: str | None  # where the package is installed from
    install: dict[str, Any]
    launch: dict[str, Any]  # besides the flags
    launched_as: str  # how the user starts it (the flags after -- are that command's)


ENGINES: dict[str, EngineCheckout] = {
    # `pip install -e "python"`: SGLang's documented install from source.
    "sglang": EngineCheckout("sglang", "python/pyproject.toml", "python", {"strategy": "editable"}, {},
                             "python -m sglang.launch_server --model-path M"),
    # `VLLM_USE_PRECOMPILED=1 pip install -e .`: vLLM's documented install of a checkout without compiling (its
    # kernels from the wheel vLLM's CI built of the same commit).
    "vllm": EngineCheckout("vllm", "pyproject.toml", None, {"strategy": "precompiled"}, {"entrypoint": "cli"},
                           "vllm serve M"),
}

# The prompts when none is given: wrong answers (each with the answer it must contain), and long answers, where
# a broken model loops or collapses (every output is scored for degeneration).
PROMPTS: tuple[dict[str, str], ...] = (
    {"id": "capital", "prompt": "What is the capital of France?", "expect": "(?i)paris"},
    {"id": "sum", "prompt": "What is 17 + 25?", "expect": r"\b42\b"},
    {"id": "symbol", "prompt": "What is the chemical symbol for gold?", "expect": r"(?i)\bau\b"},
    {"id": "hash_table", "prompt": "Explain what a hash table is."},
    {"id": "bicycle", "prompt": "Describe how a bicycle works."},
    {"id": "copper", "prompt": "List three uses of copper."},
)


def engine_of(root: Path) -> str | None:
    """The engine whose checkout `root` is (None: neither), by the name its pyproject.toml gives."""
    for kind, engine in ENGINES.items():
        path = root / engine.pyproject
        try:
            name = tomllib.loads(path.read_text()).get("project", {}).get("name")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        if isinstance(name, str) and name.lower() == kind:
            return kind
    return None


def checked_engine(given: str | None, root: Path) -> str:
    """The engine of the checkout at `root` (`given` with --engine), or one line saying how to name one."""
    if given is not None:
        if given not in ENGINES:
            raise UserError(f"unknown engine {given!r}: abbisect assembles a recipe for {' or '.join(ENGINES)}; "
                            "for another engine write a recipe (engine kind command, recipes/README.md)")
        return given
    kind = engine_of(root)
    if kind is None:
        raise UserError(f"{root} is not an SGLang or vLLM checkout (no python/pyproject.toml naming sglang, no "
                        "pyproject.toml naming vllm): run in the engine's checkout, give --engine sglang|vllm, "
                        "or give a RECIPE")
    return kind


def recipe_name(kind: str, model: str) -> str:
    """`sglang-Qwen3-8B` for Qwen/Qwen3-8B: a name results/ can hold."""
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", model.rstrip("/").rsplit("/", 1)[-1]).strip("-._")
    return f"{kind}-{tail}"[:100] if tail else kind


def assemble(kind: str, repo: str, model: str | None, flags: Sequence[str], prompts: Sequence[str]) -> dict[str, Any]:
    """The recipe (as a document) for a checkout of engine `kind` at `repo`; a missing model is one line."""
    engine = ENGINES[kind]
    if not model:
        raise UserError(f"no model: give --model M (a model id or a local path), as you would to "
                        f"{engine.launched_as.removesuffix(' M')}")
    doc: dict[str, Any] = {"name": recipe_name(kind, model), "engine": {"kind": kind, "repo": repo}}
    if engine.subdir:
        doc["engine"]["subdir"] = engine.subdir
    doc["install"] = dict(engine.install)
    doc["model"] = model
    doc["launch"] = {**engine.launch, "flags": list(flags)}
    doc["prompts"] = [{"prompt": p} for p in prompts] if prompts else [dict(p) for p in PROMPTS]
    return doc


# What `abbisect init` says above the keys users most often change (and what the recipe's --dry-run prints).
_COMMENTS = {
    "name": "results go to results/<name>/<stamp>/",
    "engine": "repo: this checkout (a git URL works too); subdir: the package's folder when it is not at the top",
    "install": ("editable: pip install -e of each commit; vLLM: precompiled (its CI's kernels of the same commit) "
                "or vllm-wheels; others: wheel, overlay, command (recipes/README.md, install)"),
    "model": "a model id or a local path, as the server takes it",
    "launch": ("flags: identical on both sides, exactly as after the server's command; ready.log / ready.http "
               "say when it is up"),
    "prompts": ("the prompts asked at temperature 0; expect: a regex the answer must match. Or prompts_file, or "
                "eval: (an accuracy verdict), perf: (a performance verdict)"),
}
_AFTER = """\
# Often changed next (every key: recipes/README.md):
# sides: {a: GOOD_REF, b: BAD_REF}      # what `abbisect run` compares without --a/--b
# gpus: [0]                              # the GPUs a trial sees; [[0], [1]] for slots
# sampling: {max_tokens: 128, seed: 0}   # temperature 0 by default
# verdict: {bad_if: [degenerate, signature, crashed_at_startup, answer_mismatch, crashed_while_serving, request_errors]}
# bisect: {pathspec: [python/], first_parent: false}
"""


def recipe_yaml(doc: dict[str, Any], source: str) -> str:
    """The recipe as YAML a user saves and edits: a comment above each key users most often change."""
    lines = [f"# {source}", "# Every key, its default and its alternatives: recipes/README.md", ""]
    for key, value in doc.items():
        if key in _COMMENTS:
            lines.append(f"# {_COMMENTS[key]}")
        lines.append(yaml.safe_dump({key: value}, sort_keys=False, allow_unicode=True, width=120).rstrip())
    return "\n".join(lines) + "\n\n" + _AFTER
