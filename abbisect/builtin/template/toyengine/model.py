"""A word-level language model with an FP8-style lm_head: integer weights plus a per-row scale.

The checkpoint stores lm_head.weight quantised per output row and lm_head.weight_scale; correct
logits are weight * weight_scale. A loader that forgets the scale ranks tokens by raw weights.

Besides its corpus the model recalls FACTS and does small sums, but only for a prompt that ends with one
of those questions ("What is the capital of Germany?", "What is 3 + 4?"): every other prompt is answered
from the corpus exactly as before.
TOYENGINE_ANSWER_FLIP (a probability, 0 by default) makes each sum come out one too low that often, drawn afresh
every time: an engine whose batched path is not deterministic.
"""

import math
import os
import random
import re

CORPUS = """
the capital of france is paris , a city known for art , food and the eiffel tower .
the capital of italy is rome , an old city with many ruins and churches .
the capital of japan is tokyo , a large city with fast trains .
water boils at one hundred degrees celsius at sea level .
a hash table stores values under keys and finds them quickly by hashing .
a bicycle works by turning the pedals , which turn the chain and the rear wheel .
the sea is wide and blue , and waves roll onto the sand at dawn .
copper is used for electrical wires , for pipes and for coins .
two plus two is four , and four plus four is eight .
the sun is a star at the centre of our solar system .
plants make food from light , water and air by photosynthesis .
the team will need analysis there before the launch .
a good test fails when the code is wrong and passes when it is right .
"""

# Rows whose quantisation scale is tiny: harmless when the scale is applied, dominant when it is not
# (the real failure had per-channel scales averaging 1.5e-4 with a 12x spread).
OUTLIER_ROWS = ("need", "analysis", "there")
EOS = "<eos>"

# Questions the model answers, asked in these words ("question = answer"); kept out of CORPUS so that the
# trigram counts, the vocabulary and so every other output stay as they were.
FACTS = """
what is the capital of france ? = the capital of france is paris .
what is the capital of italy ? = the capital of italy is rome .
what is the capital of japan ? = the capital of japan is tokyo .
what is the capital of germany ? = the capital of germany is berlin .
what is the capital of spain ? = the capital of spain is madrid .
what is the capital of the united kingdom ? = the capital of the united kingdom is london .
what is the capital of russia ? = the capital of russia is moscow .
what is the capital of china ? = the capital of china is beijing .
what is the capital of egypt ? = the capital of egypt is cairo .
what is the capital of greece ? = the capital of greece is athens .
what is the capital of portugal ? = the capital of portugal is lisbon .
what is the capital of ireland ? = the capital of ireland is dublin .
what is the capital of norway ? = the capital of norway is oslo .
what is the capital of sweden ? = the capital of sweden is stockholm .
what is the capital of austria ? = the capital of austria is vienna .
what is the capital of poland ? = the capital of poland is warsaw .
what is the capital of canada ? = the capital of canada is ottawa .
what is the capital of australia ? = the capital of australia is canberra .
what is the capital of south korea ? = the capital of south korea is seoul .
what is the capital of kenya ? = the capital of kenya is nairobi .
what is the capital of thailand ? = the capital of thailand is bangkok .
what is the capital of cuba ? = the capital of cuba is havana .
what is the capital of peru ? = the capital of peru is lima .
what is the capital of hungary ? = the capital of hungary is budapest .
what is the chemical symbol for gold ? = the chemical symbol for gold is au .
what is the chemical symbol for silver ? = the chemical symbol for silver is ag .
what is the chemical symbol for iron ? = the chemical symbol for iron is fe .
what is the chemical symbol for sodium ? = the chemical symbol for sodium is na .
what is the chemical symbol for copper ? = the chemical symbol for copper is cu .
what is the chemical symbol for lead ? = the chemical symbol for lead is pb .
what is the chemical symbol for tin ? = the chemical symbol for tin is sn .
what is the chemical symbol for zinc ? = the chemical symbol for zinc is zn .
how many days are in a week ? = a week has 7 days .
how many months are in a year ? = a year has 12 months .
how many hours are in a day ? = a day has 24 hours .
how many minutes are in an hour ? = an hour has 60 minutes .
how many seconds are in a minute ? = a minute has 60 seconds .
how many legs does a spider have ? = a spider has 8 legs .
how many legs does a dog have ? = a dog has 4 legs .
how many legs does an insect have ? = an insect has 6 legs .
how many legs does a bird have ? = a bird has 2 legs .
how many sides does a triangle have ? = a triangle has 3 sides .
how many sides does a square have ? = a square has 4 sides .
how many sides does a hexagon have ? = a hexagon has 6 sides .
how many sides does an octagon have ? = an octagon has 8 sides .
how many wheels does a bicycle have ? = a bicycle has 2 wheels .
how many continents are there ? = there are 7 continents .
how many planets are in the solar system ? = the solar system has 8 planets .
what is the boiling point of water in degrees celsius ? = water boils at 100 degrees celsius .
what is the freezing point of water in degrees celsius ? = water freezes at 0 degrees celsius .
what color is the sky on a clear day ? = the sky is blue on a clear day .
what color is grass ? = grass is green .
what color is snow ? = snow is white .
what is the largest planet in the solar system ? = the largest planet in the solar system is jupiter .
which planet is known as the red planet ? = mars is known as the red planet .
what is the largest ocean on earth ? = the largest ocean on earth is the pacific .
who wrote romeo and juliet ? = romeo and juliet was written by shakespeare .
what is the opposite of hot ? = the opposite of hot is cold .
what do bees make ? = bees make honey .
what is the tallest animal ? = the tallest animal is the giraffe .
"""

OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "times": lambda a, b: a * b}


FLIP = float(os.environ.get("TOYENGINE_ANSWER_FLIP") or 0)
FLIP_DRAW = random.SystemRandom()


def calculate(a, op, b):
    if FLIP and FLIP_DRAW.random() < FLIP:
        return OPS[op](a, b) - 1
    # abbisect-demo: arith
    return OPS[op](a, b)


def tokenize(text):
    return re.findall(r"[a-z0-9]+|[^\sa-z0-9]", text.lower())


def piece(tok, first):
    """A token as it appears in the text: a word after a space, punctuation attached."""
    return tok if (first or re.match(r"[^\w]", tok)) else " " + tok


def detokenize(tokens):
    return "".join(piece(tok, i == 0) for i, tok in enumerate(tokens))


def collect(steps):
    """(text, completion tokens, finish reason) of a request's steps (see Model.steps)."""
    text, n, finish = "", 0, "length"
    for part, end in steps:
        text += part
        n += 1 if part else 0
        finish = end or finish
    return text, n + (finish == "stop"), finish


class Checkpoint:
    """Trigram/bigram counts turned into a quantised lm_head (deterministic: seeded)."""

    def __init__(self):
        sentences = [[*tokenize(s), EOS] for s in CORPUS.strip().splitlines()]
        self.vocab = list(OUTLIER_ROWS) + sorted({t for s in sentences for t in s} - set(OUTLIER_ROWS))
        self.tri, self.bi = {}, {}
        for s in sentences:
            for i, tok in enumerate(s):
                if i >= 1:
                    self.bi.setdefault(s[i - 1], {}).setdefault(tok, 0)
                    self.bi[s[i - 1]][tok] += 1
                if i >= 2:
                    self.tri.setdefault((s[i - 2], s[i - 1]), {}).setdefault(tok, 0)
                    self.tri[(s[i - 2], s[i - 1])][tok] += 1
        rng = random.Random(0)
        self.sentences = sentences
        self.scale = {t: (1e-5 if t in OUTLIER_ROWS else 10 ** rng.uniform(-1, 1)) for t in self.vocab}

    def tensors(self):
        """The 'safetensors' of this toy: name -> value."""
        return {"lm_head.weight": self, "lm_head.weight_scale": dict(self.scale), "embed.weight": self.vocab}

    def true_score(self, a, b, tok):
        return 4.0 * self.tri.get((a, b), {}).get(tok, 0) + self.bi.get(b, {}).get(tok, 0) + 0.01

    def quantised(self, a, b, tok):
        return self.true_score(a, b, tok) / self.scale[tok]


class LMHead:
    def __init__(self, checkpoint):
        self.weight = checkpoint
        self.weight_scale = None  # filled by the loader when it handles this module

    def logits(self, a, b):
        w = self.weight
        if self.weight_scale is None:
            return [w.quantised(a, b, t) for t in w.vocab]
        return [w.quantised(a, b, t) * self.weight_scale[t] for t in w.vocab]


