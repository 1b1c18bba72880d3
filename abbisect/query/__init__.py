"""Stage 4 — query: what is sent to a running server over its OpenAI-compatible HTTP endpoints: the recipe's
prompts at temperature 0 (`chat.py`) and a pinned, streamed load for performance verdicts (`load.py`)."""
