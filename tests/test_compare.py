"""`abbisect compare` through the CLI: hand-written lm-evaluation-harness samples (tests/data/lmeval) and
abbisect results made by real eval runs on toy-engine commits; and the accuracy report pieces on those runs.
Every expected number is counted here from the files themselves, with scipy, not taken from abbisect."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT, abbisect, cli
from scipy import stats
from test_evals import toy  # noqa: F401 -- the module's toy-engine trees fixture
from test_toyengine import server

from abbisect.commands.endings import EXIT_CODES
from abbisect.infra.serial import dump
from abbisect.query.evals import EvalRun, EvalSet, pair, run_eval
from abbisect.report.accuracy import accuracy_section, failed_requests, flipped_items, headline
from abbisect.report.text import cell
from abbisect.stats import compare_paired, power_plan

DATA = REPO_ROOT / "tests" / "data" / "lmeval"
A, B = DATA / "a", DATA / "b"
CODES = EXIT_CODES["compare"]


def _flexible(folder: Path) -> dict[str, bool]:
    """doc_id → exact_match under flexible-extract, read straight from the file."""
    (path,) = folder.glob("samples_gsm8k_*.jsonl")
    docs = [json.loads(line) for line in path.read_text().splitlines()]
    return {str(d["doc_id"]): d["exact_match"] == 1.0 for d in docs if d["filter"] == "flexible-extract"}


def _run(*args: str, cwd: Path, real: bool = False):
    """In process (the command starts nothing), or as the real subprocess a CI step runs."""
    return (abbisect if real else cli)("compare", *args, cwd=cwd, cache=cwd / "cache")


@pytest.mark.smoke
def test_two_lm_eval_runs_get_the_mcnemar_answer_in_one_line(tmp_path):
    a, b = _flexible(A), _flexible(B)
    ids = [i for i in a if i in b]
    lost = sum(a[i] and not b[i] for i in ids)
    gained = sum(b[i] and not a[i] for i in ids)
    p = stats.binomtest(lost, lost + gained).pvalue
    drop = (sum(a[i] for i in ids) - sum(b[i] for i in ids)) / len(ids) * 100
    assert (len(ids), lost, gained) == (58, 12, 1)  # the files as README.md describes them
    proc = _run(str(A), str(B), "--task", "gsm8k", "--filter", "flexible-extract", cwd=tmp_path, real=True)
    assert proc.returncode == CODES["different"] == 1, proc.stderr
    first, *rest = proc.stdout.splitlines()
    assert re.fullmatch(rf"B is {drop:.1f} points lower than A \[−\d+\.\d, −\d+\.\d\], McNemar p = {p:.2g} on 58 "
                        r"paired items: different", first), first
    table = "\n".join(rest)
    assert f"discordant: {lost} lost (right on A, wrong on B), {gained} gained" in table
    # each side labelled by its file in its run folder, as given
    assert f"A     {A / 'samples_gsm8k_2026-11-30T10-12-33.481220.jsonl'} (gsm8k, flexible-extract, exact_match)" in table
    assert f"B     {B / 'samples_gsm8k_2026-11-30T11-02-07.913004.jsonl'} (gsm8k, flexible-extract, exact_match)" in table
    assert "2 items only in A and 0 only in B: not compared" in table and "below 300" in table
    # Strict matching of the same runs: one item each way apart, nothing to call yet.
    strict = _run(str(A), str(B), "--task", "gsm8k", "--filter", "strict-match", cwd=tmp_path)
    assert strict.returncode == CODES["not-sure"] == 3 and strict.stdout.splitlines()[0].endswith(": not sure")
    # A change smaller than what matters is not "different", however significant.
    assert _run(str(A), str(B), "--task", "gsm8k", "--filter", "flexible-extract", "--min-change", "0.3",
                cwd=tmp_path).returncode == CODES["not-sure"]


@pytest.mark.parametrize(("args", "says"), [
    ([str(A), str(B), "--task", "gsm8k"], "2 filters (flexible-extract, strict-match): pick one with --filter"),
    ([str(A), str(B), "--filter", "flexible-extract"], "2 tasks (arc_easy, gsm8k): pick one with --task"),
    ([str(B), str(B), "--task", "arc_easy"], "2 metrics (acc, acc_norm): pick one with --metric"),
    ([str(B), str(B), "--task", "arc_easy", "--metric", "bleu"], "no metric 'bleu' (there: acc, acc_norm)"),
    ([str(A), str(B), "--task", "mmlu"], "no task 'mmlu' (there: gsm8k)"),
    ([str(A), "nowhere.jsonl"], "no such file or folder: nowhere.jsonl"),
    ([str(A)], "one file compares its two sides"),
], ids=["filter", "task", "metric", "unknown metric", "unknown task", "missing file", "one lm-eval file"])
def test_what_to_read_is_asked_in_one_line_listing_what_is_there(tmp_path, args, says):
    proc = _run(*args, cwd=tmp_path)
    assert proc.returncode == CODES["usage"], proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_json_is_in_the_envelope_with_every_flipped_item(tmp_path):
    proc = _run(str(A), str(B / "samples_gsm8k_2026-11-30T11-02-07.913004.jsonl"), "--filter", "flexible-extract",
                "--json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "abbisect/compare/v1" and doc["command"] == "compare"
    data = doc["data"]
    a, b = _flexible(A), _flexible(B)
    assert set(data["lost"]) == {i for i in b if a[i] and not b[i]} and data["gained"] == ["0"]
    assert data["only_a"] == ["58", "59"] and data["paired"] == 58 and data["call"] == "different"
    assert data["comparison"]["lost"] == 12 and data["line"].startswith("B is 19.0 points lower than A")


# --- abbisect's own results, from real runs ---------------------------------------------------------


@pytest.fixture(scope="module")
def runs(toy) -> tuple[EvalRun, EvalRun]:  # noqa: F811
    """The built-in set on the healthy commit (A) and on arith_drift (B), whose server also answers HTTP 500
    to every question that contains "What is 12 " (TOYENGINE_FAIL_ON): wrong sums and failed requests."""
    builtin = EvalSet.load("builtin:arith_facts")
    with server(toy["healthy"]) as good, server(toy["arith_drift"], TOYENGINE_FAIL_ON="What is 12 ") as bad:
        a = run_eval(good, "toy-model", builtin, builtin.sample(), max_tokens=32, concurrency=8, timeout=20)
        b = run_eval(bad, "toy-model", builtin, builtin.sample(), max_tokens=32, concurrency=8, timeout=20)
    return a, b


def _results(path: Path, **sides: EvalRun) -> Path:
    """A results.json as `abbisect run` writes it, each side's eval run under extras.eval."""
    path.write_text(json.dumps({side: {"extras": {"eval": dump(run)}} for side, run in sides.items()}))
    return path


