"""A fault-injection pass over toy-engine runs and bisects: interrupted at a launch and again as the
resume starts, a full disk (a small tmpfs as the cache or the result folder) at the build, the launch and the
report, each file abbisect writes in the cache damaged. What must hold each time: no recorded launch is lost, no
wrong verdict is cached, and each failure is one line with the README's exit code.

Mounting a tmpfs needs root (or a user namespace that allows it): where mount is refused, those tests skip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import abbisect, readme_exit_codes, toy_recipe, write_recipe

pytestmark = pytest.mark.e2e

CODES = readme_exit_codes()
WRAPPER = '''import os, sys
with open(os.environ["ABBISECT_TEST_STARTS"], "a") as fh:
    fh.write(f"{os.getpid()}\\n")
from toyengine import server
server.main(sys.argv[1:])
'''


# -- helpers ------------------------------------------------------------------------------------------------------

@pytest.fixture
def tmpfs(tmp_path) -> Iterator:
    """`tmpfs(name, size)`: a fresh tmpfs of `size` bytes mounted at tmp_path/name (unmounted after the test)."""
    mounted: list[Path] = []

    def mount(name: str, size: int) -> Path:
        where = tmp_path / name
        where.mkdir(parents=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"mount is not permitted here: {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(folder: Path, leave: int = 0) -> Path:
    """Fill `folder`'s disk but `leave` bytes."""
    st = os.statvfs(folder)
    filler = folder / f"filler-{uuid.uuid4().hex[:6]}"
    with filler.open("wb") as fh:
        fh.write(b"\0" * max(st.f_bavail * st.f_frsize - leave, 0))
    return filler


def one_line(stderr: str, command: str, ending: str, rc: int) -> str:
    """The failure's one line (every other line on stderr is progress, indented by its clock)."""
    assert rc == CODES[command][ending], (rc, stderr[-3000:])
    said = [ln for ln in stderr.splitlines() if ln.startswith("abbisect:")]
    assert len(said) == 1, stderr[-3000:]
    prefix = {"infra": "abbisect: infrastructure error: ", "usage": "abbisect: error: "}.get(ending, "abbisect: ")
    assert said[0].startswith(prefix), said[0]
    assert "Traceback" not in stderr, stderr[-3000:]
    return said[0]


