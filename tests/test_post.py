"""`abbisect post` (and `run --post`, `bisect --post`): a result's report as one comment per result on a GitHub
issue, against a stand-in of GitHub's REST API on the loopback address (tests/github_standin.py), pointed at
through GITHUB_API_URL as on GitHub Enterprise.

The fast tier holds the pure parts (the target, where the API is and which token, the marker and the result's
id, conclusiveness, the cut) and the client against the stand-in; the e2e tier posts result folders the toy
engine made (tests/conftest.py's history): first post creates, the second updates the same comment, another
result adds its own, --dry-run sends nothing, inconclusive results are refused, every error is one line with
its exit code, a planted secret posts masked, and the token is in no line printed and no file written.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from pathlib import Path

import pytest
from conftest import abbisect, cli, run_ab, toy_recipe, write_recipe
from github_standin import GitHubStandIn

from abbisect.commands.endings import EXIT_CODES
from abbisect.infra.errors import UserError
from abbisect.infra.github import Api, Failure, GitHub, GitHubError, Target, failure_of, reset_time
from abbisect.report.post import (
    Conclusion,
    ResultKind,
    ab_conclusion,
    bisect_conclusion,
    comment_body,
    marked,
    marker,
    publishable,
    read_result,
    result_key,
)

TOKEN = "ghp_" + "Tk9rZW5Ob3RGb3JMb2dz" + "x7Q2"  # what a classic token looks like; never to be printed
PLANTED = "hf_" + "PlantedInTheRunsEnv" + "93kQ"  # a secret of the run's environment
NO_TOKENS = {name: "" for name in ("GH_TOKEN", "GITHUB_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN")}
CODES = EXIT_CODES["post"]


@pytest.fixture(autouse=True)
def _loopback_direct(monkeypatch):
    """The stand-in is reached directly even where the machine has an HTTP proxy (httpx reads *_PROXY)."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


# -- the pure parts ------------------------------------------------------------------------------------------

def test_a_target_is_owner_repo_number_or_its_address():
    assert Target.parse("vllm-project/vllm#123") == Target("vllm-project", "vllm", 123)
    assert Target.parse("https://github.com/sgl-project/sglang/pull/9") == Target("sgl-project", "sglang", 9)
    assert str(Target.parse("https://ghe.example/o/r.js/issues/4#issuecomment-1")) == "o/r.js#4"
    for bad in ("vllm#1", "o/r", "o/r#", "o/r#0", "o/r#x", "-o/r#1", "o r/x#1"):
        with pytest.raises(UserError, match="OWNER/REPO#N"):
            Target.parse(bad)


def test_the_api_and_its_token_come_from_the_variables_gh_reads():
    assert Api.from_env({}) == Api("https://api.github.com", False)
    assert Api.from_env({"GH_HOST": "github.example.com"}) == Api("https://github.example.com/api/v3", True)
    assert Api.from_env({"GH_HOST": "acme.ghe.com"}) == Api("https://api.acme.ghe.com", False)
    assert Api.from_env({"GITHUB_API_URL": "https://h.example/api/v3/", "GH_HOST": "x"}).base == "https://h.example/api/v3"
    with pytest.raises(UserError, match="GITHUB_API_URL"):
        Api.from_env({"GITHUB_API_URL": "ftp://h"})
    cloud, server = Api.from_env({}), Api.from_env({"GH_HOST": "ghe.example"})
    env = {"GITHUB_TOKEN": "b", "GH_TOKEN": "a", "GITHUB_ENTERPRISE_TOKEN": "d", "GH_ENTERPRISE_TOKEN": " "}
    assert cloud.token(env) == "a" and server.token(env) == "d"  # gh's order; a blank variable is no token
    assert cloud.token({"GITHUB_TOKEN": "b"}) == "b" and cloud.token({}) is None
    with pytest.raises(GitHubError) as err:
        server.require_token({})
    assert err.value.failure is Failure.NO_TOKEN and "GH_ENTERPRISE_TOKEN" in str(err.value)