@pytest.mark.e2e
def test_abbisect_results_compare_with_errors_kept_apart(tmp_path, runs):
    a, b = runs
    a_ok = {i.id: i.correct for i in a.items}
    b_ok = {i.id: i.correct for i in b.items}
    failed = [i for i, c in b_ok.items() if c is None]
    lost = [i for i in a_ok if a_ok[i] and b_ok[i] is False]
    assert failed and all("What is 12 " in i.prompt for i in b.errors()) and 0 < len(lost) <= 30
    assert all(i.error and i.error.startswith("HTTP 500") for i in b.errors())
    both = _results(tmp_path / "results.json", a=a, b=b)
    proc = _run(str(both), cwd=tmp_path)
    assert proc.returncode == CODES["different"], proc.stderr
    n = 400 - len(failed)
    p = stats.binomtest(len(lost), len(lost)).pvalue
    shown_p = "p < 0.0001" if p < 1e-4 else f"p = {p:.2g}"
    assert re.fullmatch(rf"B is {len(lost) / n * 100:.1f} points lower than A \[−\d+\.\d, −\d+\.\d\], McNemar "
                        rf"{shown_p} on {n} paired items: different", proc.stdout.splitlines()[0]), proc.stdout
    assert (f"requests that failed: 0 on A, {len(failed)} on B (counted apart, never as wrong answers; those "
            "items are not compared)") in proc.stdout
    assert f"discordant: {len(lost)} lost" in proc.stdout
    # Two files, a side of each; the same side twice is the same; a side that is not there is named.
    other = _results(tmp_path / "other.json", b=b)
    two = _run(f"{both}:a", str(other), cwd=tmp_path).stdout.splitlines()
    assert two[0] == proc.stdout.splitlines()[0] and two[4:] == proc.stdout.splitlines()[4:]
    assert two[2].startswith(f"A     {both}:a") and two[3].startswith(f"B     {other}:b")
    same = _run(f"{both}:a", f"{both}:a", cwd=tmp_path)  # 400 items, none changed: the exact bound is ±0.9 pts
    assert same.returncode == CODES["same"] == 0 and same.stdout.startswith("B and A are level [−0.9, +0.9]")
    assert same.stdout.splitlines()[0].endswith("on 400 paired items: same")
    missing = _run(f"{both}:c", str(other), cwd=tmp_path)
    assert missing.returncode == 2 and "no side 'c' with eval results (there: a, b)" in missing.stderr
    ambiguous = _run(str(both), str(other), cwd=tmp_path)
    assert ambiguous.returncode == 2 and "holds 2 sides with eval results (a, b): name one as" in ambiguous.stderr
    alone = tmp_path / "eval-a.json"
    alone.write_text(json.dumps(dump(a)))  # one EvalRun as dumped
    assert _run(str(alone), str(other), cwd=tmp_path).returncode == CODES["different"]
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"a": {"extras": {}}}))
    assert "no per-item eval results in it" in _run(str(plain), str(other), cwd=tmp_path).stderr


