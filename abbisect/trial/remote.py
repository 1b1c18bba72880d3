"""A trial on a machine that shares no folder with the one asking for it: what crosses, both ways.

Out, the driver's `Parcels`: for what a spec names on the driver's disk, its content — the engine's commits
(and a dependency's) as a git bundle, the recipe's own files (an eval set, a local wheel) — stored once
(`put`: Ray's object store) and named in each trial's parcel, so a node reads each only when it lacks it.

On the node, `localized`: the spec re-addressed to the node's own cache (ABBISECT_CACHE_DIR of the node's
Ray process, else the default), its repository made from the bundle, the files written by content, a trial
folder of its own; a model path the node lacks is the cluster's fault (InfraError), never the commit's.

Back, `delivery` → `land`: the result with the recipe's secrets masked, and the trial folder's files
(server.log, build.log, a probe's files), which the driver writes into its run's trial folder; the log
paths in the result then name those.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from abbisect import checkout
from abbisect.infra.cache import Cache
from abbisect.infra.errors import InfraError
from abbisect.infra.redact import Redactor
from abbisect.infra.serial import dump, load
from abbisect.recipe import Recipe
from abbisect.trial.spec import TrialResult, TrialSpec

Fetch = Callable[[str], bytes]  # a parcel's item by key, read on the node (from the object store)
_URL = re.compile(r"^[a-z+]+://")


def recipe_files(recipe: Recipe) -> dict[str, Path]:
    """The files of the driver's machine a trial reads, by the recipe key that names them."""
    files = {}
    if recipe.eval is not None and not recipe.eval.set.startswith("builtin:"):
        files["eval.set"] = Path(recipe.eval.set)
    wheel = getattr(recipe.install, "wheel", None)
    if isinstance(wheel, str) and not _URL.match(wheel) and "==" not in wheel and Path(wheel).is_file():
        files["install.wheel"] = Path(wheel)
    return files


class Parcels:
    """The driver's side: each spec's parcel, {key: {"ref": [stored], …}} — the engine's repository ("repo"),
    a dependency's ("dependency") and the recipe's files (`recipe_files`' keys). A repository's bundle
    holds its branches, tags and every sha asked so far, and is made again only for a sha it lacks."""

    def __init__(self, put: Callable[[bytes], object]) -> None:
        self.put = put
        self.bundles: dict[str, tuple[frozenset[str], dict]] = {}
        self.files: dict[tuple[str, int, float], dict] = {}
        self.asked: dict[str, list[str]] = {}
        self.lock = threading.Lock()

    def of(self, spec: TrialSpec) -> dict[str, dict]:
        with self.lock:
            parcel = {"repo": self._repo(spec.repo, spec.sha)}
            if spec.dependency:
                parcel["dependency"] = self._repo(spec.dependency.repo, spec.dependency.sha)
            for key, path in recipe_files(spec.recipe).items():
                parcel[key] = self._file(path)
        return parcel

    def _repo(self, repo: str, sha: str) -> dict:
        covered, item = self.bundles.get(repo, (frozenset(), {}))
        if sha in covered:
            return item
        shas = self.asked.setdefault(repo, [])
        shas.append(sha)
        with tempfile.TemporaryDirectory(prefix="abbisect-parcel-") as tmp:
            path = Path(tmp) / "commits.bundle"
            tips = checkout.bundle(Path(repo), shas, path)
            data = path.read_bytes()
        item = {"ref": [self.put(data)], "origin": repo, "bytes": len(data)}
        self.bundles[repo] = (frozenset(tips), item)
        return item

    def _file(self, path: Path) -> dict:
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime)
        if key not in self.files:
            data = path.read_bytes()
            self.files[key] = {"ref": [self.put(data)], "name": path.name,
                               "digest": hashlib.sha256(data).hexdigest()[:24], "bytes": len(data)}
        return self.files[key]


def localized(spec: TrialSpec, parcel: dict[str, dict], fetch: Fetch, cache: Cache, work: Path) -> TrialSpec:
    """The node's side: `spec` with this node's cache, a repository here that holds its commit, the recipe's
    files written here, and `work` as its trial folder."""
    repo = checkout.from_bundle(cache.shipped_repo(parcel["repo"]["origin"]), spec.sha, lambda: fetch("repo"))
    dependency = spec.dependency
    if dependency is not None:
        dep_repo = checkout.from_bundle(cache.shipped_repo(parcel["dependency"]["origin"]), dependency.sha,
                                        lambda: fetch("dependency"))
        dependency = replace(dependency, repo=str(dep_repo))
    recipe = spec.recipe
    updates: dict[str, object] = {}
    files = {key: _written(cache, parcel[key], key, fetch) for key in recipe_files(recipe)}
    if "eval.set" in files and recipe.eval is not None:
        updates["eval"] = recipe.eval.model_copy(update={"set": str(files["eval.set"])})
    if "install.wheel" in files:
        updates["install"] = recipe.install.model_copy(update={"wheel": str(files["install.wheel"])})
    if isinstance(recipe.model, str) and recipe.model.startswith("/") and not Path(recipe.model).exists():
        raise InfraError(f"the model {recipe.model} is not on this node: give every node a copy at that path "
                         "(or name a packaged or hub model)")
    return replace(spec, recipe=recipe.model_copy(update=updates) if updates else recipe, repo=str(repo),
                   cache_dir=str(cache), out_dir=str(work), dependency=dependency)


def _written(cache: Cache, item: dict, key: str, fetch: Fetch) -> Path:
    """A parcel's file in this node's cache, by its content: fetched only the first time."""
    dest = cache.shipped(item["digest"], item["name"])
    if not dest.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{threading.get_ident()}.tmp")
        tmp.write_bytes(fetch(key))
        tmp.replace(dest)
    return dest


def delivery(result: TrialResult, work: Path, redactor: Redactor) -> dict:
    """What goes back to the driver: the result (secrets masked) and the trial folder's files, the build log
    among them (it lies with the venv, in the node's cache)."""
    files = {str(p.relative_to(work)): p.read_bytes() for p in sorted(work.rglob("*")) if p.is_file()}
    if result.env is not None and "build.log" not in files and Path(result.env.log).is_file():
        files["build.log"] = Path(result.env.log).read_bytes()
    return {"result": redactor.data(dump(result)), "files": files}


def land(data: dict, spec: TrialSpec) -> TrialResult:
    """The driver's side: the files written into `spec.out_dir` (the run's trial folder), and the result
    addressed to `spec` again, its log paths naming those files."""
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, blob in data["files"].items():
        rel = Path(name)
        if rel.is_absolute() or ".." in rel.parts:
            raise InfraError(f"a node sent a file outside its trial folder: {name}")
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(blob)
    result = load(TrialResult, data["result"])
    launch = result.launch
    if launch is not None:
        launch = replace(launch, log_path=str(out / Path(launch.log_path).name))
    env = result.env
    if env is not None and "build.log" in data["files"]:
        env = replace(env, log=str(out / "build.log"))
    return replace(result, spec=spec, launch=launch, env=env)