def _ab(a: str = "a" * 40, b: str = "b" * 40, name: str = "toy", **extra) -> dict:
    side = {"spec": {"sha": a, "pins": []}, "verdict": {"outcome": "bad", "status": "degenerate"}}
    other = {"spec": {"sha": b, "pins": []}, "verdict": {"outcome": "good", "status": "ok"}}
    return {"schema": "abbisect/run/v1", "recipe": {"name": name, "model": "m", "engine": {"kind": "command"}},
            "a": side, "b": other, "started": "2026-12-05T00:00:00Z", **extra}


def test_the_same_question_has_the_same_id_and_another_another():
    key = result_key(ResultKind.RUN, _ab())
    assert key == result_key(ResultKind.RUN, _ab(started="another day", command="abbisect run again"))
    assert len({key, result_key(ResultKind.RUN, _ab(b="c" * 40)), result_key(ResultKind.RUN, _ab(name="other")),
                result_key(ResultKind.BISECT, _ab())}) == 4
    pinned = _ab()
    pinned["b"]["spec"]["pins"] = ["deep-gemm==2.1.0"]
    assert result_key(ResultKind.RUN, pinned) != key
    bis = {"recipe": {"name": "toy"}, "old": "a" * 40, "new": "b" * 40, "steps": [1]}
    assert result_key(ResultKind.BISECT, bis) == result_key(ResultKind.BISECT, {**bis, "steps": [1, 2, 3]})
    assert result_key(ResultKind.BISECT, bis) != result_key(ResultKind.BISECT, {**bis, "new": "c" * 40})


def test_the_marker_is_the_first_line_not_a_quote_of_it():
    key = "run-0123456789abcdef0123"
    body = comment_body(key, "## report\n", "report.md")
    assert body.splitlines()[0] == marker(key) and marked(body, key) and marked("\r\n" + body, key)
    assert not marked(f"> {marker(key)}\n> quoted", key) and not marked(f"see\n{marker(key)}", key)
    assert not marked(body, "run-ffffffffffffffffffff")
    assert "-->" not in key and "--" not in key


def test_conclusive_a_b_results():
    assert ab_conclusion(_ab()).conclusion is Conclusion.DIFFERENT
    same = _ab()
    same["a"]["verdict"] = {"outcome": "good", "status": "ok"}
    assert ab_conclusion(same).conclusion is Conclusion.SAME
    skipped = _ab()
    skipped["a"]["verdict"] = {"outcome": "skip", "status": "build_failed"}
    judged = ab_conclusion(skipped)
    assert judged.conclusion is Conclusion.UNTESTABLE and "build_failed" in judged.why
    for call, conclusion in (("different", Conclusion.DIFFERENT), ("same", Conclusion.SAME),
                             ("unsure", Conclusion.NOT_SURE)):
        stat = _ab(assessment={"a": {"outcome": "good"}, "b": {"outcome": "good"},
                               "comparison": {"text": "p = 0.4", "comparison": {"call": call}}})
        assert ab_conclusion(stat).conclusion is conclusion, call
    assert [c.conclusive for c in Conclusion] == [True, True, True, False, False, False, False, False]


def test_conclusive_bisect_results():
    found = {"mode": "regression", "outcome": "found", "first_new": "f" * 40, "confirmation": {}}
    assert bisect_conclusion(found).conclusion is Conclusion.FOUND
    assert bisect_conclusion({**found, "confirmation": {"level": "confirmed"}}).conclusion is Conclusion.FOUND
    for level in ("not sure", "not reproduced", "host changed"):
        judged = bisect_conclusion({**found, "confirmation": {"level": level, "sentence": "why"}})
        assert judged.conclusion is Conclusion.NOT_SURE and level in judged.why
    assert bisect_conclusion({"mode": "no-change", "outcome": None}).conclusion is Conclusion.NO_CHANGE
    assert bisect_conclusion({"mode": "untestable-end"}).conclusion is Conclusion.UNTESTABLE
    assert bisect_conclusion({"mode": "fix", "outcome": "ambiguous", "candidates": ["c" * 40], "posterior": {"x": 1}}
                             ).conclusion is Conclusion.NOT_SURE
    assert bisect_conclusion({"mode": "fix", "outcome": "ambiguous", "candidates": ["c" * 40]}
                             ).conclusion is Conclusion.AMBIGUOUS
    assert bisect_conclusion({"mode": "", "outcome": None}).conclusion is Conclusion.UNFINISHED


