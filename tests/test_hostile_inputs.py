"""What a hostile or unlucky input must not do (hang, grow memory, crash), through the real CLI
with stand-in servers (tests/echo_server.py), real git and real logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO_ROOT, abbisect, readme_exit_codes, toy_recipe, write_recipe

ANSWER_CAP = 1024 * 1024  # ABBISECT_ANSWER_CAP_BYTES's default (README)


def _echo_recipe(engine_repo: Path, prompts: list, **extra) -> dict:
    recipe = toy_recipe(engine_repo, prompts=prompts, **extra)
    recipe["launch"] = {"command": ["{python}", str(REPO_ROOT / "tests" / "echo_server.py"), "--host", "{host}",
                                    "--port", "{port}"], "ready": {"http": "/health"}}
    return recipe


# Runs a command and writes its peak RSS (bytes) to the file named first. A process started from pytest would
# carry pytest's own high-water mark through fork and exec (Linux keeps the larger): this small process starts
# the command afresh and reads the peak from wait4 (the command's and its waited-for children's, none large).
_PEAK = ("import os, sys; pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ); _, status, use = "
         "os.wait4(pid, 0); open(sys.argv[1], 'w').write(str(use.ru_maxrss * 1024)); "
         "sys.exit(os.waitstatus_to_exitcode(status))")


def _measured(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> tuple[int, int, str]:
    """(exit code, peak RSS in bytes, stdout and stderr) of a command."""
    peak = cwd / f"peak-{time.monotonic_ns()}"
    proc = subprocess.run([sys.executable, "-c", _PEAK, str(peak), *argv], cwd=cwd, env={**os.environ, **env},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)
    return proc.returncode, int(peak.read_text()), proc.stdout


# -- a request's timeout bounds the whole request -----------------------------------------------------------

@pytest.mark.e2e
def test_trickling_answer_ends_at_the_request_deadline(tmp_path, engine_repo, cache_dir):
    """Headers that promise a megabyte, then a byte a second: the request ends at timeouts.request (3 s), as
    an error on that output, and the check goes on (per-read timeouts would wait 100 s here)."""
    recipe = _echo_recipe(engine_repo, ["TRICKLE: 100"],
                          timeouts={"build": 300, "ready": 20, "request": 3, "teardown": 5})
    path = write_recipe(tmp_path / "r.yaml", recipe)
    proc = abbisect("check", str(path), "fixed", "--no-cache", "--json", cwd=tmp_path, cache=cache_dir, timeout=90)
    assert proc.returncode == 1, proc.stderr  # request errors are bad by default
    (out,) = json.loads(proc.stdout)["data"]["outputs"]
    assert out["error"] == "no complete answer within 3 s", out
    assert 3 <= out["latency_s"] < 100, out  # at the deadline, long before the trickle's end


# -- an answer is cut where it is read ---------------------------------------------------------------------

@pytest.mark.e2e
def test_fifty_megabyte_answer_is_cut_where_it_is_read(tmp_path, engine_repo, cache_dir):
    """A 50 MB answer: abbisect reads 1 MiB of it and no more; its peak memory stays small and so do the
    --json output, the trial's JSON and the trial-cache entry; the text read so far is kept, with a marker."""
    recipe = _echo_recipe(engine_repo, ["HUGE: 50", "ECHO: short"], name="toy-huge")
    path = write_recipe(tmp_path / "r.yaml", recipe)
    env = {"ABBISECT_CACHE_DIR": str(cache_dir)}
    # The venv and the server are started once before, so the measured run is abbisect's own work.
    warm = abbisect("check", str(path), "fixed", "--no-cache", cwd=tmp_path, cache=cache_dir)
    assert warm.returncode in (0, 1), warm.stderr
    code, peak, text = _measured([sys.executable, "-m", "abbisect", "check", str(path), "fixed", "--no-cache",
                                  "--json"], tmp_path, env)
    assert code in (0, 1), text[-3000:]
    print(f"peak RSS of abbisect check with a 50 MB answer: {peak / 2**20:.0f} MiB")
    assert peak < 300 * 2**20, peak
    assert len(text) < 4 * ANSWER_CAP, len(text)
    data = json.loads(text[text.index('{"schema"'):].splitlines()[0])["data"]
    huge, short = data["outputs"]
    assert huge["cut"] is True and short["cut"] is False and short["text"] == "short"
    assert huge["text"].startswith("river stone lamp copper orbit ")
    assert huge["text"].endswith(f"… [answer cut at {ANSWER_CAP} bytes by abbisect]"), huge["text"][-200:]
    assert len(huge["text"].encode()) < ANSWER_CAP + 100
    entries = [p for p in (cache_dir / "trials").glob("*.json") if '"toy-huge"' in p.read_text()]
    assert entries and all(p.stat().st_size < 3 * ANSWER_CAP for p in entries), entries
    trial_json = next((cache_dir / "checks" / "toy-huge").glob("check-*/trial.json"))
    assert trial_json.stat().st_size < 3 * ANSWER_CAP