def check(recipe: Path, ref: str, cwd: Path, cache: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    """`abbisect check` of one commit, its logs in a new folder outside the cache (only the cache fills)."""
    out = cwd / f"check-{uuid.uuid4().hex[:8]}"
    proc = abbisect("check", str(recipe), ref, "--json", "-o", str(out), *extra, cwd=cwd, cache=cache)
    data = json.loads(proc.stdout)["data"] if proc.stdout.strip().startswith("{") else {}
    return proc, data


def bytecode(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*.pyc")]


# -- interrupted: a resume keeps what was recorded -----------------------------------------------------------------

LAUNCH_DONE = re.compile(r": launch \d+: ")
TRIAL_STARTED = re.compile(r": (checkout|environment|launch)\b")


def launches_in(state: Path) -> set[tuple[str, str, int]]:
    steps = json.loads(state.read_text())["steps"]
    return {(s["sha"], t["spec"]["side"], t["spec"]["attempt"]) for s in steps
            for t in [s["result"], *(s.get("more") or ())] if t}


def signal_when(cmd: list[str], cwd: Path, env: dict, pattern: re.Pattern, count: int,
                sig: int) -> tuple[int, str]:
    """Run `cmd`; send `sig` when `pattern` has matched `count` lines of its stderr. (exit status, stderr)"""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    seen = [0]

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if pattern.search(line):
                seen[0] += 1
                if seen[0] == count:
                    proc.send_signal(sig)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=30)
    assert seen[0] >= count, "".join(lines)[-3000:]
    return proc.returncode, "".join(lines)


@pytest.fixture(scope="module")
def flaky(planted):
    return planted(6, {3: "flaky_crash"})


def test_a_resumed_statistical_bisect_interrupted_before_its_first_launch_ends_loses_nothing(tmp_path, cache_dir,
                                                                                              flaky):
    """Ctrl-C in the search; the printed resume stopped (SIGTERM) as its first new launch starts: state.json still
    holds every launch recorded, and the next resume runs none of them again."""
    repo, shas = flaky
    starts = tmp_path / "starts.txt"
    (tmp_path / "wrap.py").write_text(WRAPPER)
    env = {"TOYENGINE_CRASH_COUNTER": str(tmp_path / "crashes"), "TOYENGINE_CRASH_EVERY": "2",
           "ABBISECT_TEST_STARTS": str(starts)}
    recipe = toy_recipe(repo, prompts=["What is two plus two?"], env=env, repeats={"launches": 6}, verdict={"alpha": 0.05})
    recipe["launch"]["command"] = ["{python}", str(tmp_path / "wrap.py"), "--host", "{host}", "--port", "{port}"]
    recipe["timeouts"]["ready"] = 10
    path = write_recipe(tmp_path / "r.yaml", recipe)
    out = tmp_path / "out"
    run_env = {**os.environ, "ABBISECT_CACHE_DIR": str(cache_dir)}
    cli = [sys.executable, "-m", "abbisect"]
    rc, err = signal_when([*cli, "bisect", str(path), "--good", shas[0], "--bad", shas[-1], "-o", str(out),
                           "--no-cache"], tmp_path, run_env, LAUNCH_DONE, 6, signal.SIGINT)
    assert one_line(err, "bisect", "interrupted", rc).startswith("abbisect: interrupted")
    recorded = launches_in(out / "state.json")
    assert len(recorded) >= 6

    rc, err = signal_when([*cli, "bisect", "--resume", str(out)], tmp_path, run_env, TRIAL_STARTED, 1,
                          signal.SIGTERM)
    assert one_line(err, "bisect", "terminated", rc).startswith("abbisect: terminated")
    assert launches_in(out / "state.json") == recorded, "the resume's first write lost recorded launches"

    before = len(starts.read_text().split())
    proc = abbisect("bisect", "--resume", str(out), "--json", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["data"]["first_new"] == shas[3]
    final = launches_in(out / "state.json")
    assert recorded <= final
    assert len(starts.read_text().split()) - before == len(final - recorded), "a recorded launch ran again"


# -- a full disk ---------------------------------------------------------------------------------------------------

@pytest.fixture
def toy(tmp_path, engine_repo) -> Path:
    return write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo))


def test_a_full_disk_at_the_build_is_infra_and_caches_nothing(tmp_path, tmpfs, toy):
    """The environments' folder fills while the venv is built (the rest of the cache has room): the trial is
    infra, one line, and nothing is cached; with room again the commit is tested as it is."""
    cache = tmp_path / "cache"
    envs = tmpfs("cache/envs", 64 << 20)
    filler = fill(envs, leave=16 << 10)
    proc, _ = check(toy, "fixed", tmp_path, cache)
    line = one_line(proc.stderr, "check", "infra", proc.returncode)
    assert "disk filled" in line and "No space left on device" in line, line
    assert not list(cache.glob("trials/*.json")), "a trial that ran out of disk was cached"
    filler.unlink()
    proc, data = check(toy, "fixed", tmp_path, cache)
    assert proc.returncode == 0 and data["verdict"]["status"] == "ok", proc.stderr[-3000:]


def _cut_short(cache: Path) -> list[Path]:
    """The .pyc files in the cache that a full disk cut short (a multiple of the page size, not loadable)."""
    import marshal

    cut = []
    for pyc in bytecode(cache):
        data = pyc.read_bytes()
        if len(data) % 4096 == 0:
            try:
                marshal.loads(data[16:])
            except (EOFError, ValueError):
                cut.append(pyc)
    return cut