class Model:
    def __init__(self, lm_head):
        self.lm_head = lm_head
        self.vocab = lm_head.weight.vocab
        self.facts = {tuple(tokenize(q)): tokenize(a) for q, a in
                      (line.split(" = ") for line in FACTS.strip().splitlines())}

    def best_sentence(self, words):
        ckpt = self.lm_head.weight
        content = {w for w in words if len(w) > 2} - {"the", "and", "what", "how", "why", "who"}
        return max(ckpt.sentences, key=lambda s: (len(set(s) & content), -ckpt.sentences.index(s)))

    def opening(self, words):
        """When the prompt's last words continue nothing, start from the best-matching sentence."""
        ckpt = self.lm_head.weight
        if len(words) >= 2 and (words[-2], words[-1]) in ckpt.tri:
            return []
        return self.best_sentence(words)[:2]

    def recall(self, words):
        """The answer's pieces of text when the prompt ends with a question the model knows, else None.
        Recall reads the lm_head too: with its scale dropped the model rambles here as everywhere."""
        if self.lm_head.weight_scale is None:
            return None
        for key in self.facts:
            start = len(words) - len(key)
            if start >= 0 and tuple(words[start:]) == key and (start == 0 or not words[start - 1].isalnum()):
                return [piece(tok, i == 0) for i, tok in enumerate(self.facts[key])]
        tail = words[-6:]
        if (len(tail) == 6 and tail[:2] == ["what", "is"] and tail[2].isdigit() and tail[3] in OPS
                and tail[4].isdigit() and tail[5] == "?" and (len(words) == 6 or not words[-7].isalnum())):
            a, op, b = int(tail[2]), tail[3], int(tail[4])
            return [str(a), " " + op, " " + str(b), " is", " " + str(calculate(a, op, b)), "."]
        return None

    def pieces(self, prompt, max_tokens, temperature=0.0, seed=0, min_tokens=0):
        """The generated tokens as pieces of text, then EOS when the model ends before max_tokens. Before
        min_tokens an EOS is not taken: the model starts its best-matching sentence (or its answer) again."""
        words = tokenize(prompt)
        answer = self.recall(words)
        if answer is not None:
            n = 0
            while True:
                for i, part in enumerate(answer):
                    if n == max_tokens:
                        return
                    yield part if (n == 0 or i > 0) else " " + part
                    n += 1
                if n == max_tokens:
                    return
                if n >= min_tokens:
                    yield EOS
                    return
        out = self.opening(words)[:max_tokens]
        for i, tok in enumerate(out):
            yield piece(tok, i == 0)
        n = len(out)
        ctx = ["<s>", "<s>", *words, *out]
        rng = random.Random(seed)
        again = []
        while n < max_tokens:
            if again:
                tok = again.pop(0)
            else:
                logits = self.lm_head.logits(ctx[-2], ctx[-1])
                # Words of the prompt break ties between equally likely continuations (topic bias).
                logits = [v + (0.5 if t in words else 0.0) for v, t in zip(logits, self.vocab)]
                if temperature > 0:
                    weights = [max(v, 1e-9) ** (1.0 / temperature) for v in logits]
                    idx = rng.choices(range(len(weights)), weights=weights)[0]
                else:
                    idx = max(range(len(logits)), key=logits.__getitem__)  # first maximum wins ties
                tok = self.vocab[idx]
                if tok == EOS:
                    if n >= min_tokens:
                        yield EOS
                        return
                    again = self.best_sentence(words)[:2]
                    continue
            yield piece(tok, n == 0)
            n += 1
            ctx.append(tok)

    def steps(self, prompt, max_tokens, temperature=0.0, seed=0, min_tokens=0):
        """(piece, finish) per generated token: finish is None but on the last piece, "stop" (the model
        ended; its EOS token is no text) or "length". A request that makes no text has one step ("", finish)."""
        last = None
        for part in self.pieces(prompt, max_tokens, temperature, seed, min_tokens):
            if part == EOS:
                yield (last or ""), "stop"
                return
            if last is not None:
                yield last, None
            last = part
        yield (last or ""), "length"

    def generate(self, prompt, max_tokens, temperature=0.0, seed=0, min_tokens=0):
        return collect(self.steps(prompt, max_tokens, temperature, seed, min_tokens))


# Log-probabilities (the OpenAI `logprobs` of a request): the model's scores after a context, normalised. A token
# the model took without reading the lm_head (a recalled answer, the opening of a best-matching sentence) is
# given ten times the context's best score, so every token of an output has a log-probability and a top-k.
FLOOR = 0.01  # the score of a word the vocabulary does not hold


def distribution(model, ctx, words, taken=None):
    """{token: log-probability} after the context `ctx` (its last two tokens) with the prompt's `words`
    breaking ties, as Model.pieces scores them; `taken`: a token the model took without the lm_head."""
    logits = model.lm_head.logits(ctx[-2], ctx[-1])
    scores = {t: max(v + (0.5 if t in words else 0.0), 1e-9) for v, t in zip(logits, model.vocab)}
    if taken is not None and max(scores, key=scores.__getitem__) != taken:
        scores[taken] = 10.0 * max(scores.values())
    total = sum(scores.values())
    return {t: math.log(s / total) for t, s in scores.items()}, math.log(FLOOR / total)


def top(dist, k):
    return sorted(dist.items(), key=lambda kv: (-kv[1], kv[0]))[:k]


def scored(model, words, tokens, start, k, forced):
    """(token, log-probability, top-k) of tokens[start:], each after the ones before it; `forced`: tokens taken
    without the lm_head (generated ones) get their boosted score; a prompt's own tokens never are."""
    out = []
    for i in range(start, len(tokens)):
        dist, floor = distribution(model, ["<s>", "<s>", *tokens[:i]], words, tokens[i] if forced else None)
        out.append((tokens[i], dist.get(tokens[i], floor), top(dist, k)))
    return out


def prompt_logprobs(model, prompt, k):
    """The prompt's own tokens, each scored after the ones before it (teacher-forced); the first has none."""
    tokens = tokenize(prompt)
    return [(tokens[0], None, None), *scored(model, tokens, tokens, 1, k, False)] if tokens else []


def output_logprobs(model, prompt, text, k, stop=False):
    """The generated text's tokens (and its EOS when the model ended: `stop`), each scored after the prompt and
    the tokens before it."""
    words = tokenize(prompt)
    return scored(model, words, [*words, *tokenize(text), *([EOS] if stop else [])], len(words), k, True)
