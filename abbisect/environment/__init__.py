"""Stage 2 — environment: one isolated venv per (commit, install spec), built with uv and cached."""

from abbisect.environment.store import EnvResult, ensure_env, needs_source

__all__ = ["EnvResult", "ensure_env", "needs_source"]
