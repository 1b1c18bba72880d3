"""Every input is validated before anything runs: each bad input is one line and exit 2 from `--dry-run`.

Hostile inputs included (an alias bomb, 20,000-deep nesting, binary files, other URL schemes, a prompts file
that is not one): none may hang, crash with a traceback, or echo a file's content.
"""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import cli, toy_recipe, write_recipe

SECRET = "hf_topsecret_4242"


def _sig(**kw):
    return {"scoring": {"signatures": [{"id": "mine", "pattern": "boom", **kw}]}}


ALIAS_BOMB = """name: bomb
engine: {kind: command, repo: REPO}
launch: {command: [x]}
prompts: [hi]
probe_like: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""

# (id, recipe overrides or a raw text builder, what the one line says)
CASES = [
    ("signature bad regex", _sig(pattern="(unclosed"), "'scoring.signatures.0.pattern': not a valid regular expression"),
    ("signature bad severity", _sig(severity="loud"), "'scoring.signatures.0.severity'"),
    ("signature unknown field", _sig(colour="red"), "unknown key 'scoring.signatures.0.colour'"),
    ("signature without pattern", {"scoring": {"signatures": [{"id": "x"}]}}, "missing key 'scoring.signatures.0.pattern'"),
    ("threshold name", {"scoring": {"thresholds": {"max_loop_fraction_typo": 0.5}}}, "unknown degeneration threshold"),
    ("threshold value", {"scoring": {"thresholds": {"garbage_max": "lots"}}}, "'scoring.thresholds.garbage_max'"),
    ("probe unknown key", {"probe": {"file": "k.py", "kernel": "k", "grid": [1], "targets": ["sm_90"], "colour": 1}},
     "unknown key 'probe.colour'"),
    ("probe bad target", {"probe": {"file": "k.py", "kernel": "k", "grid": [1], "targets": ["sm_999x"]}},
     "unknown device class 'sm_999x'"),
    ("probe sweep of mappings", {"probe": {"file": "k.py", "kernel": "k", "grid": [1], "targets": ["sm_90"],
                                           "sweep": {"x": [{"deep": 1}]}}}, "'probe.sweep.x.0"),
    ("unknown bad signature id", {"verdict": {"bad_signatures": ["no_such_signature"]}}, "no_such_signature"),
    ("long name", {"name": "n" * 300}, "'name': String should have at most 100 characters"),
    ("ext transport", {"engine": {"kind": "command", "repo": "ext::sh -c touch% /tmp/pwned"}}, "unsupported URL scheme"),
    ("unknown scheme", {"engine": {"kind": "command", "repo": "gopher://example.org/engine.git"}},
     "unsupported URL scheme in 'gopher'"),
    ("option as repo", {"engine": {"kind": "command", "repo": "--upload-pack=touch /tmp/pwned"}}, "'engine.repo'"),
    ("too many prompts", {"prompts": [f"p{i}" for i in range(1001)]}, "'prompts': List should have at most 1000"),
    ("huge prompt", {"prompts": ["x" * 100_001]}, "at most 100000 characters"),
]


@pytest.mark.parametrize(("overrides", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_recipe_is_one_line_from_dry_run(tmp_path, engine_repo, cache_dir, overrides, says):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, **overrides))
    proc = cli("run", str(recipe), "--a", "fixed", "--b", "fixed", "--dry-run", cwd=tmp_path, cache=cache_dir)
    _one_line_exit_2(proc, says)


def _one_line_exit_2(proc, says: str) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("abbisect: error: "), proc.stderr
    assert says in lines[0], lines[0]
    assert len(lines[0]) < 600, lines[0]
    return lines[0]


def _dry_run(tmp_path, cache_dir, recipe, *extra):
    return cli("run", str(recipe), "--a", "fixed", "--b", "fixed", "--dry-run", *extra, cwd=tmp_path,
                    cache=cache_dir, timeout=60)


def test_alias_bomb_is_refused_before_validation(tmp_path, engine_repo, cache_dir):
    recipe = tmp_path / "bomb.yaml"
    recipe.write_text(ALIAS_BOMB.replace("REPO", str(engine_repo)))
    _one_line_exit_2(_dry_run(tmp_path, cache_dir, recipe), "too large once YAML aliases are expanded")


def test_deep_nesting_is_one_line(tmp_path, engine_repo, cache_dir):
    recipe = tmp_path / "deep.yaml"
    recipe.write_text(f"name: deep\nengine: {{kind: command, repo: {engine_repo}}}\nx: " + "[" * 20_000 + "]" * 20_000)
    _one_line_exit_2(_dry_run(tmp_path, cache_dir, recipe), "nested deeper than 64 levels")


def test_binary_recipe_is_one_line(tmp_path, cache_dir):
    recipe = tmp_path / "r.yaml"
    recipe.write_bytes(b"name: x\n\x00\x01\x02\xff" * 10)
    _one_line_exit_2(_dry_run(tmp_path, cache_dir, recipe), "not a text file (binary content)")


def test_non_utf8_recipe_is_one_line(tmp_path, cache_dir):
    recipe = tmp_path / "r.yaml"
    recipe.write_bytes(b"name: caf\xe9\n")
    _one_line_exit_2(_dry_run(tmp_path, cache_dir, recipe), "not UTF-8 text")


@pytest.mark.parametrize(("name", "content", "says"), [
    ("prompts.txt", b"\x00\x01binary" + SECRET.encode(), "not a text file (binary content)"),
    ("shadow", f"root:{SECRET}:19000:0:99999:7:::\n".encode(), "is not a prompts file"),
    ("prompts.jsonl", f'{{"prompt": "ok"}}\n{SECRET} not json\n'.encode(), "line 2 is not JSON"),
    ("prompts.yaml", f"- prompt: ok\n- {{prompt: [{SECRET}]}}\n".encode(), "prompt 2: prompt: Input should be a valid string"),
    ("prompts.json", json.dumps({"prompt": SECRET}).encode(), "expected a list of prompts"),
    ("prompts.yaml", f"- ok\n- {SECRET}: [unclosed\n".encode(), "not valid YAML at line"),
    ("prompts.txt", "".join(f"prompt {i}\n" for i in range(1001)).encode(), "1,001 prompts, more than the limit"),
])
def test_prompts_file_is_checked_and_never_echoed(tmp_path, engine_repo, cache_dir, name, content, says):
    (tmp_path / name).write_bytes(content)
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo, prompts=[], prompts_file=name))
    line = _one_line_exit_2(_dry_run(tmp_path, cache_dir, recipe), says)
    assert SECRET not in line


def test_output_that_is_a_file_is_one_line(tmp_path, engine_repo, cache_dir):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(engine_repo))
    (tmp_path / "taken").write_text("a file")
    for out in ("taken", "taken/inside"):
        _one_line_exit_2(_dry_run(tmp_path, cache_dir, recipe, "--output", str(tmp_path / out)), "is a file")
        proc = cli("bisect", str(recipe), "--good", "healthy0", "--bad", "broken", "-o", str(tmp_path / out),
                        cwd=tmp_path, cache=cache_dir)
        _one_line_exit_2(proc, "is a file")


def test_good_signatures_and_probe_still_validate(tmp_path, engine_repo, cache_dir):
    """The typed fields take what the untyped ones took: a recipe signature, thresholds, YAML anchors."""
    base = toy_recipe(engine_repo, scoring={"signatures": [{"id": "mine", "pattern": r"boom (\d+)", "severity": "fatal",
                                                            "meaning": "it went boom"}],
                                            "thresholds": {"garbage_max": 0.1, "collapse_min_repeats": 9}},
                      verdict={"bad_signatures": ["mine", "flag_rejected"]})
    text = yaml.safe_dump(base, sort_keys=False) + "x-anchors: &flags [--seed, '0']\n"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(text.replace("x-anchors", "description: ok\n_unused").replace("_unused: &flags [--seed, '0']\n",
                                                                                  ""))
    proc = _dry_run(tmp_path, cache_dir, recipe)
    assert proc.returncode == 0, proc.stderr