def test_cut_json_gives_the_text_read_so_far_at_every_cut_point():
    from abbisect.query.chat import partial_string

    content = 'héllo "q" \\ 😀 tab\tline\nnext ' * 3
    for ensure_ascii in (True, False):
        for api, where in (("chat", ("choices", 0, "message", "content")), ("completions", ("choices", 0, "text"))):
            choice = {"index": 0, "message": {"role": "assistant", "reasoning_content": "not this", "content": content}}
            if api == "completions":
                choice = {"index": 0, "text": content}
            raw = json.dumps({"id": "x", "choices": [choice], "finish_reason": "stop"}, ensure_ascii=ensure_ascii).encode()
            got = [partial_string(raw[:n], where) for n in range(len(raw) + 1)]
            assert all(content.startswith(g) for g in got), next(g for g in got if not content.startswith(g))
            assert got[-1] == content and got[len(raw) // 2]


# -- a corrupt trial-cache entry is a miss -----------------------------------------------------------------

@pytest.mark.e2e
def test_corrupt_trial_cache_entry_is_a_miss_with_a_notice(tmp_path, engine_repo, cache_dir):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, name="toy-corrupt"))
    first = abbisect("check", str(recipe), "fixed", cwd=tmp_path, cache=cache_dir)
    assert first.returncode == 0, first.stderr
    (entry,) = [p for p in (cache_dir / "trials").glob("*.json") if '"toy-corrupt"' in p.read_text()]
    good = entry.read_text()
    cached = abbisect("check", str(recipe), "fixed", cwd=tmp_path, cache=cache_dir)
    assert cached.returncode == 0 and "(cached)" in cached.stderr, cached.stderr
    for bad in (good[: len(good) // 2], "{}", '{"spec": {"sha": 1}, "verdict": []}', "\xff not json"):
        entry.write_text(bad)
        proc = abbisect("check", str(recipe), "fixed", cwd=tmp_path, cache=cache_dir)
        assert proc.returncode == 0, proc.stderr  # the trial ran again: the toy engine's fixed commit is good
        notices = [ln for ln in proc.stderr.splitlines() if "trial cache: entry" in ln]
        assert len(notices) == 1 and f"entry {entry.name} unreadable (" in notices[0], proc.stderr
        assert notices[0].endswith("running the trial again") and "(cached)" not in proc.stderr
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
        assert entry.is_file() and json.loads(entry.read_text())["spec"]["sha"]  # kept again, readable
        assert (entry.parent / f"{entry.name}.unreadable").read_text() == bad  # the bad one moved aside


# -- scan streams the log ----------------------------------------------------------------------------------

@pytest.mark.e2e
def test_scan_of_a_300_megabyte_log_keeps_memory_flat(tmp_path):
    log = tmp_path / "big.log"
    lines = "".join(f"INFO 07-20 12:00:{n % 60:02d} [engine.py:{n % 900}] step {n} throughput {n % 997}.5 "
                    f"tokens/s, running: {n % 7} reqs, pending: 0\n" for n in range(20_000))
    block = lines.encode()
    with log.open("wb") as fh:
        fh.write(b"INFO loading\nParameter lm_head.weight_scale not found in params_dict\n")
        for _ in range(300_000_000 // len(block)):
            fh.write(block)
        fh.write(b'Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: boom\n')
    assert log.stat().st_size > 295_000_000
    code, peak, text = _measured([sys.executable, "-m", "abbisect", "scan", str(log)], tmp_path, {}, timeout=120)
    print(f"peak RSS of abbisect scan of a {log.stat().st_size / 1e6:.0f} MB log: {peak / 2**20:.0f} MiB")
    assert code == 1, text
    assert f"{log}:2: ERROR param_not_found [lm_head.weight_scale]" in text
    n_lines = 2 + 300_000_000 // len(block) * 20_000 + 3
    assert f"{log}:{n_lines}: first exception (root cause): RuntimeError: boom" in text, text
    assert peak < 80 * 2**20, peak


# -- engine.repo file:// to a folder that is not a repository ----------------------------------------------

@pytest.mark.e2e
def test_file_url_to_a_folder_that_is_no_repository_is_a_usage_error(tmp_path, cache_dir):
    folder = tmp_path / "plain"
    folder.mkdir()
    recipe = toy_recipe(folder, sides={"a": "main", "b": "main"})
    recipe["engine"]["repo"] = folder.as_uri()
    path = write_recipe(tmp_path / "r.yaml", recipe)
    for command, code in (("check", 128), ("run", 2)):
        proc = abbisect(command, str(path), *(["main"] if command == "check" else []), cwd=tmp_path, cache=cache_dir)
        assert proc.returncode == code, proc.stderr
        assert proc.stderr.strip().splitlines() == [
            f"abbisect: error: engine.repo {folder.as_uri()}: not a git repository (a folder without a .git)"]
    missing = toy_recipe(folder, name="gone")
    missing["engine"]["repo"] = (tmp_path / "nowhere").as_uri()
    proc = abbisect("check", str(write_recipe(tmp_path / "m.yaml", missing)), "main", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 128 and "not a git repository (no such folder)" in proc.stderr, proc.stderr
    # A URL git itself turns into that folder (url.insteadOf): git's own "does not appear to be a git repository"
    url = "https://example.invalid/toy.git"
    rewritten = toy_recipe(folder, name="rewritten")
    rewritten["engine"]["repo"] = url
    env = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"url.{folder.as_uri()}.insteadOf", "GIT_CONFIG_VALUE_0": url}
    proc = abbisect("check", str(write_recipe(tmp_path / "u.yaml", rewritten)), "main", cwd=tmp_path,
                    cache=cache_dir, env=env)
    assert proc.returncode == 128, proc.stderr
    said = f"engine.repo {url}: not a git repository ('{folder}' does not appear to be a git repository)"
    assert proc.stderr.strip().splitlines() == [f"abbisect: error: {said}"], proc.stderr


# -- refs and dates: what git chose, said -------------------------------------------------------------------

def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.e2e
def test_dry_run_with_a_date_end_plans_it_by_sha_and_shows_the_label(tmp_path, engine_repo, cache_dir):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo))
    head = _git(engine_repo, "rev-parse", "HEAD")
    proc = abbisect("bisect", str(recipe), "--good", "healthy0", "--bad", "2099-12-31", "--dry-run", cwd=tmp_path,
                    cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    label = f"2099-12-31 → {head[:10]}"  # the last first-parent commit of that day: HEAD
    assert f"bad end:  {label} → {head}" in proc.stdout
    assert f"side B: {label} → {head}" in proc.stdout, proc.stdout


def test_also_on_says_how_many_more_branches_carry_the_commit(tmp_path, engine_repo):
    from abbisect import checkout
    from abbisect.bisect import gitlog
    from abbisect.bisect.bisection import BisectRun, Mode
    from abbisect.bisect.variables import EngineCommits
    from abbisect.recipe import parse_recipe
    from abbisect.report.bisect import releases_block

    repo = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(engine_repo), str(repo)], check=True)
    for n in range(6):
        _git(repo, "branch", f"topic-{n}", "fixed")
    found = checkout.resolve(repo, "fixed")
    rel = gitlog.releases(repo, found.sha)
    assert len(rel.branches) == 8  # main, topic-0..5 and the clone's origin/main
    rec = parse_recipe(toy_recipe(repo))
    run = BisectRun(rec, repo, found, found, found, found, EngineCommits(rec, repo, tmp_path), mode=Mode.FIX,
                    releases=rel)
    (line,) = [ln for ln in releases_block(run) if "also on" in ln]
    shown = rel.branches[1:4]
    assert f"also on {', '.join(shown)} and 4 more." in line, line


