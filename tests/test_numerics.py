"""The numerics verdict's pure parts: reading the engines' log-probability responses, the comparison of two runs
(effect, floor, vLLM's near-tie rule, a bisect candidate's side), the recipe section, and the toy engine's
log-probabilities and planted numerics change (in process: its model, no server)."""

from __future__ import annotations

import importlib.util
import json
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from abbisect.assess.numerics import Distances
from abbisect.builtin import history
from abbisect.builtin.evals import make_arith_facts
from abbisect.query.logprobs import chat_tokens, completion_tokens, prompt_part
from abbisect.recipe.numerics import TEXTS, Numerics
from abbisect.score.logprobs import NumericsRun, Scored, Token
from abbisect.stats.decide import Call, Resemblance
from abbisect.stats.evidence import AFTER, BEFORE
from abbisect.stats.logprobs import compare_runs, compare_text, resemblance

# A vLLM completions response to {"prompt": "The sea is", "max_tokens": 1, "echo": true, "logprobs": 2}: the
# prompt's tokens first (the first without a log-probability), then the one generated.
ECHOED = {
    "choices": [{"index": 0, "text": "The sea is wide", "finish_reason": "length", "logprobs": {
        "tokens": ["The", " sea", " is", " wide"], "token_logprobs": [None, -5.1, -1.2, -2.0],
        "top_logprobs": [None, {" sea": -5.1, " first": -2.3}, {" is": -1.2, ",": -2.2},
                         {" wide": -2.0, " calm": -2.4}], "text_offset": [0, 3, 7, 10]}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
CHAT = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris."}, "logprobs": {"content": [
    {"token": "Paris", "logprob": -0.1, "bytes": [80], "top_logprobs": [{"token": "Paris", "logprob": -0.1},
                                                                          {"token": "The", "logprob": -2.5}]},
    {"token": ".", "logprob": -0.3, "bytes": [46], "top_logprobs": [{"token": ".", "logprob": -0.3}]}]}}]}


def test_an_echoed_completion_gives_the_prompts_own_tokens_and_a_chat_its_generated_ones():
    tokens = prompt_part(ECHOED, completion_tokens(ECHOED))
    assert [t.text for t in tokens] == ["The", " sea", " is"]
    assert tokens[0].logprob is None and tokens[2].logprob == -1.2
    assert tokens[1].top == ((" first", -2.3), (" sea", -5.1))  # best first
    chat = chat_tokens(CHAT)
    assert [(t.text, t.logprob) for t in chat] == [("Paris", -0.1), (".", -0.3)] and chat[0].top[1] == ("The", -2.5)
    with pytest.raises(ValueError, match=r"logprobs\.content"):
        chat_tokens({"choices": [{"message": {"content": "x"}}]})


def _scored(sid: str, lps: list[float], kind: str = "text", words: list[str] | None = None,
            tops: list[tuple[tuple[str, float], ...]] | None = None) -> Scored:
    words = words or [f"w{i}" for i in range(len(lps))]
    tops = tops or [((w, lp),) for w, lp in zip(words, lps)]
    return Scored(sid, kind, "a text", tuple(Token(w, lp, t) for w, lp, t in zip(words, lps, tops)))


def _run(shift: float = 0.0, n: int = 8, batch_noise: float = 0.0, conts: tuple[Scored, ...] = ()) -> NumericsRun:
    texts = tuple(_scored(f"text-{i}", [-1.0 - 0.1 * k - shift * (1 + (i + k) % 3) for k in range(10)])
                  for i in range(n))
    batched = tuple(_scored(s.id, [t.logprob + batch_noise * (-1) ** k for k, t in enumerate(s.tokens)])  # type: ignore[operator]
                    for s in texts)
    return NumericsRun(texts, batched, conts)


def test_identical_runs_are_same_and_a_shift_above_what_matters_is_different():
    same = compare_runs(_run(), _run(), least=0.01, alpha=0.05)
    assert same.call is Call.SAME and same.effect == 0.0 and same.hi == 0.0
    moved = compare_runs(_run(), _run(shift=0.01), least=0.01, alpha=0.05)
    assert moved.call is Call.DIFFERENT and moved.effect == pytest.approx(0.02, abs=0.002) and moved.lo > 0
    assert compare_runs(_run(), _run(shift=0.002), least=0.01, alpha=0.05).call is Call.SAME  # real, too small


def test_the_launches_own_noise_floor_is_taken_off_the_difference():
    """Two launches of a noisy engine differ by about their floor (one request at a time against a batch): that is
    not a change; the same difference from deterministic launches is."""
    a, b = _run(batch_noise=0.02), _run(shift=0.01, batch_noise=0.02)
    noisy = compare_runs(a, b, least=0.01, alpha=0.05)
    assert noisy.floor == pytest.approx(0.02) and noisy.call is not Call.DIFFERENT
    assert compare_runs(_run(), _run(shift=0.01), least=0.01, alpha=0.05).call is Call.DIFFERENT


