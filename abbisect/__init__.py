from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("abbisect")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.1.0"
