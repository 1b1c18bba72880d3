"""Stage 3 — launch: the engine's server as a real process (`server.py`), started the way each engine wants
(`engines/`: argv, readiness, what its log says about itself)."""
