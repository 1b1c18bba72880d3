"""The secret sweep: secrets of every kind planted in one toy-engine recipe, printed by the real server (a
launch wrapper) and by a build step, through run, bisect (interrupted by SIGINT, then resumed), check, a run
stopped by SIGTERM, a check killed by SIGKILL, narrow (two probes; then a second recipe whose passing launch
and switches hold secrets of their own, short ones under their names among them, narrowed by delta debugging
and switches) and matrix (compare launches nothing and reads only files: nothing to print); the server also
writes a value with letters right after it, as two processes' interleaved lines do. Then every file under the
result folders and the cache, and every stdout and stderr, is searched for every long form of every secret
and for each short one's NAME=value form: zero hits; no artefact holds an invisible character. And nothing
structured was corrupted by masking: shas, folder names, the recipe's name, the prompts and their expect
patterns, the bisect's answer and its resume, the exit codes; the reports' rerun recipes keep each
`${VAR}` reference as it is.

One module-scoped history and cache: every venv is the recipe's own (its install.env is in the key), and the
ends of the bisect come from the run's trial cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import signal
import string
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import abbisect, marked_pids, toy_recipe, write_recipe

from abbisect.builtin.history import Commit, build_history

pytestmark = pytest.mark.e2e

HISTORY = [Commit("v1", tag="v1"), Commit("docs"), Commit("tidy"), Commit("more docs"),
           Commit("Dispatch quantisation to linear layers only", "break_scale"), Commit("cleanup"),
           Commit("polish"), Commit("release", tag="v2")]
BROKEN = 4  # the commit the bisect must find
CAP = 8192  # ABBISECT_LOG_CAP_BYTES: the head keeps 4096 bytes, and SPLIT straddles that boundary
ALNUM = string.ascii_letters + string.digits


def _random(n: int, alphabet: str = ALNUM) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


PEM = ("-----BEGIN PRIVATE KEY-----\n" + "".join(_random(64, ALNUM + "+/") + "\n" for _ in range(4))
       + _random(20, ALNUM + "+/") + "==\n-----END PRIVATE KEY-----\n")
SPLIT = "sk_" + _random(21)  # printed in two writes 0.3 s apart, cut by the log cap's head
HF = "hf_" + _random(24)
REF = "ref_" + _random(20)  # HF-like value read by reference from the user's environment
BUILD = "bt_" + _random(20)  # install.env, echoed by an install step
SHORT = "hunter2"
MARK = _random(12)
# narrow's own sources: the passing launch's literal HF_TOKEN and REF_SECRET, a switch's token, short values
# under their own names (one in the failing launch of the second recipe, one in a switch)
PASS = "hf_PASS" + _random(20)
PASS_REF = "pr_" + _random(20)
SWITCH = "sw_" + _random(20)
SHORT_NARROW, SHORT_SWITCH = "short2x", "sw2x"
INVISIBLE = re.compile("[\u200b-\u200d\u2060\ufeff]")

# The real server process prints them (bash, then exec of the toy engine): raw, with a logger's prefix on
# each line, inside a dict's repr (newlines as the two characters \n), named, split across two writes.
WRAPPER = r'''
printf '%4087s\n' pad
printf '%s' "${SPLIT_TOKEN:0:8}"; sleep 0.3; printf '%s\n' "${SPLIT_TOKEN:8}"
printf '%4000s\n' filler
printf '%s\n' "$TLS_PRIVATE_KEY"
while IFS= read -r line; do printf 'INFO key: %s\n' "$line"; done <<< "$TLS_PRIVATE_KEY"
"$0" -c 'import os; print({"key": os.environ["TLS_PRIVATE_KEY"], "hf": os.environ["HF_TOKEN"]})'
printf 'DB_PASSWORD=%s MY_TOKEN=%s LABEL=%s\n' "$DB_PASSWORD" "$MY_TOKEN" "$LABEL"
printf 'Authorization: Bearer %s; ref %s\n' "$HF_TOKEN" "$REF_SECRET"
printf 'TOKENIZERS_PARALLELISM=%s\n' "$TOKENIZERS_PARALLELISM"
printf 'switch SWITCH_TOKEN=%s SW_TOKEN=%s; raw %s\n' "${SWITCH_TOKEN:-unset}" "${SW_TOKEN:-unset}" "${SWITCH_TOKEN:-unset}"
if [ -n "$SHORT_TOKEN" ]; then printf 'refusing to start with SHORT_TOKEN=%s\n' "$SHORT_TOKEN"; exit 3; fi
printf 'INFO tok=%s' "$HF_TOKEN"; printf 'reqreq 200\n'
exec "$0" -m toyengine.server "$@"
'''
PROMPTS = [{"prompt": "The capital of France is", "expect": "(?i)paris"},
           {"prompt": "Is it false that two plus two is four?", "expect": "(?i)true|false"},
           "What is two plus two?", "Explain what a hash table is.", "List three uses of copper."]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    repo = root / "engine"
    shas = build_history(repo, HISTORY)
    short = next(shas[BROKEN][i:i + 4] for i in range(36) if not shas[BROKEN][i:i + 4].isdigit())
    recipe = toy_recipe(
        repo, name="demo", sides={"a": "v1", "b": "v2"},
        install={"strategy": "command", "env": {"BUILD_TOKEN": BUILD},
                 "commands": ["printf 'build token: %s for {sha}\\n' \"$BUILD_TOKEN\""]},
        env={"TLS_PRIVATE_KEY": PEM, "SPLIT_TOKEN": SPLIT, "HF_TOKEN": HF, "REF_SECRET": "${SWEEP_REF}",
             "DB_PASSWORD": SHORT, "MY_TOKEN": short, "LABEL": "${SWEEP_X}", "TOKENIZERS_PARALLELISM": "false",
             "ABBISECT_TEST_MARK": MARK, "TOYENGINE_REQUEST_SECONDS": "0.15"},
        prompts=PROMPTS, verdict={"bad_if": ["degenerate", "crashed_at_startup"]}, bisect={"prefetch": 2},
        narrow={"passing": {"flags": ["--seed", "1"]}, "catalogue": False})
    recipe["launch"]["command"] = ["bash", "-c", WRAPPER, "{python}", "--host", "{host}", "--port", "{port}"]
    recipe["narrow"]["passing"]["env"] = {**recipe["env"], "HF_TOKEN": PASS}
    (root / "recipe").mkdir()
    path = write_recipe(root / "recipe" / "demo.yaml", recipe)  # the user's own file: not searched
    # The second: SHORT_TOKEN makes the start fail (the wrapper); the passing launch has other secrets and no
    # SHORT_TOKEN; one switch adds a token, the other drops SHORT_TOKEN (the workaround) and adds a short one.
    passing = {**recipe["env"], "HF_TOKEN": PASS, "REF_SECRET": PASS_REF}
    narrow_recipe = {**recipe, "name": "demo-narrow", "env": {**recipe["env"], "SHORT_TOKEN": SHORT_NARROW},
                     "narrow": {"passing": {"env": passing}, "catalogue": False,
                                "help": ["{python}", "-m", "toyengine.server", "--help"],
                                "switches": [{"id": "command.another-token", "feature": "a token of its own",
                                              "env": {"SWITCH_TOKEN": SWITCH}},
                                             {"id": "command.unset-short-token", "feature": "the short token unset",
                                              "replaces": ["SHORT_TOKEN"],
                                              "env": {"SWITCH_TOKEN": SWITCH, "SW_TOKEN": SHORT_SWITCH}}]}}
    narrow_path = write_recipe(root / "recipe" / "narrow.yaml", narrow_recipe)
    work = root / "work"
    work.mkdir()
    env = {"SWEEP_REF": REF, "SWEEP_X": "demo", "ABBISECT_LOG_CAP_BYTES": str(CAP)}
    return {"root": root, "repo": repo, "shas": shas, "short": short, "recipe": path, "narrow": narrow_path,
            "work": work,
            "cache": root / "cache", "env": env, "streams": []}


def _cli(s, *args, expect: int, timeout: float = 300):
    proc = abbisect(*args, cwd=s["work"], cache=s["cache"], env=s["env"], timeout=timeout)
    s["streams"].append((args, proc.stdout + proc.stderr))
    assert proc.returncode == expect, (args, proc.returncode, proc.stderr[-3000:])
    return proc


def _interrupted(s, args: list[str], when: str, sig: int) -> int:
    """The CLI, sent `sig` once a progress line matches `when` (a trial's server has printed its secrets)."""
    proc = subprocess.Popen([sys.executable, "-m", "abbisect", *args], cwd=s["work"],
                            env={**os.environ, "ABBISECT_CACHE_DIR": str(s["cache"]), **s["env"]},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    out: list[str] = []
    hit = threading.Event()

    def read_err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err.append(line)
            if not hit.is_set() and re.search(when, line):
                hit.set()
                proc.send_signal(sig)

    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    assert proc.stdout is not None
    out.append(proc.stdout.read())
    rc = proc.wait(timeout=300)
    reader.join(timeout=10)
    s["streams"].append((tuple(args), "".join(out + err)))
    assert hit.is_set(), "".join(err)[-3000:]
    deadline = time.monotonic() + 20  # an abbisect killed by SIGKILL leaves its server to the watchdog
    while marked_pids(MARK) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marked_pids(MARK) == []
    return rc


def _forms(short: str) -> dict[str, str]:
    """What must never be found: each long secret as printed (raw, escaped, each line), the two parts of the
    split one, and each short one's NAME=value form."""
    body = PEM.strip()
    found = {"pem": body, "pem escaped": body.replace("\n", "\\n"), "split": SPLIT, "split head": SPLIT[:8],
             "split tail": SPLIT[8:], "hf": HF, "ref": REF, "build": BUILD,
             "DB_PASSWORD=": f"DB_PASSWORD={SHORT}", "DB_PASSWORD json": f'"DB_PASSWORD": "{SHORT}"',
             "MY_TOKEN=": f"MY_TOKEN={short}", "LABEL=": "LABEL=demo", "pass": PASS, "pass ref": PASS_REF,
             "switch": SWITCH, "SHORT_TOKEN=": f"SHORT_TOKEN={SHORT_NARROW}",
             "SHORT_TOKEN json": f'"SHORT_TOKEN": "{SHORT_NARROW}"', "short narrow quoted": f'"{SHORT_NARROW}"',
             "SW_TOKEN=": f"SW_TOKEN={SHORT_SWITCH}", "short switch quoted": f'"{SHORT_SWITCH}"'}
    found.update({f"pem line {n}": line for n, line in enumerate(body.splitlines())})
    return found


def _grep(roots: list[Path], forms: dict[str, str]) -> list[str]:
    hits = []
    needles = {k: v.encode() for k, v in forms.items()}
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                hits += [f"{path}: {k}" for k, v in needles.items() if v in data]
    return hits


def test_no_secret_in_any_file_or_stream_and_nothing_structured_corrupted(sweep):
    s, shas, work = sweep, sweep["shas"], sweep["work"]
    recipe = str(s["recipe"])
    t0 = time.monotonic()

    # run: A v1 (good) against B v2 (bad), into results/demo/<stamp> (the recipe's name as the folder)
    ab = json.loads(_cli(s, "run", recipe, "--json", expect=0).stdout)["data"]
    [ab_dir] = list((work / "results" / "demo").iterdir())
    # a bisect interrupted by Ctrl-C during a candidate's queries, then resumed with the command it printed
    bis = work / "bis"
    rc = _interrupted(s, ["bisect", recipe, "--good", "v1", "--bad", "v2", "-o", str(bis)],
                      r"candidate [0-9a-f]{10}: query", signal.SIGINT)
    assert rc == 130
    state = json.loads((bis / "state.json").read_text())
    assert state["masked"] and state["recipe"]["env"]["DB_PASSWORD"] == "***"
    assert _guessed(state, s["recipe"]) == []  # the fingerprint cannot be brute-forced offline
    resumed = json.loads(_cli(s, "bisect", "--resume", str(bis), "--json", expect=0).stdout)["data"]
    check = json.loads(_cli(s, "check", recipe, "v2", "--json", expect=1).stdout)["data"]
    # a run stopped by SIGTERM, and a check killed by SIGKILL, each during its trial's queries
    rc = _interrupted(s, ["run", recipe, "--no-cache", "-o", str(work / "term")], r"query", signal.SIGTERM)
    assert rc == 143
    rc = _interrupted(s, ["check", recipe, shas[2], "--no-cache"], r"query", signal.SIGKILL)
    assert rc == -signal.SIGKILL
    # narrow at the bad commit against a launch with another seed: both probes' servers print the secrets
    narrowed = json.loads(_cli(s, "narrow", recipe, "--ref", "v2", "--no-switches", "-o", str(work / "narrow"),
                               "--json", expect=1).stdout)["data"]
    assert [p["label"] for p in narrowed["probes"]][:2] == ["the recipe's launch", "narrow.passing"], narrowed
    probe_logs = [p.read_text() for p in (work / "narrow").rglob("server.log")]
    assert len(probe_logs) == 2 and all("DB_PASSWORD=*** MY_TOKEN=***" in log for log in probe_logs)
    narrow_md = (work / "narrow" / "narrow.md").read_text()
    assert "`env HF_TOKEN=*** (instead of HF_TOKEN=***)`" in narrow_md, narrow_md
    # the second recipe at v1: the start fails with SHORT_TOKEN; delta debugging and the switches find it
    second = json.loads(_cli(s, "narrow", str(s["narrow"]), "--ref", "v1", "-o", str(work / "narrow2"), "--json",
                             expect=0).stdout)["data"]
    assert [second["deltas"][i]["key"] for i in second["minimal"]] == ["SHORT_TOKEN"], second["deltas"]
    assert second["workarounds"] == ["command.unset-short-token"]
    assert sorted((d["key"], d["value"], d["was"]) for d in second["deltas"]) == [
        ("HF_TOKEN", "***", "***"), ("REF_SECRET", "${SWEEP_REF}", "***"), ("SHORT_TOKEN", "***", None)]
    narrow2_md = (work / "narrow2" / "narrow.md").read_text()
    for shown in ("`env REF_SECRET=${SWEEP_REF} (instead of REF_SECRET=***)`", "`+ env SHORT_TOKEN=***`",
                  "`− SHORT_TOKEN=***, + SWITCH_TOKEN=***, + SW_TOKEN=***`", "| `command.unset-short-token` |"):
        assert shown in narrow2_md, (shown, narrow2_md)
    probe2_logs = [p.read_text() for p in (work / "narrow2").rglob("server.log")]
    assert any("refusing to start with SHORT_TOKEN=***" in log for log in probe2_logs)
    assert any("switch SWITCH_TOKEN=*** SW_TOKEN=***; raw ***" in log for log in probe2_logs)
    matrix = work / "matrix"
    _cli(s, "matrix", str(work / "results"), str(bis), "-o", str(matrix), "--checks", "--trial-cache",
         "--no-plots", "--json", expect=0)
    elapsed = time.monotonic() - t0

    # Nothing of any secret, anywhere.
    forms = _forms(s["short"])
    assert _grep([work, s["cache"]], forms) == []
    assert [(args, k) for args, text in s["streams"] for k, v in forms.items() if v in text] == []
    shown = [p for p in work.rglob("*") if p.suffix in (".md", ".json", ".csv") and p.is_file()]
    assert [p for p in shown if INVISIBLE.search(p.read_text())] == []

    # ... and yet the server and the build step received the real values and printed them, masked.
    logs = [p.read_text() for p in ab_dir.rglob("server.log")]
    assert len(logs) == 2
    for log in logs:
        assert "DB_PASSWORD=*** MY_TOKEN=*** LABEL=***" in log and "Authorization: Bearer ***; ref ***" in log
        assert "TOKENIZERS_PARALLELISM=false" in log  # not a secret: shown
        assert "INFO key: ***" in log and "{'key': '***\\n', 'hf': '***'}" in log
        assert "elided: head and tail kept" in log  # the cap cut this log, and kept no part of SPLIT
        assert "INFO tok=***reqreq 200" in log  # a letter right after the value: still masked
    printed = "".join(p.read_text() for p in (s["cache"] / "envs").glob("*/build.log"))
    built = set(re.findall(r"^build token: \*\*\* for ([0-9a-f]{40})$", printed, re.MULTILINE))
    tested = {st["sha"] for st in resumed["steps"]} | {shas[0], shas[-1], shas[2]}
    assert built - tested, "no venv built by the prefetch alone (never tested): widen the history"

    # Nothing structured was corrupted.
    assert [ab[side]["spec"]["sha"] for side in "ab"] == [shas[0], shas[-1]]
    assert [ab[side]["verdict"]["outcome"] for side in "ab"] == ["good", "bad"]
    assert resumed["first_new"] == shas[BROKEN] and resumed["outcome"] == "found"
    assert {st["sha"] for st in state["steps"]} <= set(shas) and state["fingerprint"]
    assert all(st["sha"] in shas for st in resumed["steps"])
    assert check["spec"]["sha"] == shas[-1] and check["verdict"]["outcome"] == "bad"
    for data in (ab["a"], ab["b"], check):
        shown = data["spec"]["recipe"]
        assert shown["name"] == "demo"
        assert (shown["prompts"][1]["prompt"], shown["prompts"][1]["expect"]) == (PROMPTS[1]["prompt"],
                                                                                  "(?i)true|false")
        assert shown["env"]["TOKENIZERS_PARALLELISM"] == "false" and shown["env"]["MY_TOKEN"] == "***"
        assert data["outputs"][1]["prompt"] == PROMPTS[1]["prompt"]
    results = json.loads((ab_dir / "results.json").read_text())
    assert [results[side]["spec"]["sha"] for side in "ab"] == [shas[0], shas[-1]]
    assert all("INFO tok=***reqreq 200" in results[side]["launch"]["log_tail"] for side in "ab")
    assert all(results[side]["spec"]["recipe"]["launch"]["command"][2] == WRAPPER for side in "ab")  # runnable
    cached = [json.loads(p.read_text()) for p in (s["cache"] / "trials").glob("*.json")]
    assert cached and all(c["spec"]["sha"] in shas for c in cached)
    for spec in [results[side]["spec"] for side in "ab"] + [c["spec"] for c in cached]:
        assert spec["sha"].startswith(Path(spec["out_dir"]).name.rsplit("-", 1)[-1]), spec["out_dir"]
    assert (s["cache"] / "checks" / "demo").is_dir()
    report = (ab_dir / "report.md").read_text()
    assert "Is it false that two plus two is four?" in report and "(?i)true|false" in report
    for rerun in (report, (bis / "bisect.md").read_text()):  # a reference reruns as printed; a literal is masked
        recipe_block = rerun[rerun.index("```yaml"):]
        assert "REF_SECRET: ${SWEEP_REF}" in recipe_block and "LABEL: ${SWEEP_X}" in recipe_block
        assert "DB_PASSWORD: '***'" in recipe_block and "HF_TOKEN: '***'" in recipe_block
        assert "DB_PASSWORD=%s MY_TOKEN=%s LABEL=%s" in recipe_block  # the wrapper names them: no value to mask
    assert (matrix / "matrix.json").is_file()
    assert (s["cache"] / "fingerprint.key").stat().st_mode & 0o777 == 0o600
    print(f"sweep: {elapsed:.0f} s of commands")


def _guessed(state: dict, recipe: Path) -> list[str]:
    """Guesses of DB_PASSWORD that match state.json's fingerprint when computed as the fingerprint was before
    (sha256 over the recipe with its real values; the attacker knows all of the recipe but the password):
    none may, the right one included."""
    from abbisect.recipe import load_recipe

    real = load_recipe(recipe)[0]

    def old_method(password: str) -> str:
        guess = real.model_copy(update={"env": {**real.env, "DB_PASSWORD": password}})
        data = guess.model_dump(mode="json", exclude={"sides": True, "description": True, "hardware": True,
                                                      "bisect": True, "ab": True, "public_env": True,
                                                      "secret_env": True, "gpus": True, "gpu_slots": True,
                                                      "verdict": {"script"}, "timeouts": True})
        data["gpus"] = None
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    guesses = ["123456", "password", "letmein", "qwerty", SHORT, "hunter3", "trustno1"]
    return [g for g in guesses if old_method(g) == state["fingerprint"]]