def test_a_full_disk_at_the_launch_leaves_no_wrong_verdict(tmp_path, tmpfs, toy):
    """The server compiles the engine's modules while the disk has a few pages left: a module's bytecode is cut to
    4,096 bytes (where exactly depends on what else the launch writes, so amounts of room are tried, the fewest
    first, until one cuts a module short). Once the disk is free again the next launch reads none of it: the commit
    is ok, and no crash is ever cached."""
    cache = tmpfs("cache", 64 << 20)
    proc, data = check(toy, "fixed", tmp_path, cache, "--no-cache")
    assert proc.returncode == 0 and data["verdict"]["status"] == "ok", proc.stderr[-3000:]
    cut_any = False
    for pages in range(3, 10):
        for pyc in bytecode(cache):  # compiled again by the next launch, on the full disk
            pyc.unlink()
        filler = fill(cache, leave=pages * 4096)
        proc, data = check(toy, "fixed", tmp_path, cache, "--no-cache")
        assert proc.returncode in (0, CODES["check"]["infra"]), (pages, proc.stderr[-3000:])
        if proc.returncode:
            one_line(proc.stderr, "check", "infra", proc.returncode)
        cut_any = cut_any or bool(_cut_short(cache))
        filler.unlink()
        proc, data = check(toy, "fixed", tmp_path, cache, "--no-cache")  # launched again, its result kept
        assert proc.returncode == 0 and data["verdict"]["status"] == "ok", (pages, proc.stderr[-3000:])
        kept = [json.loads(p.read_text())["verdict"]["status"] for p in cache.glob("trials/*.json")]
        assert kept and set(kept) == {"ok"}, (pages, kept)
        if cut_any:  # the case is exercised: more room cuts the same way or less
            print(f"a module's bytecode cut short with {pages} pages left")
            break
    assert cut_any, "no amount of room cut a module's bytecode short: the case was not exercised"


def test_a_full_result_folder_at_the_report_is_one_infra_line_naming_output(tmp_path, tmpfs, toy, cache_dir):
    results = tmpfs("results", 1 << 20)
    out = results / "out"
    filler = fill(results, leave=0)
    proc = abbisect("bisect", str(toy), "--good", "healthy0", "--bad", "broken", "-o", str(out), cwd=tmp_path,
                    cache=cache_dir)
    line = one_line(proc.stderr, "bisect", "infra", proc.returncode)
    assert "No space left on device" in line and "--output" in line and "--cache-dir" not in line, line
    filler.unlink()