@pytest.mark.e2e
def test_an_ambiguous_ref_says_what_git_chose_and_how_to_name_the_other(tmp_path, engine_repo, cache_dir):
    repo = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(engine_repo), str(repo)], check=True)
    _git(repo, "tag", "dup", "healthy0")
    _git(repo, "branch", "dup", "fixed")
    tag, branch = _git(repo, "rev-parse", "healthy0"), _git(repo, "rev-parse", "fixed")
    said = (f"abbisect: warning: ref 'dup' is ambiguous: git chose refs/tags/dup ({tag[:10]}); name the other as "
            f"refs/heads/dup ({branch[:10]})")
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(repo))
    plan = abbisect("run", str(recipe), "--a", "dup", "--b", "fixed", "--dry-run", cwd=tmp_path, cache=cache_dir)
    assert plan.returncode == 0, plan.stderr
    assert plan.stderr.splitlines() == [said] and f"side A: dup → {tag}" in plan.stdout
    checked = abbisect("-q", "check", str(recipe), "dup", "--json", cwd=tmp_path, cache=cache_dir)
    assert checked.returncode == 0, checked.stderr
    assert [ln.strip() for ln in checked.stderr.splitlines() if "warning" in ln] == [said]  # once, even with -q
    assert json.loads(checked.stdout)["data"]["spec"]["sha"] == tag
    plain = abbisect("run", str(recipe), "--a", "refs/heads/dup", "--b", "fixed", "--dry-run", cwd=tmp_path,
                     cache=cache_dir)
    assert plain.stderr == "" and f"side A: refs/heads/dup → {branch}" in plain.stdout


