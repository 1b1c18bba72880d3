"""A word-level language model with an FP8-style lm_head: integer weights plus a per-row scale.

The checkpoint stores lm_head.weight quantised per output row and lm_head.weight_scale; correct
logits are weight * weight_scale. A loader that forgets the scale ranks tokens by raw weights.
"""

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


def tokenize(text):
    return re.findall(r"[a-z0-9]+|[^\sa-z0-9]", text.lower())


def detokenize(tokens):
    out = ""
    for tok in tokens:
        out += tok if (not out or re.match(r"[^\w]", tok)) else " " + tok
    return out


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

    def opening(self, words):
        """When the prompt's last words continue nothing, start from the best-matching sentence."""
        ckpt = self.lm_head.weight
        if len(words) >= 2 and (words[-2], words[-1]) in ckpt.tri:
            return []
        content = {w for w in words if len(w) > 2} - {"the", "and", "what", "how", "why", "who"}
        best = max(ckpt.sentences, key=lambda s: (len(set(s) & content), -ckpt.sentences.index(s)))
        return best[:2]

    def generate(self, prompt, max_tokens, temperature=0.0, seed=0):
        words = tokenize(prompt)
        out = self.opening(words)[:max_tokens]
        ctx = ["<s>", "<s>", *words, *out]
        rng = random.Random(seed)
        for _ in range(max_tokens - len(out)):
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
                return detokenize(out), len(out) + 1, "stop"
            out.append(tok)
            ctx.append(tok)
        return detokenize(out), len(out), "length"