def test_vllms_near_tie_rule_on_the_continuations():
    """Where two greedy outputs first pick different tokens, each pick among the other's top-k is a near tie
    (allowed); a pick outside is a difference whatever the texts say."""
    a = _scored("p", [-0.1, -0.7], "continuation", ["Paris", "is"], [(("Paris", -0.1),), (("is", -0.7), ("was", -0.71))])
    tie = _scored("p", [-0.1, -0.7], "continuation", ["Paris", "was"], [(("Paris", -0.1),), (("was", -0.7), ("is", -0.71))])
    far = _scored("p", [-0.1, -0.2], "continuation", ["Paris", "need"], [(("Paris", -0.1),), (("need", -0.2),)])
    t = compare_text(a, tie, 0.01)
    assert (t.split, t.near_tie, t.far, t.first.position) == (1, True, False, 1)  # type: ignore[union-attr]
    f = compare_text(a, far, 0.01)
    assert (f.split, f.near_tie, f.far) == (1, False, True)
    assert compare_runs(_run(conts=(a,)), _run(conts=(tie,)), 0.01, 0.05).call is Call.SAME
    moved = compare_runs(_run(conts=(a,)), _run(conts=(far,)), 0.01, 0.05)
    assert moved.call is Call.DIFFERENT and moved.far == 1 and moved.effect == 0.0


def test_a_candidate_resembles_the_end_whose_log_probabilities_it_has():
    good, bad = _run(), _run(shift=0.01)
    assert resemblance(_run(), good, bad, 0.01, 0.05).side is Resemblance.LIKE_GOOD
    assert resemblance(_run(shift=0.01), good, bad, 0.01, 0.05).side is Resemblance.LIKE_BAD
    assert resemblance(_run(shift=0.005), good, bad, 0.01, 0.05).side is Resemblance.UNSURE  # half-way


def test_the_section_defaults_and_refuses_a_text_with_nothing_to_score():
    assert Numerics().texts == TEXTS and Numerics().min_effect == 0.01 and Numerics().deterministic
    with pytest.raises(ValidationError, match="text 2 has fewer than two words"):
        Numerics(texts=("two words", "one"))
    with pytest.raises(ValidationError, match="extra"):
        Numerics.model_validate({"alpha": 0.1})  # the significance level is the recipe's verdict.alpha


@contextmanager
def _toy(tree: Path):
    """The toy engine of `tree`, imported in this process as the package `toyengine` from its folder (and
    forgotten afterwards)."""
    package = tree / "toyengine"
    spec = importlib.util.spec_from_file_location("toyengine", package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    assert spec is not None and spec.loader is not None
    sys.modules["toyengine"] = toy = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(toy)
        model = importlib.import_module("toyengine.model")
        yield importlib.import_module("toyengine.loader").load_model(model.Checkpoint()), model
    finally:
        for name in [m for m in sys.modules if m == "toyengine" or m.startswith("toyengine.")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("toy")
    shas = history.planted_history(root / "repo", 2, {1: "logit_shift"})
    out = []
    for n, sha in enumerate(shas):
        tree = root / f"t{n}"
        history.git.git(root / "repo", "worktree", "add", "-q", str(tree), sha)
        out.append(tree)
    return out[0], out[1]


def test_the_toy_engines_log_probabilities_are_a_distribution_with_the_greedy_pick_on_top(trees):
    with _toy(trees[0]) as (model, m):
        rows = m.prompt_logprobs(model, TEXTS[0], 3)
        assert rows[0][1] is None and all(lp < 0 for _, lp, _ in rows[1:])
        dist, _ = m.distribution(model, ["<s>", "<s>", "the", "sea"], ["the", "sea"])
        assert sum(2.718281828459045 ** v for v in dist.values()) == pytest.approx(1.0)
        text, _, _ = model.generate("Explain what a hash table is.", 12, 0.0)
        out = m.output_logprobs(model, "Explain what a hash table is.", text, 3)
        assert [t for t, _, _ in out] == m.tokenize(text) and all(t == tops[0][0] for t, _, tops in out)


def test_the_planted_numerics_change_moves_every_text_and_no_eval_answer(trees):
    items = [json.loads(line) for line in make_arith_facts.PATH.read_text().splitlines()]
    got = []
    for tree in trees:
        with _toy(tree) as (model, m):
            scores = [[lp for _, lp, _ in m.prompt_logprobs(model, t, 1)[1:]] for t in TEXTS]
            answers = [model.generate(i["prompt"], 32, 0.0)[0] for i in items]
            got.append((scores, answers))
    (sa, aa), (sb, ab) = got
    per_text = [sum(abs(x - y) for x, y in zip(a, b)) / len(a) for a, b in zip(sa, sb)]
    assert min(per_text) > 0.01  # every text moves by more than the default numerics.min_effect
    assert len(items) == 400 and sum(x != y for x, y in zip(aa, ab)) <= 4  # at most 1 in 100 answers


def test_the_posterior_searchs_evidence_puts_a_candidate_with_the_end_it_scores_like():
    """A noisy engine's bisect: each launch is its per-text distance to the first launch (an end's); a candidate
    scoring like the old end makes "the change is after it" far likelier than "before it"."""
    model = Distances(8)
    for sha, shift, r in (("old", 0.0, 0), ("new", 0.01, 0), ("mid", 0.0, 1), ("old", 0.0005, 2),
                          ("new", 0.0105, 2)):
        model.add_run(sha, r, _run(shift=shift, batch_noise=0.001), 0.01)
    assert model.commits() == ("old", "new", "mid")
    z = np.array([[BEFORE, AFTER, BEFORE], [BEFORE, AFTER, AFTER]])
    after_mid, before_mid = model.loglik(z)
    assert after_mid - before_mid > 5  # e^5: the candidate is with the old end
