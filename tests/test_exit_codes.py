"""Every way a command ends, through the real CLI: one exit code per meaning (abbisect.commands.endings.EXIT_CODES).

`check` is a `git bisect run` script, so the rule that matters most is tested under git itself: a fault on
abbisect's side (a model download, a checkout) exits 125 and git skips the commit — it never calls it bad.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import abbisect, cli, readme_exit_codes, toy_recipe, write_recipe

from abbisect.builtin.history import Commit, build_history
from abbisect.commands.endings import EXIT_CODES

# A model package that cannot be downloaded: the index is a closed port and there are no local links.
NO_DOWNLOAD_ENV = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple/", "PIP_CONFIG_FILE": os.devnull, "PIP_RETRIES": "0",
                   "PIP_TIMEOUT": "2"}
UNDOWNLOADABLE = {"package": "abbisect-no-such-model==0.0.1", "file": "none.gguf"}


def _no_links(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "links").mkdir(exist_ok=True)
    return {**NO_DOWNLOAD_ENV, "PIP_FIND_LINKS": str(tmp_path / "links")}


def _failing_checkout_env(tmp_path: Path, cache: Path) -> dict[str, str]:
    """A post-checkout hook that fails for worktrees in abbisect's cache only (git's own checkouts pass):
    `git worktree add` then exits non-zero, as it would on a broken filesystem or a failing filter."""
    hooks = tmp_path / "hooks"
    hooks.mkdir(exist_ok=True)
    hook = hooks / "post-checkout"
    hook.write_text(f'#!/bin/sh\ncase "$PWD" in "{cache}"/*) echo "checkout refused by test hook" >&2; exit 1;; esac\n')
    hook.chmod(0o755)
    return {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.hooksPath", "GIT_CONFIG_VALUE_0": str(hooks)}


def one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("abbisect:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


# (name, command, recipe overrides, ref(s), extra env builder, expected ending, stderr must contain)
CASES = [
    ("good", "check", {}, ["healthy0"], None, "good", None),
    ("bad verdict", "check", {}, ["broken"], None, "bad", None),
    ("unbuildable", "check", {}, ["noinstall"], None, "untestable", None),
    ("unknown ref", "check", {}, ["no-such-ref"], None, "usage", "no-such-ref"),
    ("model download fails", "check", {"model": UNDOWNLOADABLE}, ["healthy0"], "download", "infra",
     "infrastructure error: model preparation failed"),
    ("model download fails", "run", {"model": UNDOWNLOADABLE}, ["--a", "healthy0", "--b", "fixed"], "download",
     "infra", "infrastructure error: model preparation failed"),
    ("checkout fails", "check", {}, ["fixed"], "checkout", "infra", "cannot check out"),
    ("checkout fails", "run", {}, ["--a", "fixed", "--b", "healthy0"], "checkout", "infra", "cannot check out"),
    ("unknown ref", "run", {}, ["--a", "no-such-ref", "--b", "fixed"], None, "usage", "no-such-ref"),
    ("bad option", "check", {}, ["--no-such-option"], None, "usage", "No such option"),
    ("bad gate", "run", {}, ["--a", "fixed", "--b", "fixed", "--expect", "c=good"], None, "usage", "--expect"),
    ("gate passes", "run", {}, ["--a", "broken", "--b", "fixed", "--expect", "a=bad,b=good"], None, "ran", None),
    ("gate fails", "run", {}, ["--a", "broken", "--b", "fixed", "--fail-if", "b=good"], None, "gate-failed",
     "gate failed: b is good"),
    ("same commit", "bisect", {}, ["--good", "healthy0", "--bad", "healthy0^{}"], None, "usage", "same commit"),
    ("untestable end", "bisect", {}, ["--good", "fixed", "--bad", "noinstall"], None, "untestable-end", None),
    ("both ends good", "bisect", {}, ["--good", "healthy0", "--bad", "broken~1"], None, "no-change", None),
    ("found", "bisect", {}, ["--good", "healthy0", "--bad", "broken"], None, "found", None),
]


# Endings reached before a build or a server starts run the CLI in process; the others launch for real.
IN_PROCESS = {"unknown ref", "bad option", "bad gate", "same commit"}


@pytest.mark.parametrize(("name", "command", "overrides", "args", "env_kind", "ending", "says"), [
    pytest.param(*c, id=f"{c[1]}-{c[0]}", marks=() if c[0] in IN_PROCESS else pytest.mark.e2e) for c in CASES])
def test_exit_code_table(tmp_path, engine_repo, cache_dir, name, command, overrides, args, env_kind, ending, says):
    cache = cache_dir
    env: dict[str, str] = {}
    if env_kind == "download":
        env = _no_links(tmp_path)
    elif env_kind == "checkout":
        cache = tmp_path / "fresh-cache"  # a worktree made earlier in the session would not be checked out again
        env = _failing_checkout_env(tmp_path, cache)
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, **overrides))
    extra = ["-o", str(tmp_path / "out")] if command in ("run", "bisect") else []
    run = cli if name in IN_PROCESS else abbisect
    proc = run(command, str(recipe), *args, *extra, cwd=tmp_path, cache=cache, env=env)
    assert proc.returncode == EXIT_CODES[command][ending], proc.stdout + proc.stderr
    if says == "No such option":  # click's own usage message
        assert says in proc.stderr and "Traceback" not in proc.stderr
    elif says:
        assert says in one_line(proc.stderr)


def _rev(repo: Path, ref: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", ref], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_codes_are_documented_in_help_and_readme(tmp_path, cache_dir):
    assert readme_exit_codes() == EXIT_CODES  # every code of every command, and no other
    for command, codes in EXIT_CODES.items():
        help_text = cli(command, "--help", cwd=tmp_path, cache=cache_dir).stdout
        for ending, code in codes.items():
            assert f"{code} {ending}" in " ".join(help_text.split()), (command, ending)


@pytest.mark.e2e
@pytest.mark.parametrize("fault", ["download", "checkout"])
def test_git_bisect_run_skips_infrastructure_faults(tmp_path, engine_repo, cache_dir, fault):
    """Under `git bisect run`, a fault on abbisect's side makes git skip the commit, never mark it bad."""
    repo = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(engine_repo), str(repo)], check=True)
    cache = cache_dir if fault == "download" else tmp_path / "fresh-cache"
    extra = _no_links(tmp_path) if fault == "download" else _failing_checkout_env(tmp_path, cache)
    overrides = {"model": UNDOWNLOADABLE} if fault == "download" else {}
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo, **overrides))
    env = {**os.environ, "ABBISECT_CACHE_DIR": str(cache), **extra}
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "bisect", "start", "broken", "healthy0"], check=True, env=env, capture_output=True)
    run = subprocess.run([*git, "bisect", "run", sys.executable, "-m", "abbisect", "check", str(recipe)], check=False,
                         env=env, capture_output=True, text=True, timeout=600)
    log = subprocess.run([*git, "bisect", "log"], check=True, capture_output=True, text=True).stdout
    verdicts = [ln for ln in log.splitlines() if ln.startswith("git bisect ") and not ln.startswith("git bisect start")]
    assert verdicts and all(ln.startswith("git bisect skip") for ln in verdicts), log + run.stdout + run.stderr
    assert "infrastructure error" in run.stdout + run.stderr