# -- what the CLI says: usage errors, options, exit codes, counts -------------------------------------------

@pytest.mark.e2e
def test_click_usage_errors_are_one_line_with_the_commands_help(tmp_path, cache_dir):
    cases = [(["bisect", "--bogus"], 2, "No such option '--bogus'", "abbisect bisect --help"),
             (["check", "--bogus"], 128, "No such option '--bogus'", "abbisect check --help"),
             (["cache", "gc", "--kind", "nope"], 2, "Invalid value for '--kind'", "abbisect cache gc --help"),
             (["bisect", "--slots", "0"], 2, "Invalid value for '--slots'", "abbisect bisect --help"),
             (["nosuch"], 2, "No such command 'nosuch'", "abbisect --help"),
             (["--bogus", "run"], 2, "No such option '--bogus'", "abbisect --help")]
    for args, code, problem, helps in cases:
        proc = abbisect(*args, cwd=tmp_path, cache=cache_dir)
        assert proc.returncode == code, (args, proc.stderr)
        (line,) = proc.stderr.splitlines()
        assert line.startswith(f"abbisect: error: {problem}") and line.endswith(f"{helps}')"), (args, line)


@pytest.mark.e2e
def test_quiet_and_verbose_work_after_the_command_too(tmp_path, engine_repo, cache_dir):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, name="toy-quiet"))
    loud = abbisect("check", str(recipe), "healthy0", cwd=tmp_path, cache=cache_dir)
    quiet = abbisect("check", str(recipe), "healthy0", "-q", cwd=tmp_path, cache=cache_dir)
    before = abbisect("-q", "check", str(recipe), "healthy0", cwd=tmp_path, cache=cache_dir)
    assert loud.returncode == quiet.returncode == before.returncode == 0, quiet.stderr
    assert len(loud.stderr.splitlines()) > 1
    assert len(quiet.stderr.splitlines()) == 1 and quiet.stderr.startswith("healthy0 (")  # the final line alone
    assert quiet.stderr == before.stderr
    for args in (["bisect", str(recipe), "--good", "healthy0", "--bad", "broken", "--dry-run", "-q"],
                 ["run", str(recipe), "--a", "healthy0", "--b", "fixed", "--dry-run", "-v"],
                 ["scan", str(tmp_path / "r.yaml"), "-q"], ["env", "--key", "-v"], ["schema", "-q"],
                 ["matrix", str(tmp_path), "-q", "--no-plots"], ["cache", "list", "-q"],
                 ["cache", "gc", "--older-than", "999d", "--dry-run", "-v"]):
        proc = abbisect(*args, cwd=tmp_path, cache=cache_dir)
        assert "No such option" not in proc.stderr, (args, proc.stderr)
        assert proc.returncode in (0, 2), (args, proc.stderr)


