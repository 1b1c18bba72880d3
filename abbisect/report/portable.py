"""Reports a stranger can rerun: local paths replaced by portable names, GitHub links for the commits.

The recipe is shown with its engine repository as the remote URL (or its `builtin:` name), a packaged
model by package, file and sha256, and no path of this machine; every other local path in a report
(the cache, the engine's clone, the recipe file, the result folder, the home folder) is replaced by a
placeholder the Reproduce section explains. The same replacement (`Portable`) writes every other file of a
result folder: the JSON and CSV (`Portable.data`, `Portable.text`) and the logs (`Portable.copy`, as they
stream); only a bisect's state.json, which `--resume` reads back on this machine, keeps the real paths.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
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
# A known folder is replaced where its name ends: not inside a longer name (the cache /x/c1 in /x/c12).
_NAME_GOES_ON = r"(?![\w.+@-])"
COPY_BLOCK = 1 << 20  # bytes of whole lines a log is copied by (a longer line is read whole)


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
    from abbisect.environment.weights import prepared

    marker = prepared(model, cache)
    return marker.sha256 if marker is not None else None


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
    data["engine"] = {**data["engine"], "kind": recipe.engine.kind, "repo": engine_source(recipe)}
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
    temp: str = ""  # the temp folder: a path in it is named by its last part even once it is gone

    @classmethod
    def build(cls, cache: Cache | Path, repo: Path | None = None, recipe_file: Path | None = None,
              out: Path | None = None, model: str | None = None, redactor: Redactor | None = None,
              node_caches: Sequence[str] = ()) -> Portable:
        """`node_caches`: the caches of the cluster nodes that ran trials (their venvs are named in results),
        folders of other machines, replaced like this one's."""
        pairs: dict[str, str] = {cache: "$ABBISECT_CACHE_DIR" for cache in node_caches}
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
        temp = tempfile.gettempdir()
        return cls(tuple(ordered), redactor, temp if len(temp) > 1 else "")

    @cached_property
    def _known(self) -> re.Pattern[str] | None:
        """Every folder of `pairs` in one pattern, longest first, matched where its name ends."""
        if not self.pairs:
            return None
        return re.compile("(?:" + "|".join(re.escape(old) for old, _ in self.pairs) + ")" + _NAME_GOES_ON)

    @cached_property
    def _in_temp(self) -> re.Pattern[str] | None:
        """A path in the temp folder, also where it follows a URL's scheme (an `ipc:///tmp/…` socket)."""
        return re.compile(rf"(?<![\w.-]){re.escape(self.temp)}(?:/[\w.+@-]+)+") if self.temp else None

    def render(self, render: Callable[[], str]) -> str:
        """A document for people: every untrusted text made portable as it enters a markdown primitive, before
        it is cut or escaped (`shown_as`), and the whole document once more for what the renderer wrote
        itself (a ref in a code span, a command)."""
        with shown_as(self.text):
            return self.text(render())

    def text(self, text: str) -> str:
        if self.redactor is not None:
            text = self.redactor.text(text)
        return self.paths(text)

    def paths(self, text: str) -> str:
        """This machine's paths in a text replaced (the secrets are `text`'s part)."""
        if self._known is not None:
            placeholders = dict(self.pairs)
            text = self._known.sub(lambda m: placeholders[m.group(0)], text)
        # A commit's worktree (e.g. an editable install in a package list) is named by its commit.
        text = _WORKTREE.sub(lambda m: f"<checkout of {m.group(1)[:10]}>", text)
        # Any other path of this machine (a stand-in server's script, a --script judge, a temporary worktree
        # already removed): its name only.
        if self._in_temp is not None:
            text = self._in_temp.sub(lambda m: f"<local: {Path(m.group(0)).name}>", text)
        return _ABSOLUTE.sub(lambda m: f"<local: {Path(m.group(1)).name}>" if os.path.exists(m.group(1))
                             else m.group(1), text)

    def data(self, obj):
        """JSON-able data for a result file: the secrets masked as `Redactor.data` masks them, then the paths
        of every string (and key) replaced as in a text. A recipe's own values that are local paths (its
        engine's checkout, a local model, a wheel folder) are first shown as the report's recipe shows them,
        `<local: NAME>`, so that a reader of the file (the matrix) still tells engines and models apart."""
        if self.redactor is not None:
            obj = self.redactor.data(obj)
        return self._data(obj)

    def _data(self, obj):
        if isinstance(obj, dict):
            return {self.paths(k) if isinstance(k, str) else k:
                    self._data(_strip_paths(v) if k == "recipe" and isinstance(v, dict) else v)
                    for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [self._data(v) for v in obj]
        if isinstance(obj, str):
            return self.paths(obj)
        return obj

    def copy(self, src: Path, dest: Path) -> None:
        """A log copied as a stranger may see it (`text`), as it streams: a block of whole lines at a time (no
        path spans two lines), into a temporary file beside `dest` that then replaces it, so `src` may be
        `dest` itself and an interrupted copy leaves the log as it was."""
        tmp = dest.with_name(f".{dest.name}.portable")
        with src.open("rb") as fin, tmp.open("wb") as fout:
            for lines in iter(lambda: fin.readlines(COPY_BLOCK), []):
                block = b"".join(lines).decode(errors="surrogateescape")
                fout.write(self.text(block).encode(errors="surrogateescape"))
        os.replace(tmp, dest)


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
