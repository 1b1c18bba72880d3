"""Builds git histories of the toy engine: the built-in demo and the test fixtures.

Each commit applies one named change to the template, so a history reads like a real one:
harmless edits, a commit that stops applying the lm_head scale, a fix, and ways to fail.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from abbisect.infra import git
from abbisect.infra.cache import Cache, sidecar
from abbisect.infra.locks import file_lock
from abbisect.infra.progress import Say

TEMPLATE = Path(__file__).parent / "template"

# name -> (file, old text, new text); applied to the current tree of the history being built.
CHANGES: dict[str, tuple[str, str, str]] = {
    "break_scale": ("toyengine/loader.py", 'QUANTIZED_MODULES = ("layers", "lm_head")',
                    'QUANTIZED_MODULES = ("layers",)'),
    "fix_scale": ("toyengine/loader.py", 'QUANTIZED_MODULES = ("layers",)',
                  'QUANTIZED_MODULES = ("layers", "lm_head")'),
    "silence_loader": ("toyengine/loader.py", "WARN_ON_MISSING = True", "WARN_ON_MISSING = False"),
    "break_install": ("pyproject.toml", "[project]\n", "[project\n"),
    "fix_install": ("pyproject.toml", "[project\n", "[project]\n"),
    "crash_at_start": ("toyengine/server.py", "    # abbisect-demo: startup\n",
                       ("    # abbisect-demo: startup\n"
                       '    raise RuntimeError("CUDA error: an illegal memory access was encountered")\n')),
    "fix_crash": ("toyengine/server.py",
                  '    raise RuntimeError("CUDA error: an illegal memory access was encountered")\n', ""),
    "hang_at_start": ("toyengine/server.py", 'os.environ.get("TOYENGINE_LOAD_SECONDS", "0.1")', '"3600"'),
    "fix_hang": ("toyengine/server.py", '"3600"', 'os.environ.get("TOYENGINE_LOAD_SECONDS", "0.1")'),
    "rename_seed_flag": ("toyengine/server.py", 'p.add_argument("--seed"', 'p.add_argument("--random-seed"'),
    # An engine that asks git about itself at start (a version probe): fails if it inherits git's GIT_DIR.
    "git_at_start": ("toyengine/server.py", "    # abbisect-demo: startup\n",
                     ("    # abbisect-demo: startup\n"
                      '    __import__("subprocess").run(["git", "rev-parse", "--git-dir"], check=True)\n')),
    # The third request takes a path whose kernel fails to JIT-compile, and the process dies while serving.
    "crash_on_third_request": ("toyengine/server.py", "        # abbisect-demo: request\n", (
        "        # abbisect-demo: request\n"
        '        if STATE["served"] > 2:\n'
        "            sys.stdout.write(\n"
        '                "indexer.cuh(283): error: static assertion failed with \\"Invalid kNumWeightsInReg\\"\\n"\n'
        '                "          detected during instantiation of sm100_fp8_mqa_logits [with kNumHeads=32U]\\n"\n'
        '                "RuntimeError: JIT compilation of sm100_fp8_mqa_logits failed\\n")\n'
        "            sys.stdout.flush()\n"
        "            os._exit(1)\n")),
    "fix_third_request": ("toyengine/server.py", '        if STATE["served"] > 2:\n', '        if False:\n'),
    # A harmless-looking data edit that changes what the model says (not degenerate, just different).
    "reword_corpus": ("toyengine/model.py", "a city known for art", "a city famous for art"),
}

# The fixtures of load tests, performance and accuracy bisects. Each `fix_X` reverts `X` exactly: it removes
# the lines X inserted after its anchor (so it applies with other insertions there), or restores the text.
_STARTUP = "    # abbisect-demo: startup\n"
_FEATURES = "    # abbisect-demo: features\n"
_ARGS = ('    p.add_argument("--max-model-len", type=int, default=DEFAULTS["max_model_len"])\n'
         "    return p.parse_args(argv)\n")
_DECODE = ("        # abbisect-demo: batch\n"
           "        for piece, finish in steps:\n"
           "            pause(token_s * (2 if finish == \"stop\" else 1))  # a stop costs its EOS token's step too\n"
           "            yield piece, finish\n")
_PLANTED: dict[str, tuple[str, str, str]] = {
    # +10 % per token (only where TOYENGINE_TOKEN_SECONDS paces the tokens): a performance regression.
    "slow_tokens": ("toyengine/server.py", '    token_s = TIMING["token"] * factor\n',
                    '    token_s = TIMING["token"] * factor * 1.1  # the sampler re-normalises every step\n'),
    # Another +10 % per token, in the decode loop (a second regression that adds to slow_tokens).
    "slow_decode": ("toyengine/server.py",
                    '            pause(token_s * (2 if finish == "stop" else 1))  # a stop costs its EOS token\'s step too\n',
                    '            pause(token_s * 1.1 * (2 if finish == "stop" else 1))  # detokenized twice a step\n'),
    # The two above at +6 % each (twice a 3 % smallest effect): benchmarks/changes_real.py's histories.
    "slow_tokens_6": ("toyengine/server.py", '    token_s = TIMING["token"] * factor\n',
                      '    token_s = TIMING["token"] * factor * 1.06  # the sampler re-normalises every step\n'),
    "slow_decode_6": ("toyengine/server.py",
                      '            pause(token_s * (2 if finish == "stop" else 1))  # a stop costs its EOS token\'s step too\n',
                      '            pause(token_s * 1.06 * (2 if finish == "stop" else 1))  # detokenized twice a step\n'),
    # From 4 requests generating at once, each loops on "for" to max_tokens; a step takes at least 5 ms here,
    # so concurrent requests really overlap. One at a time (or up to 3) the outputs are the healthy ones.
    "batch_bug": ("toyengine/server.py", _DECODE, (
        "        # abbisect-demo: batch\n"
        "        # Batched decode: one step of the fused kernel takes at least 5 ms.\n"
        "        token_s = max(token_s, 0.005)\n"
        "        for n, (piece, finish) in enumerate(steps):\n"
        '            if STATE["in_flight"] >= 4:\n'
        "                for m in range(n, max_tokens):\n"
        "                    pause(token_s)\n"
        '                    yield (" for" if m else "for"), ("length" if m == max_tokens - 1 else None)\n'
        "                return\n"
        "            pause(token_s * (2 if finish == \"stop\" else 1))  # a stop costs its EOS token's step too\n"
        "            yield piece, finish\n")),
    # One launch in three dies at start like crash_at_start (TOYENGINE_CRASH_DRAW in [0, 1) decides, when set;
    # with TOYENGINE_CRASH_COUNTER, a file counting the starts, exactly every third start dies — every
    # TOYENGINE_CRASH_EVERY-th: tests).
    "flaky_crash": ("toyengine/server.py", _STARTUP, _STARTUP + (
        '    draw = os.environ.get("TOYENGINE_CRASH_DRAW")\n'
        '    counter = os.environ.get("TOYENGINE_CRASH_COUNTER")\n'
        "    if counter:\n"
        "        started = int(open(counter).read() or 0) if os.path.exists(counter) else 0\n"
        "        with open(counter, \"w\") as f:\n"
        "            f.write(str(started + 1))\n"
        '        every = int(os.environ.get("TOYENGINE_CRASH_EVERY", "3"))\n'
        '        draw = "0.01" if started % every == every - 1 else "0.5"\n'
        '    if (float(draw) if draw else int.from_bytes(os.urandom(8), "big") / 2**64) < 1 / 3:\n'
        "        raise RuntimeError(\n"
        '            "CUDA error: an illegal memory access was encountered")\n')),
    # Dies at every start, with another error than crash_at_start's.
    "other_crash": ("toyengine/server.py", _STARTUP, _STARTUP + (
        '    raise type("OutOfMemoryError", (RuntimeError,), {"__module__": "torch"})(\n'
        '        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which "\n'
        '        "1.06 GiB is free.")\n')),
    # Feature flags (no bug yet), and then a bug that needs two of them together: with prefix caching and
    # chunked prefill on, the fused ("flash") attention path repeats itself after three tokens;
    # --attention-backend naive or --enforce-eager (no fused path) serve correctly. For abbisect narrow.
    "feature_flags": ("toyengine/server.py", _ARGS, _ARGS.replace("    return p.parse_args(argv)\n", (
        '    p.add_argument("--enable-prefix-caching", action="store_true")\n'
        '    p.add_argument("--enable-chunked-prefill", action="store_true")\n'
        '    p.add_argument("--attention-backend", default="flash", choices=["flash", "naive"])\n'
        '    p.add_argument("--enforce-eager", action="store_true")\n'
        "    args = p.parse_args(argv)\n"
        + _FEATURES + "    return args\n"))),
    "feature_bug": ("toyengine/server.py", _FEATURES, _FEATURES + (
        "    if (args.enable_prefix_caching and args.enable_chunked_prefill and args.attention_backend == \"flash\"\n"
        "            and not args.enforce_eager):\n"
        "        global paced\n"
        "        healthy = paced\n"
        "\n"
        "        def paced(model, prompt, max_tokens, *rest):  # a cached prefix read in chunks: the same token again\n"
        "            for n, (piece, finish) in enumerate(healthy(model, prompt, max_tokens, *rest)):\n"
        '                yield (piece if n < 3 else " again"), finish\n')),
    # Streams end in an error event after their first token: 3 in 4 (TOYENGINE_STREAM_ERROR_RATE, a fraction,
    # counted over the server's streams so the share is exact), as vLLM sends one when a request fails mid-stream.
    # The server stays up and answers the recipe's prompts (not streamed) as the healthy commit does.
    "stream_errors": ("toyengine/server.py", "                # abbisect-demo: stream\n", (
        "                # abbisect-demo: stream\n"
        "                if i == 1:\n"
        "                    with LOCK:\n"
        '                        STATE["streams"] = STATE.get("streams", 0) + 1\n'
        '                        k = STATE["streams"]\n'
        '                    rate = float(os.environ.get("TOYENGINE_STREAM_ERROR_RATE") or 0.75)\n'
        "                    if int(k * rate) > int((k - 1) * rate):\n"
        '                        self._event({"error": {"object": "error", "type": "InternalServerError", "code": 500,\n'
        '                                               "message": "detokenizer: lost the state of this sequence"}})\n'
        "                        break\n")),
    # 8 % of the sums (by a hash of the question) come out one too high: no loop, no log line.
    "arith_drift": ("toyengine/model.py", "    # abbisect-demo: arith\n", (
        "    # abbisect-demo: arith\n"
        "    import hashlib\n"
        "\n"
        '    if int(hashlib.sha256(f"{a} {op} {b}".encode()).hexdigest()[:8], 16) % 100 < 8:\n'
        "        return OPS[op](a, b) + 1\n")),
    # Each lm_head row's scale kept with a 2-bit mantissa (FP8 e5m2): the logits move by up to 12 % of a row, a
    # numerics change. The recalled answers (the eval set's) do not read the logits: none of them changes.
    "logit_shift": ("toyengine/loader.py",
                    "            lm_head.weight_scale = tensor if toydep is None else toydep.row_scales(tensor)\n",
                    ("            import math  # FP8-style scales: a 2-bit mantissa each (e5m2), a quarter of the memory\n"
                    "            lm_head.weight_scale = ({k: round(v * 2 ** (3 - math.frexp(v)[1])) / 2 ** (3 - math.frexp(v)[1])\n"
                    "                                     for k, v in tensor.items()} if toydep is None\n"
                    "                                    else toydep.row_scales(tensor))\n")),
}
for _name, (_rel, _old, _new) in _PLANTED.items():
    CHANGES[_name] = (_rel, _old, _new)
    CHANGES[f"fix_{_name}"] = (_rel, _new[len(_old):], "") if _new.startswith(_old) else (_rel, _new, _old)


@dataclass(frozen=True)
class Commit:
    message: str
    change: str | None = None  # a key of CHANGES; None = a harmless edit of the changelog
    tag: str | None = None


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    base = {"GIT_AUTHOR_NAME": "Toy Dev", "GIT_AUTHOR_EMAIL": "dev@toyengine.invalid",
            "GIT_COMMITTER_NAME": "Toy Dev", "GIT_COMMITTER_EMAIL": "dev@toyengine.invalid"}
    return git.git(repo, *args, env={**base, **(env or {})}).strip()


def apply_change(repo: Path, change: str | None, n: int) -> None:
    if change is None:  # one new file per edit, so edits on parallel branches merge cleanly
        notes = repo / "changes.d"
        notes.mkdir(exist_ok=True)
        (notes / f"{n:05d}.txt").write_text(f"housekeeping {n}\n")
        return
    rel, old, new = CHANGES[change]
    path = repo / rel
    text = path.read_text()
    if old not in text:
        raise ValueError(f"change {change!r} does not apply: {old!r} not in {rel}")
    path.write_text(text.replace(old, new, 1))


def init_repo(repo: Path) -> None:
    repo.mkdir(parents=True, exist_ok=True)
    _git(repo, "init", "-q", "-b", "main")
    shutil.copytree(TEMPLATE, repo, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "CHANGES.txt").write_text("toyengine changes\n")


def commit(repo: Path, c: Commit, n: int, apply: Callable[[Path, str | None, int], None] | None = None) -> str:
    """Apply one change (with `apply`, default: the toy engine's) and commit it with a fixed, increasing
    date, so the shas are the same on every machine."""
    if n > 0:
        (apply or apply_change)(repo, c.change, n)
    _git(repo, "add", "-A")
    date = f"@{1_767_225_600 + 3600 * n} +0000"
    _git(repo, "commit", "-q", "-m", c.message, env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
    if c.tag:
        _git(repo, "tag", c.tag)
    return _git(repo, "rev-parse", "HEAD")


def _dated(n: int) -> dict[str, str]:
    date = f"@{1_767_225_600 + 3600 * n} +0000"
    return {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}


def merge(repo: Path, branch: str, message: str, n: int) -> str:
    """A pull-request merge as GitHub makes it (`--no-ff`, "Merge pull request #N from …")."""
    _git(repo, "merge", "-q", "--no-ff", branch, "-m", message, env=_dated(n))
    return _git(repo, "rev-parse", "HEAD")


def cherry_pick(repo: Path, sha: str, n: int, mainline: int | None = None) -> str:
    """A backport as release managers make it: `git cherry-pick -x` (the trailer names the original)."""
    _git(repo, "cherry-pick", "-x", *(["-m", str(mainline)] if mainline else []), sha, env=_dated(n))
    return _git(repo, "rev-parse", "HEAD")


def build_history(repo: Path, commits: list[Commit]) -> list[str]:
    """Create `repo` with these commits (the first is the template as is); returns the shas."""
    init_repo(repo)
    return [commit(repo, c, n) for n, c in enumerate(commits)]


# Commit messages of planted_history's changes (the change's name for the others).
MESSAGES = {
    "slow_tokens": "Re-normalise the sampler's logits at every step (#41)",
    "fix_slow_tokens": "Normalise the logits once per request again (#44)",
    "slow_decode": "Detokenize in the decode loop for stop strings (#46)",
    "batch_bug": "Fused batched decode kernel (#52)",
    "fix_batch_bug": "Give each sequence of a batch its own scratch buffer (#55)",
    "flaky_crash": "Overlap weight loading with the CUDA graph capture (#60)",
    "fix_flaky_crash": "Synchronise the loader stream before the capture (#63)",
    "arith_drift": "Faster integer path in the sampler (#70)",
    "feature_flags": "Add prefix caching, chunked prefill, attention backends and eager mode (#78)",
    "fix_feature_flags": "Drop the feature flags (#79)",
    "feature_bug": "Read cached prefixes in chunks in the flash attention path (#80)",
    "fix_feature_bug": "Take the chunked prefix read out of the fused path (#83)",
    "fix_arith_drift": "Revert the faster integer path (#72)",
    "stream_errors": "Detokenize streamed chunks in the engine core (#90)",
    "logit_shift": "Keep lm_head.weight_scale in FP8 (e5m2) to save memory (#75)",
    "fix_logit_shift": "Keep lm_head.weight_scale in full precision again (#77)",
    "fix_stream_errors": "Detokenize in the API server again (#93)",
    "break_scale": "Refactor quantisation dispatch to linear layers only (#17)",
    "fix_scale": "Route lm_head through the quantised method so its weight_scale loads (#23)",
}


def planted_history(repo: Path, n: int, changes: dict[int, str]) -> list[str]:
    """Create `repo` with a linear history of `n` commits: the template as is at 0, each named change
    of `changes` at its position (e.g. {40: "slow_tokens", 70: "fix_slow_tokens"}), a harmless edit at
    every other position; returns the n shas (the same on every machine)."""
    for k, change in changes.items():
        if not 0 < k < n:
            raise ValueError(f"position {k} of {change!r} is outside 1..{n - 1}")
        if change not in CHANGES:
            raise ValueError(f"unknown change {change!r}")
    commits = [Commit("Initial toy engine")] + [
        Commit(MESSAGES.get(changes[i], changes[i]), changes[i]) if i in changes else Commit(f"Housekeeping {i}")
        for i in range(1, n)]
    return build_history(repo, commits)


DEMO_HISTORY = [
    Commit("Initial toy engine with FP8-style lm_head", tag="v0.1"),
    Commit("Add CHANGES entry for the release process"),
    Commit("Tidy the request logging"),
    Commit("Refactor quantisation dispatch to linear layers only (#17)", "break_scale"),
    Commit("Speed up tokenizer"),
    Commit("Bump version for the 0.2 release", tag="v0.2"),
    Commit("Document the server flags"),
    Commit("Route lm_head through the quantised method so its weight_scale loads (#23)", "fix_scale"),
    Commit("Add a health endpoint test"),
    Commit("Update changelog"),
]


def ensure_demo_repo(dest: Path, say: Say | None = None) -> Path:
    """The built-in demo engine: v0.2 loops ("need analysis there …"), main is fixed."""
    with file_lock(sidecar(dest, ".lock"), say=say):
        if not (dest / ".git").exists() or not _has_tag(dest, "v0.2"):
            if dest.exists():
                shutil.rmtree(dest)
            build_history(dest, DEMO_HISTORY)
    return dest


PERF_DEMO = "builtin:perf-demo"
PERF_DEMO_SLOW = 27  # the commit of the 40 whose per-token cost is 10 % higher (slow_tokens)


def ensure_perf_demo_repo(cache: Cache | Path, say: Say | None = None) -> Path:
    """The built-in performance demo: 40 toy-engine commits, the per-token cost 10 % higher from commit 27
    on (only where TOYENGINE_TOKEN_SECONDS paces the tokens); tags v1.0 (the first), v1.1 (the last)."""
    dest = Cache.at(cache).builtin("perf-demo")
    with file_lock(sidecar(dest, ".lock"), say=say):
        if not _has_tag(dest, "v1.1"):
            if dest.exists():
                shutil.rmtree(dest)
            shas = planted_history(dest, 40, {PERF_DEMO_SLOW: "slow_tokens"})
            git.git(dest, "tag", "v1.0", shas[0])
            git.git(dest, "tag", "v1.1", shas[-1])
    return dest


def _has_tag(repo: Path, tag: str) -> bool:
    if not (repo / ".git").exists():
        return False
    return git.succeeds(repo, "rev-parse", "-q", "--verify", f"refs/tags/{tag}")
