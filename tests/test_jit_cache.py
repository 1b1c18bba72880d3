"""JIT and compile caches (abbisect/launch/jit.py): a folder per commit's environment, warm across its own launches
and never seen by another commit; a fresh one per launch; the user's own; the recipe's env over all of them.

The toy engine compiles its "kernels" into TRITON_CACHE_DIR (else ~/.triton/cache) keyed by its model code, which
the fixture's broken and fixed commits share (they differ in the loader): on the user's caches the fixed commit
starts on the kernels the broken one compiled, as a real cache whose key misses a change would serve them."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import typing
import uuid
from pathlib import Path

import pytest
from conftest import toy_recipe

from abbisect import checkout
from abbisect.infra.cache import Cache, entries, gc, hold, release
from abbisect.launch import jit
from abbisect.launch.engines import ADAPTERS
from abbisect.launch.jit import JitCache, JitMode, Start
from abbisect.recipe import parse_recipe
from abbisect.recipe.schema import Launch
from abbisect.report.jit import caches_line, starts_told, unlike_starts
from abbisect.trial.pipeline import run_trial, server_env
from abbisect.trial.spec import TrialResult, trial_spec

VARS = (("TRITON_CACHE_DIR", "triton"), ("TORCHINDUCTOR_CACHE_DIR", "inductor"))


# -- the folder of each launch -------------------------------------------------------------------------------

def test_a_commit_keeps_its_folder_and_two_commits_never_share_one(tmp_path):
    cache = Cache(tmp_path)
    first, env = jit.prepare(JitMode.COMMIT, VARS, cache, "key-a", {})
    assert first.start is Start.COLD and first.files == 0 and first.folder == str(cache.jit("key-a"))
    assert env == {"TRITON_CACHE_DIR": str(cache.jit("key-a") / "triton"),
                   "TORCHINDUCTOR_CACHE_DIR": str(cache.jit("key-a") / "inductor")}
    (Path(env["TRITON_CACHE_DIR"]) / "kernel.bin").write_bytes(b"compiled")
    jit.done(first)
    again, env_again = jit.prepare(JitMode.COMMIT, VARS, cache, "key-a", {})
    assert again.start is Start.WARM and again.files == 1 and env_again == env
    other, env_other = jit.prepare(JitMode.COMMIT, VARS, cache, "key-b", {})
    assert other.start is Start.COLD and other.folder != again.folder
    assert not set(env_other.values()) & set(env.values())
    for held in (again, other):
        jit.done(held)
    assert (Path(env["TRITON_CACHE_DIR"]) / "kernel.bin").is_file()  # a commit's folder outlives its launches


def test_every_launch_of_launch_mode_starts_cold_in_a_folder_removed_after_it(tmp_path):
    cache = Cache(tmp_path)
    seen = []
    for _ in range(2):
        caches, env = jit.prepare(JitMode.LAUNCH, VARS, cache, "key-a", {})
        assert caches.start is Start.COLD and caches.mode is JitMode.LAUNCH
        (Path(env["TRITON_CACHE_DIR"]) / "kernel.bin").write_bytes(b"compiled")
        seen.append(caches.folder)
        jit.done(caches)
        assert not Path(caches.folder).exists()
    assert seen[0] != seen[1]


@pytest.fixture
def short() -> typing.Iterator[Path]:
    """A cache root short enough for the server's temporary folder to be the commit's own (jit.SOCKET_ROOM)."""
    root = Path(tempfile.mkdtemp(prefix="j-", dir="/tmp"))
    yield root
    shutil.rmtree(root)


def test_temporary_files_warm_nothing_and_a_recipes_own_cache_is_an_unknown_start(tmp_path, short):
    """An eager launch leaves temporary files and sockets in its temporary folder and compiles nothing: its next
    launch still starts cold. A compile cache the recipe's env points elsewhere holds what abbisect cannot count:
    the start is unknown (its temporary folder alone the recipe may move without that)."""
    cache, stack = Cache(short), (*VARS, ("TMPDIR", jit.TEMPORARY))
    first, env = jit.prepare(JitMode.COMMIT, stack, cache, "key-a", {})
    (Path(env["TMPDIR"]) / "vllm_dist_1234").write_text("")
    jit.done(first)
    again, _ = jit.prepare(JitMode.COMMIT, stack, cache, "key-a", {})
    assert first.start is again.start is Start.COLD and again.files == 0
    jit.done(again)
    own, _ = jit.prepare(JitMode.COMMIT, stack, cache, "key-a", {"TRITON_CACHE_DIR": str(tmp_path / "mine")})
    moved, _ = jit.prepare(JitMode.COMMIT, stack, cache, "key-a", {"TMPDIR": str(tmp_path / "t")})
    assert own.start is Start.UNKNOWN and moved.start is Start.COLD
    for held in (own, moved):
        jit.done(held)


def test_a_temporary_folder_too_deep_for_a_socket_name_stays_the_machines(tmp_path, short):
    """An engine names its sockets <temporary folder>/<uuid4> (vLLM's ZMQ sockets), and a Unix socket's name holds
    107 bytes: in a cache whose path is too long for that the server keeps the machine's temporary folder, and the
    report says so; in one that fits, a socket binds in the commit's own, and Ray keeps the machine's."""
    stack = (*VARS, ("TMPDIR", jit.TEMPORARY))
    deep, env = jit.prepare(JitMode.COMMIT, stack, Cache(tmp_path / ("a-long-folder-name-" * 6)), "k" * 20, {})
    assert "TMPDIR" not in env and "RAY_TMPDIR" not in env and deep.variables == ("TRITON_CACHE_DIR",
                                                                                   "TORCHINDUCTOR_CACHE_DIR")
    assert "kept the machine's temporary folder" in caches_line(JitMode.COMMIT, [("A", _trials_of(deep))])
    fits, env = jit.prepare(JitMode.COMMIT, stack, Cache(short), "k" * 20, {})
    assert env["TMPDIR"] == str(Path(fits.folder) / jit.TEMPORARY) and "TMPDIR" in fits.variables
    assert env["RAY_TMPDIR"] == os.environ.get("RAY_TMPDIR", tempfile.gettempdir())
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(Path(env["TMPDIR"]) / str(uuid.uuid4())))
    assert "temporary folder" not in caches_line(JitMode.COMMIT, [("A", _trials_of(fits))])
    for held in (fits, deep):
        jit.done(held)


def test_the_users_caches_set_nothing(tmp_path):
    caches, env = jit.prepare(JitMode.USER, VARS, Cache(tmp_path), "key-a", {})
    assert env == {} and caches == JitCache(JitMode.USER, Start.UNKNOWN)
    assert not (tmp_path / "jit").exists()
    jit.done(caches)


def test_the_recipes_env_wins_over_the_folder_and_the_folder_over_the_callers_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", "/the/callers/triton")
    recipe = parse_recipe(toy_recipe("/nonexistent", env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "mine")}))
    caches, env = jit.prepare(JitMode.COMMIT, VARS, Cache(tmp_path), "key-a", recipe.env)
    assert caches.overridden == ("TORCHINDUCTOR_CACHE_DIR",) and caches.variables == ("TRITON_CACHE_DIR",
                                                                                      "TORCHINDUCTOR_CACHE_DIR")
    served = server_env(recipe, {}, "/venv", None, env)
    assert served["TRITON_CACHE_DIR"] == str(tmp_path / "jit" / "key-a" / "triton")
    assert served["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")
    jit.done(caches)


def test_gc_keeps_a_folder_a_launch_holds_and_lists_the_kind(tmp_path):
    cache = Cache(tmp_path)
    busy, env = jit.prepare(JitMode.COMMIT, VARS, cache, "busy", {})
    idle, _ = jit.prepare(JitMode.COMMIT, VARS, cache, "idle", {})
    jit.done(idle)
    (Path(env["TRITON_CACHE_DIR"]) / "kernel.bin").write_bytes(b"x" * 4096)
    assert sorted(e.path.name for e in entries(tmp_path) if e.kind == "jit") == ["busy", "idle"]
    plan = gc(tmp_path, 0, None, kinds=("jit",))
    assert [e.path.name for e in plan.remove] == ["idle"] and [e.path.name for e in plan.kept_in_use] == ["busy"]
    assert cache.jit("busy").is_dir() and not cache.jit("idle").exists()
    jit.done(busy)
    hold(cache.jit("busy"))  # a second holder of this process: still in use
    assert not gc(tmp_path, 0, None, kinds=("jit",)).remove
    release(cache.jit("busy"))


def test_the_modes_are_the_recipes_choices_and_every_engine_lists_its_caches():
    assert set(typing.get_args(Launch.model_fields["jit_cache"].annotation)) == {m.value for m in JitMode}
    assert Launch().jit_cache == JitMode.COMMIT
    for kind, adapter in ADAPTERS.items():
        names = [name for name, _ in adapter.jit_caches]
        assert {"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH", "DG_JIT_CACHE_DIR",
                "FLASHINFER_WORKSPACE_BASE"} <= set(names), kind
        assert len(names) == len(set(names)), kind
    assert "VLLM_CACHE_ROOT" in dict(ADAPTERS["vllm"].jit_caches)
    assert "SGLANG_CACHE_DIR" in dict(ADAPTERS["sglang"].jit_caches)
    assert "XDG_CACHE_HOME" not in dict(ADAPTERS["command"].jit_caches)  # it would move the model hub's cache too


# -- what the report says ---------------------------------------------------------------------------------------

class _Launched:
    def __init__(self, start: Start) -> None:
        self.launch = type("L", (), {"jit": JitCache(JitMode.COMMIT, start, "/c")})()


def _trials(*starts: Start) -> list[TrialResult]:
    return typing.cast(list[TrialResult], [_Launched(s) for s in starts])


def _trials_of(caches: JitCache) -> list[TrialResult]:
    launched = _Launched(caches.start)
    launched.launch.jit = caches
    return typing.cast(list[TrialResult], [launched])


def test_the_report_counts_cold_and_warm_and_warns_when_sides_start_unlike():
    cold, warm = Start.COLD, Start.WARM
    assert starts_told([cold, warm, warm]) == "1 cold, 2 warm" and starts_told([]) == "none"
    line = caches_line(JitMode.COMMIT, [("A", _trials(cold, warm)), ("B", _trials(cold, warm))])
    assert "`launch.jit_cache: commit`" in line and "A 1 cold, 1 warm; B 1 cold, 1 warm" in line
    assert unlike_starts(_trials(cold, warm), _trials(warm, cold)) == ""
    said = unlike_starts(_trials(warm, warm), _trials(cold, warm))
    assert said.startswith("⚠") and "A 2 warm, B 1 cold, 1 warm" in said
    assert "not known" in unlike_starts(_trials(Start.UNKNOWN), _trials(Start.UNKNOWN))
    assert starts_told([Start.UNKNOWN] * 2) == "2 unknown"
    assert "Launches started" not in caches_line(JitMode.USER, [("A", _trials(Start.UNKNOWN))])


# -- real launches of the toy engine ------------------------------------------------------------------------------

def _launch(tmp_path: Path, repo: Path, cache: Path, ref: str, n: int, **over) -> TrialResult:
    recipe = parse_recipe(toy_recipe(repo, **over))
    spec = trial_spec(recipe, repo, checkout.resolve(repo, ref), f"{ref}-{n}", cache, tmp_path / "out")
    return run_trial(spec)


def _kernels(result: TrialResult) -> str:
    """What the toy engine said of its kernel cache at start: `compiled` or `loaded`."""
    log = Path(result.launch.log_path).read_text()
    return "loaded" if "kernel cache: loaded" in log else "compiled" if "kernel cache: compiled" in log else "?"


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A home of the test's own: what an engine writes there by default is seen, and nobody's real one is touched
    (uv keeps the cache it had, so the venvs build from it as fast as ever)."""
    uv_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "uv"
    monkeypatch.setenv("UV_CACHE_DIR", os.environ.get("UV_CACHE_DIR") or str(uv_cache))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


@pytest.mark.e2e
def test_each_commit_compiles_once_into_its_own_folder_and_nothing_into_the_home(tmp_path, engine_repo, home):
    cache = tmp_path / "cache"
    runs = [(ref, _launch(tmp_path, engine_repo, cache, ref, n)) for n, ref in enumerate(["broken", "fixed",
                                                                                          "broken", "fixed"])]
    assert [r.verdict.status for _, r in runs] == ["degenerate", "ok", "degenerate", "ok"]
    assert [r.launch.jit.start for _, r in runs] == [Start.COLD, Start.COLD, Start.WARM, Start.WARM]
    assert [_kernels(r) for _, r in runs] == ["compiled", "compiled", "loaded", "loaded"]
    folders = {ref: {r.launch.jit.folder for s, r in runs if s == ref} for ref in ("broken", "fixed")}
    assert all(len(f) == 1 for f in folders.values()) and folders["broken"] != folders["fixed"]
    for ref, (folder,) in folders.items():
        key = next(r.env.key for s, r in runs if s == ref)
        assert folder == str(Cache(cache).jit(key)) and list(Path(folder, "triton").glob("*/toy_kernels.json"))
    assert not list(home.rglob("*"))


@pytest.mark.e2e
def test_launch_mode_compiles_at_every_launch_and_keeps_nothing(tmp_path, engine_repo, home):
    cache = tmp_path / "cache"
    runs = [_launch(tmp_path, engine_repo, cache, "fixed", n, launch={**toy_recipe(engine_repo)["launch"],
                                                                       "jit_cache": "launch"}) for n in range(2)]
    assert [(r.launch.jit.start, _kernels(r)) for r in runs] == [(Start.COLD, "compiled")] * 2
    assert runs[0].launch.jit.folder != runs[1].launch.jit.folder
    assert not list((cache / "jit").iterdir()) and not list(home.rglob("*"))


@pytest.mark.e2e
def test_on_the_users_caches_a_commit_starts_on_another_commits_kernels(tmp_path, engine_repo, home):
    cache = tmp_path / "cache"
    user = {**toy_recipe(engine_repo)["launch"], "jit_cache": "user"}
    runs = [_launch(tmp_path, engine_repo, cache, ref, n, launch=user) for n, ref in enumerate(["broken", "fixed"])]
    assert [(r.launch.jit.start, _kernels(r)) for r in runs] == [(Start.UNKNOWN, "compiled"),
                                                                  (Start.UNKNOWN, "loaded")]
    assert list((home / ".triton" / "cache").glob("*/toy_kernels.json")) and not (cache / "jit").exists()


@pytest.mark.e2e
def test_a_cache_folder_the_recipe_names_wins(tmp_path, engine_repo, home):
    mine = tmp_path / "mine"
    result = _launch(tmp_path, engine_repo, tmp_path / "cache", "fixed", 0, env={"TRITON_CACHE_DIR": str(mine)})
    assert result.launch.jit.overridden == ("TRITON_CACHE_DIR",) and _kernels(result) == "compiled"
    assert result.launch.jit.start is Start.UNKNOWN  # what the recipe's own folder holds is not abbisect's to count
    assert list(mine.glob("*/toy_kernels.json"))
    assert not list(Path(result.launch.jit.folder, "triton").iterdir())
