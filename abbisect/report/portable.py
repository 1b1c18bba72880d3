"""Reports a stranger can rerun: local paths replaced by portable names, GitHub links for the commits.

The recipe is shown with its engine repository as the remote URL (or its `builtin:` name), a packaged
model by package, file and sha256, and no path of this machine; every other local path in a report
(the cache, the engine's clone, the recipe file, the result folder, the home folder) is replaced by a
placeholder the Reproduce section explains.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from abbisect.infra import git
from abbisect.infra.cache import WORKTREES, Cache
from abbisect.infra.redact import Redactor
from abbisect.recipe import BUILTIN_PREFIX, PackagedModel, Recipe
from abbisect.report.text import shown_as

_URL = re.compile(r"^[a-z+]+://|^git@")
# Absolute paths of at least two parts, not inside a URL or a $VARIABLE path (an HTTP path like /v1/models is
# kept: it does not exist here).
_ABSOLUTE = re.compile(r"(?<![\w$~<:/.-])(/[\w.+@-]+(?:/[\w.+@-]+)+)")
_WORKTREE = re.compile(rf"\$ABBISECT_CACHE_DIR/{WORKTREES}/(?:[^/\s]+/)*?([0-9a-f]{{40}})")


def remote_url(repo: Path | str) -> str | None:
    """The `origin` remote of a local checkout (credentials in the URL dropped), else None."""
    proc = git.call(["remote", "get-url", "origin"], repo)
    url = proc.stdout.strip() if proc.returncode == 0 else ""
    return re.sub(r"^(https?://)[^/@]+@", r"\1", url) or None


def engine_source(recipe: Recipe) -> str:
    """How a stranger gets the engine: its builtin name, its URL, or the origin of the local checkout."""
    repo = recipe.engine.repo
    if repo.startswith(BUILTIN_PREFIX) or _URL.match(repo):
        return re.sub(r"^(https?://)[^/@]+@", r"\1", repo)
    url = remote_url(repo)
    if url and not _is_local(url):
        return url
    return f"<a local checkout named {Path(repo).name}, with no public remote>"


def _is_local(url: str) -> bool:
    """A remote that is a folder of this machine (a path, or a file:// URL): no use to a stranger."""
    return url.startswith(("/", "~", "file://")) or not re.match(r"^[\w+.-]+://|^[\w.-]+@[\w.-]+:", url)


def model_sha256(model: PackagedModel, cache: Cache | Path) -> str | None:
    """The GGUF's sha256 recorded when the model was prepared (None before, or for older cache entries)."""
    from abbisect.environment.weights import MARKER, model_dir

    marker = model_dir(model, cache) / MARKER
    try:
        return json.loads(marker.read_text()).get("sha256")
    except (OSError, ValueError):
        return None


def _local(value: str) -> bool:
    """A path of this machine (an absolute or home path that exists here), not a URL path like /health."""
    return value.startswith(("/", "~/")) and Path(value).expanduser().exists()


def _strip_paths(data):
    """Whole string values that are local paths become `<local: NAME>` (a wheel, a find-links folder)."""
    if isinstance(data, dict):
        return {k: _strip_paths(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_strip_paths(v) for v in data]
    if isinstance(data, str) and _local(data):
        return f"<local: {Path(data).name}>"
    return data


def portable_recipe(recipe: Recipe, cache: Cache | Path) -> dict:
    """The recipe as a stranger can use it: prompts inlined, no path of this machine, defaults left out, the
    values of secret variables masked under their names (abbisect/infra/redact.py)."""
    data = recipe.model_dump(mode="json", exclude_defaults=True)
    data["engine"] = {**data.get("engine", {}), "kind": recipe.engine.kind, "repo": engine_source(recipe)}
    if isinstance(recipe.model, PackagedModel):
        sha = model_sha256(recipe.model, cache)
        data["model"] = {**data["model"], **({"sha256": sha} if sha else {})}
    elif isinstance(recipe.model, str) and _local(recipe.model):
        data["model"] = f"<local: {Path(recipe.model).name}>"
    data.pop("prompts_file", None)  # folded into prompts when the recipe was loaded
    shown = _strip_paths({k: data[k] for k in ("name", *[k for k in data if k != "name"]) if k in data})
    return Redactor.from_recipe(recipe).data(shown)


@dataclass(frozen=True)
class Portable:
    """What a stranger may see of a text: the recipe's secrets masked, then local paths → placeholders,
    longest first (a path inside the cache before the cache itself)."""

    pairs: tuple[tuple[str, str], ...] = ()
    redactor: Redactor | None = None

    @classmethod
    def build(cls, cache: Cache | Path, repo: Path | None = None, recipe_file: Path | None = None,
              out: Path | None = None, model: str | None = None, redactor: Redactor | None = None) -> Portable:
        pairs: dict[str, str] = {}
        if model and model.startswith("/"):  # a prepared model may be gone (gc) and still be named in a result
            pairs[model] = "$MODEL"
        if repo is not None:
            pairs[str(repo)] = "$ENGINE_REPO"
        if recipe_file is not None:
            pairs[str(recipe_file.resolve())] = recipe_file.name
        if out is not None:
            pairs[str(out)] = "."
        pairs[str(cache)] = "$ABBISECT_CACHE_DIR"
        home = os.path.expanduser("~")
        if home not in ("/", ""):
            pairs[home] = "~"
        ordered = sorted(((k, v) for k, v in pairs.items() if len(k) > 1), key=lambda kv: len(kv[0]), reverse=True)
        return cls(tuple(ordered), redactor)

    def render(self, render: Callable[[], str]) -> str:
        """A document for people: every untrusted text made portable as it enters a markdown primitive, before
        it is cut or escaped (`shown_as`), and the whole document once more for what the renderer wrote
        itself (a ref in a code span, a command)."""
        with shown_as(self.text):
            return self.text(render())

    def text(self, text: str) -> str:
        if self.redactor is not None:
            text = self.redactor.text(text)
        for old, new in self.pairs:
            text = text.replace(old, new)
        # A commit's worktree (e.g. an editable install in a package list) is named by its commit.
        text = _WORKTREE.sub(lambda m: f"<checkout of {m.group(1)[:10]}>", text)
        # Any other path of this machine (a stand-in server's script, a --script judge): its name only.
        return _ABSOLUTE.sub(lambda m: f"<local: {Path(m.group(1)).name}>" if os.path.exists(m.group(1))
                             else m.group(1), text)


def reproduce_command(argv: list[str], recipe_file: Path | None) -> str:
    """The invocation without this machine's folders (--output, --cache-dir) and with the recipe by name."""
    import shlex

    shown, skip = ["abbisect"], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--output", "-o", "--cache-dir", "--resume"):
            skip = True
            continue
        if arg.startswith(("--output=", "--cache-dir=", "--resume=")):
            continue
        if recipe_file is not None and arg.endswith((".yaml", ".yml")) and Path(arg).resolve() == recipe_file.resolve():
            arg = recipe_file.name
        shown.append(arg)
    return shlex.join(shown)