@pytest.mark.e2e
def test_the_report_pieces_show_the_numbers_the_flips_and_the_errors_apart(runs):
    a, b = runs
    paired = pair(a, b)
    cmp = compare_paired(paired.a, paired.b, min_change=0.03)
    section = accuracy_section(cmp, paired, power_plan(400, 0.8, 0.03, flip_rate=0.01))
    assert section.startswith(f"### Accuracy\n\n**{cell(headline(cmp), 400)}**\n")
    assert f"| A | 100.0 % | {cmp.ci_a[0] * 100:.1f} % – 100.0 % | {paired.n}/{paired.n} | 0 |" in section
    assert f"| B | {cmp.accuracy_b * 100:.1f} % |" in section and f"| {len(paired.errors_b)} |" in section
    assert f"{len(paired.lost)} items lost, 0 gained" in section and "call: **different**" in section
    assert "requests that failed: 0 on A" in section
    assert "- power: 400 items find a drop of 3 points with 85 % power" in section
    flips = flipped_items(a, b, paired)
    lost_rows = [line for line in flips.splitlines() if line.startswith("| arith-")]
    assert len(lost_rows) == len(paired.lost)
    one = b.by_id()[paired.lost[0]]
    row = next(line for line in lost_rows if line.startswith(f"| {one.id} |"))
    assert one.prompt in row and f"| {one.reference} |" in row and f"(read: {one.extracted})" in row
    assert f"(read: {one.reference})" in row  # A's answer beside B's
    assert "#### Gained: wrong on A, right on B (0)\n\nnone" in flips
    failed = flips.split("Failed requests, not scored")[1]
    assert f"({len(paired.errors_b)})" in failed and failed.count("| B |") == len(paired.errors_b)
    assert "HTTP 500" in failed and not any(i in flips.split("#### Failed")[0] for i in paired.errors_b)
    assert failed_requests([("A", a)]).endswith("none")


# --- "same" only with the power to say so; items paired by content; the console ----------------


def _samples(folder: Path, docs: list[dict], name: str = "samples_gsm8k_2026-12-01T09-00-00.000000.jsonl") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(d) + "\n" for d in docs))
    return folder


def _docs(folder: Path, flt: str = "flexible-extract") -> list[dict]:
    (path,) = folder.glob("samples_gsm8k_*.jsonl")
    return [d for d in map(json.loads, path.read_text().splitlines()) if d["filter"] == flt]


@pytest.mark.e2e
@pytest.mark.parametrize("n", [3, 20])
def test_a_short_run_against_itself_is_not_sure_never_same(tmp_path, n):
    """With no discordant item the interval was (0, 0): "same — the 95 % interval lies within ±3 pts" at any n,
    a 3-item cut included. n items none of which changed bound the change only to 1 − 0.025^(1/n)."""
    run = _samples(tmp_path / f"run{n}", _docs(A)[:n])
    proc = _run(str(run), str(run), cwd=tmp_path)
    assert proc.returncode == CODES["not-sure"], proc.stdout + proc.stderr
    bound = stats.binomtest(0, n).proportion_ci(method="exact").high * 100
    assert proc.stdout.splitlines()[0] == (f"B and A are level [−{bound:.1f}, +{bound:.1f}], McNemar p = 1 on {n} "
                                           "paired items: not sure"), proc.stdout
    assert "no item changed answer" in proc.stdout and "about 122 paired items would settle it" in proc.stdout