@pytest.mark.e2e
def test_env_matrix_cache_and_schema_help_carry_their_exit_codes(tmp_path, cache_dir):
    readme = readme_exit_codes()
    rows = {"ok": 0, "usage": 2, "infra": 2, "internal": 70, "interrupted": 130, "terminated": 143}
    for args in (["env"], ["matrix"], ["cache"], ["cache", "list"], ["cache", "gc"], ["schema"]):
        text = " ".join(abbisect(*args, "--help", cwd=tmp_path, cache=cache_dir).stdout.split())
        assert "Exit codes: " + ", ".join(f"{code} {name}" for name, code in rows.items()) + "." in text, args
        for name, code in rows.items():
            assert readme[args[0]][name] == code, (args, name)


@pytest.mark.e2e
def test_check_output_puts_the_trial_folder_there(tmp_path, engine_repo, cache_dir):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, name="toy-output"))
    sha = _git(engine_repo, "rev-parse", "fixed")
    proc = abbisect("check", str(recipe), "fixed", "--output", "mine", "--no-cache", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    trial = tmp_path / "mine" / f"check-{sha[:10]}"
    assert json.loads((trial / "trial.json").read_text())["spec"]["sha"] == sha
    assert (trial / "server.log").is_file() and not (cache_dir / "checks" / "toy-output").exists()
    default = abbisect("check", str(recipe), "fixed", cwd=tmp_path, cache=cache_dir)  # a cached result, kept as before
    assert default.returncode == 0 and (cache_dir / "checks" / "toy-output" / f"check-{sha[:10]}" / "trial.json").is_file()
    (tmp_path / "afile").write_text("x")
    refused = abbisect("check", str(recipe), "fixed", "-o", "afile", cwd=tmp_path, cache=cache_dir)
    assert refused.returncode == 128 and "is a file, not a folder" in refused.stderr, refused.stderr


@pytest.mark.e2e
def test_matrix_counts_a_cache_replay_apart_from_the_trials(tmp_path, engine_repo, cache_dir):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, name="toy-replays"))
    for n in (1, 2, 3):  # the first runs both sides; the two after it are served from the trial cache
        proc = abbisect("run", str(recipe), "--a", "broken", "--b", "fixed", "-o", f"results/ab{n}", cwd=tmp_path,
                        cache=cache_dir)
        assert proc.returncode == 0, proc.stderr
    proc = abbisect("matrix", "results", "--json", "--no-plots", cwd=tmp_path, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    cells = json.loads(proc.stdout)["data"]["cells"]
    assert len(cells) == 2 and all((c["evidence"], c.get("replayed")) == (1, 2) for c in cells), cells
    assert "4 results replayed from the cache" in proc.stderr
    assert "1 trial, replayed from the cache 2×" in (tmp_path / "results" / "matrix" / "matrix.md").read_text()
    assert "1 trial, replayed from the cache 2×" in (tmp_path / "results" / "matrix" / "matrix.html").read_text()


@pytest.mark.e2e
def test_an_empty_ref_is_a_usage_error(tmp_path, engine_repo, cache_dir):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, sides={"a": "healthy0", "b": "fixed"}))
    for args in (["--a", ""], ["--b", " ", "--dry-run"], ["--a", "", "--a-pin", "x==1"]):
        proc = abbisect("run", str(recipe), *args, cwd=tmp_path, cache=cache_dir)
        assert proc.returncode == 2, (args, proc.stderr)
        (line,) = proc.stderr.splitlines()
        assert line.startswith(f"abbisect: error: {args[0]} {args[1]!r}: an empty ref"), line


