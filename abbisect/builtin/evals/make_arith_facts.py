"""Writes `arith_facts.jsonl`: small sums and simple facts with exact answers, for accuracy A/Bs and bisects.

Each line is {"id", "prompt", "answer", "extract", "kind"}; `extract` says how an output is read
(abbisect/score/answers.py, `extract` and `graded`): "last_number", the output's last number, is compared
with `answer`; "regex:P" passes when P matches the output, searched case-insensitively as a prompt's `expect`
is (P matches only the answer, so its match is the answer). Every item is graded right on its own answer
before it is written, so a rule that cannot read its answer never ships. Sums are "What is A + B?", "What is
A - B?" (never negative) and "What is A times B?"; facts are what the toy engine knows (its FACTS) and a
135M-parameter model mostly knows too (capitals, chemical symbols, counts, colours). Seeded: `python -m
abbisect.builtin.evals.make_arith_facts` writes the same file on every machine; `--check` only compares.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from types import SimpleNamespace

from abbisect.score.answers import graded

PATH = Path(__file__).with_name("arith_facts.jsonl")
SEED = 20261201
SUMS = 340

CAPITALS = [("France", "paris"), ("Italy", "rome"), ("Japan", "tokyo"), ("Germany", "berlin"),
            ("Spain", "madrid"), ("the United Kingdom", "london"), ("Russia", "moscow"), ("China", "beijing"),
            ("Egypt", "cairo"), ("Greece", "athens"), ("Portugal", "lisbon"), ("Ireland", "dublin"),
            ("Norway", "oslo"), ("Sweden", "stockholm"), ("Austria", "vienna"), ("Poland", "warsaw"),
            ("Canada", "ottawa"), ("Australia", "canberra"), ("South Korea", "seoul"), ("Kenya", "nairobi"),
            ("Thailand", "bangkok"), ("Cuba", "havana"), ("Peru", "lima"), ("Hungary", "budapest")]
SYMBOLS = [("gold", "au"), ("silver", "ag"), ("iron", "fe"), ("sodium", "na"), ("copper", "cu"), ("lead", "pb"),
           ("tin", "sn"), ("zinc", "zn")]
COUNTS = [("How many days are in a week?", 7), ("How many months are in a year?", 12),
          ("How many hours are in a day?", 24), ("How many minutes are in an hour?", 60),
          ("How many seconds are in a minute?", 60), ("How many legs does a spider have?", 8),
          ("How many legs does a dog have?", 4), ("How many legs does an insect have?", 6),
          ("How many legs does a bird have?", 2), ("How many sides does a triangle have?", 3),
          ("How many sides does a square have?", 4), ("How many sides does a hexagon have?", 6),
          ("How many sides does an octagon have?", 8), ("How many wheels does a bicycle have?", 2),
          ("How many continents are there?", 7), ("How many planets are in the solar system?", 8),
          ("What is the boiling point of water in degrees Celsius?", 100),
          ("What is the freezing point of water in degrees Celsius?", 0)]
WORDS = [("What color is the sky on a clear day?", "blue"), ("What color is grass?", "green"),
         ("What color is snow?", "white"), ("What is the largest planet in the solar system?", "jupiter"),
         ("Which planet is known as the red planet?", "mars"), ("What is the largest ocean on Earth?", "pacific"),
         ("Who wrote Romeo and Juliet?", "shakespeare"), ("What is the opposite of hot?", "cold"),
         ("What do bees make?", "honey"), ("What is the tallest animal?", "giraffe")]


def sums(rng: random.Random, count: int) -> list[tuple[str, int]]:
    """`count` distinct questions: + of 1..50, - of 1..50 (A >= B), times of 2..12, in a seeded mix."""
    seen: dict[str, int] = {}
    while len(seen) < count:
        op = rng.choice(["+", "-", "times"])
        if op == "times":
            a, b = rng.randint(2, 12), rng.randint(2, 12)
            value = a * b
        else:
            a, b = rng.randint(1, 50), rng.randint(1, 50)
            if op == "-":
                a, b = max(a, b), min(a, b)
            value = a + b if op == "+" else a - b
        seen.setdefault(f"What is {a} {op} {b}?", value)
    return list(seen.items())


def items() -> list[dict[str, str]]:
    rng = random.Random(SEED)
    out = [{"id": f"arith-{i:03d}", "prompt": q, "answer": str(v), "extract": "last_number", "kind": "arith"}
           for i, (q, v) in enumerate(sums(rng, SUMS), 1)]
    facts = ([(f"What is the capital of {c}?", a, f"regex:\\b{a}\\b") for c, a in CAPITALS]
             + [(f"What is the chemical symbol for {e}?", s, f"regex:\\b{s}\\b") for e, s in SYMBOLS]
             + [(q, str(v), "last_number") for q, v in COUNTS]
             + [(q, a, f"regex:\\b{a}\\b") for q, a in WORDS])
    out += [{"id": f"fact-{i:03d}", "prompt": q, "answer": a, "extract": x, "kind": "fact"}
            for i, (q, a, x) in enumerate(facts, 1)]
    return out


def readable(item: dict[str, str]) -> bool:
    """Whether the item's rule reads its own answer back as right (an output that is just the answer)."""
    return graded(SimpleNamespace(answer=item["answer"], extract=item["extract"], choices=None),
                  item["answer"]) is True


def render() -> str:
    made = items()
    unread = [item["id"] for item in made if not readable(item)]
    if unread:
        raise ValueError(f"extract rules that do not read their own answers: {', '.join(unread)}")
    return "".join(json.dumps(item) + "\n" for item in made)


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        same = PATH.is_file() and PATH.read_text() == render()
        print(f"{PATH.name}: {'up to date' if same else 'differs from the generator: regenerate it'}")
        return 0 if same else 1
    PATH.write_text(render())
    print(f"wrote {PATH.name}: {len(items())} items")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
