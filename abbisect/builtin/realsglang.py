"""`builtin:sglang-0.5.23`: a git history of real SGLang source with the seed's lm_head bug, built here.

SGLang's repository is too large to clone for a test, so the history starts from the `sglang` package as shipped
in the sglang 0.5.23 wheel, laid out as in SGLang's repository (`python/sglang/…`; the recipe's engine.subdir is
`python`), its compiled extensions (.so) left out: the `overlay` install strategy takes them from the wheel
itself. On top of it:

- v0.5.23.post1 adds row-scaled checkpoints: ParallelLMHead registers `weight_scale` (one factor per vocabulary
  row, ones unless the checkpoint has `lm_head.weight_scale`) and LogitsProcessor multiplies an unquantized
  head's logits by it;
- a later `[Quant]` commit registers that scale only under a quant config, the shape of SGLang #34895 (the
  compressed-tensors dispatch skipped ParallelLMHead): for the unquantized row-scaled checkpoint the Llama loader
  logs `Parameter lm_head.weight_scale not found in params_dict`, every logit row is off by 10**U(-1,1) and
  greedy output loops within a few tokens;
- v0.5.24 is cut after it (the release has the bug), and a later `[Bugfix]` commit on main registers the scale
  again. Everything else is housekeeping, like a real history.

Serve it with the `lm_head_row_scaled` model variant (abbisect/environment/weights.py). On a machine without a GPU
the SGLang adapter adds this built-in's CPU scaffolding (abbisect/builtin/sglang_cpu).
"""

from __future__ import annotations

from pathlib import Path

from abbisect.builtin.history import Commit
from abbisect.builtin.realengine import (
    Changes,
    applier,
    build_history,
    ensure_built,
    fetch_wheel,
    planted_history,
)
from abbisect.infra.cache import Cache
from abbisect.infra.progress import Say

NAME = "builtin:sglang-0.5.23"
WHEEL = "sglang==0.5.23"
SUBDIR = "python"
LMHEAD = f"{SUBDIR}/sglang/srt/layers/vocab_parallel_embedding.py"
LOGITS = f"{SUBDIR}/sglang/srt/layers/logits_processor.py"

_REGISTER_OK = "        if not hasattr(self, \"weight_scale\"):\n"
_REGISTER_BAD = "        if self.quant_config is not None and not hasattr(self, \"weight_scale\"):\n"

CHANGES: Changes = {
    "row_scale": [
        (LMHEAD,
         ('        else:\n            self.register_parameter("bias", None)\n\n'
          "    def tie_weights(self, embed_tokens: VocabParallelEmbedding):\n"),
         ('        else:\n            self.register_parameter("bias", None)\n'
          "        # Row-scaled checkpoints store each lm_head row multiplied by a factor\n"
          "        # and carry the inverse as lm_head.weight_scale; LogitsProcessor\n"
          "        # multiplies the logits back. Checkpoints without it keep ones. A\n"
          "        # quantized head's own weight_scale (from its quant method) is kept.\n"
          + _REGISTER_OK +
          "            self._register_weight_scale()\n\n"
          "    def _register_weight_scale(self):\n"
          "        data = torch.ones(self.num_embeddings_per_partition, dtype=torch.float32)\n"
          "        self.weight_scale = Parameter(data, requires_grad=False)\n"
          "        set_weight_attrs(\n"
          "            self.weight_scale,\n"
          '            {"output_dim": 0, "weight_loader": self.weight_loader},\n'
          "        )\n\n"
          "    def tie_weights(self, embed_tokens: VocabParallelEmbedding):\n"), 1),
        (LOGITS,
         ("                logits = lm_head.quant_method.apply(\n"
          "                    lm_head, hidden_states, embedding_bias\n"
          "                )\n"
          "        return logits\n"),
         ("                logits = lm_head.quant_method.apply(\n"
          "                    lm_head, hidden_states, embedding_bias\n"
          "                )\n"
          "        return self._apply_row_scale(lm_head, quant_method, logits)\n\n"
          "    @staticmethod\n"
          "    def _apply_row_scale(lm_head, quant_method, logits: torch.Tensor) -> torch.Tensor:\n"
          '        """An unquantized row-scaled head: the logits times lm_head.weight_scale."""\n'
          '        row_scale = getattr(lm_head, "weight_scale", None)\n'
          "        if (\n"
          "            row_scale is None\n"
          "            or row_scale.dim() != 1\n"
          "            or should_apply_lm_head_quant_method(lm_head, quant_method)\n"
          "        ):\n"
          "            return logits\n"
          "        return logits * row_scale.to(logits.dtype)\n"), 1),
    ],
    # The bug: "the scale belongs to quantized heads" forgets the unquantized row-scaled checkpoint.
    "break_row_scale": [(LMHEAD, _REGISTER_OK, _REGISTER_BAD, 1)],
    "fix_row_scale": [(LMHEAD, _REGISTER_BAD, _REGISTER_OK, 1)],
}


def default_history(n_before: int = 6, n_between: int = 4, n_after: int = 3) -> list[Commit]:
    topics = ["[Doc] Clarify the CPU backend install notes", "[CI] Pin the lint image",
              "[Test] Widen a tolerance in test_srt_endpoint", "[Doc] Fix a typo in the server arguments page",
              "[Misc] Sort imports in the benchmark scripts", "[CI] Cache the kernel wheel build",
              "[Doc] Mention --sleep-on-idle in the CPU guide", "[Test] Add a chat completion smoke test",
              "[Misc] Update the issue template", "[Doc] Link the benchmark dashboard"]
    start = [Commit("SGLang 0.5.23 as shipped in the sglang wheel", tag="v0.5.23"),
             Commit("[Model] Support row-scaled lm_head checkpoints (lm_head.weight_scale) (#23010)", "row_scale",
                    tag="v0.5.23.post1")]
    return planted_history(
        start, Commit("[Quant] ParallelLMHead: register weight_scale only under a quant config (#23107)",
                      "break_row_scale"),
        Commit("Release v0.5.24", tag="v0.5.24"),
        Commit("[Bugfix] Register lm_head.weight_scale for unquantized row-scaled heads (#23188)", "fix_row_scale"),
        topics, lambda k: 23020 + 7 * k, n_before, n_between, n_after)


def ensure_sglang_repo(cache: Cache | Path, say: Say | None = None) -> Path:
    def build(dest: Path) -> None:
        build_history(dest, fetch_wheel(cache, WHEEL, say), default_history(), package="sglang", under=SUBDIR,
                      changelog="# Changes on top of SGLang 0.5.23\n", apply=applier(CHANGES))
    return ensure_built(cache, "sglang-0.5.23", build, say)


BUILTINS = {NAME: ensure_sglang_repo}