@pytest.mark.alone
@pytest.mark.e2e
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signals_exit_130_and_143(tmp_path, engine_repo, cache_dir, sig, code):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, sides={"a": "fixed", "b": "fixed"},
                                                          env={"TOYENGINE_LOAD_SECONDS": "60"}))
    proc = subprocess.Popen([sys.executable, "-m", "abbisect", "run", str(recipe), "-o", str(tmp_path / "o"),
                             "--no-cache"], cwd=tmp_path, env={**os.environ, "ABBISECT_CACHE_DIR": str(cache_dir)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:  # wait until the server is launched, then signal abbisect
        seen.append(line)
        if "launch:" in line:
            break
    time.sleep(0.5)
    proc.send_signal(sig)
    seen.append(proc.stderr.read())
    proc.wait(timeout=60)
    err = "".join(seen)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    port = int(re.search(r"--port (\d+)", "".join(seen[:-1])).group(1))
    with socket.socket() as s:  # the server is down with abbisect
        assert s.connect_ex(("127.0.0.1", port)) != 0, "the server survived"


@pytest.mark.e2e
def test_lock_held_too_long_is_untestable(tmp_path, engine_repo, cache_dir):
    """Another abbisect holding this commit's worktree: a status line while waiting, then 125 under check."""
    sha = _rev(engine_repo, "fixed")
    lock = cache_dir / "worktrees" / hashlib.sha256(str(engine_repo.resolve()).encode()).hexdigest()[:12] / f"{sha}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo))
    with lock.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        proc = abbisect("check", str(recipe), "fixed", "--no-cache", cwd=tmp_path, cache=cache_dir,
                        env={"ABBISECT_LOCK_TIMEOUT": "2"})
    assert proc.returncode == 125, proc.stderr
    assert f"waiting for another abbisect building {sha}" in proc.stderr
    assert "gave up after" in one_line(proc.stderr)


@contextmanager
def small_disk(path: Path, size: str, options: str = ""):
    """A tmpfs of `size` at `path` (root only); skips the test where mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    opts = f"size={size}" + (f",{options}" if options else "")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], check=False, capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _remount_ro(path: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)


@pytest.mark.e2e
@pytest.mark.parametrize(("command", "ending"), [("check", "infra"), ("run", "infra"), ("bisect", "infra")])
def test_read_only_cache_is_one_line(tmp_path, engine_repo, command, ending):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo))
    with small_disk(tmp_path / "ro", "1m") as cache:
        (cache / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
        _remount_ro(cache)
        args = {"check": ["fixed"], "run": ["--a", "fixed", "--b", "fixed", "-o", str(tmp_path / "o")],
                "bisect": ["--good", "healthy0", "--bad", "broken", "-o", str(tmp_path / "o")]}[command]
        proc = abbisect(command, str(recipe), *args, cwd=tmp_path, cache=cache)
        assert not (cache / "crash.log").exists()
    assert proc.returncode == EXIT_CODES[command][ending], proc.stderr
    assert "Read-only file system" in one_line(proc.stderr)


@pytest.mark.e2e
def test_full_disk_is_untestable_under_check(tmp_path, engine_repo):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo))
    with small_disk(tmp_path / "full", "256k") as cache:
        (cache / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
        (cache / "trials").mkdir()
        filler = subprocess.run(["dd", "if=/dev/zero", f"of={cache / 'filler'}", "bs=4k"], check=False,
                                capture_output=True)
        assert filler.returncode != 0  # dd stops at "No space left on device"
        proc = abbisect("check", str(recipe), "fixed", cwd=tmp_path, cache=cache)
    assert proc.returncode == 125, proc.stdout + proc.stderr
    assert "No space left on device" in one_line(proc.stderr)


@pytest.mark.e2e
def test_port_taken_is_untestable_not_a_crash(tmp_path, engine_repo, cache_dir):
    """A server that cannot bind because another process holds the port: 125 under check, never bad."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, launch={
            "command": ["{python}", "-m", "toyengine.server", "--host", "{host}", "--port", str(port)],
            "flags": ["--seed", "0"], "ready": {"http": "/health"}}))
        proc = abbisect("check", str(recipe), "fixed", "--no-cache", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 125, proc.stdout + proc.stderr
    assert "could not bind its port" in one_line(proc.stderr)


@pytest.mark.e2e
def test_bisect_with_only_untestable_commits_left_is_ambiguous(tmp_path, cache_dir):
    """good, unbuildable, unbuildable, bad: the first bad commit is one of three — exit 5, not "found"."""
    repo = tmp_path / "engine"
    build_history(repo, [Commit("v1", tag="v1"), Commit("Break the package metadata", "break_install"),
                         Commit("Dispatch quantisation to linear layers only", "break_scale"),
                         Commit("Repair the package metadata", "fix_install", tag="bad")])
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo))
    proc = abbisect("bisect", str(recipe), "--good", "v1", "--bad", "bad", "-o", str(tmp_path / "o"), "--json",
                    cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == EXIT_CODES["bisect"]["ambiguous"] == 5, proc.stderr
    assert json.loads(proc.stdout)["data"]["outcome"] == "ambiguous"
