"""Stage 4 — query: what is sent to a running server over its OpenAI-compatible HTTP endpoints (`chat.py`:
the recipe's prompts at temperature 0)."""
