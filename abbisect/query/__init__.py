"""Stage 4 — query: what is sent to a running server over its OpenAI-compatible HTTP endpoints: the recipe's
prompts at temperature 0 (`chat.py`), a pinned, streamed load for performance verdicts (`load.py`) and an
eval set at the recipe's concurrency, graded per item (`evals.py`); `lmeval.py` reads lm-evaluation-harness's
per-item samples as the same results, for `abbisect compare`."""