def test_a_result_folder_that_fills_at_any_stage_resumes_to_the_same_answer(tmp_path, tmpfs, toy, cache_dir):
    """The result folder has room for only part of what a bisect writes (its trials' logs, state.json, the
    report): wherever it fills, the bisect ends on one infra line naming --output, and once there is room the
    printed resume finishes with the answer of a bisect that never failed."""
    args = ["--good", "healthy0", "--bad", "broken"]
    proc = abbisect("bisect", str(toy), *args, "-o", str(tmp_path / "reference"), "--json", cwd=tmp_path,
                    cache=cache_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reference = json.loads(proc.stdout)["data"]
    # about the pages the whole folder takes (and its temporary copies): the right room fails at the report, far
    # less at the trials
    used = sum(-(-f.stat().st_size // 4096) for f in (tmp_path / "reference").rglob("*") if f.is_file())
    results = tmpfs("results", (used + 96) * 4096)
    failed_at_report = False
    for pages in (2, used // 2, *range(used, used + 10)):
        out = results / f"out{pages}"
        filler = fill(results, leave=pages * 4096)
        proc = abbisect("bisect", str(toy), *args, "-o", str(out), "--json", cwd=tmp_path, cache=cache_dir)
        filler.unlink()
        if proc.returncode == 0:
            assert json.loads(proc.stdout)["data"]["first_new"] == reference["first_new"]
            shutil.rmtree(out)
            continue
        line = one_line(proc.stderr, "bisect", "infra", proc.returncode)
        assert "No space left on device" in line and "--output" in line, line
        if (out / "state.json").is_file():
            steps = json.loads((out / "state.json").read_text())["steps"]
            failed_at_report |= len(steps) == len(reference["steps"])
            proc = abbisect("bisect", "--resume", str(out), "--json", cwd=tmp_path, cache=cache_dir)
            assert proc.returncode == 0, (pages, proc.stderr[-3000:])
            assert json.loads(proc.stdout)["data"]["first_new"] == reference["first_new"]
        shutil.rmtree(out)  # room for the next one
        if failed_at_report:  # the three stages are exercised (the trials, midway, the report): more room adds none
            break
    assert failed_at_report, "no amount of room failed the bisect at its report: the stage was not exercised"


def test_a_full_disk_while_the_builtin_history_is_written_is_one_infra_line(tmp_path, tmpfs):
    cache = tmpfs("cache", 8 << 20)
    fill(cache, leave=32 << 10)  # room for the cache's own files, not for the history
    demo = Path(__file__).resolve().parent.parent / "recipes" / "demo.yaml"
    proc = abbisect("run", str(demo), "-o", str(tmp_path / "out"), cwd=tmp_path, cache=cache)
    line = one_line(proc.stderr, "run", "infra", proc.returncode)
    assert "No space left on device" in line, line


def test_a_read_only_result_folder_names_output(tmp_path, tmpfs, toy, cache_dir):
    results = tmpfs("results", 1 << 20)
    subprocess.run(["mount", "-o", "remount,ro", str(results)], check=True)
    proc = abbisect("bisect", str(toy), "--good", "healthy0", "--bad", "broken", "-o", str(results / "out"),
                    cwd=tmp_path, cache=cache_dir)
    line = one_line(proc.stderr, "bisect", "infra", proc.returncode)
    assert "--output" in line and "--cache-dir" not in line, line


# -- each file abbisect writes in the cache, damaged ---------------------------------------------------------------

def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes({"cut": data[: len(data) // 2], "empty": b"", "garbage": b"\xff\xfe\x00garbage\x81"}[how])


def _written(cache: Path) -> list[Path]:
    """What abbisect and the engine's launches wrote in `cache`: every file but the checkouts' sources and the
    installed venvs (the commit's own code, and what the installer wrote), the lock files (empty) and the
    histories."""
    return [p for p in cache.rglob("*") if p.is_file() and not p.is_symlink()
            and not p.name.endswith((".lock", ".use"))
            and (p.suffix == ".pyc" or not any(part in ("venv", "worktrees", "builtin", "repos")
                                               for part in p.relative_to(cache).parts))]


def test_every_file_abbisect_writes_in_the_cache_damaged_changes_no_verdict(tmp_path, toy, engine_repo):
    """After a good trial, every file abbisect itself wrote in the cache (the trial cache's entries and marks,
    the environments' markers, the bytecode, the JIT folders' files, the servers' records, the fingerprint key)
    is damaged: the next check reads the same verdict, or fails on one line with its README code — never another
    verdict, and what it keeps is right. Three ways in turn (cut in half, emptied, garbage), on one cache: each
    way damages the cache the last way's checks left after their good trials."""
    cache = tmp_path / "cache"
    proc, first = check(toy, "fixed", tmp_path, cache)
    assert proc.returncode == 0 and first["verdict"]["status"] == "ok", proc.stderr[-3000:]
    for how in ("cut", "empty", "garbage"):
        written = _written(cache)
        assert any(p.match("trials/*.json") for p in written) and any(p.suffix == ".pyc" for p in written)
        for p in written:
            _damage(p, how)
        proc, again = check(toy, "fixed", tmp_path, cache)
        if proc.returncode != 0:
            one_line(proc.stderr, "check", "infra", proc.returncode)
            proc, again = check(toy, "fixed", tmp_path, cache)
        assert proc.returncode == 0 and again["verdict"]["status"] == "ok", (how, proc.stderr[-3000:])
        proc, cached = check(toy, "fixed", tmp_path, cache)
        assert proc.returncode == 0 and cached["verdict"]["status"] == "ok", (how, proc.stderr[-3000:])
