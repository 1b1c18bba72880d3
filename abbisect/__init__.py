"""abbisect: A/B and bisect LLM serving engines across git commits."""


def __getattr__(name: str) -> str:
    """`abbisect.__version__`, read from the installed distribution when first asked (a command's start does
    not pay for importlib.metadata)."""
    if name != "__version__":
        raise AttributeError(f"module 'abbisect' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("abbisect")
    except PackageNotFoundError:  # running from a source tree
        found = "0.1.0"
    globals()["__version__"] = found
    return found