def test_a_long_report_is_cut_with_a_note_of_what_was_left_out():
    parts = ["## abbisect A/B: `toy`", "", "**Verdict** [a link](https://example.invalid/x)", ""]
    for n in range(40):
        parts += [f"### Section {n} [see](https://example.invalid/{n})", "", f"<details><summary>fold {n}</summary>", "",
                  "````text", *(f"line {k} " + "x" * 60 for k in range(30)), "````", "", "</details>", ""]
    text = "\n".join(parts)
    limit = 20_000
    body = comment_body("run-k", text, "report.md", limit)
    assert len(body) <= limit < len(text)
    assert body.startswith(marker("run-k") + "\n## abbisect A/B")
    kept, note = body.rsplit("\n\n", 1)
    assert note.startswith("_Cut here to fit GitHub's 20,000-character limit") and "report.md" in note
    assert "://" not in note and "](" not in note  # no link
    # the sections left out, headings and folded <details> alike, named in order: the first eight, then a count
    lines = {("Section", n): f"### Section {n} [see]" for n in range(40)} | {
        ("fold", n): f"<details><summary>fold {n}</summary>" for n in range(40)}
    left = [e for e in sorted(lines, key=lambda e: (e[1], e[0] == "fold")) if lines[e] not in kept]
    named = [(kind, int(n)) for kind, n in re.findall(r"(Section|fold) (\d+)", note)]
    assert named == left[:8] and f"and {len(left) - 8} more sections" in note
    # what was open at the cut is closed, so the note is not swallowed by a code block or a <details>
    assert kept.count("````") % 2 == 0 and kept.count("<details>") == kept.count("</details>")
    assert comment_body("run-k", "short", "report.md", limit) == marker("run-k") + "\nshort"


def test_what_leaves_is_masked_once_more(tmp_path, monkeypatch):
    """The report is posted as it is, masked again on its way out: a value of the recipe's secret variables read
    from the environment, a folder of this machine (the cache, the home folder), the token."""
    monkeypatch.setenv("ABBISECT_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache" / "envs").mkdir(parents=True)
    recipe = {"name": "toy", "env": {"HF_TOKEN": "${PLANTED_SECRET}", "LABEL": "visible-label"}}
    text = (f"auth {PLANTED} in {tmp_path / 'cache' / 'envs'}/x, by {TOKEN}; LABEL=visible-label; "
            "HF_TOKEN='${PLANTED_SECRET}'")
    shown = publishable(text, recipe, {"PLANTED_SECRET": PLANTED}, [TOKEN])
    assert shown == ("auth *** in $ABBISECT_CACHE_DIR/envs/x, by ***; LABEL=visible-label; "
                     "HF_TOKEN='${PLANTED_SECRET}'")
    assert publishable("nothing to mask", recipe, {}, []) == "nothing to mask"


def test_a_folder_that_is_not_a_finished_result_is_one_line(tmp_path):
    def refused(files: dict[str, str]) -> str:
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        for name, text in files.items():
            (folder / name).write_text(text)
        with pytest.raises(UserError) as err:
            read_result(folder)
        return str(err.value)

    with pytest.raises(UserError, match="no such result folder"):
        read_result(tmp_path / "missing")
    assert "bisect has not finished" in refused({"state.json": "{}"})
    assert "not a result folder" in refused({"notes.md": "x"})
    assert "not JSON" in refused({"report.md": "x", "results.json": "{"})
    assert "not abbisect's run result" in refused({"report.md": "x", "results.json": "[1]"})
    assert "malformed" in refused({"report.md": "x", "results.json": json.dumps({"schema": "abbisect/run/v1"})})
    folder = tmp_path / "ok"
    folder.mkdir()
    (folder / "report.md").write_text("## report")
    (folder / "results.json").write_text(json.dumps(_ab()))
    result = read_result(folder)
    assert result.kind is ResultKind.RUN and result.judged.conclusion is Conclusion.DIFFERENT
    assert result.key == result_key(ResultKind.RUN, _ab()) and result.markdown == "## report"