@pytest.mark.e2e
def test_a_recipe_with_too_many_values_blames_aliases_only_when_it_has_some(tmp_path, engine_repo, cache_dir):
    head = f"name: many\nengine: {{kind: command, repo: {engine_repo}}}\n"
    plain = tmp_path / "plain.yaml"
    plain.write_text(head + "prompts: [" + ", ".join(["p"] * 100_000) + "]\n")  # 100,000 inline prompts
    aliased = tmp_path / "aliased.yaml"
    aliased.write_text(head + "x: &a [" + ", ".join(["v"] * 400) + "]\nprompts: [" + ", ".join(["*a"] * 400) + "]\n")
    for path, says in ((plain, "too many values (100,0"), (aliased, "too large once YAML aliases are expanded")):
        proc = abbisect("run", str(path), "--a", "fixed", "--b", "fixed", "--dry-run", cwd=tmp_path, cache=cache_dir)
        assert proc.returncode == 2, proc.stderr
        (line,) = proc.stderr.splitlines()
        assert says in line and ("alias" in line) == (path == aliased), line


@pytest.mark.e2e
def test_a_wait_for_this_runs_own_background_build_says_so(tmp_path):
    """The lock names its holder: a wait behind a prefetch thread of this process is this run's background
    build; behind another process, another abbisect (with its pid) as before."""
    import threading

    from abbisect.infra.errors import InfraError
    from abbisect.infra.locks import file_lock

    lock = tmp_path / "envs" / "0123abcd.lock"
    held, done = threading.Event(), threading.Event()

    def prefetch() -> None:
        with file_lock(lock):
            held.set()
            done.wait(30)

    thread = threading.Thread(target=prefetch, name="prefetch_0")
    thread.start()
    said: list[str] = []
    try:
        held.wait(10)
        try:
            with file_lock(lock, timeout=0.5, say=said.append):
                raise AssertionError("taken while the prefetch thread holds it")
        except InfraError as exc:
            assert "waiting for this run's background build of 0123abcd" in str(exc)
    finally:
        done.set()
        thread.join()
    assert said and set(said) == {"waiting for this run's background build of 0123abcd"}, said
    hold = ("import sys, time; from pathlib import Path; from abbisect.infra.locks import file_lock\n"
            "with file_lock(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(30)")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(lock)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        said.clear()
        try:
            with file_lock(lock, timeout=0.5, say=said.append):
                raise AssertionError("taken while another process holds it")
        except InfraError:
            pass
        assert set(said) == {f"waiting for another abbisect building 0123abcd (pid {holder.pid})"}, said
    finally:
        holder.kill()
        holder.wait()
    with file_lock(lock):  # free again: taken at once
        pass
