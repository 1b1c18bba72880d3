import json

import pytest

from abbisect.infra.serial import dump, load
from abbisect.score.answers import AnswerCheck, check_answer
from abbisect.score.compare import Divergence, Resemblance, divergence, resemblance, similarity

GOOD = "The capital of France is Paris. It is known for the Eiffel Tower and the Louvre."
BAD = "The capital of France is need analysis there need analysis there need analysis there"


def test_identical_outputs():
    d = divergence(GOOD, GOOD)
    assert d == Divergence(True, None, None, 1.0, "", "")


def test_first_divergence_char_and_word():
    d = divergence(GOOD, BAD)
    assert not d.identical
    assert d.char_index == len("The capital of France is ")
    assert d.word_index == 5
    assert d.context_a == GOOD[: d.char_index + 50]
    assert "need analysis" in d.context_b
    assert 0.2 < d.similarity < 0.6


def test_divergence_when_one_is_a_prefix_of_the_other():
    d = divergence("Paris", "Paris is the capital")
    assert d.char_index == 5 and d.word_index == 1 and not d.identical


def test_divergence_with_empty_and_unicode():
    d = divergence("", "東京")
    assert d.char_index == 0 and d.word_index == 0 and d.similarity == 0.0
    d = divergence("東京は大きい 🗼", "東京は小さい 🗼")
    assert d.char_index == 3 and d.word_index == 0


def test_similarity_is_symmetric_and_bounded():
    assert similarity(GOOD, BAD) == similarity(BAD, GOOD)
    assert similarity("", "") == 1.0 and similarity("a b", "c d") == 0.0
    assert similarity(" ", "\n") < 1.0


def test_trial_resembling_the_bad_end():
    r = resemblance([BAD, "x y"], good=[GOOD, "x y"], bad=[BAD, "x y"])
    assert r.closer_to == "bad" and r.score_bad == 1.0 and r.score_good < 0.6
    assert "1 prompt(s) tell the ends apart: 0 resemble good, 1 bad" in r.evidence


def test_trial_resembling_the_good_end_without_matching_it_exactly():
    near_good = GOOD.replace("Louvre", "Louvre Museum")
    r = resemblance([near_good], good=[GOOD], bad=[BAD])
    assert r.closer_to == "good" and r.score_good > r.score_bad


def test_identical_ends_are_both():
    assert resemblance(["anything"], good=[GOOD], bad=[GOOD]).closer_to == "both"


def test_trial_unlike_either_end_is_neither():
    r = resemblance(["completely different words here"], good=[GOOD], bad=[BAD])
    assert r.closer_to == "neither"


def test_mixed_votes_are_neither():
    g2, b2 = "Water boils at 100 degrees Celsius at sea level.", "Water water water water water water"
    r = resemblance([GOOD, b2], good=[GOOD, g2], bad=[BAD, b2])
    assert r.closer_to == "neither" and "mixed" in r.evidence


def test_resemblance_needs_one_output_per_prompt():
    with pytest.raises(ValueError, match="one output per prompt"):
        resemblance(["a"], good=["a", "b"], bad=["a", "b"])


def test_compare_results_round_trip_through_json():
    d = divergence(GOOD, BAD)
    assert load(Divergence, json.loads(json.dumps(dump(d)))) == d
    r = resemblance([BAD], good=[GOOD], bad=[BAD])
    assert load(Resemblance, json.loads(json.dumps(dump(r)))) == r


# --- known answers --------------------------------------------------------------------------------


def test_known_answer_found():
    c = check_answer("The capital of France is Paris.", r"\bParis\b")
    assert c == AnswerCheck(expected=r"\bParis\b", passed=True, found="Paris")


def test_known_answer_missed_is_evidence():
    c = check_answer("need analysis there need analysis there", "Paris")
    assert not c.passed and c.found is None


def test_known_answer_is_case_insensitive_unless_asked():
    assert check_answer("PARIS!", "paris").found == "PARIS"
    assert not check_answer("PARIS!", "(?-i:paris)").passed


def test_known_answer_bad_regex_is_reported():
    with pytest.raises(ValueError, match=r"bad expected-answer regex '\(Paris'"):
        check_answer("Paris", "(Paris")


def test_answer_check_round_trips():
    c = check_answer("17 * 23 = 391", r"\b391\b")
    assert load(AnswerCheck, json.loads(json.dumps(dump(c)))) == c