def test_failures_by_status_and_the_reset_time():
    now = 1_800_000_000.0
    assert reset_time({"x-ratelimit-reset": str(int(now) + 125)}, now).endswith("(in 2 min 5 s)")
    assert "UTC" in reset_time({"retry-after": "60"}, now) and "minute" in reset_time({}, now)
    cases = [(401, {}, "Bad credentials", Failure.DENIED), (403, {}, "Resource not accessible", Failure.DENIED),
             (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1"}, "", Failure.RATE_LIMITED),
             (403, {}, "You have exceeded a secondary rate limit", Failure.RATE_LIMITED),
             (429, {"retry-after": "3"}, "", Failure.RATE_LIMITED), (404, {}, "Not Found", Failure.NOT_FOUND),
             (410, {}, "Issues are disabled", Failure.NOT_FOUND), (502, {}, "", Failure.NETWORK),
             (422, {}, "Body is too long", Failure.OTHER)]
    for status, headers, message, failure in cases:
        err = failure_of(status, headers, message, "o/r#1")
        assert err.failure is failure and "\n" not in str(err), (status, message)
    assert {f.value for f in Failure} <= set(CODES)


# -- the client against the stand-in (no abbisect process: the fast tier) -----------------------------------------

def test_the_client_pages_creates_and_updates(monkeypatch):
    with GitHubStandIn(TOKEN) as gh:
        gh.issues[("o", "r", 1)] = []
        for n in range(5):
            gh.add_comment("o", "r", 1, f"comment {n}")
        api = Api(gh.url, True)
        with GitHub(api, TOKEN) as client:
            assert [c.body for c in client.comments(Target("o", "r", 1))] == [f"comment {n}" for n in range(5)]
            made = client.create(Target("o", "r", 1), "new")
            assert client.update(Target("o", "r", 1), made.id, "changed").id == made.id
        assert [c["body"] for c in gh.comments("o", "r", 1)][-1] == "changed"
        pages = [s.path for s in gh.seen if s.method == "GET"]
        assert len(pages) == 3 and pages[0] == "/repos/o/r/issues/1/comments?per_page=100"  # 5 comments, 2 a page
        assert {s.authorization for s in gh.seen} == {f"Bearer {TOKEN}"}
        # a next page on another host is not followed (the token would go with it)
        monkeypatch.setattr(gh, "url", "http://localhost:9")
        with GitHub(api, TOKEN) as client:
            assert len(list(client.comments(Target("o", "r", 1)))) == 2


def test_the_client_says_each_failure_without_the_token():
    with GitHubStandIn(TOKEN) as gh:
        gh.issues[("o", "r", 1)] = []
        gh.read_only.add("o/r")
        api = Api(gh.url, True)
        seen = []
        for token, call, failure in [
                ("ghp_wrongwrongwrongwrong", lambda c: list(c.comments(Target("o", "r", 1))), Failure.DENIED),
                (TOKEN, lambda c: c.create(Target("o", "r", 1), "x"), Failure.DENIED),
                (TOKEN, lambda c: list(c.comments(Target("o", "r", 2))), Failure.NOT_FOUND),
                (TOKEN, lambda c: c.issue(Target("o", "other", 1)), Failure.NOT_FOUND)]:
            with GitHub(api, token) as client, pytest.raises(GitHubError) as err:
                call(client)
            assert err.value.failure is failure
            seen.append(str(err.value))
        gh.rate_limit(600)
        with GitHub(api, TOKEN) as client, pytest.raises(GitHubError) as err:
            client.issue(Target("o", "r", 1))
        assert err.value.failure is Failure.RATE_LIMITED and re.search(r"resets at \d\d:\d\d:\d\d UTC", str(err.value))
        seen.append(str(err.value))
    with GitHub(Api(gh.url, True), TOKEN, timeout=5) as client, pytest.raises(GitHubError) as err:
        client.issue(Target("o", "r", 1))  # the server is gone: nothing listens on its port
    assert err.value.failure is Failure.NETWORK and "cannot reach" in str(err.value)
    assert not any(TOKEN in s or "wrongwrong" in s for s in [*seen, str(err.value)])


# -- through the CLI, on result folders of the toy engine --------------------------------------------------------

WRAPPER = r'''printf 'Parameter lm_head.weight_scale not found in params_dict (auth %s)\n' "$HF_TOKEN"
exec "$0" -m toyengine.server "$@"
'''


@pytest.fixture(scope="module")
def results(tmp_path_factory, engine_repo, cache_dir) -> dict[str, Path]:
    """Result folders of the toy engine: an A/B that differs, one that is the same, one not sure (two passes a
    side), one untestable, one whose report holds a secret of the run's environment (masked), and a bisect
    that names the commit."""
    root = tmp_path_factory.mktemp("results")
    folders = {}
    for name, a, b, overrides in [
            ("differs", "broken", "fixed", {}), ("same", "fixed", "healthy0", {}),
            ("unsure", "fixed", "healthy0", {"name": "toy-repeats",
                                             "repeats": {"launches": 1, "passes": 2, "max_launches": 1,
                                                         "min_effect": 0.05}}),
            ("untestable", "noinstall", "fixed", {})]:
        (root / name).mkdir()
        _, folders[name] = run_ab(root / name, engine_repo, cache_dir, a, b, **overrides)
    secret = toy_recipe(engine_repo, name="toy-secret", sides={"a": "broken", "b": "fixed"},
                        env={"HF_TOKEN": "${PLANTED_SECRET}"})
    secret["launch"]["command"] = ["bash", "-c", WRAPPER, "{python}", "--host", "{host}", "--port", "{port}"]
    (root / "secret").mkdir()
    recipe = write_recipe(root / "secret" / "r.yaml", secret)
    folders["secret"] = root / "secret" / "out"
    proc = abbisect("run", str(recipe), "-o", str(folders["secret"]), cwd=root / "secret", cache=cache_dir,
                    env={"PLANTED_SECRET": PLANTED})
    assert proc.returncode == 0, proc.stderr
    assert "(auth ***)" in (folders["secret"] / "report.md").read_text()  # the report holds it, masked
    recipe = write_recipe(root / "bisect.yaml", toy_recipe(engine_repo))
    folders["bisect"] = root / "bisect"
    proc = abbisect("bisect", str(recipe), "--good", "healthy0", "--bad", "broken", "-o", str(folders["bisect"]),
                    cwd=root, cache=cache_dir)
    assert proc.returncode == 0, proc.stderr
    return folders


def _post(tmp_path, cache_dir, gh: GitHubStandIn | None, *args: str, token: str | None = TOKEN, input: str = "",
          env: dict | None = None):
    full = {**NO_TOKENS, "GITHUB_API_URL": gh.url if gh else "http://127.0.0.1:9", **(env or {})}
    if token is not None:
        full["GH_TOKEN"] = token
    proc = cli("post", *args, cwd=tmp_path, cache=cache_dir, env=full, input=input)
    assert TOKEN not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    return proc


def _one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("abbisect: "), stderr
    return lines[0]


def _mine(gh: GitHubStandIn) -> list[dict]:
    return [c for c in gh.comments("o", "r", 7) if c["body"].startswith("<!-- abbisect-result ")]


@pytest.mark.e2e
def test_first_post_creates_the_second_updates_another_result_adds(tmp_path, cache_dir, results):
    with GitHubStandIn(TOKEN) as gh:
        gh.issues[("o", "r", 7)] = []
        for n in range(3):  # others' comments first, so that finding ours takes more than one page
            gh.add_comment("o", "r", 7, f"a maintainer's comment {n}")
        first = _post(tmp_path, cache_dir, gh, str(results["differs"]), "o/r#7", "--yes")
        assert first.returncode == CODES["posted"] and first.stdout.startswith("posted: https://"), first.stderr
        (created,) = _mine(gh)
        report = (results["differs"] / "report.md").read_text()
        assert created["body"].split("\n", 1)[1] == report  # the report as it is: nothing added, nothing left out
        again = _post(tmp_path, cache_dir, gh, str(results["differs"]), "https://github.com/o/r/issues/7", "-y")
        assert again.returncode == 0 and again.stdout.startswith("updated: ")
        assert [c["id"] for c in _mine(gh)] == [created["id"]] and len(gh.comments("o", "r", 7)) == 4
        assert [s.method for s in gh.seen].count("PATCH") == 1
        other = _post(tmp_path, cache_dir, gh, str(results["same"]), "o/r#7", "-y")
        assert other.returncode == 0 and other.stdout.startswith("posted: ")
        mine = _mine(gh)
        assert len(mine) == 2 and mine[0]["body"].splitlines()[0] != mine[1]["body"].splitlines()[0]
        # a bisect that names its commit posts its bisect.md, as a result of its own
        bis = _post(tmp_path, cache_dir, gh, str(results["bisect"]), "o/r#7", "-y")
        assert bis.returncode == 0 and len(_mine(gh)) == 3
        assert _mine(gh)[2]["body"].split("\n", 1)[1] == (results["bisect"] / "bisect.md").read_text()
        assert "<!-- abbisect-result bisect-" in _mine(gh)[2]["body"]


@pytest.mark.e2e
def test_asked_first_and_dry_run_sends_nothing(tmp_path, cache_dir, results):
    with GitHubStandIn(TOKEN) as gh:
        gh.issues[("o", "r", 7)] = []
        dry = _post(tmp_path, cache_dir, gh, str(results["differs"]), "o/r#7", "--dry-run", token=None)
        assert dry.returncode == 0 and gh.seen == []  # not a request, and no token needed
        assert "o/r#7" in dry.stderr and dry.stdout.startswith("<!-- abbisect-result run-")
        assert (results["differs"] / "report.md").read_text() in dry.stdout
        no = _post(tmp_path, cache_dir, gh, str(results["differs"]), "o/r#7", input="n\n")
        assert no.returncode == CODES["declined"] and gh.comments("o", "r", 7) == []
        assert (results["differs"] / "report.md").read_text() in no.stdout and "add a comment to o/r#7" in no.stderr
        yes = _post(tmp_path, cache_dir, gh, str(results["differs"]), "o/r#7", input="y\n")
        assert yes.returncode == 0 and len(_mine(gh)) == 1
        asked = _post(tmp_path, cache_dir, gh, str(results["differs"]), "o/r#7", input="y\n")
        assert asked.returncode == 0 and f"update comment {_mine(gh)[0]['id']}" in asked.stderr


@pytest.mark.e2e
def test_inconclusive_results_are_refused_unless_anyway(tmp_path, cache_dir, results):
    with GitHubStandIn(TOKEN) as gh:
        gh.issues[("o", "r", 7)] = []
        for name, says in (("unsure", "it is not sure"), ("untestable", "could not be tested")):
            proc = _post(tmp_path, cache_dir, gh, str(results[name]), "o/r#7", "-y")
            assert proc.returncode == CODES["inconclusive"] and says in _one_line(proc.stderr), proc.stderr
        assert gh.seen == []
        anyway = _post(tmp_path, cache_dir, gh, str(results["unsure"]), "o/r#7", "-y", "--anyway")
        assert anyway.returncode == 0 and len(_mine(gh)) == 1 and "not sure" in _mine(gh)[0]["body"]


@pytest.mark.e2e
def test_every_error_is_one_line_with_its_exit_code(tmp_path, cache_dir, results):
    folder = str(results["differs"])
    with GitHubStandIn(TOKEN) as gh:
        gh.issues[("o", "r", 7)] = []
        gh.issues[("o", "ro", 1)] = []
        gh.read_only.add("o/ro")
        cases = [("tokenless", [folder, "o/r#7"], {"token": None}, "GH_TOKEN"),
                 ("denied", [folder, "o/r#7"], {"token": "ghp_notTheRightOne0000000000"}, "refused the token"),
                 ("denied", [folder, "o/ro#1"], {}, "may not comment on o/ro#1"),
                 ("not-found", [folder, "o/r#8"], {}, "no o/r#8 on GitHub"),
                 ("usage", [folder, "o/r"], {}, "OWNER/REPO#N"),
                 ("usage", [str(tmp_path), "o/r#7"], {}, "not a result folder"),
                 ("usage", [folder, "o/r#7"], {"env": {"GITHUB_API_URL": "ftp://x"}}, "GITHUB_API_URL")]
        for ending, args, kw, says in cases:
            proc = _post(tmp_path, cache_dir, gh, *args, "-y", **kw)
            assert proc.returncode == CODES[ending] and says in _one_line(proc.stderr), (ending, proc.stderr)
            assert "notTheRightOne" not in proc.stderr
        gh.rate_limit(900)
        proc = _post(tmp_path, cache_dir, gh, folder, "o/r#7", "-y")
        assert proc.returncode == CODES["rate-limited"], proc.stderr
        reset = time.strftime("%H:%M", time.gmtime(gh.rate_limited_until))
        assert f"resets at {reset}" in _one_line(proc.stderr)
        assert gh.comments("o", "r", 7) == [] and gh.comments("o", "ro", 1) == []
    proc = _post(tmp_path, cache_dir, gh, folder, "o/r#7", "-y")  # the stand-in is gone: nothing listens
    assert proc.returncode == CODES["network"] and "cannot reach" in _one_line(proc.stderr)


@pytest.mark.e2e
def test_a_secret_of_the_runs_environment_posts_masked(tmp_path, cache_dir, results):
    with GitHubStandIn(TOKEN) as gh:
        gh.issues[("o", "r", 7)] = []
        proc = _post(tmp_path, cache_dir, gh, str(results["secret"]), "o/r#7", "-y",
                     env={"PLANTED_SECRET": PLANTED})
        assert proc.returncode == 0, proc.stderr
        (body,) = [c["body"] for c in _mine(gh)]
        sent = json.dumps([s.body for s in gh.seen])
    assert "(auth ***)" in body and PLANTED not in body + sent + proc.stdout + proc.stderr
    assert str(cache_dir) not in body and str(Path.home()) + "/" not in body


@pytest.mark.e2e
def test_run_and_bisect_post_when_asked(tmp_path, engine_repo, cache_dir, results):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, name="toy-posted",
                                                          sides={"a": "broken", "b": "fixed"}))
    with GitHubStandIn(TOKEN) as gh:
        gh.issues[("o", "r", 7)] = []
        env = {**NO_TOKENS, "GITHUB_API_URL": gh.url, "GH_TOKEN": TOKEN}
        printed = []
        for n in (1, 2):
            proc = abbisect("run", str(recipe), "-o", str(tmp_path / f"out{n}"), "--post", "o/r#7", cwd=tmp_path,
                            cache=cache_dir, env=env)
            printed.append(proc.stdout + proc.stderr)
            assert proc.returncode == 0, proc.stderr
            assert ("posted on o/r#7" if n == 1 else "updated on o/r#7") in proc.stderr
        assert len(_mine(gh)) == 1  # the rerun updated its comment
        # a bisect with no change to find is not posted, and says so in one line; its own exit code stands
        proc = abbisect("bisect", str(recipe), "--good", "healthy0", "--bad", "fixed", "-o", str(tmp_path / "b"),
                        "--post", "o/r#7", cwd=tmp_path, cache=cache_dir, env=env)
        printed.append(proc.stdout + proc.stderr)
        assert proc.returncode == EXIT_CODES["bisect"]["no-change"], proc.stderr
        assert "not posted to o/r#7: bisect.md is not conclusive" in proc.stderr and len(_mine(gh)) == 1
        # a post that fails after the run: the folder is written, one line says how to retry, exit post-failed
        gh.rate_limit_after = len(gh.seen) + 1  # the check before the run is answered, the post is not
        proc = abbisect("run", str(recipe), "-o", str(tmp_path / "limited"), "--post", "o/r#7", cwd=tmp_path,
                        cache=cache_dir, env=env)
        printed.append(proc.stdout + proc.stderr)
        assert proc.returncode == EXIT_CODES["run"]["post-failed"], proc.stderr
        assert (tmp_path / "limited" / "report.md").is_file()
        line = next(ln for ln in proc.stderr.splitlines() if "not posted" in ln)
        assert "rate limit" in line and shlex.join(["abbisect", "post", str(tmp_path / "limited"), "o/r#7"]) in line
        gh.rate_limit_after = gh.rate_limited_until = None
        # checked before anything runs: no token, no such issue
        for extra, says in (({"GH_TOKEN": ""}, "no GitHub token"), ({}, "no o/r#8 on GitHub")):
            target = "o/r#8" if not extra else "o/r#7"
            proc = abbisect("run", str(recipe), "-o", str(tmp_path / "never"), "--post", target, cwd=tmp_path,
                            cache=cache_dir, env={**env, **extra})
            assert proc.returncode == EXIT_CODES["run"]["usage"] and says in proc.stderr and "nothing ran" in proc.stderr
            assert not (tmp_path / "never").exists()
    assert not any(TOKEN in p for p in printed)
    written = [p for root in (tmp_path, cache_dir, *results.values()) for p in root.rglob("*") if p.is_file()]
    assert written and not [p for p in written if TOKEN.encode() in p.read_bytes()]