@pytest.mark.e2e
def test_documents_under_the_same_ids_in_another_order_are_refused_or_left_out(tmp_path):
    """lm-eval writes each document's doc_hash: two runs over the same ids in another order were paired by doc_id
    alone (17 lost / 17 gained, "not sure") with no word that the documents differ."""
    docs = _docs(B)
    shuffled = [{**d, **{k: v for k, v in other.items() if k != "doc_id"}}
                for d, other in zip(docs, docs[7:] + docs[:7])]  # doc k holds document k + 7
    moved = _samples(tmp_path / "moved", shuffled)
    proc = _run(str(A), str(moved), "--filter", "flexible-extract", cwd=tmp_path)
    assert proc.returncode == CODES["usage"], proc.stdout + proc.stderr
    line = one_line(proc.stderr)
    assert "58 of the 58 doc_ids both runs hold name another document on each side (lm-eval's doc_hash differs" in line
    assert "nothing to pair" in line
    # Two documents swapped: those two are left out and named, the rest compared.
    swapped = list(docs)
    swapped[3], swapped[4] = ({**docs[4], "doc_id": docs[3]["doc_id"]}, {**docs[3], "doc_id": docs[4]["doc_id"]})
    some = _samples(tmp_path / "some", swapped)
    proc = _run(str(A), str(some), "--filter", "flexible-extract", "--json", cwd=tmp_path)
    data = json.loads(proc.stdout)["data"]
    assert set(data["mismatched"]) == {str(docs[3]["doc_id"]), str(docs[4]["doc_id"])} and data["paired"] == 56
    assert "warning: 2 of the 58 doc_ids both runs hold name another document" in proc.stderr


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.e2e
def test_quiet_prints_the_answer_and_a_results_file_names_the_samples_beside_it(tmp_path):
    full = _run(str(A), str(B), "--task", "gsm8k", "--filter", "flexible-extract", cwd=tmp_path)
    quiet = _run(str(A), str(B), "--task", "gsm8k", "--filter", "flexible-extract", "-q", cwd=tmp_path)
    assert quiet.returncode == full.returncode == CODES["different"]
    assert quiet.stdout.splitlines() == full.stdout.splitlines()[:1] and len(full.stdout.splitlines()) > 4
    # lm-eval's aggregated results_<date>.json given by mistake: the samples file beside it is named.
    run = tmp_path / "lm" / "model"
    _samples(run, _docs(A))
    (run / "results_2026-12-01T09-00-00.000000.json").write_text(json.dumps(
        {"results": {"gsm8k": {"exact_match,flexible-extract": 0.85}}, "configs": {}, "versions": {}}))
    proc = _run(str(run / "results_2026-12-01T09-00-00.000000.json"), str(B), cwd=tmp_path)
    assert proc.returncode == CODES["usage"]
    assert one_line(proc.stderr) == (
        "abbisect: error: results_2026-12-01T09-00-00.000000.json is lm-eval's aggregated results (scores, no "
        "per-item answers): give the samples file beside it (samples_gsm8k_2026-12-01T09-00-00.000000.jsonl), or "
        f"its folder {run}")


def test_a_chat_runs_prompt_is_read_from_its_messages(tmp_path):
    """lm-eval's chat runs (--apply_chat_template with a chat-completions model) write the context as the
    message list in JSON, inside a one-element list: the question is its last user message, not ""."""
    from abbisect.query.lmeval import read_samples

    docs = _docs(A)[:2]
    question = docs[0]["arguments"]["gen_args_0"]["arg_0"]
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Q: 1 + 1?\nA: 2"},
                {"role": "assistant", "content": "2"}, {"role": "user", "content": question}]
    docs[0]["arguments"]["gen_args_0"]["arg_0"] = [json.dumps(messages)]
    docs[1]["arguments"]["gen_args_0"]["arg_0"] = [json.dumps([{"role": "user", "content": [
        {"type": "text", "text": "What is "}, {"type": "text", "text": "two plus two?"}]}])]
    run, sel = read_samples(_samples(tmp_path / "chat", docs))
    assert [i.prompt for i in run.items] == [question, "What is two plus two?"]
    assert sel.hashes == {str(d["doc_id"]): d["doc_hash"] for d in docs}
