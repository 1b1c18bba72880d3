"""toyengine: a tiny OpenAI-compatible server around a deterministic word-level model."""

__version__ = "0.3.0"
