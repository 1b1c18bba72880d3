"""A report is safe to paste into GitHub: text from outside — a commit's subject, a ref, a flag, an
output — mentions no one once pasted (an `@name` is a code span), shows its control bytes as visible pictures
(never raw), keeps its backslashes out of code blocks, and a value cut at its column's length is listed in full
below the table. The renderers are fed hostile text directly (A/B, bisect through the bisect's seam, narrow,
matrix); no server starts."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from conftest import toy_recipe

from abbisect.ab import compare
from abbisect.bisect.bisection import Mode
from abbisect.checkout import Revision
from abbisect.environment.store import EnvResult
from abbisect.matrix.cells import Finding, Matrix, Stack, build_cells
from abbisect.matrix.markdown import render_matrix
from abbisect.narrow.deltas import Delta, Launch
from abbisect.narrow.narrowing import NarrowRun, Probe
from abbisect.query.chat import Completion
from abbisect.recipe import parse_recipe
from abbisect.recipe.status import Outcome, Status
from abbisect.report.ab import render_ab
from abbisect.report.bisect import render_bisect
from abbisect.report.narrow import render_narrow
from abbisect.report.posterior import block as posterior_block
from abbisect.report.text import NOTE_CAP, Notes, cell, code, esc, fence, plain, table
from abbisect.score.degeneration import OutputAnalysis
from abbisect.testing import seam
from abbisect.trial.spec import LaunchInfo, Timings, TrialResult, TrialSpec
from abbisect.verdict.rules import Verdict

ANSI = "\x1b[31mred\x1b[0m"
BIDI = "abc\u202edcba"
HOSTILE = f"fix by @alice for @org/team-x {ANSI} {BIDI} (mail: dev@example.com)"
RAW_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
SHA_A, SHA_B = "903fef3ace96402133e626cdf5802395abf85f97", "7b18977842343176fbd1570304fbdfd7f9942bb0"


def outside_code(md: str) -> str:
    """The markdown with its code blocks and code spans removed: where GitHub would read a mention."""
    md = re.sub(r"(?ms)^(`{3,})[^\n]*\n.*?^\1\s*$", "", md)
    return re.sub(r"(`+)(?!`).+?(?<!`)\1(?!`)", "", md)


def mentions(md: str) -> list[str]:
    """What GitHub would turn into a mention (a user's or a team's) outside code."""
    return re.findall(r"(?<![A-Za-z0-9_`])@[A-Za-z0-9][A-Za-z0-9-]*", outside_code(md))


def assert_paste_safe(md: str) -> None:
    assert not mentions(md), mentions(md)
    assert not RAW_CONTROL.search(md), repr(RAW_CONTROL.search(md))


# -- the primitives -----------------------------------------------------------------------------------------------

def test_a_mention_in_a_cell_or_prose_is_a_code_span_and_an_email_is_left_alone():
    shown = cell(HOSTILE, 200)
    assert "`@alice`" in shown and "`@org/team-x`" in shown and "dev@example.com" in shown
    assert_paste_safe(shown)
    assert esc("@bob") == "`@bob`" and esc("cc @bob_x") == "cc `@bob`\\_x"
    assert_paste_safe(code("@alice's flag", 60)) and code("a|b", 10, in_table=True) == "`a\\|b`"


def test_control_bytes_are_shown_as_visible_pictures_in_every_primitive():
    for shown in (cell(HOSTILE, 200), esc(HOSTILE), code(HOSTILE, 200), plain(HOSTILE, 200), fence(HOSTILE)):
        assert not RAW_CONTROL.search(shown), repr(shown)
        assert "␛" in shown and "U+202E" in shown, shown
    assert plain("a\x00b\x7fc\x9bd\te", 90) == "a␀b␡c<U+009B>d\te"  # a tab stays a tab


def test_text_in_a_code_block_keeps_no_backslash_escape():
    assert plain("tpot_median 2.0 ms | *x*", 90) == "tpot_median 2.0 ms | *x*"
    assert fence("a ``` b").startswith("````text\n")


def test_a_value_cut_at_its_length_is_listed_in_full_below_the_table():
    subject = ("Fix the scheduler when " + "the batch holds many requests " * 66).strip()  # ~2,000 characters
    notes = Notes()
    rows = [[cell(subject, 50, notes)]]
    shown = table(["subject"], rows, notes)
    assert rows[0][0].endswith("…[1]") and len(rows[0][0]) < 60
    assert shown.endswith(f"- [1] `{subject}`")
    assert len(subject) > 1000  # longer than a note was once cut to: it is listed whole
    huge = "word " * (NOTE_CAP // 2)
    listed = Notes()
    cell(huge, 40, listed)
    assert "characters in all; the whole value is in the JSON" in listed.render()


# -- the renderers ------------------------------------------------------------------------------------------------

def _trial(recipe, side: str, sha: str, ref: str, text: str, tmp: Path) -> TrialResult:
    spec = TrialSpec(recipe, side, ref, sha, HOSTILE, str(tmp / "repo"), str(tmp / "cache"), str(tmp / side))
    env = EnvResult(True, f"{side}_key", str(tmp / "venv"), "python", False, 1.0, str(tmp / "build.log"), ())
    facts = {"version": "0.1 @carol", "non_default_args": {"served_model_name": "@dave", "dtype": "float32"}}
    launch = LaunchInfo(("serve", "--name", "@erin"), {}, "ready", 3.0, 1, str(tmp / "server.log"),
                        (f"INFO {ANSI} @frank",), {}, facts)
    outputs = (Completion("p0", f"Who is @grace? {ANSI}", text, "length", 5, 64, 0.5),)
    analyses = (OutputAnalysis("degenerate" if side == "a" else "healthy", f"loops {ANSI}", ()),)
    verdict = Verdict(Status.OK, Outcome.GOOD, (f"reason naming @heidi {ANSI}",))
    return TrialResult(spec, env, launch, outputs, analyses, (None,), (), (7, f"RuntimeError: @ivan {ANSI}"),
                       verdict, Timings(build=1.0))


def test_the_ab_report_mentions_no_one_and_shows_no_raw_control_byte(tmp_path):
    recipe = parse_recipe(toy_recipe(Path("demo"), engine={"kind": "command", "repo": "builtin:demo"}))
    a = _trial(recipe, "a", SHA_A, "fix@judy", f"@mallory {ANSI} " * 30, tmp_path)
    b = _trial(recipe, "b", SHA_B, "v0.2", f"Paris, says @oscar {BIDI}", tmp_path)
    md = render_ab(compare(recipe, a, b, "abbisect run r.yaml", "2026-12-01T00:00:00Z"))
    assert_paste_safe(md)
    assert "`@heidi`" in md and "`@mallory`" in md and "`fix@judy`" in md and "␛[31m" in md


def _seam_run(kind: str = "perf"):
    world = seam.World("perf", 40, 17, seed=3) if kind == "perf" else seam.World("flaky", 16, 9, seed=2)
    run, _ = seam.bisect(world, seam.recipe_for(kind))
    return run


def test_the_posterior_picture_shows_the_metric_without_a_backslash():
    picture = "\n".join(posterior_block(_seam_run()))
    block = picture.split("```text\n", 1)[1]
    assert "tpot_median" in block and "\\_" not in block


def test_bisect_md_with_hostile_subjects_and_refs_mentions_no_one_and_lists_a_cut_subject_in_full():
    run = _seam_run("flaky")
    long_subject = "Refactor the scheduler so that " + "every request in the batch is counted once " * 46
    hostile = {sha: replace(info, subject=f"{HOSTILE} {sha}", author=f"@{sha}-author")
               for sha, info in run.commits.items()}
    hostile[run.result.first_new] = replace(hostile[run.result.first_new], subject=long_subject)
    run.commits = hostile
    run.good = Revision("good@alice", run.good.sha, "")
    md = render_bisect(run, ["abbisect bisect r.yaml --good good@alice --bad c015"])
    assert_paste_safe(md)
    assert len(long_subject) > 1500 and f"`{long_subject}`" in md  # cut in the trail, in full below it
    assert "`@org/team-x`" in md and "␛" in md
    # what abbisect says in its own words quotes outside text too: an end's evidence, a ref, a prompt's id
    run.merge_bases, run.ends_note, run.unstable = ("c000",), f"good@alice and main are on two branches {ANSI}", ("q@bob",)
    assert_paste_safe(render_bisect(run, []))
    run.mode, run.message = Mode.UNTESTABLE_END, f"the old end (c000) is untestable: crashed — {HOSTILE}"
    stopped = render_bisect(run, [])
    assert "### No bisection: `the old end" in stopped
    assert_paste_safe(stopped)


def test_narrow_md_shows_flags_already_in_the_launch_as_code():
    recipe = parse_recipe(toy_recipe(Path("demo"), engine={"kind": "command", "repo": "builtin:demo"}))
    failing = Launch(("--name", "@peggy", ANSI), {})
    probes = [Probe(0, "failing", "the failing launch", failing, Outcome.BAD, "degenerate",
                    f"loops at @trent {ANSI}", 1.0, False),
              Probe(1, "switch", "sglang.x", failing, Outcome.GOOD, "ok", f"passes for @uma {ANSI}", 1.0, False,
                    switch="sglang.x", feature=f"the @vera kernel {ANSI}", change="+ --x=@wendy")]
    run = NarrowRun(recipe, Path("repo"), Revision("main@victor", SHA_A, HOSTILE), failing, None,
                    deltas=[Delta("option", "--name", "@walter", None)], probes=probes, launches=2,
                    already=["--name=@sybil"], message=f"nothing narrowed @rupert {ANSI}")
    md = render_narrow(run, "abbisect narrow r.yaml main@victor")
    assert_paste_safe(md)
    assert "`--name=@sybil`" in md


def test_the_matrix_mentions_no_one():
    stack = Stack("k1", "1x H200", "NVIDIA H200 (sm_90)")
    e = Finding(model="m @zoe", model_id="org/@m", engine="vllm", engine_repo="vllm-project/vllm",
                     engine_version="0.11", commit="c1", ref="fix@yan", subject=HOSTILE, stack=stack,
                     status=f"degenerate {ANSI}", outcome="bad", date="2026-01-01T00:00:00Z", report="r/report.md",
                     source="run @xavier", recipe="r", commit_date=None, parents=())
    md = render_matrix(Matrix(build_cells([e]), ["x"]))
    assert_paste_safe(md)
    assert "`fix@yan`" in md
